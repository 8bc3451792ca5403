"""An SGD built with momentum > 0 whose group momentum drops to 0 for some steps (an LR scheduler
or the caller editing ``param_groups``) steps as ``torch.optim.SGD`` does (torch/optim/sgd.py,
``_single_tensor_sgd``): a step with momentum 0 neither reads nor writes the buffer, and the
first step with momentum != 0 starts the buffer as the weight-decayed gradient, undampened,
whatever the parameter's step count. hwtune used to rewrite the buffer in momentum-0 steps and
to start it (from zero, dampened) only at step 1."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from hwtune.optim import SGD
from hwtune.optim.optimizer import CHUNK

#: a vector, a ragged matrix (not a whole number of groups), and more than one chunk
SHAPES = ((64,), (33, 7), (CHUNK + 45,))
#: momentum per step: the buffer starts at step 3 (dampening then shows), or pauses at 3-4
STARTS_LATE = (0.0, 0.0, 0.9, 0.9, 0.9, 0.9)
PAUSED = (0.9, 0.9, 0.0, 0.0, 0.9, 0.9)
#: paths through the driver: one chunk per call (CPU default), buckets of small parameters in
#: spans of several chunks (as on GPUs), and the update fused by torch.compile
PATHS = {
    "eager": {"compile": False},
    "buckets": {"compile": False, "span_elements": 8 * CHUNK},
    "compiled": {"compile": True},
}
#: distance from torch.optim.SGD's fp32 weights, as a fraction of the distance they moved: the
#: 8-bit buffer's coding error. Measured with the fix: at most 0.4% over a schedule; before it
#: (the buffer rewritten at momentum 0, started only at step 1), 40% to 68%
TOL = 0.02


def _off(ours: torch.Tensor, ref: torch.Tensor, start: torch.Tensor) -> float:
    """How far ``ours`` is from ``ref``, as a fraction of the distance ``ref`` moved."""
    return float((ours - ref).detach().norm() / (ref - start).detach().norm())


def _params() -> list[nn.Parameter]:
    gen = torch.Generator().manual_seed(0)
    return [nn.Parameter(torch.randn(s, generator=gen)) for s in SHAPES]


def _grads(step: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(1000 + step)
    return [torch.randn(s, generator=gen) for s in SHAPES]


def _step(opt: torch.optim.Optimizer, ps: list[nn.Parameter], step: int, momentum: float) -> None:
    """One step at ``momentum``, set on every group as a scheduler would."""
    for group in opt.param_groups:
        group["momentum"] = momentum
    for p, g in zip(ps, _grads(step), strict=True):
        p.grad = g
    opt.step()


def _compare(schedule: tuple[float, ...], path: str, **kw: float | bool) -> None:
    """Step hwtune's SGD and torch's through ``schedule`` on the same fp32 parameters and
    gradients; after every step each parameter is within `TOL` of torch's."""
    ref_ps, our_ps = _params(), _params()
    start = [p.detach().clone() for p in ref_ps]
    ref = torch.optim.SGD(ref_ps, lr=0.1, momentum=0.9, **kw)
    ours = SGD(our_ps, lr=0.1, momentum=0.9, numerics_check_every=0, **PATHS[path], **kw)
    for i, mu in enumerate(schedule):
        _step(ref, ref_ps, i, mu)
        _step(ours, our_ps, i, mu)
        for p0, pr, po in zip(start, ref_ps, our_ps, strict=True):
            off = _off(po, pr, p0)
            assert off <= TOL, f"step {i + 1}, shape {tuple(p0.shape)}: {off:.1%} off torch"
    if path == "compiled":
        assert ours.compile  # no fallback to eager


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize(
    "kw",
    [{"dampening": 0.1, "weight_decay": 1e-2}, {"nesterov": True, "weight_decay": 1e-2}],
    ids=["dampening", "nesterov"],
)
def test_buffer_started_after_momentum_zero_steps_matches_torch(kw, path):
    """Momentum 0 at steps 1-2, then 0.9: torch starts the buffer at step 3 as the gradient
    (no dampening, no earlier gradient in it)."""
    _compare(STARTS_LATE, path, **kw)


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize(
    "kw",
    [
        {"weight_decay": 1e-2},
        {"nesterov": True, "weight_decay": 1e-2},
        {"dampening": 0.1, "weight_decay": 1e-2},
    ],
    ids=["heavy-ball", "nesterov", "dampening"],
)
def test_buffer_paused_by_momentum_zero_steps_matches_torch(kw, path):
    """Momentum 0.9, then 0 at steps 3-4, then 0.9 again: torch's buffer keeps its step-2 value
    through the pause and goes on from it."""
    _compare(PAUSED, path, **kw)


def _buffer_bits(opt: SGD, p: nn.Parameter) -> dict[str, torch.Tensor]:
    """The stored buffer tensors (codes, fp16 scales, fp32 gscales) as integer bit patterns."""
    state = opt.state[p]
    out = {}
    for key in ("momentum_buffer", "momentum_buffer_scale", "momentum_buffer_gscale"):
        t = state[key]
        if t.is_floating_point():
            t = t.view(torch.int16 if t.element_size() == 2 else torch.int32)
        out[key] = t.clone()
    return out


@pytest.mark.parametrize("path", list(PATHS))
def test_a_momentum_zero_step_leaves_the_buffer_bit_identical(path):
    """The stored codes, scales and gscales of every parameter are untouched by a step with
    momentum 0 (not decoded and coded again), while the weights do move."""
    ps = _params()
    opt = SGD(ps, lr=0.1, momentum=0.9, weight_decay=1e-2, numerics_check_every=0, **PATHS[path])
    _step(opt, ps, 0, 0.9)
    _step(opt, ps, 1, 0.9)
    before = {id(p): _buffer_bits(opt, p) for p in ps}
    weights = [p.detach().clone() for p in ps]
    _step(opt, ps, 2, 0.0)
    for p, w in zip(ps, weights, strict=True):
        assert not torch.equal(p.detach(), w)
        for key, bits in _buffer_bits(opt, p).items():
            assert torch.equal(bits, before[id(p)][key]), key


def test_paths_agree_through_a_start_and_a_pause():
    """Through a late start and a pause, buckets are bit-identical to one chunk per call (the
    driver's invariant) and the compiled update agrees with eager within 1% of the distance
    moved (its fused arithmetic rounds differently in the last fp32 bit, as in
    `test_compiled_step_matches_eager`); and eager follows torch."""
    schedule = STARTS_LATE[:2] + PAUSED
    ref_ps = _params()
    ref = torch.optim.SGD(ref_ps, lr=0.1, momentum=0.9, dampening=0.1)
    for i, mu in enumerate(schedule):
        _step(ref, ref_ps, i, mu)
    runs = {}
    for path in PATHS:
        ps = _params()
        opt = SGD(ps, lr=0.1, momentum=0.9, dampening=0.1, numerics_check_every=0, **PATHS[path])
        for i, mu in enumerate(schedule):
            _step(opt, ps, i, mu)
        runs[path] = (ps, opt)
    (pe, oe), (pb, ob), (pc, _) = runs["eager"], runs["buckets"], runs["compiled"]
    for p0, r, e, b, c in zip(_params(), ref_ps, pe, pb, pc, strict=True):
        assert torch.equal(e, b)
        assert oe.state[e].keys() == ob.state[b].keys()
        for key, value in oe.state[e].items():
            assert torch.equal(value, ob.state[b][key]), key
        assert _off(c, e, p0) < 0.01
        assert _off(e, r, p0) <= TOL


def test_new_momentum_values_compile_nothing_new(graphs):
    """Once a start, a pause and a resume have compiled (with and without the buffer), other
    momentum and dampening values, a second start and a second pause reuse those graphs: they
    reach the compiled update as tensors (`SGD.step_varying`). With floats specialised, as
    torch 2.11 did, a new momentum compiled a new graph; and past the recompile limit dynamo
    would run the rest eagerly."""
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True, specialize_float=True):
        ps = _params()
        opt = SGD(ps, lr=0.1, momentum=0.9, dampening=0.1, compile=True, numerics_check_every=0)
        for i, mu in enumerate(STARTS_LATE[:2] + PAUSED):
            _step(opt, ps, i, mu)
        assert opt.compile
        before = len(graphs)
        qs = _params()
        again = SGD(qs, lr=0.05, momentum=0.5, dampening=0.3, compile=True, numerics_check_every=0)
        for i, mu in enumerate((0.0, 0.8, 0.7, 0.0, 0.95, 0.6)):
            _step(again, qs, i, mu)
        assert again.compile
        assert len(graphs) == before


def _legacy(state_dict: dict) -> dict:
    """``state_dict`` as saved before the buffer's start was recorded: without the entry."""
    return {
        "state": {
            k: {n: t.clone() for n, t in v.items() if n != "momentum_started"}
            for k, v in state_dict["state"].items()
        },
        "param_groups": [dict(g) for g in state_dict["param_groups"]],
    }


@pytest.mark.parametrize(
    ("saved_momentum", "schedule"),
    [(0.9, (0.0, 0.0, 0.9, 0.9)), (0.0, (0.9, 0.9, 0.9))],
    ids=["started", "unused"],
)
def test_a_checkpoint_without_the_start_entry_loads_and_follows_torch(saved_momentum, schedule):
    """A checkpoint saved before the entry existed loads; its buffer counts as started where the
    saved group's momentum is > 0 (the buffer was then in use since step 1) and as unused where
    it is 0 (the old code kept the last gradient in it, which torch would not have)."""
    ref_ps, our_ps = _params(), _params()
    start = [p.detach().clone() for p in ref_ps]
    ref = torch.optim.SGD(ref_ps, lr=0.1, momentum=0.9, weight_decay=1e-2)
    ours = SGD(our_ps, lr=0.1, momentum=0.9, weight_decay=1e-2, compile=False)
    for i in range(2):
        _step(ref, ref_ps, i, saved_momentum)
        _step(ours, our_ps, i, saved_momentum)
    sd = ours.state_dict()
    resumed_ps = [nn.Parameter(p.detach().clone()) for p in our_ps]
    resumed = SGD(resumed_ps, lr=0.1, momentum=0.9, weight_decay=1e-2, compile=False)
    resumed.load_state_dict(_legacy(sd))
    for i, mu in enumerate(schedule, start=2):
        _step(ref, ref_ps, i, mu)
        _step(resumed, resumed_ps, i, mu)
    for p0, pr, po in zip(start, ref_ps, resumed_ps, strict=True):
        assert _off(po, pr, p0) <= TOL


def test_a_round_trip_before_the_buffer_starts_resumes_bit_identically():
    """Saved while the buffer is unused (momentum 0 so far): the loaded optimizer starts it at
    the same step as the uninterrupted one, bit for bit, and both follow torch."""
    ref_ps, ps = _params(), _params()
    ref = torch.optim.SGD(ref_ps, lr=0.1, momentum=0.9, dampening=0.1)
    opt = SGD(ps, lr=0.1, momentum=0.9, dampening=0.1, compile=False)
    _step(ref, ref_ps, 0, 0.0)
    _step(opt, ps, 0, 0.0)
    sd = opt.state_dict()
    sd = {
        "state": {k: {n: t.clone() for n, t in v.items()} for k, v in sd["state"].items()},
        "param_groups": [dict(g) for g in sd["param_groups"]],
    }
    qs = [nn.Parameter(p.detach().clone()) for p in ps]
    again = SGD(qs, lr=0.1, momentum=0.9, dampening=0.1, compile=False)
    again.load_state_dict(sd)
    for i in (1, 2):
        _step(ref, ref_ps, i, 0.9)
        _step(opt, ps, i, 0.9)
        _step(again, qs, i, 0.9)
    for p0, r, p, q in zip(_params(), ref_ps, ps, qs, strict=True):
        assert _off(p, r, p0) <= TOL
        assert torch.equal(p, q)
        for key, value in opt.state[p].items():
            assert torch.equal(value, again.state[q][key]), key
