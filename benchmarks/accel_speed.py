"""Speed of `hwtune.accel`: one (architecture, schedule) evaluation of a ResNet-18 training step
(issue target <= 50 ms on one core, mapper caches cleared before every call), and an NSGA-II
search of N evaluations (target: 5,000 in minutes).

    .venv/bin/python benchmarks/accel_speed.py                    # evaluation only
    .venv/bin/python benchmarks/accel_speed.py --search 5000 --workers 2
    .venv/bin/python benchmarks/accel_speed.py --repeats 0 --search 300 --workload gpt2 \
        --activation-limit-frac 0.6         # search with checkpointing planned per architecture

``--activation-limit-frac F`` runs the search as `hwtune accel search --activation-limit-mib`
does, with the limit F x the workload's all-kept activation bytes; the search prints
evaluations per second. gpt2 is GPT-2 small at 1,024 tokens, batch 1 (the CLI's defaults).
"""

from __future__ import annotations

import argparse
import statistics
import time

from hwtune.accel.architecture import catalog_names, load_accelerator
from hwtune.accel.mapper import map_mac_op
from hwtune.accel.models import gpt2, resnet18
from hwtune.accel.schedule import schedule
from hwtune.accel.search import Budget, Checkpointing, search
from hwtune.accel.training import lower_training, saved_roots


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument(
        "--search", type=int, default=0, help="evaluations of a search to time (0 = skip)"
    )
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--workload", choices=("resnet18", "gpt2"), default="resnet18")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--activation-limit-frac",
        type=float,
        default=None,
        help="search with checkpointing to this fraction of the all-kept activation bytes",
    )
    ap.add_argument("--checkpoint-method", default="auto")
    a = ap.parse_args()
    g = resnet18(batch=1) if a.workload == "resnet18" else gpt2(batch=1, seq=1024)
    tg = lower_training(g)
    print(f"{g.name} training step: {len(tg.ops)} ops, {tg.macs / 1e9:.2f} GMAC")
    for name in catalog_names() if a.repeats > 0 else ():
        acc = load_accelerator(name)
        for depth in (1, 4):
            ts = []
            for _ in range(a.repeats):
                map_mac_op.cache_clear()
                t0 = time.perf_counter()
                schedule(tg, acc, fusion_depth=depth)
                ts.append(time.perf_counter() - t0)
            ts.sort()
            print(f"  {name:14s} fusion {depth}: median {statistics.median(ts) * 1e3:6.1f} ms, "
                  f"p90 {ts[int(0.9 * (len(ts) - 1))] * 1e3:6.1f} ms (cold mapper caches)")  # fmt: skip
    if a.search:
        t = load_accelerator("edge-hetero")
        ck = None
        if a.activation_limit_frac is not None:
            kept = sum(g.tensors[r].nbytes for r in saved_roots(g))
            ck = Checkpointing(a.activation_limit_frac * kept, a.checkpoint_method)
            print(f"checkpointing ({ck.method}) to {ck.limit_bytes / 2**20:.2f} MiB "
                  f"({a.activation_limit_frac:g} x all kept, {kept / 2**20:.2f} MiB)")  # fmt: skip
        r = search(
            tg,
            t,
            evaluations=a.search,
            pop_size=100,
            workers=a.workers,
            seed=a.seed,
            budget=Budget(area_mm2=20),
            checkpointing=ck,
        )
        print(f"search: {r.evaluations} evaluations in {r.seconds:.1f} s on {a.workers} process(es) "
              f"({r.seconds / r.evaluations * 1e3:.1f} ms per evaluation, "
              f"{r.evaluations / r.seconds:.2f} per second); {len(r.F)} Pareto points; "
              f"{r.infeasible} infeasible ({r.over_limit} over the activation limit)")  # fmt: skip


if __name__ == "__main__":
    main()
