"""Per-request records of a serving simulation (`hwtune serve --requests-out`).

One row per finished request: its lengths, where it ran, and its latencies as the summary
defines them (`hwtune.serve.metrics`: queueing delay, TTFT, TPOT, E2E) plus its own inter-token
gaps (median and largest). CSV for spreadsheets; JSON Lines also carries every output token's
time (a token-level trace; needs ``simulate(..., record_tokens=True)``).
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np

from hwtune.serve.request import Request
from hwtune.serve.simulator import SimResult

COLUMNS = (
    "rid", "replica", "arrival_s", "prompt_tokens", "output_tokens", "cached_tokens",
    "preemptions", "queue_s", "ttft_s", "tpot_s", "e2e_s", "itl_p50_s", "itl_max_s",
)  # fmt: skip
SUFFIXES = frozenset({"csv", "jsonl"})


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def request_record(r: Request) -> dict:
    """The columns of one finished request (None where undefined: TPOT and inter-token gaps
    of a one-token output, or gaps without recorded token times)."""
    gaps = np.diff(r.token_times) if r.token_times else np.zeros(0)
    return {
        "rid": r.rid,
        "replica": r.replica,
        "arrival_s": r.arrival,
        "prompt_tokens": r.prompt,
        "output_tokens": r.output,
        "cached_tokens": r.cached_tokens,
        "preemptions": r.preemptions,
        "queue_s": r.first_scheduled - r.arrival,
        "ttft_s": r.ttft,
        "tpot_s": _finite(r.tpot),
        "e2e_s": r.e2e,
        "itl_p50_s": float(np.median(gaps)) if gaps.size else None,
        "itl_max_s": float(gaps.max()) if gaps.size else None,
    }


def write_requests(res: SimResult, path: str | Path) -> Path:
    """Write ``res``'s requests in arrival order to ``path``: ``.csv`` (the `COLUMNS`; empty cells
    where undefined) or ``.jsonl`` (one object a line, with ``token_times_s``)."""
    p = Path(path)
    kind = p.suffix.lower().lstrip(".")
    if kind not in SUFFIXES:
        raise ValueError(f"requests-out: got {p}; expected a file name ending in .csv or .jsonl")
    rows = sorted(res.requests, key=lambda r: (r.arrival, r.rid))
    with p.open("w", newline="") as f:
        if kind == "csv":
            w = csv.DictWriter(f, fieldnames=COLUMNS)
            w.writeheader()
            for r in rows:
                w.writerow({k: "" if v is None else v for k, v in request_record(r).items()})
        else:
            for r in rows:
                rec = request_record(r) | {"token_times_s": r.token_times}
                f.write(json.dumps(rec, allow_nan=False) + "\n")
    return p
