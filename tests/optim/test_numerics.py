"""The numerics check warns when updates are too small to change the stored weights."""

from __future__ import annotations

import warnings

import pytest
import torch

from hwtune.optim import SGD, AdamW, UpdateTooSmallWarning
from hwtune.optim.numerics import stalled_fraction


def stepped(bits, lr, steps=1, check_every=100):
    p = torch.nn.Parameter(torch.full((256,), 0.5, dtype=torch.bfloat16))
    opt = AdamW(
        [("w", p)],
        lr=lr,
        weight_decay=0.0,
        master_weight_bits=bits,
        numerics_check_every=check_every,
        compile=False,
    )
    for _ in range(steps):
        p.grad = torch.randn(256).to(torch.bfloat16)
        opt.step()
    return p


def test_warns_when_bf16_swallows_the_update():
    # an Adam step of 1e-4 on weights of 0.5: below half a bf16 ULP (2^-9), so nothing moves
    with pytest.warns(UpdateTooSmallWarning, match=r"100% of the elements of 'w'.*step 1"):
        p = stepped(16, 1e-4)
    assert torch.equal(p, torch.full((256,), 0.5, dtype=torch.bfloat16))


def test_24_bit_master_keeps_the_same_update_and_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error", UpdateTooSmallWarning)
        stepped(24, 1e-4, steps=3)  # 1e-4 / 0.5 = 2^-12.3 > 2^-17: the master moves


def test_24_bit_master_warns_below_its_own_precision():
    with pytest.warns(UpdateTooSmallWarning, match="master_weight_bits=32"):
        stepped(24, 1e-7)  # 1e-7 / 0.5 < 2^-17


def test_check_runs_every_n_steps_only():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stepped(16, 1e-4, steps=5, check_every=4)  # checked at steps 1 and 4
    assert sum(issubclass(w.category, UpdateTooSmallWarning) for w in caught) == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error", UpdateTooSmallWarning)
        stepped(16, 1e-4, steps=2, check_every=0)  # disabled


def test_stalled_fraction_counts_only_elements_with_a_gradient():
    before = torch.tensor([1.0, 2.0, 3.0, 4.0])
    after = torch.tensor([1.0, 2.5, 3.0, 4.0])
    grad = torch.tensor([1.0, 1.0, 0.0, 1.0])
    assert stalled_fraction(before, after, grad) == pytest.approx(2 / 3)
    assert stalled_fraction(before, after, torch.zeros(4)) == 0.0


def test_sgd_small_lr_on_bf16_warns():
    p = torch.nn.Parameter(torch.ones(64, dtype=torch.bfloat16))
    opt = SGD([p], lr=1e-3, master_weight_bits=16, compile=False)
    p.grad = torch.full((64,), 1e-2, dtype=torch.bfloat16)  # step 1e-5 << ULP(1)/2
    with pytest.warns(UpdateTooSmallWarning):
        opt.step()
