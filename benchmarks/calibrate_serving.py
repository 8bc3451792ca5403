"""Tier 1 vs tier 2 on this machine: the serving iteration model against a real HF Llama.

    .venv/bin/python benchmarks/calibrate_serving.py --profile /tmp/cpu1.yaml [--bench]
        [--json out.json] [--reps 5] [--warmup 2]

With ``--bench`` it first runs ``hwtune bench --quick --threads 1`` and writes the profile.
Then, for each step shape, it measures a `transformers` ``LlamaForCausalLM`` with random
weights (`hwtune.calibrate.serving_reference`: fp32, one torch thread, process CPU time,
median of the timed runs) and predicts the same step with `hwtune.serve.iteration.IterationModel`
in fp32 (``dtype="fp32"``) on the ModelSpec read from the model's own HF config:

- tier 1: the profile's Device without its measured curves (``profile=None``: the measured best
  GEMM rate as peak, the STREAM copy bandwidth, default efficiencies, roofline per op);
- tier 2: the same Device with its curves (GEMM, elementwise and attention rates interpolated
  over shape; decode-size GEMMs from the cold-weight points);
- tier 2 + engine: tier 2 plus the engine's own calibration (`hwtune.serve.profile`), measured
  by `ServingReference.engine_overhead`: the host time of an eager `transformers` step (the same
  model's depth and code path at negligible widths) and ``fused_elementwise: false`` (eager
  PyTorch runs each norm, rotary and SwiGLU op as separate kernels).

``fused_elementwise`` reaches the step time through `IterationModel`, which lowers with
`hwtune.serve.profile.elementwise_fused(cfg.profile)`.

Prints a Markdown table (measured vs predicted, error per shape) and the median / 90th-percentile
absolute relative errors, per phase. Nothing is fitted to the measured steps.

On a GPU (``--device cuda``) the model is Llama-3.1-8B's shape in bf16 (`LLAMA31_8B`) at serving
step shapes, and each step is measured twice: its eager wall time, and its CUDA kernel time
(PyTorch profiler: the step a CUDA-graph engine runs, without host time). Tier 1 is the catalog
device named by the profile (spec sheets only), tier 2 the same device with the profile's curves
attached (`hardware.profile.attach_profile`); both are compared on kernel time (host overhead 0,
eager lowering), and tier 2 + engine (the tiny-model host time, as on the CPU) on wall time.

    python benchmarks/calibrate_serving.py --device cuda --profile h200.yaml --json out.json
    # no GPU: the H200 measurements of VALIDATION.md against the shipped H200 profile
    python benchmarks/calibrate_serving.py --device cuda --measured \
        benchmarks/data/h200_serving_reference.json \
        --profile src/hwtune/hardware/profiles/nvidia-h200-sxm.yaml
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from hwtune.calibrate.serving_reference import (
    LlamaRefConfig,
    ServingReference,
    model_spec,
    step_shape,
)
from hwtune.hardware.device import Device, load_device_file
from hwtune.model.spec import ModelSpec
from hwtune.serve.config import ReplicaConfig
from hwtune.serve.iteration import IterationModel
from hwtune.serve.profile import CalibrationProfile

GPU_SHAPES: list[tuple[str, int, int]] = [  # Llama-3.1-8B bf16 on one GPU
    ("prefill", 1, 512),
    ("prefill", 1, 2048),
    ("prefill", 1, 8192),
    ("prefill", 4, 2048),
    ("prefill", 16, 512),
    ("decode", 1, 1024),
    ("decode", 8, 1024),
    ("decode", 32, 2048),
    ("decode", 64, 1024),
    ("decode", 128, 1024),
    ("decode", 256, 512),
]

SHAPES: list[tuple[str, int, int]] = [  # (phase, batch, prompt length or cached context)
    ("prefill", 1, 128),
    ("prefill", 1, 1024),
    ("prefill", 4, 256),
    ("prefill", 8, 128),
    ("prefill", 2, 512),
    ("decode", 1, 128),
    ("decode", 1, 1024),
    ("decode", 4, 512),
    ("decode", 8, 128),
    ("decode", 8, 1024),
]


def predictor(
    spec: ModelSpec, device: Device, engine: CalibrationProfile | None = None
) -> IterationModel:
    """The serve iteration model for ``spec`` on ``device`` (with the engine's calibration
    ``engine``), everything in fp32."""
    return IterationModel(ReplicaConfig(model=spec, device=device, profile=engine), dtype="fp32")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", required=True)
    ap.add_argument("--bench", action="store_true", help="run hwtune bench --quick first")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", default=None)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--measured", default=None,
                    help="with --device cuda: predict the steps of a saved --json run (no GPU)")  # fmt: skip
    a = ap.parse_args()
    if a.device == "cuda":
        return main_gpu(a)
    if a.bench:
        from hwtune.calibrate.bench import BenchConfig, run_bench, write_profile

        t0 = time.perf_counter()
        res = run_bench(BenchConfig(mode="quick", threads=1))
        write_profile(res.document, a.profile)
        print(f"bench --quick --threads 1: {time.perf_counter() - t0:.0f} s -> {a.profile}",
              file=sys.stderr)  # fmt: skip
    tier2_dev = load_device_file(a.profile)
    tier1_dev = tier2_dev.model_copy(update={"profile": None})
    cfg = LlamaRefConfig()
    spec = model_spec(cfg)
    ref = ServingReference(cfg, threads=1, warmup=a.warmup, reps=a.reps)
    load0 = os.getloadavg()[0]
    engine = ref.engine_overhead(tier2_dev)
    print(f"engine: {engine.host_overhead_per_iteration_s * 1e3:.3f} ms per step + "
          f"{engine.host_overhead_per_sequence_s * 1e6:.1f} us per sequence ({engine.source})",
          file=sys.stderr)  # fmt: skip
    tier1, tier2 = predictor(spec, tier1_dev), predictor(spec, tier2_dev)
    tier3 = predictor(spec, tier2_dev, engine)
    rows = []
    for phase, b, n in SHAPES:
        m = ref.prefill(b, n) if phase == "prefill" else ref.decode(b, n)
        s = step_shape(phase, b, n)
        t1, t2 = tier1.step_time(s), tier2.step_time(s)
        t3, br3 = tier3.step_time(s), tier3.breakdown(s)
        rows.append({"phase": phase, "batch": b, "tokens": n, "measured_s": m.median_s,
                     "clock": m.clock, "wall_s": m.wall_median_s, "reps_s": m.reps_s,
                     "tier1_s": t1, "tier2_s": t2, "tier3_s": t3,
                     "err1": t1 / m.median_s - 1, "err2": t2 / m.median_s - 1,
                     "err3": t3 / m.median_s - 1, "tier2_breakdown": tier2.breakdown(s),
                     "tier3_breakdown": br3})  # fmt: skip
        print(f"{phase} b{b} n{n}: measured {m.median_s * 1e3:.2f} ms, tier 1 {t1 * 1e3:.2f}, "
              f"tier 2 {t2 * 1e3:.2f}, tier 2 + engine {t3 * 1e3:.2f}",
              file=sys.stderr)  # fmt: skip
    load1 = os.getloadavg()[0]
    print(f"allocator: {'glibc mallopt, freed memory kept' if ref.kept_memory else 'default'}; "
          f"KV cache: transformers StaticCache of context + 1 slots")  # fmt: skip
    print(f"model: {spec.name} (LlamaForCausalLM, random weights, fp32; hidden {cfg.hidden}, "
          f"{cfg.layers} layers, {cfg.heads} heads / {cfg.kv_heads} KV heads, intermediate "
          f"{cfg.intermediate}, vocab {cfg.vocab}); one torch thread, {rows[0]['clock']} clock; "
          f"load average {load0:.1f} -> {load1:.1f}\n")  # fmt: skip
    print(f"engine (tier 2 + engine): {engine.host_overhead_per_iteration_s * 1e3:.3f} ms per "
          f"step + {engine.host_overhead_per_sequence_s * 1e6:.1f} us per sequence, eager "
          "lowering (the profile's fused_elementwise: false)\n")  # fmt: skip
    print("| step | batch | prompt / context | measured (ms) | tier 1 (ms) | err | tier 2 (ms) "
          "| err | tier 2 + engine (ms) | err |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['phase']} | {r['batch']} | {r['tokens']} | {r['measured_s'] * 1e3:.2f} | "
              f"{r['tier1_s'] * 1e3:.2f} | {r['err1']:+.1%} | {r['tier2_s'] * 1e3:.2f} | "
              f"{r['err2']:+.1%} | {r['tier3_s'] * 1e3:.2f} | {r['err3']:+.1%} |")  # fmt: skip
    print("\n| | median abs. error | p90 | prefill median | decode median |")
    print("|---|---|---|---|---|")
    for key, name in (("err1", "tier 1"), ("err2", "tier 2"), ("err3", "tier 2 + engine")):
        e = [abs(r[key]) for r in rows]
        ph = {p: statistics.median(abs(r[key]) for r in rows if r["phase"] == p)
              for p in ("prefill", "decode")}  # fmt: skip
        print(f"| {name} | {statistics.median(e):.1%} | {np.percentile(e, 90, method='nearest'):.1%} | "
              f"{ph['prefill']:.1%} | {ph['decode']:.1%} |")  # fmt: skip
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"profile": a.profile, "model": spec.name, "load": [load0, load1],
                       "engine": engine.model_dump(), "eager_lowering": True,
                       "rows": rows}, f, indent=1)  # fmt: skip
    return 0


def measure_gpu(a: argparse.Namespace, tier2_dev: Device) -> tuple[list[dict], dict]:
    """Measure the GPU_SHAPES steps of Llama-3.1-8B (bf16) here: rows of wall and kernel time,
    and the eager engine's host time (`ServingReference.engine_overhead`)."""
    from hwtune.calibrate.serving_reference import LLAMA31_8B

    ref = ServingReference(LLAMA31_8B, warmup=a.warmup, reps=a.reps, device="cuda")
    engine = ref.engine_overhead(tier2_dev)
    rows = []
    for phase, b, n in GPU_SHAPES:
        m = ref.prefill(b, n) if phase == "prefill" else ref.decode(b, n)
        rows.append({"phase": phase, "batch": b, "tokens": n, "wall_s": m.wall_median_s,
                     "kernel_s": m.kernel_s, "reps_s": m.reps_s})  # fmt: skip
        print(f"{phase} b{b} n{n}: wall {m.wall_median_s * 1e3:.2f} ms, kernels "
              f"{(m.kernel_s or float('nan')) * 1e3:.2f} ms", file=sys.stderr, flush=True)  # fmt: skip
    import torch
    import transformers

    where = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
             "transformers": transformers.__version__}  # fmt: skip
    return rows, {"engine": engine.model_dump(), **where}


def main_gpu(a: argparse.Namespace) -> int:
    """Llama-3.1-8B bf16 steps on a GPU (measured here, or replayed from ``--measured``):
    kernel time against tier 1 (catalog) and tier 2 (catalog + the profile's curves)."""
    from hwtune.calibrate.serving_reference import LLAMA31_8B
    from hwtune.hardware.catalog import get_device
    from hwtune.hardware.profile import attach_profile, load_profile_file

    fields, _ = load_profile_file(a.profile)
    tier1_dev = get_device(str(fields["name"]))
    tier2_dev = attach_profile(tier1_dev, a.profile)
    spec = model_spec(LLAMA31_8B)
    if a.measured:
        saved = json.loads(Path(a.measured).read_text())
        rows = [{k: r[k] for k in ("phase", "batch", "tokens", "wall_s", "kernel_s", "reps_s")}
                for r in saved["rows"]]  # fmt: skip
        meta = {k: saved.get(k) for k in ("engine", "gpu", "torch", "transformers")}
    else:
        rows, meta = measure_gpu(a, tier2_dev)
    none = CalibrationProfile(host_overhead_per_iteration_s=0.0, host_overhead_per_sequence_s=0.0,
                              fused_elementwise=False)  # fmt: skip

    def model(dev: Device) -> IterationModel:
        return IterationModel(ReplicaConfig(model=spec, device=dev, profile=none), dtype="bf16")

    tier1, tier2 = model(tier1_dev), model(tier2_dev)
    for r in rows:
        s = step_shape(r["phase"], r["batch"], r["tokens"])
        k = r["kernel_s"] or float("nan")
        t1, t2 = tier1.step_time(s), tier2.step_time(s)
        r.update(tier1_s=t1, tier2_s=t2, err1=t1 / k - 1, err2=t2 / k - 1,
                 tier1_breakdown=tier1.breakdown(s), tier2_breakdown=tier2.breakdown(s))  # fmt: skip
    eng = meta.get("engine") or {}
    print(f"model: {spec.name} (LlamaForCausalLM, random weights, bf16, Llama-3.1-8B shapes) on "
          f"{meta.get('gpu')}; torch {meta.get('torch')}, transformers {meta.get('transformers')}; "
          f"tier 1 {tier1_dev.name} catalog, tier 2 + {a.profile}"
          f"{' (replayed from ' + a.measured + ')' if a.measured else ''}\n")  # fmt: skip
    if eng:
        print(
            f"eager host time (tiny model of the same depth): "
            f"{eng['host_overhead_per_iteration_s'] * 1e3:.1f} ms per step; the eager wall "
            "time is about the larger of host and kernel time (launches overlap the GPU)\n"
        )
    print("| step | batch | prompt / context | eager wall (ms) | kernels (ms) | tier 1 (ms) | err "
          "| tier 2 (ms) | err |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['phase']} | {r['batch']} | {r['tokens']} | {r['wall_s'] * 1e3:.2f} | "
              f"{(r['kernel_s'] or float('nan')) * 1e3:.2f} | {r['tier1_s'] * 1e3:.2f} | "
              f"{r['err1']:+.1%} | {r['tier2_s'] * 1e3:.2f} | {r['err2']:+.1%} |")  # fmt: skip
    print("\n| kernel time | median abs. error | p90 | prefill median | decode median |")
    print("|---|---|---|---|---|")
    for key, name in (("err1", "tier 1"), ("err2", "tier 2")):
        e = [abs(r[key]) for r in rows]
        ph = {p: statistics.median(abs(r[key]) for r in rows if r["phase"] == p)
              for p in ("prefill", "decode")}  # fmt: skip
        print(f"| {name} | {statistics.median(e):.1%} | "
              f"{np.percentile(e, 90, method='nearest'):.1%} | {ph['prefill']:.1%} | "
              f"{ph['decode']:.1%} |")  # fmt: skip
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"profile": a.profile, "model": spec.name, "device": "cuda", **meta,
                       "rows": rows}, f, indent=1)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
