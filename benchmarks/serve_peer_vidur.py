"""Simulator speed side by side with Vidur (microsoft/vidur): the same 10,000 requests, the same
model and GPU, each simulator's own event loop, timed in one process each.

Vidur is a peer, never a dependency: it runs from a checkout of microsoft/vidur in a venv of its
own, and this script talks to it through a subprocess.

    git clone https://github.com/microsoft/vidur /tmp/vidur/src   # git-lfs for attention.csv
    python -m venv /tmp/vidur/venv && /tmp/vidur/venv/bin/pip install -r /tmp/vidur/src/requirements.txt
    .venv/bin/python benchmarks/serve_peer_vidur.py --vidur-src /tmp/vidur/src \
        --vidur-python /tmp/vidur/venv/bin/python [--requests 10000] [--rate 20] [--repeat 2]

What each side simulates (one H100, Llama-2-7B, bf16, a token budget of 4,096 per step, the
largest step Vidur's profile covers, and at most 256 running sequences):
- the requests: the ShareGPT-like length mix of `hwtune.serve.request.sharegpt_like_lengths`
  (seed 0) with Poisson arrivals (`open_loop`, seed 0), written to a CSV that Vidur replays
  (`--request_generator_config_type trace_replay`), so both see the same arrivals and lengths.
  Prompt + output is capped at Llama-2's 4,096-token context by shortening the prompt, as
  Vidur's trace loader does, and hwtune gets the capped lengths too;
- the scheduler: hwtune's vLLM-style chunked prefill; Vidur's Sarathi scheduler with
  ``chunk_size`` = 4,096 (the same policy: decodes first, then prompt chunks up to the budget);
- step times: Vidur's own H100 profile of Llama-2-7B's linear layers and norms
  (``data/profiling/compute/h100/meta-llama/Llama-2-7b-hf/mlp.csv`` in its repository,
  measured by its authors). Its attention profile (``attention.csv``) is stored in Git LFS; where
  the checkout lacks it (a clone without git-lfs, or the copy on the development machine), this
  script writes one on the grid Vidur's profiler uses, with times from hwtune's tier-1 attention
  model (`hwtune.cost.kv_cache`), and says so in its output (``vidur_attention_profile``). The
  speed of Vidur's event loop does not depend on where those numbers come from; its latencies
  then do, so they are printed as a cross-check, not as an accuracy comparison.

Timed: Vidur's ``Simulator(config)`` (which trains or loads its execution-time predictors) apart
from ``Simulator.run()`` (the event loop); hwtune's `simulate` including the construction of its
step-time model. Wall and process CPU seconds, best of ``--repeat``. Vidur's predictor cache is
warm from the second repeat on; the first construction, which trains its random forests, is
printed as ``vidur_first_init_s`` (the trained predictors are kept in ``--cache-dir`` for the
next invocation). Metrics and plots are written by neither side (Vidur: chrome
trace, plots and batch metrics off, which only makes it faster).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from hwtune.cost.kv_cache import attention_shape, decode_attention_time, prefill_attention_time
from hwtune.hardware.catalog import get_device
from hwtune.model.catalog import get_model
from hwtune.model.lowering import layer_classes
from hwtune.serve.config import ReplicaConfig
from hwtune.serve.metrics import summarize
from hwtune.serve.request import Workload, open_loop, sharegpt_like_lengths
from hwtune.serve.simulator import _MODEL_CACHE, simulate

VIDUR_MODEL = "meta-llama/Llama-2-7b-hf"
HWTUNE_MODEL = "llama2-7b"
CONTEXT = 4096  # Llama-2's max_position_embeddings; Vidur's trace loader caps prompt + output
BUDGET = (
    4096  # Vidur's profiles stop at 4,096 tokens per step (its random forests do not extrapolate)
)
MAX_SEQS = 256
BLOCK = 16


def workload(n: int, rate: float) -> Workload:
    """The requests both simulators get: lengths capped at the context by shortening the prompt."""
    p, o = sharegpt_like_lengths(n, seed=0)
    p = np.maximum(1, p - np.maximum(0, p + o - CONTEXT))
    return open_loop(rate, p, o, seed=0)


def write_trace(wl: Workload, path: Path) -> None:
    lines = ["arrived_at,num_prefill_tokens,num_decode_tokens"]
    lines += [f"{a!r},{p},{o}" for a, p, o in zip(wl.arrivals, wl.prompts, wl.outputs, strict=True)]
    path.write_text("\n".join(lines) + "\n")


def _sizes(limit: int) -> list[int]:
    """Lengths on a grid like Vidur's profiler: every 32 to 1k, every 64 to 2k, every 128 above."""
    out, t = [], 0
    while t < limit:
        t += 32 if t < 1024 else 64 if t < 2048 else 128
        out.append(min(t, limit))
    return out


def attention_profile(path: Path, tps: list[int]) -> int:
    """Write a Vidur-format ``attention.csv`` for Llama-2-7B on an H100 with hwtune's tier-1
    attention times (milliseconds per layer, as Vidur's profiles are): prefill chunks of ``q``
    tokens after ``c`` cached ones, and decode batches of ``b`` sequences of ``c`` cached tokens
    each (the semantics of Vidur's ``AttentionInput``). Returns the number of rows."""
    spec, dev = get_model(HWTUNE_MODEL), get_device("h100-sxm-80gb")
    (ltype, _moe), = layer_classes(spec).keys()  # fmt: skip
    cols = ["n_embd", "n_q_head", "n_kv_head", "block_size", "num_tensor_parallel_workers",
            "prefill_chunk_size", "kv_cache_size", "batch_size", "is_prefill",
            "time_stats.attn_prefill.median", "time_stats.attn_decode.median",
            "time_stats.attn_kv_cache_save.median"]  # fmt: skip
    rows = []
    for tp in tps:
        shape = attention_shape(spec, ltype, tp)
        head = [spec.d_model, spec.n_heads, spec.n_kv_heads or spec.n_heads, BLOCK, tp]
        for q in [32, 64, 128, 256, 512, 1024, 2048, 4096]:  # chunked prefills
            for c in range(0, CONTEXT - q + 1, q):
                ms = 1e3 * prefill_attention_time(shape, q * (c + q / 2), c + q, q, dev, "bf16")
                rows.append(head + [q, c, 1, True, ms, 0.0, 0.0])
        for q in _sizes(CONTEXT):  # full prefills
            ms = 1e3 * prefill_attention_time(shape, q * q / 2, q, q, dev, "bf16")
            rows.append(head + [q, 0, 1, True, ms, 0.0, 0.0])
        for b in [1, 2, 4, 8, 16, 32, 64, 128, 192, 256]:  # decodes
            for c in _sizes(CONTEXT):
                if b * c > 2_000_000:  # what fits in the KV cache of the profiled GPU
                    continue
                ms = 1e3 * decode_attention_time(shape, b, b * c, dev, "bf16")
                rows.append(head + [0, c, b, False, 0.0, ms, 0.0])
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        f.write(",".join(cols) + "\n")
        for r in rows:
            f.write(",".join(str(x) for x in r) + "\n")
    return len(rows)


DRIVER = r"""
import atexit, json, sys, time
args = json.loads(sys.argv[1])
sys.argv = ["vidur"] + args["argv"]
from vidur.config import SimulationConfig
from vidur.simulator import Simulator
cfg = SimulationConfig.create_from_cli_args()
t0, c0 = time.perf_counter(), time.process_time()
sim = Simulator(cfg)
t1, c1 = time.perf_counter(), time.process_time()
atexit.unregister(sim._write_output)
reqs = [e._request for _, e in sim._event_queue]
sim.run()
t2, c2 = time.perf_counter(), time.process_time()
ttft = sorted(r.prefill_completed_at - r.arrived_at for r in reqs)
tpot = sorted((r.completed_at - r.prefill_completed_at) / (r.num_decode_tokens - 1)
              for r in reqs if r.num_decode_tokens > 1)
print(json.dumps({"init_s": t1 - t0, "init_cpu_s": c1 - c0, "run_s": t2 - t1,
                  "run_cpu_s": c2 - c1, "simulated_s": sim._time, "requests": len(reqs),
                  "completed": sum(r.completed for r in reqs),
                  "ttft_p50_s": ttft[len(ttft) // 2], "tpot_p50_s": tpot[len(tpot) // 2]}))
"""


def run_vidur(
    python: str, src: Path, trace: Path, profile_dir: Path, out: Path, cache: Path
) -> dict:
    """One Vidur simulation of the trace; its JSON line."""
    p = "random_forrest_execution_time_predictor_config"
    argv = [
        "--replica_config_device", "h100", "--replica_config_network_device", "h100_dgx",
        "--replica_config_model_name", VIDUR_MODEL, "--replica_config_tensor_parallel_size", "1",
        "--cluster_config_num_replicas", "1",
        "--request_generator_config_type", "trace_replay",
        "--trace_request_generator_config_trace_file", str(trace),
        "--trace_request_generator_config_max_tokens", str(CONTEXT),
        "--replica_scheduler_config_type", "sarathi",
        "--sarathi_scheduler_config_chunk_size", str(BUDGET),
        "--sarathi_scheduler_config_batch_size_cap", str(MAX_SEQS),
        "--sarathi_scheduler_config_block_size", str(BLOCK),
        f"--{p}_compute_input_file", str(profile_dir / "compute/h100/{MODEL}/mlp.csv"),
        f"--{p}_attention_input_file", str(profile_dir / "compute/h100/{MODEL}/attention.csv"),
        f"--{p}_prediction_max_batch_size", str(MAX_SEQS),
        f"--{p}_prediction_max_prefill_chunk_size", str(CONTEXT),
        f"--{p}_prediction_max_tokens_per_request", str(CONTEXT),
        "--metrics_config_output_dir", str(out / "vidur_output"),
        "--metrics_config_cache_dir", str(cache),
        "--no-metrics_config_enable_chrome_trace", "--no-metrics_config_store_plots",
        "--no-metrics_config_store_batch_metrics", "--no-metrics_config_store_utilization_metrics",
        "--no-metrics_config_write_metrics",
    ]  # fmt: skip
    driver = out / "vidur_driver.py"
    driver.write_text(DRIVER)
    env = dict(os.environ, PYTHONPATH=str(src), WANDB_MODE="disabled")
    r = subprocess.run([python, str(driver), json.dumps({"argv": argv})], cwd=src, env=env,
                       capture_output=True, text=True, check=False)  # fmt: skip
    if r.returncode != 0:
        sys.exit(f"vidur failed (exit {r.returncode}):\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def run_hwtune(wl: Workload) -> dict:
    cfg = ReplicaConfig(get_model(HWTUNE_MODEL), get_device("h100-sxm-80gb"),
                        max_num_batched_tokens=BUDGET, max_num_seqs=MAX_SEQS, block_size=BLOCK,
                        enable_prefix_caching=False)  # fmt: skip
    _MODEL_CACHE.clear()  # include building the step-time grid
    t, c = time.perf_counter(), time.process_time()
    res = simulate(cfg, wl)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    s = summarize(res)
    return {"run_s": wall, "run_cpu_s": cpu, "simulated_s": res.duration_s,
            "requests": len(wl), "steps": res.n_steps,
            "ttft_p50_s": s["ttft_s"]["p50"], "tpot_p50_s": s["tpot_s"]["p50"]}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vidur-src", type=Path, required=True, help="microsoft/vidur checkout")
    ap.add_argument("--vidur-python", required=True, help="python of a venv with its requirements")
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None, help="write the JSON result here too")
    ap.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache/hwtune-vidur-peer",
                    help="where Vidur keeps its trained predictors between invocations")  # fmt: skip
    a = ap.parse_args()
    if not (a.vidur_src / "vidur" / "simulator.py").is_file():
        sys.exit(
            f"--vidur-src: {a.vidur_src} is not a microsoft/vidur checkout (no vidur/simulator.py)"
        )
    mlp = a.vidur_src / "data/profiling/compute/h100" / VIDUR_MODEL / "mlp.csv"
    if not mlp.is_file() or mlp.stat().st_size < 1000:
        sys.exit(f"--vidur-src: {mlp} missing (Vidur's measured H100 profile of {VIDUR_MODEL})")
    wl = workload(a.requests, a.rate)
    with tempfile.TemporaryDirectory(prefix="vidur-peer-") as tmp:
        out = Path(tmp)
        trace = out / "trace.csv"
        write_trace(wl, trace)
        prof = a.cache_dir / "profiling"  # a fixed path: Vidur's predictor cache keys on it
        shutil.copy(mlp, _mkparent(prof / "compute/h100" / VIDUR_MODEL / "mlp.csv"))
        att = a.vidur_src / "data/profiling/compute/h100" / VIDUR_MODEL / "attention.csv"
        dst = prof / "compute/h100" / VIDUR_MODEL / "attention.csv"
        if att.is_file() and att.stat().st_size > 1000:  # a real file, not an LFS pointer
            shutil.copy(att, dst)
            source = "Vidur's measured H100 profile"
        else:
            n = attention_profile(dst, [1])
            source = f"hwtune tier 1, written by this script ({n} rows on Vidur's grid)"
        vidur, first_init = [], None
        for i in range(a.repeat):
            v = run_vidur(a.vidur_python, a.vidur_src, trace, prof, out, a.cache_dir)
            first_init = v["init_s"] if i == 0 else first_init
            vidur.append(v)
            print(f"vidur {i + 1}/{a.repeat}: init {v['init_s']:.1f} s, run {v['run_s']:.2f} s",
                  file=sys.stderr)  # fmt: skip
        hw = []
        for i in range(a.repeat):
            hw.append(run_hwtune(wl))
            print(f"hwtune {i + 1}/{a.repeat}: run {hw[-1]['run_s']:.2f} s", file=sys.stderr)
    bv = min(vidur, key=lambda v: v["run_s"])
    bh = min(hw, key=lambda v: v["run_s"])
    result = {
        "requests": a.requests, "rate_per_s": a.rate, "model": VIDUR_MODEL, "gpu": "H100 SXM",
        "vidur_attention_profile": source, "vidur_first_init_s": round(first_init, 2),
        "vidur": {k: round(v, 4) if isinstance(v, float) else v for k, v in bv.items()}
        | {"simulated_s_per_wall_s": round(bv["simulated_s"] / bv["run_s"], 1)},
        "hwtune": {k: round(v, 4) if isinstance(v, float) else v for k, v in bh.items()}
        | {"simulated_s_per_wall_s": round(bh["simulated_s"] / bh["run_s"], 1)},
    }  # fmt: skip
    text = json.dumps(result, indent=2)
    print(text)
    if a.out:
        a.out.write_text(text + "\n")


def _mkparent(p: Path) -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    return p


if __name__ == "__main__":
    main()
