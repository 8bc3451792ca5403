"""Counts so large that the work would never finish are refused at once (exit 2, one line naming
the option, the value and the bound), not run for ever: a cluster or deployment past
`MAX_GPUS`, a step past `MAX_MICRO_BATCHES` micro-batches, `energy tune` past
`MAX_TUNE_STEPS`, an architecture search past `MAX_EVALUATIONS`. Each bound itself is accepted
where accepting it is cheap to check."""

from __future__ import annotations

import pytest

from hwtune.accel.search import MAX_EVALUATIONS
from hwtune.cli.energy import MAX_TUNE_STEPS
from hwtune.errors import HwtuneInputError
from hwtune.hardware.cluster import MAX_GPUS, make_cluster
from hwtune.train.schedules import MAX_MICRO_BATCHES

HUGE = str(10**20)


@pytest.mark.parametrize(
    ("args", "field", "bound"),
    [
        (["plan", "--gpus", HUGE], "--gpus", str(MAX_GPUS)),
        (["estimate", "--gpus", HUGE], "--gpus", str(MAX_GPUS)),
        (["serve", "--replicas", HUGE], "--replicas", f"{MAX_GPUS:,}"),
        (["serve", "--replicas", str(MAX_GPUS + 1)], "--replicas", f"{MAX_GPUS:,}"),
        (["energy", "tune", "--steps", HUGE], "--steps", f"{MAX_TUNE_STEPS:,}"),
        (
            ["energy", "pipeline", "--microbatches", HUGE],
            "--microbatches",
            f"{MAX_MICRO_BATCHES:,}",
        ),
        (["compile", "--global-batch", HUGE], "--global-batch", f"{MAX_MICRO_BATCHES:,}"),
        (["accel", "search", "--evaluations", HUGE], "--evaluations", f"{MAX_EVALUATIONS:,}"),
    ],
)
def test_a_count_past_its_bound_is_refused(rejects, args, field, bound):
    rejects(args, field, bound)


def test_the_bounds_themselves_are_accepted():
    assert make_cluster("h100-sxm-80gb", MAX_GPUS).n_gpus == MAX_GPUS
    with pytest.raises(HwtuneInputError, match="n_gpus"):
        make_cluster("h100-sxm-80gb", MAX_GPUS + 8)


def test_compile_takes_the_last_micro_batch_count_allowed(rejects):
    """dp 2, micro-batch 2: 65,536 micro-batches are 262,144 sequences; one more micro-batch's
    worth is refused, naming the product it was checked against."""
    from hwtune.model.catalog import get_model
    from hwtune.parallel.spec import make_spec, validate

    ms = get_model("llama3.1-8b")
    ok = make_spec(dp=2, micro_batch=2, global_batch=MAX_MICRO_BATCHES * 4)
    assert ok.n_micro == MAX_MICRO_BATCHES
    with pytest.raises(HwtuneInputError, match="global_batch"):
        validate(make_spec(dp=2, micro_batch=2, global_batch=(MAX_MICRO_BATCHES + 1) * 4), ms)
    validate(ok, ms)
