"""NSGA-II search: deterministic by seed, budgets respected, parallel equals serial."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pymoo")

from hwtune.accel.architecture import load_accelerator  # noqa: E402
from hwtune.accel.search import Budget, decode, search  # noqa: E402
from hwtune.accel.training import lower_training  # noqa: E402
from hwtune.accel.workload import Graph, conv2d, linear, vector, view  # noqa: E402


def _tiny() -> Graph:
    g = Graph("tiny")
    x = g.tensor("x", (2, 3, 16, 16), "input", 2)
    x = conv2d(g, "c1", x, 16, 3, 1, 1)
    x = vector(g, "r1", "relu", (x,))
    x = conv2d(g, "c2", x, 16, 3, 2, 1)
    x = view(g, "flat", x, (2, 16 * 8 * 8))
    x = linear(g, "fc", x, 10)
    vector(g, "loss", "loss", (x,), (1,))
    return g


def test_search_deterministic_and_within_budget():
    t = load_accelerator("edge-hetero")
    tg = lower_training(_tiny())
    a = search(tg, t, evaluations=60, pop_size=20, seed=3, budget=Budget(area_mm2=3.0))
    b = search(tg, t, evaluations=60, pop_size=20, seed=3, budget=Budget(area_mm2=3.0), workers=2)
    assert a.evaluations == 60
    assert np.array_equal(a.F, b.F)
    assert len(a.F) > 0
    for x, f in zip(a.X, a.F, strict=True):
        acc, _ = decode(x, t)
        assert acc.area_mm2() <= 3.0 and f[2] == pytest.approx(acc.area_mm2())
    rows = a.rows(t)
    assert rows == sorted(rows, key=lambda r: r["latency_s"])
