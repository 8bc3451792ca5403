"""The package's top-level calls take a model by catalog name, as `hwtune.estimate` does, and
refuse a cluster given as a string with one line (it raised AttributeError deep in the search)."""

from __future__ import annotations

import pytest

import hwtune
from hwtune.hardware.cluster import make_cluster
from hwtune.model.catalog import get_model


def test_plan_takes_a_catalog_name() -> None:
    """A name resolves to the same spec the catalog gives, so the ranking is the same."""
    cl = make_cluster("h100-sxm-80gb", 8)
    by_name = hwtune.plan("llama3.1-8b", cl, 64, 4096, top_k=3)
    by_spec = hwtune.plan(get_model("llama3.1-8b"), cl, 64, 4096, top_k=3)
    assert [e.strategy for e in by_name.top] == [e.strategy for e in by_spec.top]


def test_scale_sweep_takes_a_catalog_name() -> None:
    r = hwtune.scale_sweep(
        "llama3.1-8b", lambda n: make_cluster("h100-sxm-80gb", n), [8, 16], 4096,
        global_batch=64,
    )  # fmt: skip
    assert len(r.points) == 2


@pytest.mark.parametrize("cluster", ["h100-sxm-80gb", 64, None])
def test_plan_refuses_a_cluster_that_is_not_one(cluster: object) -> None:
    with pytest.raises(hwtune.HwtuneInputError) as err:
        hwtune.plan("llama3.1-8b", cluster, 64, 4096)  # type: ignore[arg-type]
    assert str(err.value).startswith("cluster: got ") and "\n" not in str(err.value)


def test_plan_names_an_unknown_model() -> None:
    with pytest.raises(hwtune.HwtuneInputError, match="^model: got 'no-such-model'"):
        hwtune.plan("no-such-model", make_cluster("h100-sxm-80gb", 8), 64, 4096)


def _refused(call, field: str, *words: str) -> None:  # noqa: ANN001
    with pytest.raises(hwtune.HwtuneInputError) as err:
        call()
    line = str(err.value)
    assert line.startswith(f"{field}: got ") and "\n" not in line, line
    for w in words:
        assert w in line, line


def test_estimate_refuses_what_it_would_ignore_or_trip_on() -> None:
    """``gpu``/``gpus`` beside a cluster and strategy keywords beside a strategy were dropped
    without a word; a cluster or strategy of the wrong type raised AttributeError."""
    from hwtune.train.strategy import make_strategy

    cl = make_cluster("h100-sxm-80gb", 8)
    st = make_strategy(dp=8, precision="bf16")
    _refused(lambda: hwtune.estimate("llama3.1-8b", cl, gpu="a100"), "gpu", "'a100'",
             "no gpu beside a cluster")  # fmt: skip
    _refused(lambda: hwtune.estimate("llama3.1-8b", cl, gpus=64), "gpus", "64")
    _refused(lambda: hwtune.estimate("llama3.1-8b", cl, st, tp=4), "tp", "got 4",
             "no strategy keyword beside a strategy")  # fmt: skip
    _refused(lambda: hwtune.estimate("llama3.1-8b", "h100"), "cluster", "'h100'", "a Cluster")  # type: ignore[arg-type]
    _refused(lambda: hwtune.estimate("llama3.1-8b", cl, {"tp": 2}), "strategy", "a Strategy")  # type: ignore[arg-type]
    assert hwtune.estimate("llama3.1-8b", cl, st).step_time_s > 0  # one way each still runs


@pytest.mark.parametrize(
    ("base", "field", "expected"),
    [
        ({"nosuch": 1}, "base.nosuch", "a Strategy field (this one is unknown)"),  # was a dump
        ({"tp": 2}, "base.tp", "a field the search does not set"),  # was a TypeError
        ({"optimizer": "nosuch"}, "base.optimizer", "one of adam"),  # was a ValueError
        ({"moe_imbalance": 0.5}, "base.moe_imbalance", "greater than or equal to 1"),
    ],
)
def test_plan_base_fields_are_checked_first(base: dict, field: str, expected: str) -> None:
    cl = make_cluster("h100-sxm-80gb", 8)
    _refused(lambda: hwtune.plan("llama3.1-8b", cl, 8, 4096, base=base), field, expected)


@pytest.mark.parametrize("mbs", [[0], [], [-1], [1.5]])
def test_plan_micro_batches_are_positive_integers(mbs: list) -> None:
    # [0] divided by zero; [] fell back to the default sizes without a word
    cl = make_cluster("h100-sxm-80gb", 8)
    _refused(lambda: hwtune.plan("llama3.1-8b", cl, 64, 4096, micro_batches=mbs),
             "micro_batches", "one or more positive integers")  # fmt: skip


def test_plan_micro_batches_may_be_an_iterator() -> None:
    # an iterator was used up by the first layout: the others searched no micro-batch
    cl = make_cluster("h100-sxm-80gb", 8)
    as_list = hwtune.plan("llama3.1-8b", cl, 64, 4096, micro_batches=[1, 2], top_k=8)
    as_iter = hwtune.plan("llama3.1-8b", cl, 64, 4096, micro_batches=iter([1, 2]), top_k=8)
    assert [e.strategy for e in as_iter.top] == [e.strategy for e in as_list.top]


def test_searched_fields_are_the_ones_plan_sets(monkeypatch):
    """`SEARCHED_FIELDS` (what ``base`` may not give) restates the keywords `plan` passes to
    every candidate `Strategy`; recorded from a real search, they must be the same set (plus
    ``recompute_modules``, which ``base`` may give: plan takes it out of ``base`` first)."""
    from hwtune.train import search

    seen: set[str] = set()
    real = search.Strategy

    def recording(**kw):  # noqa: ANN003, ANN202
        seen.update(kw)
        return real(**kw)

    monkeypatch.setattr(search, "Strategy", recording)
    search.plan("llama3.1-8b", make_cluster("h100-sxm-80gb", 8), 64, 4096, top_k=1)
    assert seen - {"recompute_modules"} == set(search.SEARCHED_FIELDS)
