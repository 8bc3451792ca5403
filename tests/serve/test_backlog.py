"""A deployment that falls behind its arrivals is told apart from one that keeps up
(`hwtune.serve.backlog`), and `serve plan` does not list one that falls behind."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from hwtune.hardware.catalog import get_device
from hwtune.model.catalog import get_model
from hwtune.serve.backlog import Backlog, backlog
from hwtune.serve.config import Deployment, ReplicaConfig
from hwtune.serve.metrics import backlog_of, summarize
from hwtune.serve.plan import SLO, plan
from hwtune.serve.request import closed_loop, fixed_lengths, open_loop
from hwtune.serve.simulator import simulate


def _single_server(arrival: np.ndarray, service_s: float) -> tuple[np.ndarray, np.ndarray]:
    """First-scheduled and finish times of a one-at-a-time FIFO server (Lindley's recursion)."""
    start, finish = np.empty_like(arrival), np.empty_like(arrival)
    free = 0.0
    for i, a in enumerate(arrival):
        start[i] = max(a, free)
        finish[i] = free = start[i] + service_s
    return start, finish


def _poisson(rate: float, n: int, seed: int) -> np.ndarray:
    return np.cumsum(np.random.default_rng(seed).exponential(1 / rate, n))


@settings(max_examples=30, deadline=None)
@given(load=hs.floats(0.1, 0.8), seed=hs.integers(0, 10_000))
def test_a_server_below_its_capacity_is_not_taken_to_fall_behind(load: float, seed: int) -> None:
    # M/D/1 at load <= 0.8: a stable queue whose length is a few requests
    arr = _poisson(10.0, 4000, seed)
    start, fin = _single_server(arr, load / 10.0)
    b = backlog(arr, start, fin, closed=False)
    assert b.judged and not b.falls_behind


@pytest.mark.parametrize("overload", [1.1, 1.3, 2.0])
def test_a_server_past_its_capacity_falls_behind(overload: float) -> None:
    # service rate 1/overload of the arrival rate: the backlog grows by (1 - 1/overload) x the
    # second half's arrivals, 9-50% of 2,000, far above 2 x sqrt(2,000) = 89
    arr = _poisson(10.0, 4000, 1)
    start, fin = _single_server(arr, overload / 10.0)
    b = backlog(arr, start, fin, closed=False)
    assert b.judged and b.falls_behind
    assert b.served_requests_per_s < b.offered_requests_per_s
    assert "falls behind" in b.note()


def test_closed_loops_and_tiny_runs_are_not_judged() -> None:
    arr = _poisson(10.0, 4000, 2)
    start, fin = _single_server(arr, 0.2)  # overloaded, but a closed loop cannot be
    assert backlog(arr, start, fin, closed=True) == Backlog(False, False, None, None, 0, 0)
    b = backlog(arr[:19], start[:19], fin[:19], closed=False)
    assert not b.judged and b.note() is None


def test_a_run_shorter_than_its_service_time_says_how_many_requests_would_tell() -> None:
    arr = _poisson(10.0, 100, 3)  # ~10 s of arrivals, 30 s in service each
    fin = arr + 30.0
    b = backlog(arr, arr, fin, closed=False)
    assert not b.judged and not b.falls_behind
    # the first half must outlast 30 s: ~60 s of arrivals at ~10/s, with the 1.5x margin ~900
    assert 700 <= b.requests_to_judge <= 1100
    assert str(b.requests_to_judge) in b.note()


def _h100(seqs: int) -> ReplicaConfig:
    return ReplicaConfig(get_model("llama3.1-8b"), get_device("h100-sxm-80gb"), max_num_seqs=seqs)


def test_the_simulator_reports_an_overloaded_replica() -> None:
    # one replica holding 8 sequences of 512 output tokens (~8 x 7 ms = a few seconds each)
    # cannot serve 20 requests/s; with 256 sequences it can
    p, o = fixed_lengths(1500, 256, 512)
    wl = open_loop(20.0, p, o, seed=0)
    assert backlog_of(simulate(Deployment(_h100(8)), wl)).falls_behind
    summary = summarize(simulate(Deployment(_h100(256)), wl))
    assert summary["backlog"]["judged"] and not summary["backlog"]["falls_behind"]
    closed = summarize(
        simulate(Deployment(_h100(8)), closed_loop(64, *fixed_lengths(200, 256, 64)))
    )
    assert not closed["backlog"]["judged"]


def test_plan_does_not_list_a_layout_that_falls_behind() -> None:
    p, o = fixed_lengths(1500, 256, 512)
    wl = open_loop(20.0, p, o, seed=0)
    res = plan(_h100(256), wl, SLO(ttft_p90_s=1000.0), max_gpus=1, disagg=False, processes=1)
    behind = [r for r in res if r.falls_behind]
    assert behind and not any(r.meets for r in behind)
    assert all(not r.falls_behind for r in res if r.meets)
