"""The optimizer's numerics warnings point at the line that called ``optimizer.step()``, also
when an LR scheduler has wrapped ``step`` once more (torch's ``LRScheduler`` patches it to count
calls): a fixed ``stacklevel`` pointed into ``torch/optim/lr_scheduler.py`` there."""

from __future__ import annotations

import inspect
import warnings

import pytest
import torch

from hwtune.optim import AdamW, DecayTooSmallWarning, UpdateTooSmallWarning


def _run(opt, p, scheduler: bool):
    if scheduler:
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            p.grad = torch.randn(p.shape).to(p.dtype) * 1e-3
            line = inspect.currentframe().f_lineno + 1
            opt.step()
            if scheduler:
                sched.step()
    return caught, line


@pytest.mark.parametrize("scheduler", [False, True])
def test_decay_warning_points_at_the_step_call(scheduler):
    p = torch.nn.Parameter((torch.randn(4096) + 3.0).to(torch.bfloat16))
    opt = AdamW([p], lr=3e-5, weight_decay=0.1, master_weight_bits=24, compile=False)
    caught, line = _run(opt, p, scheduler)
    mine = [w for w in caught if issubclass(w.category, DecayTooSmallWarning)]
    assert len(mine) == 1
    assert (mine[0].filename, mine[0].lineno) == (__file__, line)


@pytest.mark.parametrize("scheduler", [False, True])
def test_update_warning_points_at_the_step_call(scheduler):
    p = torch.nn.Parameter(torch.full((256,), 0.5, dtype=torch.bfloat16))
    opt = AdamW([("w", p)], lr=1e-4, weight_decay=0.0, master_weight_bits=16,
                numerics_check_every=1, compile=False)  # fmt: skip
    caught, line = _run(opt, p, scheduler)
    mine = [w for w in caught if issubclass(w.category, UpdateTooSmallWarning)]
    assert mine
    assert all((w.filename, w.lineno) == (__file__, line) for w in mine)
