"""8-bit optimizer states: group-wise scaling (32 elements, fp16 scales) with companding.

Block-wise 8-bit states follow Dettmers et al. 2022 ("8-bit Optimizers via Block-wise
Quantization", ICLR, §2): each group of ``group_size`` consecutive elements (of the flattened
tensor) is divided by its absolute maximum and coded on 8 bits. A *compander* (the audio-codec
idea behind mu-law, ITU-T G.711) first maps the normalised value through a concave function so
that small values, which dominate optimizer states, get more of the 8-bit levels. The two maps are
FlashOptim's (Gonzalez Ortiz et al. 2026, arXiv 2602.23349, §4 "companding"):

- momentum (signed): ``phi(x) = 2x / (1 + |x|)`` on x in [-1, 1], inverse ``z / (2 - |z|)``;
  slope 2 at zero, so values near 0 are coded twice as finely as by linear int8 (int8, 127 levels
  each side);
- second moment (unsigned): coded as ``sqrt(v)`` (inverse: square), which halves the dynamic range
  in bits: only elements below 1/510 of their group's largest sqrt(v) fall into the bottom bin,
  where linear coding of ``v`` puts everything below 1/510 of the largest v there, i.e. every
  element whose RMS gradient is below 1/22.6 of the group's largest (uint8, 255 levels).

Scales are fp16 (2 bytes per group). fp16 normals span 2^-14..65504, narrower than optimizer states
(|g| ~ 1e-8 is common in large models), so each *chunk* of coded elements (the optimizers use
chunks of 65,536) also keeps one fp32 power of two ``gscale``: stored scale = group absmax /
gscale, with gscale chosen so the chunk's largest group maps into (2^14, 2^15]. Groups down to
2^-29 of the largest keep full fp16 precision. This factor is our addition; it costs 4 bytes per
65,536 elements (0.00006 bytes/param) and no bandwidth.

By default one call codes one chunk (one gscale for the whole tensor). With ``chunk_groups`` (groups
per chunk) one call codes a *span* of consecutive chunks and keeps one gscale per chunk, with the
same arithmetic per element, so the codes, scales and gscales are bit-identical to coding each
chunk on its own: a GPU then updates a large tensor in a few calls instead of one per chunk (each
call is dozens of kernel launches), while the stored format stays the same.

Codes are rounded to nearest and decode to the centre of their bin. For the second moment the bin
of code 0 is [0, 1/2] step (v is not negative), so code 0 decodes to 1/4 step (`ZERO_BIN_CENTRE`),
not to 0: an element whose v fell into the bottom bin but whose momentum did not (sparse inputs,
dead units: g = 0 at this step) would otherwise get the update m / eps, which blows up training
(measured: scikit-learn digits, ``benchmarks/optim_quality.py``). A group of zeros has scale 0 and
decodes to zeros. Linear int8 coding (``companded=False``) is kept to show what companding buys.

Non-finite inputs (a NaN or inf gradient reaches the states through the update) are confined to
their group: a group whose maximum is not finite gets scale 0, so its 32 elements decode to zeros
(their states start again from zero once), and the chunk's power of two is taken over the finite
groups. Without it the group's fp16 scale would be NaN or inf and all ``group_size`` elements
would decode as NaN from then on (Lion, whose sign(NaN) is 0, would silently freeze them), and
``frexp`` of a NaN or inf maximum would reset the gscale of the whole chunk (with SGD momentum the
whole tensor went NaN). The parameter update, computed before the states are coded, still sees
the non-finite value, so that element of the parameter turns non-finite, as in ``torch.optim``.
Keeping the 31 neighbours' states too would take a per-element guard, which cost the fused CPU
step ~15%.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

SIGNED_LEVELS = 127
UNSIGNED_LEVELS = 255
_SCALE_EXP = 15  # the largest group scale maps into (2^14, 2^15], below fp16's max (65504)
#: where code 0 of the second moment decodes, in steps (1/4: the centre of its bin [0, 1/2])
ZERO_BIN_CENTRE = 0.25


def n_groups(numel: int, group_size: int) -> int:
    """Number of groups of ``group_size`` covering ``numel`` elements (the last may be padded)."""
    return -(-numel // group_size)


def compand_signed(x: torch.Tensor) -> torch.Tensor:
    """FlashOptim's momentum compander phi(x) = 2x / (1 + |x|), [-1, 1] -> [-1, 1]."""
    return 2.0 * x / (1.0 + x.abs())


def expand_signed(z: torch.Tensor) -> torch.Tensor:
    """Inverse of `compand_signed`: x = z / (2 - |z|)."""
    return z / (2.0 - z.abs())


def _grouped(x: torch.Tensor, group_size: int) -> torch.Tensor:
    """A flat tensor zero-padded to whole groups, viewed as (groups, group_size).

    A whole number of groups is not padded, also under `torch.compile`: the guard on
    ``numel % group_size`` costs a graph, but padding by a symbolic 0 made the compiled CPU loops
    index through divisions, 2.4x slower (measured: 42 vs 18 ms for 2.1 M elements).
    """
    pad = (-x.numel()) % group_size
    if pad:
        x = F.pad(x, (0, pad))
    return x.view(-1, group_size)


def _is_single(groups: int, chunk_groups: int | None) -> bool:
    """Whether ``groups`` group scales form one chunk (one gscale, the per-chunk coding)."""
    return chunk_groups is None or groups <= chunk_groups


def _per_group(gscale: torch.Tensor, groups: int, chunk_groups: int) -> torch.Tensor:
    """Each chunk's gscale repeated over its ``chunk_groups`` groups, trimmed to ``groups``
    (the last chunk may be partial)."""
    return gscale[:, None].expand(-1, chunk_groups).reshape(-1)[:groups]


def _encode_scales(
    amax: torch.Tensor, chunk_groups: int | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(fp16 stored scales, fp32 powers of two, fp32 effective scales) from group maxima.

    The maxima must be finite (the callers take them over finite values only, see the module
    docstring): a NaN or inf maximum would make its group's scale and its chunk's gscale useless.

    The power of two is one per chunk of ``chunk_groups`` groups (0-d when ``amax`` fits in one
    chunk, as without ``chunk_groups``): the group maxima are zero-padded to whole chunks (maxima
    are >= 0, so the padding never wins) and reduced per row, which gives each chunk the value
    coding it alone would give.
    """
    groups = amax.numel()
    if _is_single(groups, chunk_groups):
        _, exp = torch.frexp(amax.max())  # max <= 2^exp
        gscale = torch.exp2((exp - _SCALE_EXP).float())
        per_group = gscale
    else:
        chunks = -(-groups // chunk_groups)
        rows = F.pad(amax, (0, chunks * chunk_groups - groups)).view(chunks, chunk_groups)
        _, exp = torch.frexp(rows.amax(dim=1))
        gscale = torch.exp2((exp - _SCALE_EXP).float())
        per_group = _per_group(gscale, groups, chunk_groups)
    scales16 = (amax / per_group).to(torch.float16)
    return scales16, gscale, scales16.float() * per_group


def decode_scales(
    scales16: torch.Tensor, gscale: torch.Tensor, chunk_groups: int | None = None
) -> torch.Tensor:
    """Effective fp32 group scales (``gscale``: one per chunk of ``chunk_groups`` groups)."""
    groups = scales16.numel()
    if _is_single(groups, chunk_groups):
        return scales16.float() * gscale
    return scales16.float() * _per_group(gscale, groups, chunk_groups)


def _safe_inverse(scale: torch.Tensor) -> torch.Tensor:
    return torch.where(scale > 0, 1.0 / scale, 0.0)


def _finite_or_zero(amax: torch.Tensor) -> torch.Tensor:
    """Group maxima with the non-finite ones (a group holding a NaN or inf) set to 0: such a
    group gets scale 0, so it decodes to zeros whatever its codes (NaN x 0 coded as anything),
    and the chunk's power of two is taken over the finite groups. One op on the maxima (1/32 of
    the elements): the fused CPU step does not slow down (a per-element guard cost it ~15%)."""
    return torch.where(amax < math.inf, amax, 0.0)  # NaN < inf is False


def quantize_signed(
    x: torch.Tensor, group_size: int, companded: bool = True, chunk_groups: int | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Code a flat fp32 tensor on int8 per group: (codes (groups*group_size,), fp16 scales, gscale).

    ``chunk_groups``: groups per chunk when ``x`` spans several chunks (one gscale each, shape
    (chunks,)); None codes ``x`` as one chunk (a 0-d gscale).

    A group holding a NaN or inf gets scale 0 (module docstring): it decodes to zeros, and its
    chunk's power of two and the other groups keep theirs."""
    xg = _grouped(x, group_size)
    scales16, gscale, scale = _encode_scales(_finite_or_zero(xg.abs().amax(dim=1)), chunk_groups)
    u = xg * _safe_inverse(scale)[:, None]
    if companded:
        u = compand_signed(u)
    codes = torch.round(u * SIGNED_LEVELS).clamp_(-SIGNED_LEVELS, SIGNED_LEVELS).to(torch.int8)
    return codes.view(-1), scales16, gscale


def dequantize_signed(
    codes: torch.Tensor,
    scales16: torch.Tensor,
    gscale: torch.Tensor,
    numel: int,
    group_size: int,
    companded: bool = True,
    chunk_groups: int | None = None,
) -> torch.Tensor:
    """Decode `quantize_signed`'s codes to a flat fp32 tensor of ``numel`` elements (with the
    ``chunk_groups`` they were coded with)."""
    z = codes.view(-1, group_size).float() * (1.0 / SIGNED_LEVELS)
    if companded:
        z = expand_signed(z)
    return (z * decode_scales(scales16, gscale, chunk_groups)[:, None]).view(-1)[:numel]


def quantize_second_moment(
    v: torch.Tensor, group_size: int, companded: bool = True, chunk_groups: int | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Code a flat non-negative fp32 tensor on uint8 per group, as sqrt(v) when companded
    (``chunk_groups``: as `quantize_signed`; a group holding a NaN or inf gets scale 0)."""
    vg = _grouped(v, group_size)
    if companded:
        vg = vg.sqrt()
    scales16, gscale, scale = _encode_scales(_finite_or_zero(vg.amax(dim=1)), chunk_groups)
    u = vg * (_safe_inverse(scale)[:, None] * UNSIGNED_LEVELS)
    codes = torch.round(u).clamp_(0, UNSIGNED_LEVELS).to(torch.uint8)
    return codes.view(-1), scales16, gscale


def dequantize_second_moment(
    codes: torch.Tensor,
    scales16: torch.Tensor,
    gscale: torch.Tensor,
    numel: int,
    group_size: int,
    companded: bool = True,
    chunk_groups: int | None = None,
) -> torch.Tensor:
    """Decode `quantize_second_moment`'s codes to a flat fp32 tensor of ``numel`` elements (with
    the ``chunk_groups`` they were coded with).

    Each code decodes to the centre of its bin; code 0's bin is [0, 1/2] step (the value is not
    negative), so it decodes to 1/4 step rather than to 0 (see the module docstring).
    """
    scale = decode_scales(scales16, gscale, chunk_groups) * (1.0 / UNSIGNED_LEVELS)
    r = codes.view(-1, group_size).float().clamp_min(ZERO_BIN_CENTRE) * scale[:, None]
    if companded:
        r = r * r
    return r.view(-1)[:numel]
