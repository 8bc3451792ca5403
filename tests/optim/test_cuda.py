"""The compact optimizers on a CUDA device: the same updates as on the CPU, the same footprint,
and torch.compile's fused kernel on the GPU. Skipped where torch sees no GPU (CI); run on one
with ``pytest tests/optim/test_cuda.py``."""

from __future__ import annotations

import copy

import pytest
import torch

from hwtune.optim import SGD, AdamW, Lion, measure_footprint

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

OURS = {"adamw": AdamW, "sgd": SGD, "lion": Lion}
KW = {
    "adamw": {"lr": 1e-2, "weight_decay": 0.1},
    "sgd": {"lr": 0.1, "momentum": 0.9, "weight_decay": 1e-3},
    "lion": {"lr": 1e-3, "weight_decay": 0.1},
}


def _params(dtype: torch.dtype, seed: int = 0) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    shapes = [(256, 192), (192,), (1000, 64), (7, 3), (4096,)]  # ragged and odd sizes
    return [torch.nn.Parameter((torch.randn(s, generator=g) * 0.05).to(dtype)) for s in shapes]


def _grads(params: list[torch.nn.Parameter], step: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(100 + step)
    return [(torch.randn(p.shape, generator=g) * 1e-2).to(p.dtype) for p in params]


def _run(opt_cls: type, params: list[torch.nn.Parameter], device: str, steps: int, **kw) -> list:
    ps = [torch.nn.Parameter(p.detach().clone().to(device)) for p in params]
    opt = opt_cls(ps, **kw)
    for i in range(steps):
        for p, gr in zip(ps, _grads(params, i), strict=True):
            p.grad = gr.to(device)
        opt.step()
        opt.zero_grad()
    return [p.detach().float().cpu() for p in ps]


@pytest.mark.parametrize("name", ["adamw", "sgd", "lion"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_updates_match_the_cpu(name, dtype):
    """Ten steps of the same gradients on the GPU and the CPU end at the same weights: the
    8-bit codes are computed by the same arithmetic, so differences are rounding (fp32 sums in
    another order), far below the distance the weights moved."""
    start = _params(dtype)
    kw = KW[name] | {"compile": False}
    cpu = _run(OURS[name], start, "cpu", 10, **kw)
    gpu = _run(OURS[name], start, "cuda", 10, **kw)
    for p0, c, g in zip(start, cpu, gpu, strict=True):
        moved = (c - p0.detach().float()).norm()
        assert moved > 0
        assert (g - c).norm() < 0.02 * moved, name


def test_cuda_compiled_step_matches_eager():
    """torch.compile's fused update (Triton on the GPU) gives the eager update's weights."""
    start = _params(torch.bfloat16)
    eager = _run(AdamW, start, "cuda", 5, lr=1e-2, compile=False)
    fused = _run(AdamW, start, "cuda", 5, lr=1e-2, compile=True)
    for p0, e, f in zip(start, eager, fused, strict=True):
        moved = (e - p0.detach().float()).norm()
        assert (f - e).norm() < 0.02 * moved


@pytest.mark.parametrize("compile", [False, True])
def test_cuda_spans_match_chunks(compile):
    """On a GPU the default update covers up to `GPU_SPAN` elements per call; the weights and
    every state tensor are bit-identical to one chunk per call (eager), resp. within rounding of
    the fused arithmetic (compiled), and a parameter of a few chunks takes one call."""
    from hwtune.optim.optimizer import CHUNK, GPU_SPAN

    gen = torch.Generator().manual_seed(0)
    start = [
        torch.nn.Parameter((torch.randn(n, generator=gen) * 0.05).to(torch.bfloat16))
        for n in (3 * CHUNK + 1000 + 7, 2 * CHUNK, 5000, 7)
    ]
    runs = []
    for span in (CHUNK, None):
        ps = [torch.nn.Parameter(p.detach().clone().cuda()) for p in start]
        opt = AdamW(ps, lr=1e-2, compile=compile, span_elements=span)
        for i in range(4):
            for p, gr in zip(ps, _grads(start, i), strict=True):
                p.grad = gr.cuda()
            opt.step()
        assert opt.compile == compile
        runs.append((ps, opt))
    assert GPU_SPAN > 3 * CHUNK + 1007
    (pa, oa), (pb, ob) = runs
    for p0, a, b in zip(start, pa, pb, strict=True):
        if compile:  # the graphs of one and of many chunks may fuse (round) differently
            moved = (a.detach().float().cpu() - p0.detach().float()).norm()
            assert (b.detach().float() - a.detach().float()).norm().cpu() < 0.02 * moved
            continue
        assert torch.equal(a.detach().cpu(), b.detach().cpu())
        for key in oa.state[a]:
            assert torch.equal(oa.state[a][key].cpu(), ob.state[b][key].cpu()), key


def test_cuda_footprint_is_seven_bytes_per_parameter():
    """bf16 weights + bf16 gradients + two 8-bit states + the 8-bit master split + scales: the
    7 B/param of the design (Dettmers et al. 2022 states, split master weights), on the GPU."""
    ps = [torch.nn.Parameter(p.detach().cuda()) for p in _params(torch.bfloat16)]
    opt = AdamW(ps, lr=1e-3, compile=False)
    for p, gr in zip(ps, _grads(ps, 0), strict=True):
        p.grad = gr.cuda()
    opt.step()
    fp = measure_footprint(torch.nn.ParameterList(ps), opt)
    assert 7.0 <= fp.bytes_per_param < 7.3
    # the states live on the GPU; the step count is a host scalar, as in torch's optimizers
    states = [s for st in opt.state.values() for s in st.values() if torch.is_tensor(s)]
    assert all(s.is_cuda for s in states if s.dim() > 0)


def test_cuda_model_training_loss_falls():
    """A small MLP trained on the GPU with AdamW: the loss falls as with torch's AdamW."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 10)
    ).cuda()
    ref = copy.deepcopy(model)
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(512, 64, device="cuda", generator=g)
    y = torch.randint(0, 10, (512,), device="cuda", generator=g)
    losses = {}
    for tag, m, opt in (
        ("ours", model, AdamW(model.parameters(), lr=3e-3, compile=False)),
        ("torch", ref, torch.optim.AdamW(ref.parameters(), lr=3e-3)),
    ):
        out = []
        for _ in range(100):
            loss = torch.nn.functional.cross_entropy(m(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            out.append(loss.item())
        losses[tag] = out
    assert losses["ours"][-1] < 0.5 * losses["ours"][0]
    assert abs(losses["ours"][-1] - losses["torch"][-1]) < 0.1 * losses["torch"][0]
