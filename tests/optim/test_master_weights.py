"""Split master weights: bf16 + int8 reconstructs the fp32 master to 16 significant bits (error
<= 2^-16 |x| for normal x, <= 2^-142 for subnormal x), bf16 + int16 bit-exactly; checked over
millions of random bit patterns, i.e. every exponent from subnormal to the largest finite."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hwtune.optim import master_weights as mw

BF16_MAX = 3.3895313892515355e38
SATURATION = 3.3961e38  # largest reconstructible magnitude (bf16 max + 127 * 2^8 ulp32)


def random_floats(n=4_000_000, seed=0):
    """Uniform random fp32 bit patterns: uniform over exponents, incl. subnormals; no inf/nan."""
    gen = torch.Generator().manual_seed(seed)
    bits = torch.randint(-(2**31), 2**31 - 1, (n,), dtype=torch.int32, generator=gen)
    x = bits.view(torch.float32)
    return x[torch.isfinite(x)]


def test_int8_error_bound_over_all_exponents():
    x = random_floats()
    x = x[x.abs() < BF16_MAX]
    param, corr = mw.split_bf16(x, torch.int8)
    assert param.dtype == torch.bfloat16 and corr.dtype == torch.int8
    err = (mw.join_bf16(param, corr).double() - x.double()).abs()
    ax = x.abs().double()
    normal = ax >= 2.0**-126
    subnormal = ~normal & (ax > 0)
    assert normal.sum() > 3_000_000 and subnormal.sum() > 10_000  # the sample covers both
    rel = err[normal] / ax[normal]
    assert rel.max().item() <= mw.REL_ERROR_24
    assert rel.max().item() > 0.9 * mw.REL_ERROR_24  # the bound is tight
    assert err[subnormal].max().item() <= mw.ABS_ERROR_SUBNORMAL_24
    # FlashOptim's claim in bits: 16 significant bits, i.e. 8 more than bf16 alone
    bf16_err = (param.double() - x.double()).abs()[normal] / ax[normal]
    assert bf16_err.max().item() <= 2.0**-8 + 2.0**-16


def test_int8_master_is_x_rounded_to_a_24_bit_float():
    x = random_floats(200_000, seed=1)
    x = x[x.abs() < BF16_MAX]
    y = mw.join_bf16(*mw.split_bf16(x, torch.int8))
    assert torch.all((y.view(torch.int32) & 0xFF) == 0)  # low 8 mantissa bits are zero
    # the nearest 24-bit value: ties away from zero on the magnitude bits
    mag = x.view(torch.int32) & 0x7FFFFFFF
    expected = ((mag + 0x80) >> 8) << 8
    assert torch.equal(y.view(torch.int32) & 0x7FFFFFFF, expected)


def test_int16_reconstructs_fp32_exactly():
    x = random_floats(2_000_000, seed=2)
    x = x[x.abs() < SATURATION]
    param, corr = mw.split_bf16(x, torch.int16)
    assert corr.dtype == torch.int16
    assert torch.equal(mw.join_bf16(param, corr).view(torch.int32), x.view(torch.int32))


def test_bf16_part_is_within_half_a_bf16_ulp_of_the_master():
    x = random_floats(500_000, seed=3)
    x = x[(x.abs() < BF16_MAX) & (x.abs() >= 2.0**-126)]
    param, _ = mw.split_bf16(x, torch.int8)
    ulp = torch.exp2(torch.floor(torch.log2(x.abs().double())) - 7)
    assert ((param.double() - x.double()).abs() <= ulp / 2 + ulp / 2**9).all()
    # only values near a bf16 rounding tie round differently from torch's ties-to-even
    assert (param != x.to(torch.bfloat16)).float().mean().item() < 0.005


@pytest.mark.parametrize("corr_dtype", [torch.int8, torch.int16])
def test_non_finite_values_keep_their_class(corr_dtype):
    x = torch.tensor([math.inf, -math.inf, math.nan, 0.0, -0.0, 3.4e38, -3.4e38, 1e-45])
    param, corr = mw.split_bf16(x, corr_dtype)
    y = mw.join_bf16(param, corr)
    assert y[0] == math.inf and y[1] == -math.inf and math.isnan(y[2])
    assert y[3] == 0 and not torch.signbit(y[3]) and torch.signbit(y[4])
    assert SATURATION <= y[5] < 3.4e38 and y[6] == -y[5]  # saturates at the top, stays finite
    assert corr[:3].tolist() == [0, 0, 0]


@settings(max_examples=200, deadline=None)
@given(
    st.floats(
        width=32, allow_nan=False, allow_infinity=False, max_value=2.0**127, min_value=-(2.0**127)
    )
)
def test_split_of_a_reconstruction_is_a_fixed_point(v):
    x = torch.tensor([v], dtype=torch.float32)
    p1, c1 = mw.split_bf16(x, torch.int8)
    p2, c2 = mw.split_bf16(mw.join_bf16(p1, c1), torch.int8)
    assert torch.equal(p1.view(torch.int16), p2.view(torch.int16)) and torch.equal(c1, c2)
    err = abs(mw.join_bf16(p1, c1).item() - v)
    assert err <= max(abs(v) * mw.REL_ERROR_24, mw.ABS_ERROR_SUBNORMAL_24)


@pytest.mark.parametrize(("corr_dtype", "k"), [(torch.int8, 8), (torch.int16, 16)])
def test_fp16_correction_bound(corr_dtype, k):
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(500_000, generator=gen)
    x = x * torch.exp2(torch.randint(-30, 12, x.shape, generator=gen).float())  # subnormal fp16 too
    low, corr = mw.split_fp16(x, corr_dtype)
    err = (mw.join_fp16(low, corr) - x).abs()
    assert (err <= mw._fp16_ulp(low) * 2.0**-k * (1 + 1e-6)).all()
    assert (err <= mw._fp16_ulp(low) * 2.0 ** -(k + 1)).float().mean() > 0.99
