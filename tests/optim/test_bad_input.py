"""Bad input gets a one-line error naming the parameter (or field), the value and what was
expected (DESIGN.md, Conventions)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from hwtune.errors import HwtuneInputError
from hwtune.optim import SGD, AdamW, Lion


def one_line(err):
    assert "\n" not in str(err.value)
    return str(err.value)


def test_sparse_gradients_name_the_parameter():
    emb = nn.Embedding(10, 4, sparse=True).to(torch.bfloat16)
    opt = AdamW(emb.named_parameters(), compile=False)
    emb(torch.tensor([1, 2])).sum().backward()
    with pytest.raises(HwtuneInputError) as err:
        opt.step()
    assert "parameter 'weight'.grad.layout" in one_line(err) and "sparse" in str(err.value)


def test_complex_parameters_are_refused():
    p = nn.Parameter(torch.zeros(4, dtype=torch.complex64))
    with pytest.raises(HwtuneInputError) as err:
        Lion([("z", p)])
    assert "parameter 'z'.dtype" in one_line(err) and "complex64" in str(err.value)


def test_fp16_without_a_scaler_names_the_parameter():
    model = nn.Linear(4, 2).half()
    opt = AdamW(model.named_parameters(), compile=False)
    model(torch.randn(3, 4).half()).sum().backward()
    with pytest.raises(HwtuneInputError) as err:
        opt.step()
    msg = one_line(err)
    assert "parameter 'weight'.dtype" in msg and "GradScaler" in msg


def test_unnamed_parameters_are_named_by_position():
    a = nn.Parameter(torch.zeros(2))
    b = nn.Parameter(torch.zeros(2, dtype=torch.float64))
    match = r"parameter \"param_groups\[0\]\['params'\]\[1\]\"\.dtype.*float64"
    with pytest.raises(HwtuneInputError, match=match):
        AdamW([a, b])


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda ps: AdamW(ps, lr=-1.0), "lr"),
        (lambda ps: AdamW(ps, betas=(0.9, 1.0)), "betas[1]"),
        (lambda ps: AdamW(ps, eps=0.0), "eps"),
        (lambda ps: AdamW(ps, weight_decay=float("nan")), "weight_decay"),
        (lambda ps: AdamW(ps, master_weight_bits=20), "master_weight_bits"),
        (lambda ps: AdamW(ps, group_size=48), "group_size"),
        (lambda ps: AdamW(ps, numerics_check_every=-1), "numerics_check_every"),
        (lambda ps: SGD(ps, nesterov=True), "nesterov"),
        (lambda ps: SGD(ps, momentum=1.5), "momentum"),
        (lambda ps: Lion(ps, max_grad_norm=0.0), "max_grad_norm"),
    ],
)
def test_bad_hyperparameters(make, field):
    with pytest.raises(HwtuneInputError) as err:
        make([nn.Parameter(torch.zeros(2))])
    assert one_line(err).startswith(f"{field}: got ")


def test_loading_a_state_dict_with_another_group_size_is_refused():
    p = nn.Parameter(torch.zeros(64, dtype=torch.bfloat16))
    opt = AdamW([p], compile=False)
    p.grad = torch.ones_like(p)
    opt.step()
    sd = opt.state_dict()
    sd["param_groups"][0]["group_size"] = 64
    with pytest.raises(HwtuneInputError, match=r"exp_avg_scale.*torch\.float16 \(2,\)"):
        AdamW([p], compile=False).load_state_dict(sd)
