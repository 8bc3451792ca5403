"""Speed of the activation-checkpointing planner (`plan_checkpointing`), and a record of its
plans to compare a change against.

    .venv/bin/python benchmarks/accel_checkpoint_speed.py                      # timing only
    .venv/bin/python benchmarks/accel_checkpoint_speed.py --record ref.json    # plans -> JSON
    .venv/bin/python benchmarks/accel_checkpoint_speed.py --check ref.json     # plans == JSON?

Timing: one `plan_checkpointing` call (a fresh planner every call, as `accel evaluate` and the
training evaluation make it) at 0.6x the all-kept activation bytes, with the forward times on
edge-hetero as the recompute cost, as `evaluate` passes them. Plans: every workload below on
every catalog accelerator at 1.0/0.8/0.6/0.5/0.4x all-kept (method auto; greedy and chain too
on edge-hetero).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from hwtune.accel.architecture import catalog_names, load_accelerator
from hwtune.accel.checkpointing import plan_checkpointing
from hwtune.accel.models import GPT2Config, gpt2, resnet18
from hwtune.accel.schedule import schedule
from hwtune.accel.training import lower_training, saved_roots

FRACS = (1.0, 0.8, 0.6, 0.5, 0.4)


def workloads() -> dict:
    return {
        "resnet18-b4": resnet18(batch=4),
        "gpt2-4l-s256": gpt2(batch=1, seq=256, config=GPT2Config(n_layer=4)),
        "resnet18-b1-i96": resnet18(batch=1, image=96),
        "gpt2-12l-s128": gpt2(batch=2, seq=128),
    }


def forward_cost(g, acc) -> dict[str, float]:
    """The per-layer forward time `evaluate` passes to the planner."""
    base = schedule(lower_training(g), acc, 1)
    return {o.name: o.end - o.start for o in base.ops if o.phase == "fwd"}


def all_kept(g) -> int:
    return sum(g.tensors[r].nbytes for r in saved_roots(g))


def plans() -> dict:
    out = {}
    for wname, g in workloads().items():
        total = all_kept(g)
        for arch in catalog_names():
            cost = forward_cost(g, load_accelerator(arch))
            methods = ("auto", "greedy", "chain") if arch == "edge-hetero" else ("auto",)
            for method in methods:
                for frac in FRACS:
                    p = plan_checkpointing(g, frac * total, cost, method)
                    out[f"{wname}/{arch}/{method}/{frac}"] = p.to_dict()
    return out


def timing(repeats: int) -> None:
    acc = load_accelerator("edge-hetero")
    for wname in ("resnet18-b4", "gpt2-4l-s256"):
        g = workloads()[wname]
        cost = forward_cost(g, acc)
        limit = 0.6 * all_kept(g)
        ts = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            plan_checkpointing(g, limit, cost)
            ts.append(time.perf_counter() - t0)
        print(f"{wname:14s} plan_checkpointing: median {statistics.median(ts) * 1e3:7.1f} ms, "
              f"min {min(ts) * 1e3:7.1f} ms over {repeats}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--record", type=Path, help="write every plan to this JSON file")
    ap.add_argument("--check", type=Path, help="compare every plan with this JSON file")
    a = ap.parse_args()
    timing(a.repeats)
    if a.record:
        a.record.write_text(json.dumps(plans(), indent=1, sort_keys=True))
        print(f"wrote {a.record}")
    if a.check:
        want = json.loads(a.check.read_text())
        got = json.loads(json.dumps(plans()))
        bad = [k for k in want if got.get(k) != want[k]]
        for k in bad:
            w, h = want[k], got.get(k, {})
            diff = {f: (w.get(f), h.get(f)) for f in w if f != "dropped" and w.get(f) != h.get(f)}
            print(f"DIFFERS {k}: {diff}; dropped equal: {w['dropped'] == h.get('dropped')}")
        print(f"{len(want) - len(bad)}/{len(want)} plans equal")
        sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
