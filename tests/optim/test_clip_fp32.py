"""`clip_grad_norm_fp32`: torch's global-norm clipping with every norm in fp32, grouped by
device and dtype into fused kernels."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from hwtune.optim.optimizer import clip_grad_norm_fp32  # noqa: E402

SIZES = st.lists(st.integers(1, 40), min_size=1, max_size=6)


@settings(max_examples=40, deadline=None)
@given(sizes=SIZES, max_norm=st.floats(0.01, 100.0), seed=st.integers(0, 2**31 - 1))
def test_fp32_gradients_are_clipped_as_torch_clips_them(sizes, max_norm, seed):
    gen = torch.Generator().manual_seed(seed)
    ours = [torch.randn(n, generator=gen) for n in sizes]
    theirs = [g.clone() for g in ours]
    total = clip_grad_norm_fp32(ours, max_norm)
    params = [torch.nn.Parameter(torch.zeros_like(g)) for g in theirs]
    for p, g in zip(params, theirs, strict=True):
        p.grad = g
    expected = torch.nn.utils.clip_grad_norm_(params, max_norm)
    assert torch.allclose(total, expected, rtol=1e-5)
    for a, p in zip(ours, params, strict=True):
        assert torch.allclose(a, p.grad, rtol=1e-5, atol=1e-7)


@settings(max_examples=40, deadline=None)
@given(sizes=SIZES, seed=st.integers(0, 2**31 - 1))
def test_mixed_dtypes_give_the_norm_of_the_values_and_at_most_max_norm_after(sizes, seed):
    gen = torch.Generator().manual_seed(seed)
    dtypes = (torch.bfloat16, torch.float16, torch.float32)
    grads = [(torch.randn(n, generator=gen) * 300).to(dtypes[i % 3]) for i, n in enumerate(sizes)]
    exact = math.sqrt(sum(float(g.double().pow(2).sum()) for g in grads))
    total = clip_grad_norm_fp32(grads, 1.0)
    assert total.dtype == torch.float32
    assert math.isclose(float(total), exact, rel_tol=1e-5)
    after = math.sqrt(sum(float(g.double().pow(2).sum()) for g in grads))
    assert after <= 1.0 * (1 + 1e-2)  # bf16's rounding of the scaled values


def test_fp16_gradients_past_fp16s_range_keep_a_finite_norm():
    # every element finite, the sum of squares past 65,504: torch's own clipping gives inf
    grads = [torch.full((4096,), 2000.0, dtype=torch.float16)]
    total = clip_grad_norm_fp32(grads, 1.0)
    assert math.isclose(float(total), 2000.0 * 64, rel_tol=1e-3)
    assert torch.isfinite(grads[0]).all() and float(grads[0].float().norm()) <= 1.001


def test_no_gradients_is_a_zero_norm_not_an_error():
    assert float(clip_grad_norm_fp32([], 1.0)) == 0.0
    assert float(clip_grad_norm_fp32([torch.zeros(0)], 1.0)) == 0.0
    grads = [torch.zeros(0), torch.full((4,), 3.0), torch.zeros(0, dtype=torch.bfloat16)]
    assert float(clip_grad_norm_fp32(grads, 100.0)) == pytest.approx(6.0)
