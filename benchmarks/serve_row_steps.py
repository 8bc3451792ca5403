"""One published serving row, simulated step by step: the measured TTFT and TPOT beside the
simulated ones, the simulated TTFT percentiles, and the engine steps where the batch changes
(start, duration, prompts and their tokens, decodes). For reading how a closed loop settles
(lock-step groups, cycles of prefill steps) on a row the simulator gets wrong.

    python benchmarks/serve_row_steps.py trtllm_agg_512x128_c32_tp4      # a substring of the id
    python benchmarks/serve_row_steps.py c4_cfg81 --all-steps --max-steps 50
"""

from __future__ import annotations

import argparse
import math
import sys

import numpy as np

from hwtune.serve.metrics import per_request
from hwtune.serve.published import REQUESTS_PER_CLIENT, load_rows, row_workload
from hwtune.serve.simulator import simulate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("row", help="a substring of the row id (the first expressible match)")
    ap.add_argument("--requests-per-client", type=int, default=REQUESTS_PER_CLIENT)
    ap.add_argument("--all-steps", action="store_true", help="every step, not only changes")
    ap.add_argument("--max-steps", type=int, default=80, help="steps printed at most")
    a = ap.parse_args()
    if a.requests_per_client < 1 or a.max_steps < 0:
        ap.error("--requests-per-client: expected >= 1; --max-steps: expected >= 0")
    rows = [r for r in load_rows() if r.deployment is not None and a.row in r.id]
    if not rows:
        sys.stderr.write(f"error: row: got {a.row!r}; expected a substring of an expressible id\n")
        raise SystemExit(2)
    r = rows[0]
    res = simulate(r.deployment, row_workload(r, a.requests_per_client), record_steps=True)
    pr = per_request(res)
    tpot = pr["tpot"][~np.isnan(pr["tpot"])]
    print(f"{r.id} ({len(rows)} match{'es' if len(rows) > 1 else ''}; the first)")
    print(f"TTFT measured {r.ttft_s * 1e3:.0f} ms, simulated {pr['ttft'].mean() * 1e3:.0f} ms; "
          f"TPOT measured {r.tpot_s * 1e3:.1f} ms, simulated "
          f"{(tpot.mean() if tpot.size else math.nan) * 1e3:.1f} ms")  # fmt: skip
    pct = np.percentile(pr["ttft"], [10, 50, 90]) * 1e3
    print(f"simulated TTFT p10 / p50 / p90: {pct[0]:.0f} / {pct[1]:.0f} / {pct[2]:.0f} ms")
    print("start s | duration ms | prompts (tokens) | decodes")
    shown, prev = 0, None
    for s in res.steps:
        if shown >= a.max_steps:
            break
        if a.all_steps or s.prefills or s.decodes != prev:
            print(f"{s.start:.4f} | {s.duration * 1e3:.1f} | {s.prefills} ({s.shape.pf_tokens}) "
                  f"| {s.decodes}")  # fmt: skip
            shown += 1
        prev = s.decodes


if __name__ == "__main__":
    main()
