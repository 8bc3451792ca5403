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
  over shape).

Prints a Markdown table (measured vs predicted, error per shape) and the median / 90th-percentile
absolute relative errors. Nothing is fitted to the measured steps.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from hwtune.calibrate.serving_reference import LlamaRefConfig, ServingReference, model_spec
from hwtune.hardware.device import Device, load_device_file
from hwtune.model.spec import ModelSpec
from hwtune.serve.config import ReplicaConfig
from hwtune.serve.iteration import IterationModel, StepShape

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


def step_shape(phase: str, batch: int, n: int) -> StepShape:
    """The simulator's `StepShape` of one step (as `serve.scheduler` builds it): ``batch``
    whole prompts of ``n`` tokens, or ``batch`` decodes after ``n`` cached tokens each."""
    if phase == "prefill":
        pairs = batch * n * (n / 2.0)
        return StepShape(tokens=batch * n, seqs=batch, sampled=batch, pf_pairs=pairs,
                         pf_kv=batch * n, pf_tokens=batch * n, pf_pairs_w=pairs,
                         pf_kv_w=batch * n)  # fmt: skip
    ctx = batch * (n + 1)  # the new token's key is read too (scheduler: ctx = computed + 1)
    return StepShape(tokens=batch, seqs=batch, sampled=batch, dec_n=batch, dec_ctx=ctx,
                     dec_ctx_w=ctx)  # fmt: skip


def predictor(spec: ModelSpec, device: Device) -> IterationModel:
    """The serve iteration model for ``spec`` on ``device``, everything in fp32."""
    return IterationModel(ReplicaConfig(model=spec, device=device), dtype="fp32")


def pctl(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", required=True)
    ap.add_argument("--bench", action="store_true", help="run hwtune bench --quick first")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
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
    tier1, tier2 = predictor(spec, tier1_dev), predictor(spec, tier2_dev)
    ref = ServingReference(cfg, threads=1, warmup=a.warmup, reps=a.reps)
    rows = []
    for phase, b, n in SHAPES:
        m = ref.prefill(b, n) if phase == "prefill" else ref.decode(b, n)
        s = step_shape(phase, b, n)
        t1, t2 = tier1.step_time(s), tier2.step_time(s)
        rows.append({"phase": phase, "batch": b, "tokens": n, "measured_s": m.median_s,
                     "clock": m.clock, "wall_s": m.wall_median_s, "tier1_s": t1, "tier2_s": t2,
                     "err1": t1 / m.median_s - 1, "err2": t2 / m.median_s - 1,
                     "tier2_breakdown": tier2.breakdown(s)})  # fmt: skip
        print(f"{phase} b{b} n{n}: measured {m.median_s * 1e3:.2f} ms, tier 1 {t1 * 1e3:.2f}, "
              f"tier 2 {t2 * 1e3:.2f}", file=sys.stderr)  # fmt: skip
    print(f"model: {spec.name} (LlamaForCausalLM, random weights, fp32; hidden {cfg.hidden}, "
          f"{cfg.layers} layers, {cfg.heads} heads / {cfg.kv_heads} KV heads, intermediate "
          f"{cfg.intermediate}, vocab {cfg.vocab}); one torch thread, {rows[0]['clock']} clock\n")  # fmt: skip
    print("| step | batch | prompt / context | measured (ms) | tier 1 (ms) | err | tier 2 (ms) "
          "| err | tier 1 → 2 |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        better = abs(r["err1"]) - abs(r["err2"])
        print(f"| {r['phase']} | {r['batch']} | {r['tokens']} | {r['measured_s'] * 1e3:.2f} | "
              f"{r['tier1_s'] * 1e3:.2f} | {r['err1']:+.1%} | {r['tier2_s'] * 1e3:.2f} | "
              f"{r['err2']:+.1%} | {better * 100:+.1f} pts |")  # fmt: skip
    e1 = [abs(r["err1"]) for r in rows]
    e2 = [abs(r["err2"]) for r in rows]
    print(f"\ntier 1: median |error| {statistics.median(e1):.1%}, p90 {pctl(e1, 0.9):.1%}")
    print(f"tier 2: median |error| {statistics.median(e2):.1%}, p90 {pctl(e2, 0.9):.1%}")
    for ph in ("prefill", "decode"):
        e = [abs(r["err2"]) for r in rows if r["phase"] == ph]
        print(f"tier 2 {ph}: median |error| {statistics.median(e):.1%}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"profile": a.profile, "model": spec.name, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
