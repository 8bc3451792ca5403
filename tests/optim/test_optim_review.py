"""Review of the compact optimizers: hyperparameters in every group are checked (field, value,
expectation), state dicts resume bit-identically, dtypes, and agreement with independent
references (torch.optim.AdamW / SGD, and Lion written out here from Chen et al. 2023)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from hwtune.errors import HwtuneInputError
from hwtune.optim import SGD, AdamW, Lion


def params(n=4, dtype=torch.float32):
    return [nn.Parameter(torch.zeros(n, dtype=dtype))]


@pytest.mark.parametrize(
    ("make", "field", "value"),
    [
        (lambda ps: AdamW(ps, lr=True), "lr", "True"),
        (lambda ps: AdamW(ps, lr=float("inf")), "lr", "inf"),
        (lambda ps: AdamW(ps, betas=(0.9,)), "betas", "(0.9,)"),
        (lambda ps: AdamW(ps, betas=0.9), "betas", "0.9"),
        (lambda ps: AdamW(ps, weight_decay=True), "weight_decay", "True"),
        (lambda ps: AdamW(ps, companded="no"), "companded", "'no'"),
        (lambda ps: AdamW(ps, gradient_release="yes"), "gradient_release", "'yes'"),
        (lambda ps: AdamW(ps, group_size=True), "group_size", "True"),
        (lambda ps: AdamW(ps, master_weight_bits=24.0), "master_weight_bits", "24.0"),
        (lambda ps: AdamW(ps, numerics_check_every=True), "numerics_check_every", "True"),
        (lambda ps: SGD(ps, momentum=0.9, nesterov="yes"), "nesterov", "'yes'"),
        (lambda ps: SGD(ps, decoupled_weight_decay=1), "decoupled_weight_decay", "1"),
        (lambda ps: Lion(ps, betas=(0.9, float("nan"))), "betas[1]", "nan"),
        # values given in a parameter group are checked as the constructor's are
        (lambda ps: AdamW([{"params": ps, "lr": -1.0}]), "param_groups[0]['lr']", "-1.0"),
        (
            lambda ps: AdamW([{"params": ps, "betas": (1.5, 0.9)}]),
            "param_groups[0]['betas'][0]",
            "1.5",
        ),
        (
            lambda ps: AdamW([{"params": ps, "eps": float("nan")}]),
            "param_groups[0]['eps']",
            "nan",
        ),
        (
            lambda ps: Lion([{"params": ps, "weight_decay": "x"}]),
            "param_groups[0]['weight_decay']",
            "'x'",
        ),
        (
            lambda ps: AdamW([{"params": ps, "group_size": 48}]),
            "param_groups[0]['group_size']",
            "48",
        ),
        (
            lambda ps: AdamW([{"params": ps, "master_weight_bits": 20}]),
            "param_groups[0]['master_weight_bits']",
            "20",
        ),
        (
            lambda ps: SGD([{"params": ps, "nesterov": True}]),
            "param_groups[0]['nesterov']",
            "True",
        ),
        (
            lambda ps: SGD([{"params": ps, "dampening": 0.5}], momentum=0.9, nesterov=True),
            "param_groups[0]['nesterov']",
            "True",
        ),
        (
            lambda ps: SGD([{"params": ps, "momentum": 1.5}], momentum=0.9),
            "param_groups[0]['momentum']",
            "1.5",
        ),
        (
            lambda ps: SGD([{"params": ps, "momentum": 0.9}], momentum=0.0),
            "param_groups[0]['momentum']",
            "0.9",
        ),
    ],
)
def test_bad_hyperparameters_name_field_value_and_expectation(make, field, value):
    with pytest.raises(HwtuneInputError) as err:
        make(params())
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(f"{field}: got {value}; expected "), msg


def test_add_param_group_checks_values_and_keeps_a_refused_group_out():
    opt = AdamW(params(), compile=False)
    with pytest.raises(HwtuneInputError, match=r"param_groups\[1\]\['lr'\]: got nan"):
        opt.add_param_group({"params": params(), "lr": float("nan")})
    assert len(opt.param_groups) == 1
    sgd = SGD(params(), momentum=0.0, compile=False)
    with pytest.raises(HwtuneInputError, match=r"param_groups\[1\]\['momentum'\]: got 0.9"):
        sgd.add_param_group({"params": params(), "momentum": 0.9})
    assert len(sgd.param_groups) == 1


def test_sgd_group_without_momentum_ignores_dampening_as_torch_does():
    """torch.optim.SGD skips the buffer (and dampening) where momentum is 0; a group with
    momentum 0 in an SGD built with momentum > 0 must step as plain SGD."""
    torch.manual_seed(0)
    a = nn.Parameter(torch.randn(64))
    b = nn.Parameter(a.detach().clone())
    ours = SGD(
        [{"params": [a], "momentum": 0.0, "dampening": 0.5}], lr=0.1, momentum=0.9, compile=False
    )
    ref = torch.optim.SGD([b], lr=0.1, momentum=0.0, dampening=0.5)
    for _ in range(5):
        g = torch.randn(64)
        a.grad, b.grad = g.clone(), g.clone()
        ours.step()
        ref.step()
    assert torch.allclose(a, b, rtol=0, atol=1e-6)
