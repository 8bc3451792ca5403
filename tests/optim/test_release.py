"""Gradient release: updates inside backward give bit-identical results to the ordinary step, free
every gradient, work with activation checkpointing, and refuse what they cannot do."""

from __future__ import annotations

import copy

import pytest
import torch
from tiny_models import GPT, CharData, corpus

from hwtune.errors import HwtuneInputError
from hwtune.optim import SGD, AdamW, Lion


def gpt(seed=0):
    torch.manual_seed(seed)
    data = CharData(corpus(20_000), 16)
    return GPT(data.vocab, 16, d=32).to(torch.bfloat16), data


@pytest.mark.parametrize("cls", [AdamW, SGD, Lion])
@pytest.mark.parametrize("checkpointing", [False, True])
def test_release_is_bit_identical_to_step(cls, checkpointing):
    a, data = gpt()
    b = copy.deepcopy(a)
    b.checkpointing = checkpointing
    kw = {"momentum": 0.9} if cls is SGD else {}
    oa = cls(a.parameters(), compile=False, **kw)
    ob = cls(b.parameters(), compile=False, gradient_release=True, **kw)
    ga, gb = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    for _ in range(3):
        a.loss(*data.batch(ga, 4)).backward()
        oa.step()
        oa.zero_grad()
        b.loss(*data.batch(gb, 4)).backward()
        assert all(p.grad is None for p in b.parameters())  # freed inside backward
        ob.step()  # closes the iteration
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        for key, value in oa.state[pa].items():
            assert torch.equal(value, ob.state[pb][key]), key


def test_gradient_accumulation_is_refused():
    model, data = gpt()
    opt = AdamW(model.parameters(), compile=False, gradient_release=True)
    gen = torch.Generator().manual_seed(0)
    model.loss(*data.batch(gen, 4)).backward()
    with pytest.raises(HwtuneInputError, match="gradient accumulation across micro-batches"):
        model.loss(*data.batch(gen, 4)).backward()  # second micro-batch, no step() in between
    del opt


def test_global_norm_clipping_is_refused():
    model, _ = gpt()
    with pytest.raises(HwtuneInputError, match="max_grad_norm.*global-norm clipping"):
        AdamW(model.parameters(), gradient_release=True, max_grad_norm=1.0)


def test_grad_scaler_is_refused():
    model, data = gpt()
    opt = AdamW(model.parameters(), compile=False, gradient_release=True)
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale(model.loss(*data.batch(torch.Generator().manual_seed(0), 2))).backward()
    with pytest.raises(HwtuneInputError, match="GradScaler"):
        scaler.step(opt)


def test_fp16_parameters_are_refused():
    p = torch.nn.Parameter(torch.zeros(4, dtype=torch.float16))
    with pytest.raises(HwtuneInputError, match=r"parameter 'w'\.dtype"):
        AdamW([("w", p)], gradient_release=True)


def test_max_grad_norm_clips_without_release():
    p = torch.nn.Parameter(torch.zeros(64))
    opt = SGD([p], lr=1.0, max_grad_norm=1.0, compile=False, numerics_check_every=0)
    p.grad = torch.full((64,), 10.0)  # norm 80
    opt.step()
    assert p.norm().item() == pytest.approx(1.0, rel=1e-5)
