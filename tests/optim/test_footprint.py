"""Bytes per parameter measured from the tensors' storage against FlashOptim Table 1: AdamW 7
(5 with gradient release), SGD and Lion 6 (4), + 2 bytes of fp16 scale per 32 elements per state;
and against the estimator's memory model (hwtune.cost.memory)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from hwtune.cost.memory import state_bytes_per_param
from hwtune.optim import SGD, AdamW, Lion, measure_footprint

SCALE = 2 / 32  # fp16 scale per group of 32, per 8-bit state


def model():
    # shapes like a transformer's, multiples of 32; ~1.2 M parameters so per-tensor constants
    # (step counter, per-chunk power of two) stay below 0.001 bytes per parameter
    return nn.Sequential(nn.Linear(512, 1024), nn.GELU(), nn.Linear(1024, 512)).to(torch.bfloat16)


def footprint(cls, release=False, **kw):
    torch.manual_seed(0)
    m = model()
    opt = cls(m.parameters(), gradient_release=release, compile=False, **kw)
    m(torch.randn(8, 512, dtype=torch.bfloat16)).float().pow(2).mean().backward()
    opt.step()  # states now exist; without release the gradients are still alive
    return measure_footprint(m, opt)


@pytest.mark.parametrize(
    ("cls", "kw", "states", "paper"),
    [
        (AdamW, {}, 2, 7.0),
        (SGD, {"momentum": 0.9}, 1, 6.0),
        (Lion, {}, 1, 6.0),
    ],
)
def test_bytes_per_param_match_flashoptim(cls, kw, states, paper):
    fp = footprint(cls, **kw)
    assert fp.weight_bytes == 2 * fp.n_params  # bf16
    assert fp.grad_bytes == 2 * fp.n_params  # 16-bit gradients
    assert fp.bytes_per_param == pytest.approx(paper + states * SCALE, abs=1e-3)
    released = footprint(cls, release=True, **kw)
    assert released.grad_bytes == 0
    assert released.bytes_per_param == pytest.approx(paper - 2 + states * SCALE, abs=1e-3)


def test_master_weight_bits_change_the_correction_bytes():
    assert footprint(AdamW, master_weight_bits=32).bytes_per_param == pytest.approx(
        8 + 2 * SCALE, abs=1e-3
    )
    assert footprint(AdamW, master_weight_bits=16).bytes_per_param == pytest.approx(
        6 + 2 * SCALE, abs=1e-3
    )
    # group size 64 halves the scales: under the 7.1 bytes
    assert footprint(AdamW, group_size=64).bytes_per_param == pytest.approx(7 + 2 / 32, abs=1e-3)


def test_estimator_uses_the_measured_bytes():
    for name, release in (("adam-8bit", False), ("adam-8bit-release", True)):
        sb = state_bytes_per_param("bf16", name, fp32_grads=False)
        fp = footprint(AdamW, release=release)
        assert sb.weights + sb.grads + sb.optimizer == pytest.approx(fp.bytes_per_param, abs=1e-3)


def test_torch_adamw_mixed_precision_is_16_bytes_for_comparison():
    torch.manual_seed(0)
    m = model().float()
    opt = torch.optim.AdamW(m.parameters())
    m(torch.randn(8, 512)).pow(2).mean().backward()
    opt.step()
    # fp32 weights + fp32 grads + two fp32 moments: 16 bytes (the "step" counters add ~0)
    assert measure_footprint(m, opt).bytes_per_param == pytest.approx(16, abs=1e-3)
