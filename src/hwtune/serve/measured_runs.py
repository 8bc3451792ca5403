"""Benchmark runs a user measured on a serving engine, and their simulated twins.

A runs file is a CSV with a header; one row per run of a closed-loop benchmark (``vllm bench
serve --max-concurrency C``, aiperf ``--concurrency C``, ...) of one engine, model and GPU:

    concurrency,input_len,output_len,ttft_ms,tpot_ms,tp
    8,1024,512,62.1,7.9,1
    64,1024,512,180.4,11.2,1

Required: ``concurrency``, ``input_len``, ``output_len`` and the measured mean ``ttft_ms`` and
``tpot_ms``. Optional: ``tp``, ``pp``, ``ep``, ``dp_attention`` (default 1), ``range_ratio``
(default 1: fixed lengths; 0.8 for InferenceX-style sampling in [0.8 L, L]) and
``num_requests`` (default 10 x concurrency; at least ``concurrency``: the measured phase starts
all its clients at once, `hwtune.serve.endpoint_bench`). Measured means are latencies of a
real server, within `LATENCY_RANGE_MS`. `simulate_run` replays each run with the same
closed loop on a `ReplicaConfig`; `hwtune.serve.correction` fits the tier-3 correction to the
pairs.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hwtune.errors import HwtuneInputError
from hwtune.serve.config import Deployment, ReplicaConfig
from hwtune.structured_file import read_utf8, repeated_columns

REQUIRED = ("concurrency", "input_len", "output_len", "ttft_ms", "tpot_ms")
OPTIONAL_INT = ("tp", "pp", "ep", "dp_attention", "num_requests")
RECORDED = ("ttft_p90_ms", "tpot_p90_ms", "requests_per_s", "output_tokens_per_s",
            "mean_output_tokens")  # fmt: skip
"""Columns `hwtune serve measure` writes for the record; read and ignored."""
KNOWN = (*REQUIRED, *OPTIONAL_INT, "range_ratio", *RECORDED)
CONFIG = ("concurrency", "input_len", "output_len", "tp", "pp", "ep", "dp_attention",
          "range_ratio", "num_requests")  # fmt: skip


@dataclass(frozen=True)
class MeasuredRun:
    """One measured closed-loop run (latencies in seconds)."""

    concurrency: int
    input_len: int
    output_len: int
    ttft_s: float
    tpot_s: float
    tp: int = 1
    pp: int = 1
    ep: int = 1
    dp_attention: int = 1
    range_ratio: float = 1.0
    num_requests: int | None = None
    line: int = field(default=0, compare=False, repr=False)
    """The runs file's line it was read from (0: not read from a file)."""


LATENCY_RANGE_MS = (1e-3, 2.16e7)
"""Measured mean TTFT and TPOT a run may have, in ms: from 1 us (below one kernel launch, so no
token is served faster) to 6 hours, the whole-request timeout of vLLM's and SGLang's benchmark
clients (``AIOHTTP_TIMEOUT = aiohttp.ClientTimeout(total=6 * 60 * 60)``): no measured request
outlives it. Outside it a value is a unit slip or a corrupt cell, and one such run decides the
fitted correction (its relative residual dwarfs the others')."""


def check_requests_per_client(
    n: int, clients: int, field: str, clients_name: str, shown: object = None
) -> None:
    """Refuse a run of fewer requests than clients: the measured phase starts all its clients
    at once, each with a request, so some clients would never have sent one (``shown``: the
    value as the user wrote it, a file's cell)."""
    if n < clients:
        shown = n if shown is None else shown
        raise HwtuneInputError(field, shown, f"at least {clients_name} ({clients}): the measured "
                               "phase starts all its clients at once, each with a request")  # fmt: skip


def _num(path: str, line: int, col: str, text: str, kind: type) -> float:
    try:
        v = kind(text)
    except ValueError:
        v = math.nan
    if not (isinstance(v, int) or math.isfinite(v)) or v <= 0:
        raise HwtuneInputError(f"{path}: line {line}: {col}", text, f"a positive {kind.__name__}")
    return v


def _latency(path: str, line: int, col: str, text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    lo, hi = LATENCY_RANGE_MS
    if not lo <= v <= hi:  # NaN, inf, 0 and negatives too
        raise HwtuneInputError(f"{path}: line {line}: {col}", text, f"a measured latency from "
                               f"{lo:g} ms to {hi:g} ms ({hi / 3.6e6:g} hours, the benchmark "
                               "clients' request timeout)")  # fmt: skip
    return v


def load_runs(path: str | Path) -> list[MeasuredRun]:
    """Read a runs CSV (see the module docstring); a bad cell names its line and column."""
    p = Path(path)
    text = read_utf8(p, "runs")
    reader = csv.DictReader(text.splitlines())
    cols = [c.strip() for c in reader.fieldnames or []]
    missing = [c for c in REQUIRED if c not in cols]
    if missing:
        raise HwtuneInputError(
            f"{p.name}: header", ",".join(cols), f"columns {', '.join(REQUIRED)}"
        )
    twice = repeated_columns(cols)
    if twice:
        raise HwtuneInputError(f"{p.name}: header", ",".join(cols),
                               f"each column once ({', '.join(twice)} repeated)")  # fmt: skip
    unknown = [c for c in cols if c not in KNOWN]
    if unknown:  # a misspelt optional column (tpp for tp) would be read as its default
        raise HwtuneInputError(f"{p.name}: header", ",".join(cols),
                               f"only the columns {', '.join(KNOWN)} ({', '.join(unknown)} "
                               "unknown)")  # fmt: skip
    runs = []
    seen: dict[tuple[str, ...], int] = {}
    for raw in reader:
        line = reader.line_num  # the file's line: csv skips blank lines, which enumerate miscounts
        if None in raw:  # more cells than the header has columns
            raise HwtuneInputError(f"{p.name}: line {line}", ",".join(raw[None]),
                                   f"at most {len(cols)} cells, one per header column "
                                   "(these are extra)")  # fmt: skip
        row = {(k or "").strip(): (v or "").strip() for k, v in raw.items()}
        if not any(row.values()):
            continue
        kw: dict[str, object] = {
            "concurrency": _num(p.name, line, "concurrency", row["concurrency"], int),
            "input_len": _num(p.name, line, "input_len", row["input_len"], int),
            "output_len": _num(p.name, line, "output_len", row["output_len"], int),
            "ttft_s": _latency(p.name, line, "ttft_ms", row["ttft_ms"]) / 1e3,
            "tpot_s": _latency(p.name, line, "tpot_ms", row["tpot_ms"]) / 1e3,
        }
        for col in OPTIONAL_INT:
            if row.get(col):
                kw[col] = _num(p.name, line, col, row[col], int)
        if row.get("range_ratio"):
            rr = _num(p.name, line, "range_ratio", row["range_ratio"], float)
            if rr > 1:
                raise HwtuneInputError(f"{p.name}: line {line}: range_ratio", row["range_ratio"],
                                       "a fraction in (0, 1]")  # fmt: skip
            kw["range_ratio"] = rr
        out, ratio = int(str(kw["output_len"])), float(str(kw.get("range_ratio", 1.0)))
        if int(out * ratio) < 2:  # TPOT, which calibrate fits, needs two output tokens in each
            col = "output_len" if out < 2 else "range_ratio"
            raise HwtuneInputError(f"{p.name}: line {line}: {col}", row[col], "2 output tokens "
                                   "or more in every request (with range_ratio, at the low end "
                                   "int(output_len * range_ratio) too): TPOT is the time between "
                                   "output tokens")  # fmt: skip
        n = kw.get("num_requests")
        if n is not None:
            check_requests_per_client(int(str(n)), int(str(kw["concurrency"])),
                                      f"{p.name}: line {line}: num_requests", "concurrency",
                                      row["num_requests"])  # fmt: skip
        run = MeasuredRun(**kw, line=line)  # type: ignore[arg-type]
        key = tuple(str(getattr(run, f)) for f in CONFIG)
        if key in seen:  # its twin would stay in every leave-one-out fit and hide its error
            raise HwtuneInputError(f"{p.name}: line {line}", ",".join(row[c] for c in cols),
                                   f"one row per configuration (line {seen[key]} has the same "
                                   "concurrency, lengths and layout; average repeated "
                                   "measurements into one row)")  # fmt: skip
        seen[key] = line
        runs.append(run)
    if not runs:
        raise HwtuneInputError("runs", str(path), "at least one run below the header")
    return runs


def simulate_run(
    base: ReplicaConfig,
    run: MeasuredRun,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[float, float]:
    """(mean TTFT, mean TPOT) seconds of ``run`` simulated on ``base`` with the run's layout;
    ``progress(done, total)`` as `hwtune.serve.simulator.simulate` calls it."""
    from hwtune.serve.metrics import per_request
    from hwtune.serve.request import closed_loop, fixed_lengths, range_ratio_lengths
    from hwtune.serve.simulator import simulate

    cfg = base.with_(tp=run.tp, pp=run.pp, ep=run.ep, dp_attention=run.dp_attention)
    n = run.num_requests or 10 * run.concurrency
    if run.range_ratio < 1:
        p, o = range_ratio_lengths(n, run.input_len, run.output_len, run.range_ratio, seed)
    else:
        p, o = fixed_lengths(n, run.input_len, run.output_len)
    res = simulate(Deployment(cfg), closed_loop(run.concurrency, p, o), progress=progress)
    pr = per_request(res)
    tpot = pr["tpot"][pr["tpot"] == pr["tpot"]]
    return float(pr["ttft"].mean()), float(tpot.mean()) if tpot.size else math.nan


__all__ = ["MeasuredRun", "load_runs", "simulate_run"]
