"""Tier 1 vs tier 2 on this machine: the estimator against the reference training loop.

    .venv/bin/python benchmarks/calibrate_validate.py --profile cpu1.yaml [--bench] [--json out.json]

With ``--bench`` it first runs ``hwtune bench --quick --threads 1`` (the calibration, about
a minute) and writes the profile; then, for each shape, it runs the reference loop
(`hwtune.calibrate.reference`, one torch thread per process) and predicts its step time with
`hwtune.train.estimator.estimate` on the profile (tier 2) and on the same Device without its
measured curves (tier 1: the measured best GEMM rate as peak, the STREAM copy bandwidth, the
default efficiencies). Prints a Markdown table and the median / 90th-percentile relative errors.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np

from hwtune.calibrate.reference import (
    RefConfig,
    predict,
    predict_estimate,
    run_reference,
    to_model_spec,
)
from hwtune.hardware.device import load_device_file
from hwtune.train.estimator import OPTIMIZER_BYTES_MOVED

SHAPES: list[dict] = [
    {"layers": 2, "hidden": 256, "heads": 4, "seq": 256, "micro_batch": 4},
    {"layers": 6, "hidden": 256, "heads": 4, "seq": 256, "micro_batch": 4},
    {"layers": 2, "hidden": 512, "heads": 8, "seq": 256, "micro_batch": 4},
    {"layers": 2, "hidden": 256, "heads": 4, "seq": 1024, "micro_batch": 1},
    {"layers": 2, "hidden": 256, "heads": 4, "seq": 256, "micro_batch": 16},
    {"layers": 4, "hidden": 768, "heads": 12, "seq": 512, "micro_batch": 2},
    {"layers": 2, "hidden": 256, "heads": 4, "seq": 256, "micro_batch": 4, "processes": 2},
    {"layers": 4, "hidden": 512, "heads": 8, "seq": 512, "micro_batch": 2, "processes": 2},
]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", required=True)
    ap.add_argument("--bench", action="store_true", help="run hwtune bench --quick first")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--clock", default="auto")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    if a.bench:
        from hwtune.calibrate.bench import BenchConfig, run_bench, write_profile

        t0 = time.perf_counter()
        res = run_bench(BenchConfig(mode="quick", threads=1, clock=a.clock))
        write_profile(res.document, a.profile)
        print(f"bench --quick --threads 1: {time.perf_counter() - t0:.0f} s -> {a.profile}",
              file=sys.stderr)  # fmt: skip
    tier2 = load_device_file(a.profile)
    tier1 = tier2.model_copy(update={"profile": None})
    triad = tier2.profile.memory.triad_bytes_per_s
    rows = []
    for kw in SHAPES:
        cfg = RefConfig(threads=1, steps=a.steps, warmup=a.warmup, clock=a.clock, **kw)
        r = run_reference(cfg)
        t1 = predict(cfg, tier1)
        e2 = predict_estimate(cfg, tier2)
        t2 = e2.step_time_s
        # the proposed estimator fix: the fused optimizer streams in place, at STREAM triad
        # bandwidth, not at the out-of-place elementwise curve
        t2f = t2 - e2.breakdown["optimizer"] + r.params * OPTIMIZER_BYTES_MOVED["adam"] / triad
        rows.append({"shape": kw, "model": to_model_spec(cfg).name, "processes": cfg.processes,
                     "measured_s": r.median_s, "clock": r.clock, "wall_s": r.wall_median_s,
                     "tier1_s": t1, "tier2_s": t2, "err1": t1 / r.median_s - 1,
                     "err2": t2 / r.median_s - 1, "tier2_optfix_s": t2f,
                     "err2f": t2f / r.median_s - 1, "load": r.load_average})  # fmt: skip
        print(f"{rows[-1]['model']} mb{cfg.micro_batch} s{cfg.seq} p{cfg.processes}: "
              f"measured {r.median_s:.4f} tier1 {t1:.4f} tier2 {t2:.4f}", file=sys.stderr)  # fmt: skip
    print(
        "| shape | procs | measured (s) | tier 1 (s) | err | tier 2 (s) | err "
        "| tier 2 + optimizer fix (s) | err | wall (s) | load |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        s = r["shape"]
        print(f"| L{s['layers']} h{s['hidden']} s{s['seq']} mb{s['micro_batch']} | "
              f"{r['processes']} | {r['measured_s']:.4f} | {r['tier1_s']:.4f} | "
              f"{r['err1']:+.1%} | {r['tier2_s']:.4f} | {r['err2']:+.1%} | "
              f"{r['tier2_optfix_s']:.4f} | {r['err2f']:+.1%} | {r['wall_s']:.4f} | "
              f"{r['load'][0] if r['load'] else '-'} |")  # fmt: skip
    e1 = [abs(r["err1"]) for r in rows]
    e2 = [abs(r["err2"]) for r in rows]
    e2f = [abs(r["err2f"]) for r in rows]
    print(
        f"\ntier 1: median |error| {statistics.median(e1):.1%}, p90 {np.percentile(e1, 90, method='nearest'):.1%}"
    )
    print(
        f"tier 2: median |error| {statistics.median(e2):.1%}, p90 {np.percentile(e2, 90, method='nearest'):.1%}"
    )
    print(f"tier 2 + optimizer fix: median |error| {statistics.median(e2f):.1%}, "
          f"p90 {np.percentile(e2f, 90, method='nearest'):.1%}")  # fmt: skip
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"profile": a.profile, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
