"""A NaN or inf gradient element is confined to its group of 32: the parameter turns non-finite at
that element only, as in torch.optim; the group's 8-bit states start again from zero (scale 0) and
keep updating, and every other group and the chunk's power of two keep their scales (before, the
group decoded NaN for good, Lion froze it, and SGD momentum turned the whole tensor NaN)."""

from __future__ import annotations

import math

import pytest
import torch

from hwtune.optim import SGD, AdamW, Lion
from hwtune.optim import companding as cq

N = 4096  # one fp32 parameter, 128 groups of 32 in one chunk
BAD = 1000  # the element whose gradient is non-finite once
GROUP = slice(BAD // 32 * 32, BAD // 32 * 32 + 32)
STEPS_BEFORE, STEPS_AFTER = 3, 4
OURS = {"adamw": AdamW, "sgd": SGD, "lion": Lion}
TORCH = {"adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}
KW = {
    "adamw": {"lr": 1e-2, "weight_decay": 0.1},
    "sgd": {"lr": 0.1, "momentum": 0.9, "weight_decay": 1e-3},
    # no decay: a Lion element whose momentum decodes as NaN (sign 0) would then not move at all
    "lion": {"lr": 1e-3, "weight_decay": 0.0},
}
# the tolerances of test_optimizers.py::test_trajectory_follows_torch_in_fp32 (8-bit states)
TOLERANCE = {"adamw": 0.05, "sgd": 0.05, "lion": 0.1}
NONFINITE = [float("nan"), float("inf")]


def start() -> torch.Tensor:
    return torch.randn(N, generator=torch.Generator().manual_seed(0))


def trajectory(make, bad: float) -> tuple[list[torch.Tensor], torch.optim.Optimizer]:
    """The parameter after each step (index 0: the start): STEPS_BEFORE finite gradients, one
    whose element BAD is ``bad``, then STEPS_AFTER finite ones (the same seed for every run)."""
    p = torch.nn.Parameter(start())
    opt = make([p])
    gen = torch.Generator().manual_seed(1)
    out = [p.detach().clone()]
    for step in range(STEPS_BEFORE + 1 + STEPS_AFTER):
        g = torch.randn(N, generator=gen)
        if step == STEPS_BEFORE:
            g[BAD] = bad
        p.grad = g
        opt.step()
        out.append(p.detach().clone())
    return out, opt


def ours(name: str, compile: bool = False):
    return lambda params: OURS[name](params, compile=compile, **KW[name])


def assert_states_finite(opt: torch.optim.Optimizer) -> None:
    for state in opt.state.values():
        for key, t in state.items():
            if t.is_floating_point():  # fp16 scales, fp32 gscales (codes are integers)
                assert torch.isfinite(t).all(), key


def others(mask_out: slice | int | list[int], n: int = N) -> torch.Tensor:
    """True everywhere but at ``mask_out``."""
    keep = torch.ones(n, dtype=torch.bool)
    keep[mask_out] = False
    return keep


def close(a: torch.Tensor, b: torch.Tensor, p0: torch.Tensor, tolerance: float) -> bool:
    """``a`` within ``tolerance`` of the distance ``b`` moved from ``p0`` (norms)."""
    return bool((a - b).norm() < tolerance * (b - p0).norm())


def assert_like_the_zero_gradient_run(name, bad_run, zero_run, p0):
    """Outside the offending group the states are coded exactly as with a zero gradient at BAD
    (same group scales, same chunk gscale: the group does not hold the chunk's maximum here):
    bit for bit. In the group the states restarted from zero: finite."""
    outside = others(GROUP)
    assert torch.equal(bad_run[outside], zero_run[outside])
    in_group = ~outside
    in_group[BAD] = False
    assert torch.isfinite(bad_run[in_group]).all()


@pytest.mark.parametrize("bad", NONFINITE, ids=["nan", "inf"])
@pytest.mark.parametrize("name", ["adamw", "sgd"])
def test_nonfinite_gradient_damages_only_its_element_as_in_torch(name, bad):
    ref, _ = trajectory(lambda params: TORCH[name](params, **KW[name]), bad)
    got, opt = trajectory(ours(name), bad)
    zero, _ = trajectory(ours(name), 0.0)
    p0 = got[0]
    torch_bad = ~torch.isfinite(ref[-1])
    assert torch_bad.nonzero().flatten().tolist() == [BAD]  # torch: that one element only
    for r, g in zip(ref[STEPS_BEFORE + 1 :], got[STEPS_BEFORE + 1 :], strict=True):
        assert torch.equal(~torch.isfinite(g), ~torch.isfinite(r))  # at every later step
    assert_states_finite(opt)
    outside = others(GROUP)  # the group's 31 neighbours restarted their states from zero
    assert close(got[-1][outside], ref[-1][outside], p0[outside], TOLERANCE[name])
    neighbours = ~outside
    neighbours[BAD] = False
    assert (got[-1][neighbours] != got[-2][neighbours]).all()  # still updating
    assert_like_the_zero_gradient_run(name, got[-1], zero[-1], p0)


@pytest.mark.parametrize("bad", NONFINITE, ids=["nan", "inf"])
def test_nonfinite_gradient_does_not_freeze_lions_group(bad):
    """Lion's sign(NaN) is 0 on CPU: a group whose scale went NaN would stop moving for good."""
    got, opt = trajectory(ours("lion"), bad)
    zero, _ = trajectory(ours("lion"), 0.0)
    assert_states_finite(opt)
    neighbours = ~others(GROUP)
    neighbours[BAD] = False
    assert neighbours.sum() == 31
    for before, after in zip(got[STEPS_BEFORE + 1 : -1], got[STEPS_BEFORE + 2 :], strict=True):
        assert (after[neighbours] != before[neighbours]).all()  # each later step moves them
    assert torch.isfinite(got[-1]).all()  # sign() of inf or NaN is finite: Lion stays finite
    assert_like_the_zero_gradient_run("lion", got[-1], zero[-1], got[0])


def test_compiled_update_keeps_a_nan_gradient_on_its_element():
    """The default CPU path (torch.compile) codes non-finite values as the eager ops do."""
    got, opt = trajectory(ours("adamw", compile=True), float("nan"))
    ref, _ = trajectory(lambda params: torch.optim.AdamW(params, **KW["adamw"]), float("nan"))
    assert opt.compile  # no fallback to eager
    assert (~torch.isfinite(got[-1])).nonzero().flatten().tolist() == [BAD]
    assert_states_finite(opt)
    rest = others(BAD)
    assert close(got[-1][rest], ref[-1][rest], got[0][rest], TOLERANCE["adamw"])


def signed_input() -> torch.Tensor:
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(8 * 32, generator=gen) * torch.exp2(torch.randn(8 * 32, generator=gen) * 3)
    x[3 * 32 : 4 * 32] *= 1e3  # the offending group is the largest: it sets the chunk's gscale
    return x


@pytest.mark.parametrize("chunk_groups", [None, 2], ids=["one-chunk", "chunks-of-2-groups"])
@pytest.mark.parametrize("companded", [True, False])
@pytest.mark.parametrize("kind", ["signed", "second"])
def test_quantize_confines_nonfinite_elements_to_their_group(kind, companded, chunk_groups):
    """A NaN and an inf (and -inf, signed) in group 3, the chunk's largest, and group 7 of nothing
    but non-finite values: those groups get scale 0 and decode to zeros; every other group's
    scale, codes and decoded values, and the chunk's power of two, are those of the same input
    with both groups set to 0 (the power of two taken over the finite groups)."""
    x = signed_input()
    if kind == "second":
        x = x * x
    quantize = cq.quantize_signed if kind == "signed" else cq.quantize_second_moment
    decode = cq.dequantize_signed if kind == "signed" else cq.dequantize_second_moment
    bad = {100: math.nan, 110: math.inf}
    if kind == "signed":
        bad[120] = -math.inf
    y = x.clone()
    for i, value in bad.items():
        y[i] = value
    y[7 * 32 :] = torch.tensor([math.nan, math.inf] * 16)
    zeroed = x.clone()
    zeroed[3 * 32 : 4 * 32] = 0.0
    zeroed[7 * 32 :] = 0.0
    codes, scales, gscale = quantize(y, 32, companded, chunk_groups)
    ref_codes, ref_scales, ref_gscale = quantize(zeroed, 32, companded, chunk_groups)
    assert torch.equal(scales, ref_scales) and torch.equal(gscale, ref_gscale)
    assert torch.isfinite(scales).all() and torch.isfinite(gscale).all()
    assert scales[3] == 0 and scales[7] == 0
    plain = others([*range(3 * 32, 4 * 32), *range(7 * 32, 8 * 32)], y.numel())
    assert torch.equal(codes[plain], ref_codes[plain])
    out = decode(codes, scales, gscale, y.numel(), 32, companded, chunk_groups)
    ref_out = decode(ref_codes, ref_scales, ref_gscale, y.numel(), 32, companded, chunk_groups)
    assert torch.equal(out[plain], ref_out[plain])
    assert torch.equal(out[~plain], torch.zeros(64))
