"""Simulator speed: 10,000 requests of a ShareGPT-like length mix on Llama-3.1-8B (one H100),
Poisson arrivals, vLLM-style scheduler, one process. Prints wall seconds and simulated seconds per
wall second (best of ``--repeat``), as JSON; ``cpu_s`` is the process CPU time, which other
load on the machine does not inflate.

    .venv/bin/python benchmarks/serve_speed.py [--requests 10000] [--rate 20] [--repeat 3]
        [--spec-tokens K --spec-acceptance A]
"""

from __future__ import annotations

import argparse
import json
import time

from hwtune.hardware.catalog import get_device
from hwtune.model.catalog import get_model
from hwtune.serve.config import ReplicaConfig
from hwtune.serve.metrics import summarize
from hwtune.serve.request import closed_loop, open_loop, sharegpt_like_lengths
from hwtune.serve.simulator import _MODEL_CACHE, simulate


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--concurrency", type=int, default=0, help="closed loop instead of --rate")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--model", default="llama3.1-8b")
    ap.add_argument("--gpu", default="h100-sxm-80gb")
    ap.add_argument("--spec-tokens", type=int, default=0, help="speculative decoding drafts")
    ap.add_argument("--spec-acceptance", type=float, default=0.0)
    a = ap.parse_args()
    cfg = ReplicaConfig(get_model(a.model), get_device(a.gpu), spec_tokens=a.spec_tokens,
                        spec_acceptance=a.spec_acceptance)  # fmt: skip
    p, o = sharegpt_like_lengths(a.requests, seed=0)
    wl = closed_loop(a.concurrency, p, o) if a.concurrency else open_loop(a.rate, p, o, seed=0)
    best = None
    for _ in range(a.repeat):
        _MODEL_CACHE.clear()  # include building the step-time grid in every run
        t, c = time.perf_counter(), time.process_time()
        res = simulate(cfg, wl)
        wall, cpu = time.perf_counter() - t, time.process_time() - c
        if best is None or wall < best[0]:
            best = (wall, cpu, res)
    wall, cpu, res = best
    s = summarize(res)
    print(json.dumps({
        "requests": a.requests, "model": a.model, "gpu": a.gpu,
        "workload": f"closed C={a.concurrency}" if a.concurrency else f"Poisson {a.rate}/s",
        "wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "simulated_s": round(res.duration_s, 1),
        "simulated_s_per_wall_s": round(res.duration_s / wall, 1), "steps": res.n_steps,
        "steps_per_wall_s": round(res.n_steps / wall), "ttft_p50_s": s["ttft_s"]["p50"],
        "tpot_p50_s": s["tpot_s"]["p50"],
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
