"""Speed of `hwtune.accel`: one (architecture, schedule) evaluation of a ResNet-18 training step
(issue target <= 50 ms on one core, mapper caches cleared before every call), and an NSGA-II
search of N evaluations (target: 5,000 in minutes).

    .venv/bin/python benchmarks/accel_speed.py                    # evaluation only
    .venv/bin/python benchmarks/accel_speed.py --search 5000 --workers 2
"""

from __future__ import annotations

import argparse
import statistics
import time

from hwtune.accel.architecture import catalog_names, load_accelerator
from hwtune.accel.mapper import map_mac_op
from hwtune.accel.models import resnet18
from hwtune.accel.schedule import schedule
from hwtune.accel.search import Budget, search
from hwtune.accel.training import lower_training


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument(
        "--search", type=int, default=0, help="evaluations of a search to time (0 = skip)"
    )
    ap.add_argument("--workers", type=int, default=1)
    a = ap.parse_args()
    tg = lower_training(resnet18(batch=1))
    print(f"ResNet-18 training step: {len(tg.ops)} ops, {tg.macs / 1e9:.2f} GMAC")
    for name in catalog_names():
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
        r = search(
            tg,
            t,
            evaluations=a.search,
            pop_size=100,
            workers=a.workers,
            seed=0,
            budget=Budget(area_mm2=20),
        )
        print(f"search: {r.evaluations} evaluations in {r.seconds:.1f} s on {a.workers} process(es) "
              f"({r.seconds / r.evaluations * 1e3:.1f} ms per evaluation); {len(r.F)} Pareto points")  # fmt: skip


if __name__ == "__main__":
    main()
