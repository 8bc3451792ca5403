"""``simulate(progress=...)``: told how many requests have finished, in order, to the end."""

from __future__ import annotations

import pytest

from hwtune.hardware.catalog import get_device
from hwtune.model.catalog import get_model
from hwtune.serve.config import Deployment, ReplicaConfig
from hwtune.serve.request import Workload
from hwtune.serve.simulator import simulate


@pytest.mark.parametrize(("n", "mode", "disagg"), [(1000, "closed", False), (37, "open", False),
                                                   (250, "closed", True)])  # fmt: skip
def test_progress_counts_finished_requests_to_the_end(n, mode, disagg) -> None:
    cfg = ReplicaConfig(get_model("llama3.1-8b"), get_device("h100-sxm-80gb"))
    dep = Deployment(cfg, prefill=cfg if disagg else None)
    arrivals = tuple(0.02 * i for i in range(n)) if mode == "open" else ()
    wl = Workload((256,) * n, (8,) * n, mode, 16, arrivals)
    calls: list[tuple[int, int]] = []
    res = simulate(dep, wl, progress=lambda done, total: calls.append((done, total)))
    assert calls[-1] == (n, n)
    assert all(t == n for _d, t in calls)
    done = [d for d, _t in calls]
    assert done == sorted(set(done))  # strictly rising
    assert len(calls) <= 101  # about every 1%, not every request
    if n >= 100:
        assert len(calls) >= 50
    # one report per whole 1% step (ceil(n / 100) requests) and one at the last request
    every = -(-n // 100)
    assert done == sorted({*range(every, n + 1, every), n})
    assert all(r.finish is not None for r in res.requests)
