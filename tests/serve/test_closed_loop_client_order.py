"""A closed loop's next request goes to the client freed first, across replicas, even when a
front end or the host's timeline delivers the last token after the step's event; fast-forwarded
decode steps record the same shape as step-by-step ones."""

from __future__ import annotations

import math

import pytest

from hwtune.hardware.catalog import get_device
from hwtune.model.catalog import get_model
from hwtune.serve.config import Deployment, ReplicaConfig
from hwtune.serve.request import Workload
from hwtune.serve.simulator import simulate


def _arrivals_follow_finishes(res, concurrency: int) -> None:
    """The k-th request after the first wave arrives just after the k-th earliest finish."""
    rs = sorted(res.requests, key=lambda r: r.rid)
    later = rs[concurrency:]
    finishes = sorted(r.finish for r in rs)[: len(later)]
    for r, f in zip(later, finishes, strict=True):
        assert r.arrival == math.nextafter(f, math.inf), (r.rid, r.arrival, f)


@pytest.mark.parametrize(
    ("kw", "prompts", "outputs", "conc"),
    [
        # a slow front end: request 0's tokens reach its client after request 1's
        (dict(frontend_tokens_per_s=20.0), (1000, 4000, 4000), (10, 3, 3), 2),
        # the host's timeline: an eager prompt step delays the tokens of the step before
        (dict(overlap_schedule=True, host_timeline=True, eager_prefill=True),
         (200,) * 4, (1,) * 4, 3),
    ],
)  # fmt: skip
def test_next_request_goes_to_the_first_free_client(kw, prompts, outputs, conc) -> None:
    cfg = ReplicaConfig(get_model("llama3.1-8b"), get_device("h100-sxm-80gb"), **kw)
    res = simulate(Deployment(cfg, replicas=2), Workload(prompts, outputs, "closed", conc))
    _arrivals_follow_finishes(res, conc)


def test_single_replica_closed_loop_order() -> None:
    cfg = ReplicaConfig(get_model("llama3.1-8b"), get_device("h100-sxm-80gb"))
    wl = Workload((300, 50, 900, 120, 60, 400), (20, 5, 9, 30, 2, 7), "closed", 3)
    _arrivals_follow_finishes(simulate(cfg, wl), 3)


def test_fast_forward_records_the_same_step_shapes() -> None:
    cfg = ReplicaConfig(get_model("llama3.1-8b"), get_device("h100-sxm-80gb"))
    wl = Workload((100,), (20,), "closed", 1)
    a = simulate(cfg, wl, record_steps=True, fast=True)
    b = simulate(cfg, wl, record_steps=True, fast=False)
    assert [s.shape for s in a.steps] == [s.shape for s in b.steps]
    assert [s.duration for s in a.steps] == [s.duration for s in b.steps]
