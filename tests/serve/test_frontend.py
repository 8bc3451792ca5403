"""The engine's front end as a first-in-first-out token server (`ReplicaConfig.frontend_tokens_per_s`):
what the client sees is the engine's tokens delayed by the queue, never earlier and never faster
than the front end's rate."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwtune.errors import HwtuneInputError
from hwtune.serve.metrics import summarize
from hwtune.serve.request import Workload, closed_loop, fixed_lengths, open_loop
from hwtune.serve.simulator import simulate


@pytest.mark.parametrize("bad", [0, -5.0, float("nan"), True, "fast"])
def test_bad_rate_names_the_field(cfg8b, bad):
    with pytest.raises(HwtuneInputError, match="frontend_tokens_per_s"):
        cfg8b.with_(frontend_tokens_per_s=bad)


def test_one_request_streams_at_the_front_end_rate(cfg8b):
    """Alone on the replica, a decode step (~7 ms on an H100 for Llama-3.1-8B) is faster than a
    front end of 50 tokens/s (20 ms a token): after the first token the client receives one
    token every 1/50 s exactly, and the first token comes 1/50 s after the prefill step."""
    rate = 50.0
    base = simulate(cfg8b, Workload((1000,), (21,), "closed", 1)).requests[0]
    assert base.tpot < 1 / rate  # the premise: the GPU outruns this front end
    r = simulate(cfg8b.with_(frontend_tokens_per_s=rate),
                 Workload((1000,), (21,), "closed", 1)).requests[0]  # fmt: skip
    assert r.ttft == pytest.approx(base.ttft + 1 / rate, rel=1e-9)
    assert r.tpot == pytest.approx(1 / rate, rel=1e-9)


def test_a_fast_front_end_changes_nothing_measurable(cfg8b):
    p, o = fixed_lengths(64, 500, 100)
    a = summarize(simulate(cfg8b, closed_loop(16, p, o)))
    b = summarize(simulate(cfg8b.with_(frontend_tokens_per_s=1e12), closed_loop(16, p, o)))
    for k in ("ttft_s", "tpot_s", "e2e_s"):
        assert b[k]["mean"] == pytest.approx(a[k]["mean"], rel=1e-6)


@settings(max_examples=8, deadline=None)
@given(rate=st.floats(200.0, 20000.0), conc=st.integers(1, 64), out=st.integers(2, 120))
def test_closed_loop_never_streams_faster_than_the_front_end(cfg8b, rate, conc, out):
    """Every output token passes the front end, one at a time at ``rate``: the run cannot end
    before all of them are through."""
    p, o = fixed_lengths(2 * conc, 300, out)
    res = simulate(cfg8b.with_(frontend_tokens_per_s=rate), closed_loop(conc, p, o))
    total = sum(r.output for r in res.requests)
    assert res.duration_s >= total / rate * (1 - 1e-9)


@settings(max_examples=6, deadline=None)
@given(rate=st.floats(500.0, 50000.0), seed=st.integers(0, 10))
def test_open_loop_tokens_are_seen_no_earlier_than_the_engine_makes_them(cfg8b, rate, seed):
    """With arrivals fixed in advance the engine runs the same steps with or without a front-end
    limit; the client sees each request's first and last token no earlier than the engine
    produced them."""
    p, o = fixed_lengths(60, 400, 50)
    wl = open_loop(20.0, p, o, seed=seed)
    a = simulate(cfg8b, wl)
    b = simulate(cfg8b.with_(frontend_tokens_per_s=rate), open_loop(20.0, p, o, seed=seed))
    assert a.n_steps == b.n_steps
    for x, y in zip(a.requests, b.requests, strict=True):
        assert y.first_token >= x.first_token - 1e-12
        assert y.finish >= x.finish - 1e-12
