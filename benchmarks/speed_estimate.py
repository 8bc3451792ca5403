"""Speed of one training estimate (`hwtune.train.estimator.estimate`), and of llm-analysis's
training analysis on the same configurations; the figures of BENCHMARKS.md.

    python benchmarks/speed_estimate.py                       # hwtune: table on stdout
    /tmp/llma/bin/python benchmarks/speed_estimate.py --peer llm-analysis --json /tmp/llma.json
    python benchmarks/speed_estimate.py --markdown --peer-json /tmp/llma.json
    python benchmarks/speed_estimate.py --profile 70b         # top functions by cumulative time

llm-analysis lives in its own throwaway virtual environment (``python3 -m venv /tmp/llma &&
/tmp/llma/bin/pip install llm-analysis``); it is imported only with ``--peer llm-analysis``, and
hwtune only without it, so the model shapes below are written out and, in hwtune mode, checked
against hwtune's catalog.

Per configuration: warm-up calls, then N calls each timed with `time.perf_counter` (median and
p90 of the per-call latency; estimates/s = N / total time of the N calls). The distinct-
configuration sweep estimates every strategy of a grid once, in order, starting from empty
cost caches (catalog entries stay loaded): the rate a search loop sees.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# Model shapes, as in hwtune's catalog (checked in hwtune mode): layers, d_model, heads, KV heads,
# FFN width (per expert for an MoE), vocabulary, routed experts, top-k, max context.
SHAPES: dict[str, dict[str, int]] = {
    "llama3.1-8b": dict(n_layers=32, d_model=4096, n_heads=32, kv_heads=8, ffn=14336, vocab=128256, experts=1, top_k=1, max_seq=131072),
    "llama3.1-70b": dict(n_layers=80, d_model=8192, n_heads=64, kv_heads=8, ffn=28672, vocab=128256, experts=1, top_k=1, max_seq=131072),
    "llama3.1-405b": dict(n_layers=126, d_model=16384, n_heads=128, kv_heads=8, ffn=53248, vocab=128256, experts=1, top_k=1, max_seq=131072),
    "mixtral-8x7b": dict(n_layers=32, d_model=4096, n_heads=32, kv_heads=8, ffn=14336, vocab=32000, experts=8, top_k=2, max_seq=32768),
}  # fmt: skip

PEER_GPU = {"h100-sxm-80gb": "h100-sxm-80gb", "a100-sxm4-80gb": "a100-sxm-80gb"}
"""hwtune device name -> the GPU config llm-analysis ships for the same part."""


@dataclass(frozen=True)
class Config:
    key: str
    label: str
    model: str
    gpu: str
    gpus: int
    strategy: dict = field(default_factory=dict)
    peer: bool = True  # llm-analysis can express the model


CONFIGS: list[Config] = [
    Config("8b", "Llama 3.1 8B, 8x H100, dp=8, seq 4096, gbs 256, ZeRO-2", "llama3.1-8b", "h100-sxm-80gb", 8,
           dict(tp=1, pp=1, dp=8, micro_batch=1, global_batch=256, seq=4096, zero=2)),
    Config("70b", "Llama 3.1 70B, 64x H100, tp=8 pp=2 dp=4 (SP, 1F1B), seq 8192, gbs 256", "llama3.1-70b",
           "h100-sxm-80gb", 64,
           dict(tp=8, pp=2, dp=4, micro_batch=1, global_batch=256, seq=8192, sequence_parallel=True)),
    Config("405b", "Llama 3.1 405B, 1024x H100, tp=8 pp=16 dp=8 (SP, interleaved vpp=2), seq 4096, gbs 2048",
           "llama3.1-405b", "h100-sxm-80gb", 1024,
           dict(tp=8, pp=16, dp=8, micro_batch=1, global_batch=2048, seq=4096, sequence_parallel=True,
                schedule="interleaved", vpp=2)),
    Config("405b-a100", "Llama 3.1 405B, 1024x A100, tp=8 pp=16 dp=8 (SP, 1F1B, full recompute), seq 4096, gbs 2048",
           "llama3.1-405b", "a100-sxm4-80gb", 1024,
           dict(tp=8, pp=16, dp=8, micro_batch=1, global_batch=2048, seq=4096, sequence_parallel=True,
                recompute="full")),
    Config("mixtral", "Mixtral 8x7B, 64x H100, tp=2 pp=4 dp=8 ep=8 (SP), seq 4096, gbs 512", "mixtral-8x7b",
           "h100-sxm-80gb", 64,
           dict(tp=2, pp=4, dp=8, ep=8, micro_batch=1, global_batch=512, seq=4096, sequence_parallel=True)),
    Config("dsv3", "DeepSeek-V3, 2048x H100, pp=16 dp=128 ep=64 (DualPipe, fp8, full recompute), seq 4096, gbs 15360",
           "deepseek-v3", "h100-sxm-80gb", 2048,
           dict(tp=1, pp=16, dp=128, ep=64, micro_batch=1, global_batch=15360, seq=4096, schedule="dualpipe",
                precision="fp8", recompute="full"),
           peer=False),
]  # fmt: skip

SLOW = Config("405b-pp1", "Llama 3.1 405B, 1024x H100, tp=8 pp=1 dp=128 (SP), seq 4096, gbs 256: 126 layers on one rank",
              "llama3.1-405b", "h100-sxm-80gb", 1024,
              dict(tp=8, pp=1, dp=128, micro_batch=1, global_batch=256, seq=4096, sequence_parallel=True))  # fmt: skip
CONFIGS.append(SLOW)

PEER_NA = (
    "MLA, shared experts and dense first layers are not expressible in llm-analysis's ModelConfig"
)


def sweep_grid() -> list[Config]:
    """Distinct strategies for Llama 3.1 70B on 64 and 405B on 1024 H100s: every (tp, pp, micro
    batch, global batch, seq, recompute) that divides evenly. Each changes the per-rank shard or
    the pipeline, so few per-layer cost entries are shared between neighbours."""
    out = []
    for model, gpus in (("llama3.1-70b", 64), ("llama3.1-405b", 1024)):
        s = SHAPES[model]
        for seq in (4096, 8192):
            for tp in (1, 2, 4, 8):
                if s["n_heads"] % tp or (s["kv_heads"] % tp and tp % s["kv_heads"]):
                    continue
                for pp in (1, 2, 4, 8, 16):
                    if gpus % (tp * pp) or pp > s["n_layers"]:
                        continue
                    dp = gpus // (tp * pp)
                    for mb in (1, 2, 4):
                        for gb in (256, 512, 1024, 2048):
                            if gb % (mb * dp):
                                continue
                            for rec in ("none", "selective", "full"):
                                st = dict(tp=tp, pp=pp, dp=dp, micro_batch=mb, global_batch=gb, seq=seq,
                                          sequence_parallel=tp > 1, recompute=rec)  # fmt: skip
                                out.append(
                                    Config(f"sweep{len(out)}", "", model, "h100-sxm-80gb", gpus, st)
                                )
    return out


# ---------------------------------------------------------------------------------------------
# timing


def time_calls(fn: Callable[[], object], n: int, warmup: int) -> dict:
    for _ in range(warmup):
        fn()
    lat = []
    clock = time.perf_counter
    t0 = clock()
    for _ in range(n):
        t = clock()
        fn()
        lat.append(clock() - t)
    total = clock() - t0
    return {
        "n": n,
        "median_s": statistics.median(lat),
        "p90_s": float(np.percentile(lat, 90)),
        "mean_s": total / n,
        "per_s": n / total,
    }


def machine() -> dict:
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = (
                    f"{cpu} / {line.split(':', 1)[1].strip()}"
                    if cpu
                    else line.split(":", 1)[1].strip()
                )
                break
    except OSError:
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "processor": cpu,
        "nproc": usable,
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
    }


# ---------------------------------------------------------------------------------------------
# hwtune


def hwtune_caches() -> list:
    """The cost caches an estimate fills: every functools cache in hwtune's cost, model-lowering,
    parameter-count and training modules (catalog loaders excluded: a search resolves its model
    and device once)."""
    import importlib
    import pkgutil

    import hwtune

    fns = []
    for mod in pkgutil.walk_packages(hwtune.__path__, "hwtune."):
        if not mod.name.startswith(
            ("hwtune.cost.", "hwtune.train.", "hwtune.model.params", "hwtune.model.lowering")
        ):
            continue
        m = importlib.import_module(mod.name)
        for obj in vars(m).values():
            if hasattr(obj, "cache_clear") and getattr(obj, "__module__", None) == mod.name:
                fns.append(obj)
    return fns


def source_state() -> str:
    """The hwtune source measured: commit, and a digest of uncommitted changes under src/."""
    import hashlib
    import subprocess

    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True
        ).stdout
        diff = subprocess.run(
            ["git", "diff", "HEAD", "--", "src"], cwd=root, capture_output=True
        ).stdout
    except OSError:
        return "unknown"
    state = head.strip() or "unknown"
    if diff:
        state += (
            f" + uncommitted src/ changes (diff sha256 {hashlib.sha256(diff).hexdigest()[:12]})"
        )
    return state


def check_shapes() -> None:
    from hwtune.model.catalog import get_model

    for name, s in SHAPES.items():
        spec = get_model(name)
        got = dict(n_layers=spec.n_layers, d_model=spec.d_model, n_heads=spec.n_heads, kv_heads=spec.kv_heads,
                   ffn=spec.moe.expert_ffn_hidden if spec.moe else spec.ffn_hidden, vocab=spec.vocab,
                   experts=spec.moe.n_routed_experts if spec.moe else 1, top_k=spec.moe.top_k if spec.moe else 1)  # fmt: skip
        want = {k: v for k, v in s.items() if k != "max_seq"}
        if got != want:
            raise SystemExit(f"shape table out of date for {name}: catalog {got}, script {want}")


def run_hwtune(n: int, warmup: int, sweep: bool) -> dict:
    from hwtune.errors import HwtuneInputError
    from hwtune.model.catalog import get_model
    from hwtune.train.estimator import estimate
    from hwtune.train.strategy import make_strategy

    check_shapes()
    rows = {}
    for c in CONFIGS:
        est = estimate(c.model, gpu=c.gpu, gpus=c.gpus, **c.strategy)
        r = time_calls(
            lambda c=c: estimate(c.model, gpu=c.gpu, gpus=c.gpus, **c.strategy), n, warmup
        )
        r.update(
            step_time_s=est.step_time_s,
            mfu=est.mfu,
            fits=est.fits,
            quantities=sorted(est.breakdown),
        )
        rows[c.key] = r
    out = {"tool": "hwtune", "source": source_state(), "machine": machine(), "configs": rows}
    if sweep:
        grid = sweep_grid()
        valid = []
        for c in grid:  # validation touches no cost cache
            try:
                make_strategy(**c.strategy).validate_for(get_model(c.model), c.gpus)
                valid.append(c)
            except HwtuneInputError:
                pass
        caches = hwtune_caches()
        for f in caches:
            f.cache_clear()
        t0 = time.perf_counter()
        for c in valid:
            estimate(c.model, gpu=c.gpu, gpus=c.gpus, **c.strategy)
        warm_total = time.perf_counter() - t0
        # worst case: every cost cache emptied before each estimate (clearing is outside the clock)
        cold_total = 0.0
        for c in valid:
            for f in caches:
                f.cache_clear()
            t = time.perf_counter()
            estimate(c.model, gpu=c.gpu, gpus=c.gpus, **c.strategy)
            cold_total += time.perf_counter() - t
        out["sweep"] = {
            "n": len(valid),
            "rejected": len(grid) - len(valid),
            "per_s": len(valid) / warm_total,
            "mean_s": warm_total / len(valid),
            "all_cold_per_s": len(valid) / cold_total,
            "all_cold_mean_s": cold_total / len(valid),
        }
        # warm latency of each grid strategy (best of 5 repeated calls, as timeit advises, so that a
        # burst of noise on a shared machine is not charged to one strategy): is <= 1 ms met everywhere?
        warm = []
        for c in valid:
            lat = []
            for _ in range(6):
                t = time.perf_counter()
                estimate(c.model, gpu=c.gpu, gpus=c.gpus, **c.strategy)
                lat.append(time.perf_counter() - t)
            warm.append((min(lat[1:]), c))
        warm.sort(key=lambda x: x[0])
        xs = [w for w, _ in warm]
        out["sweep"].update(
            warm_median_s=statistics.median(xs),
            warm_p90_s=float(np.percentile(xs, 90)),
            warm_max_s=xs[-1],
            warm_over_1ms=sum(x > 1e-3 for x in xs),
            warm_slowest=[{"latency_s": w, "model": c.model, **c.strategy} for w, c in warm[-5:]],
        )
    return out


def profile(key: str, n: int, top: int) -> None:
    import cProfile
    import pstats

    from hwtune.train.estimator import estimate

    c = next(c for c in CONFIGS if c.key == key)
    for _ in range(20):
        estimate(c.model, gpu=c.gpu, gpus=c.gpus, **c.strategy)
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(n):
        estimate(c.model, gpu=c.gpu, gpus=c.gpus, **c.strategy)
    pr.disable()
    print(f"# {c.label}: {n} warm estimates; cumulative seconds are totals over the {n} calls")
    pstats.Stats(pr).sort_stats("cumulative").print_stats(top)


# ---------------------------------------------------------------------------------------------
# llm-analysis


def run_llm_analysis(n: int, warmup: int, sweep: bool) -> dict:
    import logging

    from llm_analysis import analysis as la
    from llm_analysis.config import (
        GPUConfig,
        ModelConfig,
        ParallelismConfig,
        get_dtype_config_by_name,
        get_gpu_config_by_name,
    )
    from llm_analysis.logger import logger

    logger.setLevel(logging.ERROR)
    dtype = get_dtype_config_by_name("w16a16e16")
    models: dict[str, ModelConfig] = {}
    for name, s in SHAPES.items():
        models[name] = ModelConfig(
            name=name, num_layers=s["n_layers"], n_head=s["n_heads"], hidden_dim=s["d_model"], vocab_size=s["vocab"],
            max_seq_len=s["max_seq"], num_key_value_heads=s["kv_heads"], ffn_embed_dim=s["ffn"],
            expansion_ratio=s["ffn"] / s["d_model"], model_type="llama", moe_num_experts=s["experts"],
            moe_top_k=s["top_k"],
        )  # fmt: skip
    gpus: dict[str, GPUConfig] = {k: get_gpu_config_by_name(v) for k, v in PEER_GPU.items()}
    recompute = {"none": 0, "selective": 1, "full": 2}

    def call(c: Config) -> dict:
        st = c.strategy
        tp = st.get("tp", 1)
        par = ParallelismConfig(tp_size=tp, pp_size=st.get("pp", 1), dp_size=st["dp"], ep_size=st.get("ep", 1),
                                sp_size=tp if st.get("sequence_parallel") else 1)  # fmt: skip
        a = la.LLMAnalysis(models[c.model], gpus[c.gpu], dtype, par)
        return a.training(
            batch_size_per_gpu=st.get("micro_batch", 1),
            global_batch_size=st["global_batch"],
            seq_len=st["seq"],
            activation_recomputation=la.ActivationRecomputation(
                recompute[st.get("recompute", "none")]
            ),
            ds_zero=la.DSZeRO(st.get("zero", 1)),
            flash_attn=True,
            mlp_gated_linear_units=True,
        )

    rows = {}
    for c in CONFIGS:
        if not c.peer:
            continue
        res = call(c)
        r = time_calls(lambda c=c: call(c), n, warmup)
        r.update(step_time_s=res["latency_per_iter"], quantities=sorted(res))
        rows[c.key] = r
    out = {"tool": "llm-analysis", "machine": machine(), "configs": rows}
    if sweep:
        grid = sweep_grid()
        t0 = time.perf_counter()
        for c in grid:
            call(c)
        total = time.perf_counter() - t0
        out["sweep"] = {"n": len(grid), "per_s": len(grid) / total, "mean_s": total / len(grid)}
    return out


# ---------------------------------------------------------------------------------------------
# output


def fmt_lat(s: float | None) -> str:
    return "n/a" if s is None else f"{s * 1e3:.3f} ms"


def fmt_rate(r: float | None) -> str:
    return "n/a" if r is None else f"{r:,.0f}"


def print_table(res: dict) -> None:
    m = res["machine"]
    print(f"# {res['tool']} on {m['processor']} ({m['nproc']} CPUs), Python {m['python']}")
    if "source" in res:
        print(f"# source: {res['source']}")
    print(f"{'config':10} {'median':>10} {'p90':>10} {'est/s':>8} {'step_s':>8}")
    for key, r in res["configs"].items():
        print(
            f"{key:10} {fmt_lat(r['median_s']):>10} {fmt_lat(r['p90_s']):>10} {fmt_rate(r['per_s']):>8} {r['step_time_s']:8.2f}"
        )
    if "sweep" in res:
        s = res["sweep"]
        line = f"distinct-configuration sweep: {s['n']} strategies, {fmt_rate(s['per_s'])} est/s ({fmt_lat(s['mean_s'])} mean)"
        if "all_cold_per_s" in s:
            line += f"; every cache cleared before each: {fmt_rate(s['all_cold_per_s'])} est/s"
        print(line)
        if "warm_median_s" in s:
            print(
                f"warm latency across the grid (best of 5 each): median {fmt_lat(s['warm_median_s'])}, p90 {fmt_lat(s['warm_p90_s'])},"
                f" max {fmt_lat(s['warm_max_s'])}; {s['warm_over_1ms']} of {s['n']} strategies over 1 ms"
            )
            for w in s["warm_slowest"]:
                print(f"  slow: {w}")


def print_markdown(res: dict, peer: dict | None) -> None:
    pc = (peer or {}).get("configs", {})
    print("| configuration | hwtune median latency | hwtune p90 | hwtune estimates/s | "
          "llm-analysis median latency | llm-analysis estimates/s |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|")
    for c in CONFIGS:
        r = res["configs"][c.key]
        p = pc.get(c.key)
        pl, pr = (fmt_lat(p["median_s"]), fmt_rate(p["per_s"])) if p else ("n/a", "n/a")
        print(
            f"| {c.label} | {fmt_lat(r['median_s'])} | {fmt_lat(r['p90_s'])} | {fmt_rate(r['per_s'])} | {pl} | {pr} |"
        )
    if "sweep" in res:
        s = res["sweep"]
        ps = (peer or {}).get("sweep")
        print()
        print(
            "| distinct-configuration sweep | strategies | hwtune estimates/s | llm-analysis estimates/s |"
        )
        print("|---|---:|---:|---:|")
        print(
            f"| caches filled as the sweep goes | {s['n']} | {fmt_rate(s['per_s'])} | {fmt_rate(ps and ps['per_s'])} |"
        )
        print(
            f"| every cost cache cleared before each estimate | {s['n']} | {fmt_rate(s['all_cold_per_s'])} | n/a |"
        )
        if "warm_median_s" in s:
            print()
            print(
                f"Warm latency of each grid strategy (best of 5 repeats): median {fmt_lat(s['warm_median_s'])},"
                f" p90 {fmt_lat(s['warm_p90_s'])}, max {fmt_lat(s['warm_max_s'])};"
                f" {s['warm_over_1ms']} of {s['n']} strategies over 1 ms."
            )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peer", choices=["llm-analysis"], help="time the peer tool instead of hwtune")
    ap.add_argument("-n", type=int, default=2000, help="timed calls per configuration")
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--no-sweep", action="store_true", help="skip the distinct-configuration sweep")
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument(
        "--peer-json", type=Path, help="llm-analysis results (from --peer --json) for --markdown"
    )
    ap.add_argument("--markdown", action="store_true", help="print the BENCHMARKS.md rows")
    ap.add_argument(
        "--profile",
        metavar="CONFIG",
        help=f"cProfile N estimates of one of {[c.key for c in CONFIGS]}",
    )
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args(argv)

    if a.profile:
        profile(a.profile, a.n, a.top)
        return 0
    if a.peer == "llm-analysis":
        res = run_llm_analysis(a.n, a.warmup, not a.no_sweep)
    else:
        res = run_hwtune(a.n, a.warmup, not a.no_sweep)
    if a.json:
        a.json.write_text(json.dumps(res, indent=1))
    print_table(res)
    if a.markdown:
        if a.peer:
            sys.exit("--markdown is for the hwtune run (give it --peer-json)")
        peer = json.loads(a.peer_json.read_text()) if a.peer_json else None
        print()
        print_markdown(res, peer)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
