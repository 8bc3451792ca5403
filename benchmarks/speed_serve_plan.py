"""Speed of the serving deployment search (`hwtune serve plan`) as the GPU budget grows: layouts
simulated and wall seconds, one process, for an SLO that one GPU meets and for one that needs
more, and for one that no layout meets. The search stops at the fewest GPUs that meet the SLOs
once every layout on that many has been simulated, inside a batch of whole GPU counts
(`hwtune.serve.plan.plan`), so a large budget costs only the GPU counts searched; without one it leaves out the layouts with more replicas than a smaller one's
simulation used (`hwtune.serve.plan.ReplicaSaturation`), which bounds the search by the traffic.

    python benchmarks/speed_serve_plan.py [--markdown] [--met-only]
"""

from __future__ import annotations

import argparse
import platform
import time

from hwtune.errors import HwtuneInputError
from hwtune.hardware.catalog import get_device
from hwtune.model.catalog import get_model
from hwtune.serve.config import ReplicaConfig
from hwtune.serve.plan import SLO, ReplicaSaturation, candidates, plan
from hwtune.serve.request import closed_loop, fixed_lengths

# (label, model, clients, prompt, output, SLO)
JOBS = [
    ("Llama-3.1-8B, 16 clients 1024/128, p90 TTFT <= 2 s", "llama3.1-8b", 16, 1024, 128,
     SLO(ttft_p90_s=2.0)),
    ("Llama-3.1-70B, 64 clients 1024/128, p90 TTFT <= 3 s, TPOT <= 30 ms", "llama3.1-70b", 64,
     1024, 128, SLO(ttft_p90_s=3.0, tpot_p90_s=0.030)),
    ("Llama-3.1-8B, 16 clients 1024/128, p90 TTFT <= 1 ms (none meets)", "llama3.1-8b", 16,
     1024, 128, SLO(ttft_p90_s=0.001)),
]  # fmt: skip
BUDGETS = (8, 64, 4096)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--met-only", action="store_true",
                    help="only the jobs whose SLOs some layout meets (skip the ~16 min of the last)")  # fmt: skip
    args = ap.parse_args()
    rows = []
    for label, model, clients, prompt, output, slo in JOBS[:2] if args.met_only else JOBS:
        base = ReplicaConfig(get_model(model), get_device("h100-sxm-80gb"))
        wl = closed_loop(clients, *fixed_lengths(4 * clients, prompt, output))
        for g in BUDGETS:
            t = time.perf_counter()
            sat, seen = ReplicaSaturation(), [0]
            try:
                res = plan(base, wl, slo, max_gpus=g, processes=1, saturation=sat,
                           progress=lambda d, _t, s=seen: s.__setitem__(0, d))  # fmt: skip
                best = str(res[0].gpus)
            except HwtuneInputError:  # none meets
                best = "none"
            wall = time.perf_counter() - t
            every = len(candidates(base, g)) if g <= 256 else None
            rows.append((label, g, seen[0], sat.skipped, every, best, wall))
    if args.markdown:
        print(f"machine: {platform.processor() or platform.machine()}, one process\n")
        print("| job | --max-gpus | layouts simulated | left out alike | layouts in budget "
              "| best GPUs | wall s |")  # fmt: skip
        print("|---|---:|---:|---:|---:|---:|---:|")
        for label, g, n, skipped, every, best, wall in rows:
            e = f"{every:,}" if every is not None else "-"
            print(f"| {label} | {g:,} | {n:,} | {skipped:,} | {e} | {best} | {wall:.1f} |")
    else:
        for r in rows:
            print(*r)


if __name__ == "__main__":
    main()
