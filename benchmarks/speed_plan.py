"""Speed of the planner's search (`hwtune plan`): candidates per second, one core.

    python benchmarks/speed_plan.py [--markdown]

Each job is planned from cold caches (a fresh process would see the same), then once more warm.
"""

from __future__ import annotations

import argparse
import functools
import gc
import platform
import time

from hwtune.hardware.cluster import make_cluster
from hwtune.model.catalog import get_model
from hwtune.train.search import plan, strategy_label

JOBS = [
    # (label, model, gpu, gpus, global batch (sequences), seq)
    (
        "Llama-3.1-405B, 16,384 H100 (issue target <= 2 s)",
        "llama3.1-405b",
        "h100-sxm-80gb",
        16384,
        2048,
        8192,
    ),
    ("Llama-3.1-70B, 64 H100", "llama3.1-70b", "h100-sxm-80gb", 64, 128, 8192),
    ("GPT-3 175B, 1,024 A100 (Calculon's job)", "gpt3-175b", "a100-sxm4-80gb", 1024, 1024, 2048),
    ("Mixtral-8x7B, 64 H100", "mixtral-8x7b", "h100-sxm-80gb", 64, 256, 4096),
    ("DeepSeek-V3, 1,024 H100", "deepseek-v3", "h100-sxm-80gb", 1024, 8192, 4096),
]


def clear_caches() -> None:
    import hwtune.cost.compute as c
    import hwtune.cost.memory as m
    import hwtune.model.lowering as lo
    import hwtune.model.params as p
    import hwtune.train.estimator as e

    for mod in (c, m, lo, p, e):
        for obj in vars(mod).values():
            if isinstance(obj, functools._lru_cache_wrapper):
                obj.cache_clear()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    rows = []
    for label, model, gpu, n, gb, seq in JOBS:
        spec, cl = get_model(model), make_cluster(gpu, n)
        clear_caches()
        gc.collect()
        t0 = time.perf_counter()
        r = plan(spec, cl, gb, seq)
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        plan(spec, cl, gb, seq)
        warm = time.perf_counter() - t0
        best = r.top[0]
        rows.append((label, r.candidates, r.evaluated, cold, warm, r.candidates / cold,
                     strategy_label(best.strategy), best.mfu))  # fmt: skip
        print(f"{label}: {r.candidates:,} candidates, {r.evaluated:,} estimated, cold {cold:.2f} s, "
              f"warm {warm:.2f} s, {r.candidates / cold:,.0f} candidates/s; best {strategy_label(best.strategy)}")  # fmt: skip
    print(f"# {platform.processor() or platform.machine()}, Python {platform.python_version()}")
    if a.markdown:
        print(
            "| job | candidates | estimated | cold (s) | warm (s) | candidates/s (cold) | best strategy | MFU |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for label, c, ev, cold, warm, rate, lab, mfu in rows:
            print(
                f"| {label} | {c:,} | {ev:,} | {cold:.2f} | {warm:.2f} | {rate:,.0f} | {lab} | {mfu:.1%} |"
            )


if __name__ == "__main__":
    main()
