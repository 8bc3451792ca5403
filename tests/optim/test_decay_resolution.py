"""Weight decay below the master's resolution: the loss is real (the stored master does not move),
and the optimizers say so once per group and master format (`DecayTooSmallWarning`)."""

from __future__ import annotations

import re
import warnings

import pytest
import torch

from hwtune.optim import SGD, AdamW, DecayTooSmallWarning, Lion, UpdateTooSmallWarning
from hwtune.optim import master_weights as mw
from hwtune.optim.numerics import decay_threshold

# p: significant bits with the implicit leading one. bf16 stores 7 mantissa bits (p = 8), fp16
# 10 (11), fp32 23 (24). The int8 correction counts 2^-8 parameter ULPs, i.e. 8 more bits; the
# int16 one 16 more, capped at fp32's 24 because the update runs in fp32.
FORMATS = [
    (torch.bfloat16, 16, 8),  # the bf16 parameter is the master
    (torch.bfloat16, 24, 16),  # bf16 + int8: a 24-bit float (8 exponent bits, 15 + 1 significand)
    (torch.bfloat16, 32, 24),  # bf16 + int16: fp32 bit for bit
    (torch.float16, 16, 11),
    (torch.float16, 24, 19),
    (torch.float16, 32, 24),  # 11 + 16 = 27 bits of correction grid, but fp32 arithmetic
    (torch.float32, 24, 24),  # no split whatever master_weight_bits says
    (torch.float32, 16, 24),
]


@pytest.mark.parametrize(("dtype", "bits", "p"), FORMATS)
def test_significant_bits_from_the_formats(dtype, bits, p):
    assert mw.master_significant_bits(dtype, bits) == p


def test_thresholds_from_first_principles():
    # half a ULP relative to the largest weights of a binade [2^e, 2^(e+1)): ULP = 2^(e+1-p),
    # half of it over 2^(e+1) = 2^-(p+1)
    assert decay_threshold(mw.master_significant_bits(torch.bfloat16, 24)) == 2.0**-17
    assert decay_threshold(mw.master_significant_bits(torch.bfloat16, 16)) == 2.0**-9
    assert decay_threshold(mw.master_significant_bits(torch.bfloat16, 32)) == 2.0**-25
    assert decay_threshold(mw.master_significant_bits(torch.float32, 24)) == 2.0**-25
    # the module's own error bound of the 24-bit master is half a unit at 16 bits, 2^-p
    assert 2.0 ** -mw.master_significant_bits(torch.bfloat16, 24) == mw.REL_ERROR_24
    # the review's example: lr 3e-5 x wd 0.1 is below the 24-bit master's threshold, 1e-3 x 0.1
    # above 2^-16, where every weight decays
    assert 3e-5 * 0.1 < 2.0**-17 < 2.0**-16 < 1e-3 * 0.1


def _weights():
    """Weights over 24 binades, none zero, within fp16's normal range (2^-14 to 65504)."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(50_000, generator=gen) * torch.exp2(
        torch.randint(-12, 12, (50_000,), generator=gen).float()
    )
    x = torch.where(x.abs() < 2.0**-13, 2.0**-13, x)  # fp16 normal: |x| >= 2^-14
    return x.clamp(-6e4, 6e4)


@pytest.mark.parametrize(
    ("dtype", "bits", "p"), [f for f in FORMATS if f[1] != 24 or f[0] != torch.float16]
)
def test_the_threshold_is_where_the_split_master_loses_the_decay(dtype, bits, p):
    """theta (1 - r) in fp32, stored through the split: below 2^-(p+1) no weight moves; above
    2^-p every one does (between the two, those at the bottom of their binade)."""
    corr = mw.correction_dtype(dtype, bits)
    param, c = mw.split(_weights(), dtype, corr)
    master = mw.join(param, c)

    def decayed(r):
        return mw.join(*mw.split(master * (1.0 - r), dtype, corr))

    assert torch.equal(decayed(decay_threshold(p) * 0.97), master)
    assert bool((decayed(2.0**-p * 1.03) != master).all())
    partly = float((decayed(decay_threshold(p) * 1.5) != master).float().mean())
    if p < 24:
        assert 0.0 < partly < 1.0
    else:  # fp32 rounds the factor 1 - r itself to 1 - 2^-24: all or nothing
        assert partly == 1.0


def test_fp16_int8_threshold_up_to_ties():
    """fp16 + int8 (p = 19) rounds its correction half to even in fp32: below 2^-20 by more than
    fp32's rounding reaches, only masters exactly at an fp16 rounding tie (correction -128, which
    any decrease moves once) change (see `hwtune.optim.numerics`)."""
    param, c = mw.split(_weights(), torch.float16, torch.int8)
    master = mw.join(param, c)
    r = decay_threshold(19) * 0.9
    moved = mw.join(*mw.split(master * (1.0 - r), torch.float16, torch.int8)) != master
    assert bool((c[moved] == -128).all())
    assert float(moved.float().mean()) < 0.01
    # above 2^-19 nearly all move; not every one: int8's range is [-128, 127], so a negative
    # master at correction +127 cannot take a step of less than one unit towards zero
    above = mw.join(*mw.split(master * (1.0 - 2.0**-19 * 1.1), torch.float16, torch.int8))
    stuck = above == master
    assert float(stuck.float().mean()) < 0.01
    assert bool((c[stuck] == 127).all() and (master[stuck] < 0).all())


def _master(opt, p):
    """The stored fp32 master; before the first step the parameter itself (the state starts
    with a zero correction)."""
    return mw.join(p.detach(), opt.state[p].get("master_correction")).clone()


def _steps(opt, params, steps=1):
    """``steps`` steps with zero gradients; returns the DecayTooSmallWarnings they raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(steps):
            for p in params:
                p.grad = torch.zeros_like(p)
            opt.step()
    return [w for w in caught if issubclass(w.category, DecayTooSmallWarning)]


def _bf16_weights(n=4096):
    gen = torch.Generator().manual_seed(1)
    return torch.nn.Parameter((torch.randn(n, generator=gen) + 3.0).to(torch.bfloat16))


@pytest.mark.parametrize("compile", [False, True])
def test_adamw_24_bit_master_loses_a_small_decay_and_says_so_once(compile):
    p = _bf16_weights()
    before = p.detach().float().clone()
    opt = AdamW([p], lr=3e-5, weight_decay=0.1, master_weight_bits=24, compile=compile)
    caught = _steps(opt, [p], steps=4)
    assert torch.equal(_master(opt, p), before)  # the decay is lost, warning or not
    assert len(caught) == 1
    assert caught[0].filename == __file__  # the caller of step()
    message = str(caught[0].message)
    assert "\n" not in message
    for part in (
        "param_groups[0]",
        "lr 3e-05 x weight_decay 0.1 = 3e-06",
        "< 2^-17 = 7.63e-06",
        "16 significant bits",
        "bfloat16 + int8, master_weight_bits=24",
        "master_weight_bits=32",
        "accept it",
    ):
        assert part in message


@pytest.mark.parametrize(
    ("lr", "bits"),
    [(1e-3, 24), (3e-5, 32)],  # lr wd = 1e-4 > 2^-16; 32 bits: 3e-6 > 2^-24
)
def test_adamw_decay_above_the_threshold_moves_every_weight_without_warning(lr, bits):
    p = _bf16_weights()
    before = p.detach().float().clone()
    opt = AdamW([p], lr=lr, weight_decay=0.1, master_weight_bits=bits, compile=False)
    assert _steps(opt, [p]) == []
    assert bool((_master(opt, p) != before).all())
    after_one = _master(opt, p)
    assert _steps(opt, [p], steps=2) == []
    assert bool((_master(opt, p) != after_one).all())


def test_warned_again_only_after_the_decay_rose_above_the_threshold():
    p = _bf16_weights(64)
    opt = AdamW([p], lr=3e-5, weight_decay=0.1, compile=False)
    assert len(_steps(opt, [p], steps=20)) == 1
    opt.param_groups[0]["lr"] = 1e-3  # above 2^-17: re-armed
    assert _steps(opt, [p], steps=2) == []
    opt.param_groups[0]["lr"] = 3e-5
    assert len(_steps(opt, [p], steps=5)) == 1
    opt.param_groups[0]["lr"] = 0.0  # no decay at all: nothing lost, nothing said, not re-armed
    assert _steps(opt, [p], steps=2) == []
    opt.param_groups[0]["lr"] = 3e-5
    assert _steps(opt, [p], steps=2) == []


def test_once_per_group_and_format():
    a, b = _bf16_weights(64), _bf16_weights(64)
    c = torch.nn.Parameter(torch.ones(64))  # fp32: 2^-25, 3e-6 is resolved
    opt = AdamW(
        [{"params": [a, c]}, {"params": [b], "weight_decay": 0.0}, {"params": [_bf16_weights(64)]}],
        lr=3e-5,
        weight_decay=0.1,
        compile=False,
    )
    caught = _steps(opt, [a, b, c], steps=3)  # the last group's parameter has no gradient
    assert [re.search(r"param_groups\[(\d+)\]", str(w.message))[1] for w in caught] == ["0"]
    opt.param_groups[0]["lr"] = 1e-8  # 1e-9 < 2^-25: now fp32 loses it too, a second cause
    caught = _steps(opt, [a, c], steps=2)
    assert len(caught) == 1
    assert "float32 parameter, no split" in str(caught[0].message)
    assert "torch.optim in fp32 loses it too" in str(caught[0].message)


def test_fp32_torch_adamw_loses_the_same_decay():
    """The fp32 threshold is no artefact of the split: torch.optim.AdamW in fp32 keeps no decay
    of 1e-9 per step either."""
    p = torch.nn.Parameter(torch.randn(4096) + 3.0)
    before = p.detach().clone()
    opt = torch.optim.AdamW([p], lr=1e-8, weight_decay=0.1)
    for _ in range(3):
        p.grad = torch.zeros_like(p)
        opt.step()
    assert torch.equal(p.detach(), before)


@pytest.mark.parametrize(
    "make",
    [
        lambda ps: Lion(ps, lr=3e-5, weight_decay=0.1, compile=False),
        lambda ps: SGD(ps, lr=3e-5, weight_decay=0.1, decoupled_weight_decay=True, compile=False),
        lambda ps: SGD(ps, lr=3e-5, weight_decay=0.1, compile=False),  # L2, no momentum
        # L2 through momentum 0.9: the decay reaches lr wd / (1 - mu) = 5e-6 < 2^-17
        lambda ps: SGD(ps, lr=1e-4, momentum=0.9, weight_decay=5e-3, compile=False),
    ],
)
def test_lion_and_sgd_lose_a_small_decay_and_say_so(make):
    p = _bf16_weights()
    before = p.detach().float().clone()
    opt = make([p])
    with warnings.catch_warnings():
        warnings.simplefilter("error", UpdateTooSmallWarning)  # zero gradients: not counted there
        caught = _steps(opt, [p], steps=30)
    assert torch.equal(_master(opt, p), before)
    assert len(caught) == 1


def test_sgd_l2_decay_through_momentum_counts_the_buffer():
    """lr wd = 2e-6 < 2^-17 alone, but momentum 0.9 carries it to 2e-5 > 2^-16: no warning, and
    once the buffer has built up every weight decays."""
    p = _bf16_weights()
    opt = SGD([p], lr=2e-4, momentum=0.9, weight_decay=1e-2, compile=False)
    assert _steps(opt, [p], steps=20) == []
    before = _master(opt, p)
    assert _steps(opt, [p], steps=20) == []
    assert bool((_master(opt, p) != before).all())
    q = _bf16_weights()
    plain = SGD([q], lr=2e-4, weight_decay=1e-2, compile=False)  # no momentum: 2e-6, lost
    assert len(_steps(plain, [q], steps=2)) == 1


def test_gradient_release_warns_from_step():
    p = _bf16_weights(64)
    opt = AdamW([p], lr=3e-5, weight_decay=0.1, gradient_release=True, compile=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            (p.float() * 0.0).sum().backward()  # zero gradient, applied inside backward
            opt.step()
    assert sum(issubclass(w.category, DecayTooSmallWarning) for w in caught) == 1


def test_numerics_check_every_0_silences_it():
    p = _bf16_weights()
    before = p.detach().float().clone()
    opt = AdamW([p], lr=3e-5, weight_decay=0.1, numerics_check_every=0, compile=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DecayTooSmallWarning)
        for _ in range(3):
            p.grad = torch.zeros_like(p)
            opt.step()
    assert torch.equal(_master(opt, p), before)  # still lost, only not said
