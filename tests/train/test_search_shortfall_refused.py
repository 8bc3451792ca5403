"""The closest memory miss of an impossible job among the strategies a launch framework runs.

When no strategy fits, `plan` reports the smallest overshoot (`PlanResult.shortfall`). With a
framework filter (`Constraints.runs`) that refuses the most memory-saving knob setting, the
closest miss is the least memory of the settings it does run, not no miss at all (before this
test the search tried only the most memory-saving setting against the filter)."""

from __future__ import annotations

from hwtune.hardware.cluster import make_cluster
from hwtune.model.catalog import get_model
from hwtune.train.search import Constraints, plan
from hwtune.train.strategy import Strategy


def _no_optimizer_offload(st: Strategy) -> bool:
    return not st.offload_optimizer


def test_refused_offload_gives_the_miss_of_a_search_without_offload() -> None:
    # Llama-3.1-405B on 8 H100: 810 GB of bf16 weights alone exceed 8 x 80 GB, nothing fits.
    # The most memory-saving setting offloads the optimizer states; a filter refusing offload
    # must leave the same closest miss as a search that never tries offload (an independent
    # path: the knob is left out of the lattice there).
    job = (get_model("llama3.1-405b"), make_cluster("h100-sxm-80gb", 8), 64, 8192)
    refused = plan(*job, constraints=Constraints(runs=_no_optimizer_offload))
    without = plan(*job, constraints=Constraints(allow_offload=False))
    anything = plan(*job)
    assert refused.top == [] and without.top == [] and anything.top == []
    assert refused.shortfall is not None and without.shortfall is not None
    assert anything.shortfall is not None
    assert not refused.shortfall[1].offload_optimizer
    assert refused.shortfall[0] == without.shortfall[0]
    # offload saves memory, so the unconstrained miss is the smaller one
    assert anything.shortfall[1].offload_optimizer
    assert anything.shortfall[0] < refused.shortfall[0]


def test_a_filter_refusing_everything_names_no_miss() -> None:
    r = plan(get_model("llama3.1-405b"), make_cluster("h100-sxm-80gb", 8), 64, 8192,
             constraints=Constraints(runs=lambda st: False))  # fmt: skip
    assert r.top == [] and r.shortfall is None
