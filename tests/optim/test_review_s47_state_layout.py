"""A group value set after construction (by an LR scheduler or by hand) that asks for a state the
optimizer does not keep is refused by ``step()`` before any parameter changes: SGD built with
momentum=0 (no momentum buffer) and AdamW built with amsgrad=False (no v_max). torch.optim keeps
the state in those cases, so a silent step would train differently from torch."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from hwtune.errors import HwtuneInputError
from hwtune.optim import SGD, AdamW


def _param(seed: int = 0) -> nn.Parameter:
    torch.manual_seed(seed)
    return nn.Parameter(torch.randn(64))


@pytest.mark.parametrize(
    "scheduler",
    [
        lambda opt: torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=10),
        lambda opt: torch.optim.lr_scheduler.CyclicLR(opt, base_lr=0.01, max_lr=0.1),
    ],
    ids=["OneCycleLR", "CyclicLR"],
)
def test_sgd_without_momentum_refuses_a_scheduler_momentum_before_any_change(scheduler):
    # the independent reason: torch.optim.SGD under the same scheduler keeps a momentum buffer
    ref_p = _param()
    ref = torch.optim.SGD([ref_p], lr=0.1, momentum=0.0)
    scheduler(ref)
    ref_p.grad = torch.ones(64)
    ref.step()
    assert "momentum_buffer" in ref.state[ref_p]

    p = _param()
    opt = SGD([p], lr=0.1, momentum=0.0, compile=False)
    scheduler(opt)
    assert opt.param_groups[0]["momentum"] > 0  # what the scheduler set
    before = p.detach().clone()
    p.grad = torch.ones(64)
    with pytest.raises(HwtuneInputError) as err:
        opt.step()
    msg = str(err.value)
    assert err.value.field == "param_groups[0]['momentum']"
    assert "built with momentum=0" in msg and "cycle_momentum=False" in msg
    assert torch.equal(p.detach(), before)  # no parameter changed
    assert not opt.state[p]  # no state created or advanced


def test_sgd_without_momentum_steps_under_a_scheduler_with_cycle_momentum_false():
    # cycle_momentum=False leaves momentum at 0: plain SGD, as torch's (fp32: exact up to rounding)
    ref_p, p = _param(), _param()
    ref = torch.optim.SGD([ref_p], lr=0.1)
    opt = SGD([p], lr=0.1, compile=False)
    sr = torch.optim.lr_scheduler.OneCycleLR(ref, 0.1, total_steps=5, cycle_momentum=False)
    so = torch.optim.lr_scheduler.OneCycleLR(opt, 0.1, total_steps=5, cycle_momentum=False)
    for i in range(4):
        g = torch.full((64,), float(i + 1))
        ref_p.grad, p.grad = g.clone(), g.clone()
        ref.step()
        opt.step()
        sr.step()
        so.step()
    assert torch.allclose(p.detach(), ref_p.detach(), atol=1e-6)


def test_sgd_with_momentum_takes_a_group_momentum_of_zero():
    # torch allows it (plain SGD step for that group); it must not be refused
    p = _param()
    opt = SGD([p], lr=0.1, momentum=0.9, compile=False)
    opt.param_groups[0]["momentum"] = 0.0
    p.grad = torch.ones(64)
    before = p.detach().clone()
    opt.step()
    assert torch.allclose(p.detach(), before - 0.1, atol=1e-6)


def test_adamw_without_amsgrad_refuses_amsgrad_turned_on_later():
    # the independent reason: torch.optim.AdamW with amsgrad turned on keeps a v_max
    ref_p = _param()
    ref = torch.optim.AdamW([ref_p], lr=0.1)
    ref.param_groups[0]["amsgrad"] = True
    ref_p.grad = torch.ones(64)
    ref.step()
    assert "max_exp_avg_sq" in ref.state[ref_p]

    p = _param()
    opt = AdamW([p], lr=0.1, compile=False)
    opt.param_groups[0]["amsgrad"] = True
    before = p.detach().clone()
    p.grad = torch.ones(64)
    with pytest.raises(HwtuneInputError) as err:
        opt.step()
    assert err.value.field == "param_groups[0]['amsgrad']"
    assert "built with amsgrad=False" in str(err.value)
    assert torch.equal(p.detach(), before)


def test_a_refused_group_stops_the_whole_step_not_only_its_own_parameters():
    # group 0 is fine, group 1 refused: group 0's parameter must not have moved either
    a, b = _param(0), _param(1)
    opt = SGD([{"params": [a]}, {"params": [b]}], lr=0.1, compile=False)
    opt.param_groups[1]["momentum"] = 0.5
    a.grad, b.grad = torch.ones(64), torch.ones(64)
    before = a.detach().clone()
    with pytest.raises(HwtuneInputError, match=r"param_groups\[1\]\['momentum'\]: got 0.5"):
        opt.step()
    assert torch.equal(a.detach(), before)


def test_gradient_release_refuses_before_the_first_update_of_the_iteration():
    # with gradient release the updates run inside backward: the check must run there too
    p = _param()
    opt = SGD([p], lr=0.1, momentum=0.0, gradient_release=True, compile=False)
    opt.param_groups[0]["momentum"] = 0.9
    before = p.detach().clone()
    with pytest.raises(HwtuneInputError, match=r"param_groups\[0\]\['momentum'\]"):
        (p * p).sum().backward()
    assert torch.equal(p.detach(), before)
