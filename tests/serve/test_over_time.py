"""KV utilization and prefix-cache hit rate over time (`hwtune.serve.metrics.over_time`)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwtune.serve.kv_usage import time_weighted_mean
from hwtune.serve.metrics import over_time, summarize
from hwtune.serve.request import Workload, closed_loop, fixed_lengths
from hwtune.serve.simulator import simulate


@settings(max_examples=12, deadline=None)
@given(
    clients=st.integers(1, 6),
    prompt=st.integers(40, 600),
    output=st.integers(2, 30),
    prefix=st.integers(0, 39),
    groups=st.integers(1, 3),
    windows=st.integers(1, 25),
)
def test_windows_add_up_to_the_whole_run(cfg8b, clients, prompt, output, prefix, groups, windows):
    """Equal windows: the windows' KV means average to the run's time-weighted mean; the
    windows' hit rates, weighted by their looked-up tokens, give the run's hit rate; the last
    window ends at the last finish."""
    wl = closed_loop(clients, *fixed_lengths(3 * clients, prompt, output), prefix_len=prefix,
                     prefix_groups=groups if prefix else 0, seed=7)  # fmt: skip
    res = simulate(cfg8b, wl)
    got = over_time(res, windows)
    assert len(got["t_s"]) == len(got["kv_utilization"]) == len(got["prefix_hit_rate"]) == windows
    assert got["t_s"][-1] == pytest.approx(res.duration_s)
    start = min(r.arrival for r in res.requests)
    whole = time_weighted_mean(res.kv_time, res.kv_util, start, res.duration_s)
    assert np.mean(got["kv_utilization"]) == pytest.approx(whole, rel=1e-9, abs=1e-15)
    edges = [start, *got["t_s"]]
    log = res.prefix_log
    assert np.all(np.diff(log[:, 0]) >= 0)
    assert log[:, 1].sum() == sum(r.prompt for r in res.requests)  # no preemption here
    weighted = 0.0
    for i, rate in enumerate(got["prefix_hit_rate"]):
        inside = (log[:, 0] >= edges[i]) & ((log[:, 0] < edges[i + 1]) | (i == windows - 1))
        q = log[inside, 1].sum()
        assert (rate is None) == (q == 0)
        weighted += (rate or 0.0) * q
    assert weighted / log[:, 1].sum() == pytest.approx(summarize(res)["prefix_hit_rate"])


def test_the_first_of_a_group_misses_and_the_rest_hit(cfg8b):
    """One client, one prefix group of 480 tokens (30 blocks of 16) in 600-token prompts: the
    first request finds nothing cached, each later one its 480 tokens, so the first window's hit
    rate is below the last's, which is 480 / 600."""
    n = 12
    wl = Workload((600,) * n, (4,) * n, "closed", concurrency=1, prefix_groups=(0,) * n,
                  prefix_lens=(480,) * n)  # fmt: skip
    res = simulate(cfg8b, wl)
    assert res.prefix_log[0, 2] == 0
    assert np.all(res.prefix_log[1:, 2] == 480)
    rates = over_time(res, 4)["prefix_hit_rate"]
    assert rates[0] < 0.8 and rates[-1] == pytest.approx(0.8)


def test_prefix_caching_off_gives_no_rates(cfg8b):
    res = simulate(cfg8b.with_(enable_prefix_caching=False),
                   closed_loop(2, *fixed_lengths(6, 200, 4), prefix_len=100, prefix_groups=1))  # fmt: skip
    got = over_time(res, 5)
    assert got["prefix_hit_rate"] == [None] * 5 and res.prefix_log.shape == (0, 3)
    assert summarize(res)["prefix_hit_rate"] == 0.0
    assert all(math.isfinite(v) for v in got["kv_utilization"])


def test_window_count_is_checked(cfg8b):
    res = simulate(cfg8b, closed_loop(1, *fixed_lengths(2, 64, 4)))
    with pytest.raises(ValueError, match="windows: got 0"):
        over_time(res, 0)
