"""Summaries of a run: latency percentiles, throughput, KV utilization and prefix hits (in all
and over time).

Definitions (as ``vllm bench serve`` and genai-perf report them): TTFT = first token − arrival;
TPOT = (E2E − TTFT)/(output tokens − 1) per request, over requests with more than one output
token; ITL = the gaps between consecutive tokens of a request; E2E = finish − arrival; queueing
delay = first scheduled − arrival. Throughput divides by the span from the first arrival to the
last finish.
"""

from __future__ import annotations

import math

import numpy as np

from hwtune.serve.backlog import Backlog, backlog
from hwtune.serve.kv_usage import time_weighted_mean
from hwtune.serve.simulator import SimResult

PERCENTILES = (50, 90, 99)


def stats(values: np.ndarray) -> dict[str, float]:
    """mean, p50, p90, p99 (linear interpolation, numpy's default) of finite values."""
    v = values[np.isfinite(values)]
    if v.size == 0:
        return {"mean": math.nan, "p50": math.nan, "p90": math.nan, "p99": math.nan}
    p = np.percentile(v, PERCENTILES)
    return {"mean": float(v.mean()), "p50": float(p[0]), "p90": float(p[1]), "p99": float(p[2])}


def weighted_stats(values: np.ndarray, weights: np.ndarray) -> dict[str, float]:
    """`stats` of samples that each stand for ``weights`` equal observations (the inverted
    empirical CDF: the smallest value whose cumulative weight reaches q of the total)."""
    ok = np.isfinite(values)
    v, w = values[ok], weights[ok]
    if v.size == 0 or w.sum() <= 0:
        return stats(v)
    order = np.argsort(v, kind="stable")
    v, w = v[order], w[order]
    cw = np.cumsum(w)
    tot = cw[-1]
    out = {"mean": float((v * w).sum() / tot)}
    for p in PERCENTILES:
        i = int(np.searchsorted(cw, p / 100.0 * tot, side="left"))
        out[f"p{p}"] = float(v[min(i, v.size - 1)])
    return out


def per_request(res: SimResult) -> dict[str, np.ndarray]:
    """Arrays over finished requests: ttft, tpot, e2e, queue, prompt, output."""
    rs = res.requests
    return {
        "ttft": np.array([r.ttft for r in rs]),
        "tpot": np.array([r.tpot for r in rs]),
        "e2e": np.array([r.e2e for r in rs]),
        "queue": np.array([r.first_scheduled - r.arrival for r in rs]),
        "first_scheduled": np.array([r.first_scheduled for r in rs]),
        "finish": np.array([r.finish for r in rs]),
        "prompt": np.array([r.prompt for r in rs]),
        "output": np.array([r.output for r in rs]),
        "arrival": np.array([r.arrival for r in rs]),
    }


def backlog_of(res: SimResult, pr: dict[str, np.ndarray] | None = None) -> Backlog:
    """Whether the run's deployment kept up with its arrivals (`hwtune.serve.backlog`);
    ``pr`` is `per_request`'s arrays when the caller has them."""
    pr = per_request(res) if pr is None else pr
    return backlog(pr["arrival"], pr["first_scheduled"], pr["finish"], res.closed_loop)


WINDOWS = 20
"""How many equal stretches of the run `over_time` reports."""


def over_time(res: SimResult, windows: int = WINDOWS) -> dict[str, list]:
    """KV utilization and prefix-cache hit rate in ``windows`` equal stretches from the first
    arrival to the last finish: ``t_s`` each stretch's end; ``kv_utilization`` the time-weighted
    used share of all KV blocks in it; ``prefix_hit_rate`` the cached share of the prompt tokens
    of the admissions in it (None where nothing was admitted or prefix caching is off)."""
    if windows < 1:
        raise ValueError(f"windows: got {windows}; expected a positive integer")
    start = min((r.arrival for r in res.requests), default=0.0)
    end = max(res.duration_s, start)
    edges = np.linspace(start, end, windows + 1)
    kv = [time_weighted_mean(res.kv_time, res.kv_util, a, b)
          for a, b in zip(edges[:-1], edges[1:], strict=True)]  # fmt: skip
    log = res.prefix_log
    cut = np.searchsorted(log[:, 0], edges[1:-1], side="left")
    bounds = np.concatenate(([0], cut, [len(log)]))
    hit: list[float | None] = []
    for i in range(windows):
        q = log[bounds[i] : bounds[i + 1], 1].sum()
        hit.append(float(log[bounds[i] : bounds[i + 1], 2].sum() / q) if q else None)
    return {"t_s": edges[1:].tolist(), "kv_utilization": kv, "prefix_hit_rate": hit}


def summarize(res: SimResult) -> dict:
    """The JSON summary of ``hwtune serve``."""
    pr = per_request(res)
    n = len(res.requests)
    start = float(pr["arrival"].min()) if n else 0.0
    span = max(res.duration_s - start, 1e-12)
    tin, tout = float(pr["prompt"].sum()), float(pr["output"].sum())
    hit = res.prefix_hit_tokens / res.prefix_query_tokens if res.prefix_query_tokens else 0.0
    dep = res.deployment
    return {
        "requests": n,
        "ttft_s": stats(pr["ttft"]),
        "tpot_s": stats(pr["tpot"]),
        "itl_s": weighted_stats(res.itl, res.itl_weights),
        "e2e_s": stats(pr["e2e"]),
        "queue_s": stats(pr["queue"]),
        "throughput_tokens_per_s": {
            "input": tin / span,
            "output": tout / span,
            "total": (tin + tout) / span,
        },  # fmt: skip
        "requests_per_s": n / span,
        "kv_utilization": {
            "mean": time_weighted_mean(res.kv_time, res.kv_util, start, res.duration_s),
            "max": res.kv_peak,
        },
        "prefix_hit_rate": hit,
        "over_time": over_time(res),
        "preemptions": res.preemptions,
        "backlog": backlog_of(res, pr).to_dict(),
        "kv_cache_blocks": res.memory.kv_blocks * dep.replica.dp_attention,
        "kv_cache_tokens": res.memory.kv_tokens * dep.replica.dp_attention,
        "weights_per_gpu_bytes": res.memory.weights,
        "gpus": dep.gpus,
        "simulated_s": res.duration_s,
        "wall_s": res.wall_s,
        "steps": res.n_steps,
    }
