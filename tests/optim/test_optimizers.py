"""Drop-in behaviour: the update rules against torch's, param groups, LR schedulers, decoupled
weight decay, zero_grad, closures, ragged shapes, GradScaler and torch.compile."""

from __future__ import annotations

import copy

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import ReferenceLion
from tiny_models import GPT, CharData, corpus, mlp

from hwtune.optim import SGD, AdamW, Lion, export_fp32_state_dict

OURS = {"adamw": AdamW, "sgd": SGD, "lion": Lion}
KW = {
    "adamw": {"lr": 1e-2, "weight_decay": 0.1},
    "sgd": {"lr": 0.1, "momentum": 0.9, "weight_decay": 1e-3},
    "lion": {"lr": 1e-3, "weight_decay": 0.1},
}


def torch_ref(name, params, **kw):
    if name == "adamw":
        return torch.optim.AdamW(params, **kw)
    if name == "sgd":
        return torch.optim.SGD(params, **kw)
    return ReferenceLion(params, **kw)


def run(model, opt, steps, seed=0, d_in=64):
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(16, d_in, generator=gen).to(next(model.parameters()).dtype)
        y = torch.randint(0, 10, (16,), generator=gen)
        torch.nn.functional.cross_entropy(model(x).float(), y).backward()
        opt.step()
        opt.zero_grad()


@pytest.mark.parametrize("name", ["adamw", "sgd", "lion"])
def test_trajectory_follows_torch_in_fp32(name):
    """fp32 parameters (no split), 8-bit states: after 20 steps the weights differ from torch's
    fp32 optimizer's by a few percent of the distance they moved."""
    torch.manual_seed(0)
    ref = mlp()
    ours = copy.deepcopy(ref)
    run(ref, torch_ref(name, ref.parameters(), **KW[name]), 20)
    run(ours, OURS[name](ours.parameters(), compile=False, **KW[name]), 20)
    torch.manual_seed(0)
    start = mlp()
    # Lion's sign() flips where the interpolated momentum is near zero: a full 2 lr step each
    tolerance = 0.1 if name == "lion" else 0.05
    for p0, pr, po in zip(start.parameters(), ref.parameters(), ours.parameters(), strict=True):
        moved = (pr - p0).norm()
        assert moved > 0
        assert (po - pr).norm() < tolerance * moved, name


def test_adamw_first_step_is_exact_sign_step():
    """At step 1 AdamW moves every element by lr * g/(|g| + eps/...) ~ lr * sign(g): the codes
    represent m = 0.1 g and v = 0.001 g^2 with the same group scale, so the step is exact to the
    fp32 master's precision."""
    p = torch.nn.Parameter(torch.randn(256) * 0.1)
    p.grad = torch.randn(256)
    before = p.detach().clone()
    AdamW([p], lr=1e-3, weight_decay=0.0, compile=False).step()
    step = (p.detach() - before) / 1e-3
    assert torch.allclose(step, -torch.sign(p.grad), atol=1e-3)


def test_param_groups_and_scheduler():
    model = mlp().to(torch.bfloat16)
    opt = AdamW(
        [
            {"params": model[0].parameters(), "lr": 1e-2},
            {"params": model[2].parameters(), "lr": 0.0, "weight_decay": 0.0},
        ],
        compile=False,
    )
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    frozen = [p.detach().clone() for p in model[2].parameters()]
    run(model, opt, 3)
    sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(5e-3)
    for p, f in zip(model[2].parameters(), frozen, strict=True):
        assert torch.equal(p, f)  # lr 0: untouched, bit for bit


def test_decoupled_weight_decay_shrinks_towards_zero_without_gradients():
    p = torch.nn.Parameter(torch.ones(64, dtype=torch.bfloat16))
    opt = AdamW([p], lr=0.1, weight_decay=0.5, compile=False)
    for _ in range(10):
        p.grad = torch.zeros_like(p)
        opt.step()
    # (1 - lr wd)^10 with a 24-bit master: bf16 alone would stall at the first steps' rounding
    assert p.float().mean().item() == pytest.approx(0.95**10, rel=2**-8)
    master = export_fp32_state_dict(torch.nn.ParameterList([p]), opt)["0"]
    assert master.mean().item() == pytest.approx(0.95**10, rel=1e-4)


def test_sgd_nesterov_and_dampening_match_torch_in_direction():
    for kw in ({"momentum": 0.9, "nesterov": True}, {"momentum": 0.5, "dampening": 0.5}):
        torch.manual_seed(1)
        ref = mlp()
        ours = copy.deepcopy(ref)
        run(ref, torch.optim.SGD(ref.parameters(), lr=0.05, **kw), 10)
        run(ours, SGD(ours.parameters(), lr=0.05, compile=False, **kw), 10)
        for pr, po in zip(ref.parameters(), ours.parameters(), strict=True):
            assert torch.allclose(po, pr, atol=2e-3), kw


def test_zero_grad_and_closure():
    model = mlp().to(torch.bfloat16)
    opt = Lion(model.parameters(), lr=1e-3, compile=False)
    x = torch.randn(8, 64, dtype=torch.bfloat16)

    def closure():
        opt.zero_grad()
        loss = model(x).float().pow(2).mean()
        loss.backward()
        return loss

    loss = opt.step(closure)
    assert isinstance(loss, torch.Tensor)
    opt.zero_grad()
    assert all(p.grad is None for p in model.parameters())


def test_parameters_without_grad_are_skipped():
    a = torch.nn.Parameter(torch.randn(40, dtype=torch.bfloat16))
    b = torch.nn.Parameter(torch.randn(40, dtype=torch.bfloat16))
    opt = AdamW([a, b], compile=False)
    a.grad = torch.randn_like(a)
    before = b.detach().clone()
    opt.step()
    assert torch.equal(b, before) and b not in opt.state


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.integers(1, 70), min_size=1, max_size=3),
    st.sampled_from(["adamw", "sgd", "lion"]),
    st.integers(0, 2**31 - 1),
)
def test_any_shape_steps_finitely_and_deterministically(shape, name, seed):
    gen = torch.Generator().manual_seed(seed)
    results = []
    for _ in range(2):
        p = torch.nn.Parameter(torch.randn(shape, generator=torch.Generator().manual_seed(seed)))
        p.data = p.data.to(torch.bfloat16)
        opt = OURS[name]([p], compile=False, **KW[name])
        g = torch.Generator().manual_seed(seed + 1)
        for _ in range(3):
            p.grad = torch.randn(shape, generator=g).to(torch.bfloat16)
            opt.step()
        results.append(p.detach().clone())
    assert torch.isfinite(results[0].float()).all()
    assert torch.equal(results[0], results[1])  # seeded runs repeat bit for bit
    del gen


def test_grad_scaler_with_fp16_parameters():
    torch.manual_seed(0)
    ref = mlp()
    start = copy.deepcopy(ref)
    model = copy.deepcopy(ref).half()
    opt = AdamW(model.parameters(), lr=1e-2, compile=False)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12)
    gen = torch.Generator().manual_seed(0)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    for _ in range(10):
        x = torch.randn(16, 64, generator=gen)
        y = torch.randint(0, 10, (16,), generator=gen)
        scaler.scale(torch.nn.functional.cross_entropy(model(x.half()).float(), y)).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ref(x), y).backward()
        ref_opt.step()
        ref_opt.zero_grad()
    assert opt.state  # steps were taken, not all skipped
    for p0, pr, po in zip(start.parameters(), ref.parameters(), model.parameters(), strict=True):
        assert (po.float() - pr).norm() < 0.05 * (pr - p0).norm()


def test_clipping_scaled_fp16_gradients_whose_norm_passes_fp16s_range():
    """fp16 parameters are clipped by ``max_grad_norm`` on the still-scaled gradients (the
    user cannot unscale fp16 gradients). Here every scaled element is 491.52 (0.03 x 2^14,
    finite) but the norm of 200,000 of them, 2.2e5, is past fp16's 65,504: taken in fp16 it
    is inf and the clip coefficient 0 (torch's clip_grad_norm_), which would wipe the step
    while GradScaler, seeing no inf, keeps its scale. The unscaled norm is 13.4, clipped to
    1: one SGD step at lr 1 from zero moves the parameters by exactly that norm."""
    n = 200_000
    p = torch.nn.Parameter(torch.zeros(n, dtype=torch.float16))
    opt = SGD([p], lr=1.0, compile=False, max_grad_norm=1.0, numerics_check_every=0)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**14)
    scaler.scale((p * torch.full((n,), 0.03, dtype=torch.float16)).sum()).backward()
    assert torch.isfinite(p.grad).all() and torch.linalg.vector_norm(p.grad).isinf()
    scaler.step(opt)
    scaler.update()
    assert torch.linalg.vector_norm(p.detach().float()).item() == pytest.approx(1.0, rel=2e-3)
    assert scaler.get_scale() == 2.0**14  # no inf was found, so the scale held


def test_grad_scaler_skips_steps_with_inf():
    p = torch.nn.Parameter(torch.ones(64, dtype=torch.bfloat16))
    opt = AdamW([p], compile=False)
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale((p.float() * float("inf")).sum()).backward()
    scaler.step(opt)
    scaler.update()
    assert torch.equal(p, torch.ones(64, dtype=torch.bfloat16)) and not opt.state


def test_activation_checkpointing_gives_the_same_update():
    torch.manual_seed(0)
    data = CharData(corpus(20_000), 16)
    a = GPT(data.vocab, 16, d=32).to(torch.bfloat16)
    b = copy.deepcopy(a)
    b.checkpointing = True
    oa, ob = AdamW(a.parameters(), compile=False), AdamW(b.parameters(), compile=False)
    gen_a, gen_b = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    for _ in range(3):
        for model, opt, gen in ((a, oa, gen_a), (b, ob, gen_b)):
            model.loss(*data.batch(gen, 4)).backward()
            opt.step()
            opt.zero_grad()
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)


def test_compiled_step_matches_eager():
    """compile=True fuses the same ops (C++ on CPU); the fused arithmetic rounds differently in
    the last fp32 bit, which moves a few percent of the 8-bit codes by one or two steps."""
    torch.manual_seed(0)
    model = mlp(64, 96, 10).to(torch.bfloat16)
    start = copy.deepcopy(model)
    twin = copy.deepcopy(model)
    released = copy.deepcopy(model)
    eager = AdamW(model.parameters(), lr=1e-2, compile=False)
    compiled = AdamW(twin.parameters(), lr=1e-2, compile=True)
    in_backward = AdamW(released.parameters(), lr=1e-2, compile=True, gradient_release=True)
    run(model, eager, 3)
    run(twin, compiled, 3)
    run(released, in_backward, 3)  # the compiled update also runs inside backward hooks
    assert compiled.compile and in_backward.compile  # no fallback to eager
    for p, q in zip(twin.parameters(), released.parameters(), strict=True):
        assert torch.equal(p, q)
    fe, fc = export_fp32_state_dict(model, eager), export_fp32_state_dict(twin, compiled)
    for k, p0 in start.named_parameters():
        assert (fe[k] - fc[k]).norm() < 0.01 * (fe[k] - p0.float()).norm(), k
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        for key in ("exp_avg", "exp_avg_sq"):
            diff = (eager.state[p][key].int() - compiled.state[q][key].int()).abs()
            assert diff.max() <= 2 and (diff > 0).float().mean() < 0.15
