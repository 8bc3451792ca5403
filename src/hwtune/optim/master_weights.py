"""Split master weights: a 16-bit parameter plus an integer correction holds the fp32 master.

Mixed-precision training keeps an fp32 master copy of every weight (4 bytes) next to the 16-bit
copy the model computes with (Micikevicius et al. 2018, "Mixed Precision Training", §3.1).
FlashOptim (Gonzalez Ortiz et al. 2026, arXiv 2602.23349, §3 "master weight splitting") replaces
the fp32 master by the 16-bit parameter plus an 8-bit correction term: 3 bytes instead of 6.

Our correction is defined on the bit pattern, so the rounding is exact integer arithmetic and the
error bound is a property of a floating-point format rather than of floating-point arithmetic.

**bf16 + int8 (``master_weight_bits=24``).** For a finite fp32 master ``x`` with magnitude bits
``M`` (the 31 bits below the sign, monotonic in ``|x|``):

    M24 = round_half_up(M / 2^8)          # x rounded to 16 significant bits (a 24-bit float)
    H   = round_half_up(M24 / 2^8)        # the bf16 parameter's magnitude bits
    rho = M24 - 2^8 * H   in [-128, 127]  # the int8 correction

and the master is reconstructed as ``bits = sign | (2^16 H + 2^8 rho)``. The reconstruction is
exactly ``x`` rounded to nearest (ties away from zero) at 16 significant bits (8 exponent bits,
15 stored mantissa bits, sign: a 24-bit float), hence:

    |x_hat - x| <= 2^-16 * 2^floor(log2|x|) <= 2^-16 |x|        (normal x)
    |x_hat - x| <= 2^7 * 2^-149 = 2^-142                         (subnormal x)

i.e. half a unit in the 16th significant bit (fp32 keeps 24). The bf16 parameter is ``M24``
rounded to 8 significant bits (ties away from zero); this double rounding differs from
``x.to(torch.bfloat16)`` (ties to even) by one bf16 ULP for the ~0.2% of values that lie within
half a 24-bit unit of a bf16 rounding tie. FlashOptim's correction (``rho / 127 * ULP(x') / 2``)
has the same bound up to a factor 256/254.

**bf16 + int16 (``master_weight_bits=32``).** ``H = round_half_up(M / 2^16)``,
``rho = M - 2^16 H`` in [-32768, 32767]: the fp32 master is reconstructed bit-exactly.

**fp16 + int8/int16.** fp16 has 5 exponent bits, so its bits are not a prefix of fp32's; the
correction is the rounding error in units of the fp16 ULP, ``rho = round(2^k (x - x') / ULP(x'))``
(k = 8 or 16), reconstructed as ``x' + rho ULP(x') / 2^k``: error <= ULP(x') / 2^(k+1), or
ULP(x') / 2^k for a master exactly at an fp16 rounding tie (the correction saturates at 2^(k-1)-1).

Non-finite values (inf, nan) keep their class with a zero correction. Finite magnitudes above the
largest bf16 (3.3895e38) saturate there. Pure torch integer and float ops: the same code on CPU
and GPU.
"""

from __future__ import annotations

import math

import torch

#: bits of master precision -> correction dtype (16 means no correction: the parameter is the master)
CORRECTION_DTYPES: dict[int, torch.dtype | None] = {16: None, 24: torch.int8, 32: torch.int16}

_SIGN = -(2**31)  # 0x80000000 as int32
_MAG = 0x7FFFFFFF
_INF = 0x7F800000
_BF16_MAX_HI = 0x7F7F  # magnitude bits of the largest finite bf16

#: relative reconstruction error bound of bf16 + int8 for normal numbers: half a unit in the
#: 16th significant bit (see the module docstring)
REL_ERROR_24 = 2.0**-16
#: absolute reconstruction error bound of bf16 + int8 for subnormal numbers
ABS_ERROR_SUBNORMAL_24 = 2.0**-142


def correction_dtype(param_dtype: torch.dtype, master_weight_bits: int) -> torch.dtype | None:
    """The dtype of the correction term for a parameter (None: no correction is kept)."""
    if param_dtype == torch.float32:
        return None
    return CORRECTION_DTYPES[master_weight_bits]


def significant_bits(param_dtype: torch.dtype, corr_dtype: torch.dtype | None) -> int:
    """Significant bits ``p`` of the master held by a ``param_dtype`` parameter and a
    ``corr_dtype`` correction (None: the parameter alone), implicit leading bit included:

        p = min(p_param + bits(corr), 24)

    Each correction counts in units of ``2^-bits(corr)`` of the parameter's ULP (bf16: the
    ``M24`` / ``M`` splits above; fp16: ``k``), so it extends the parameter's significand by its
    own width; the update runs in fp32, which keeps 24. Hence bf16 (p_param 8): 8 alone, 16 with
    int8, 24 with int16 (exact fp32); fp16 (11): 11, 19, and 24 (27 capped by the fp32
    arithmetic); fp32 (24, no correction): 24. The bf16 + int8 value agrees with
    `REL_ERROR_24` = 2^-p. For fp16 this holds in its normal range (|x| >= 2^-14): below,
    ULP(x') stops shrinking, and the master keeps fewer significant bits."""
    own = 1 - int(math.log2(torch.finfo(param_dtype).eps))  # eps = 2^-(p - 1), a power of two
    extra = 0 if corr_dtype is None else torch.iinfo(corr_dtype).bits
    return min(own + extra, 1 - int(math.log2(torch.finfo(torch.float32).eps)))


def master_significant_bits(param_dtype: torch.dtype, master_weight_bits: int) -> int:
    """`significant_bits` of the master an optimizer keeps for a ``param_dtype`` parameter with
    ``master_weight_bits`` (16, 24 or 32; fp32 parameters keep no correction: 24)."""
    return significant_bits(param_dtype, correction_dtype(param_dtype, master_weight_bits))


def split_bf16(master: torch.Tensor, corr_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Split an fp32 master into (bf16 parameter, int8/int16 correction); see the module doc."""
    bits = master.contiguous().view(torch.int32)
    sign = bits & _SIGN
    mag = bits & _MAG
    if corr_dtype == torch.int8:
        m24 = torch.clamp((mag + 0x80) >> 8, max=(_INF >> 8) - 1)  # 24-bit float magnitude bits
        hi = torch.clamp((m24 + 0x80) >> 8, max=_BF16_MAX_HI)
        rho = torch.clamp(m24 - (hi << 8), -128, 127)
    elif corr_dtype == torch.int16:
        hi = torch.clamp((mag + 0x8000) >> 16, max=_BF16_MAX_HI)
        rho = torch.clamp(mag - (hi << 16), -32768, 32767)
    else:
        raise ValueError(f"correction dtype: got {corr_dtype}; expected torch.int8 or torch.int16")
    # branch-free masks (torch.where is several times slower than integer ops on CPU):
    # -1 (all ones) where the value is not finite, resp. a nan; 0 elsewhere
    nonfinite = (_INF - 1 - mag) >> 31
    nan = (_INF - mag) >> 31
    nan_hi = ((mag >> 16) & ~nan) | (0x7FC0 & nan)  # inf stays inf, any nan a quiet nan
    hi = (hi & ~nonfinite) | (nan_hi & nonfinite)
    rho = rho & ~nonfinite
    param = (sign | (hi << 16)).view(torch.float32).to(torch.bfloat16)  # exact: low bits are 0
    return param, rho.to(corr_dtype)


def join_bf16(param: torch.Tensor, corr: torch.Tensor) -> torch.Tensor:
    """The fp32 master held by a bf16 parameter and its int8/int16 correction."""
    bits = param.float().view(torch.int32)
    shift = 8 if corr.dtype == torch.int8 else 0
    mag = (bits & _MAG) + (corr.to(torch.int32) << shift)
    return ((bits & _SIGN) | mag).view(torch.float32)


def _fp16_ulp(low: torch.Tensor) -> torch.Tensor:
    """ULP of fp16 values (IEEE 754 binary16: 10 stored mantissa bits, min exponent -14)."""
    _, exp = torch.frexp(low.float())  # |x| = f 2^exp, f in [0.5, 1); 0 gives exp 0
    exp = torch.where(low == 0, -24, (exp - 11).clamp(min=-24))
    return torch.exp2(exp.float())


def split_fp16(master: torch.Tensor, corr_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Split an fp32 master into (fp16 parameter, correction in units of 2^-k fp16 ULPs)."""
    k = 8 if corr_dtype == torch.int8 else 16
    info = torch.iinfo(corr_dtype)
    low = master.to(torch.float16)
    err = (master - low.float()) / _fp16_ulp(low) * 2.0**k
    err = torch.where(torch.isfinite(err), err, 0.0)
    return low, torch.round(err).clamp(info.min, info.max).to(corr_dtype)


def join_fp16(param: torch.Tensor, corr: torch.Tensor) -> torch.Tensor:
    """The fp32 master held by an fp16 parameter and its correction."""
    k = 8 if corr.dtype == torch.int8 else 16
    return param.float() + corr.float() * (_fp16_ulp(param) * 2.0**-k)


def split(
    master: torch.Tensor, param_dtype: torch.dtype, corr_dtype: torch.dtype | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Store an fp32 master as a ``param_dtype`` parameter plus a ``corr_dtype`` correction."""
    if corr_dtype is None:
        return master.to(param_dtype), None
    if param_dtype == torch.bfloat16:
        return split_bf16(master, corr_dtype)
    return split_fp16(master, corr_dtype)


def join(param: torch.Tensor, corr: torch.Tensor | None) -> torch.Tensor:
    """The fp32 master weight of a parameter and its correction (None: the parameter itself)."""
    if corr is None:
        return param.float()
    if param.dtype == torch.bfloat16:
        return join_bf16(param, corr)
    return join_fp16(param, corr)
