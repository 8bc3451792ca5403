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
