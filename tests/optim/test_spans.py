"""Updates in spans of many chunks (one call per span, as on GPUs) give bit-identical weights,
master corrections, codes, fp16 scales and per-chunk gscales to one chunk per call (the CPU
default): the state format, and so checkpoints, do not depend on the span."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hwtune.errors import HwtuneInputError
from hwtune.optim import SGD, AdamW, Lion
from hwtune.optim import companding as cq
from hwtune.optim import optimizer as opt_mod
from hwtune.optim.optimizer import CHUNK, GPU_SPAN

OURS = {"adamw": AdamW, "sgd": SGD, "lion": Lion}
KW = {
    "adamw": {"lr": 1e-2, "weight_decay": 0.1},
    "sgd": {"lr": 0.1, "momentum": 0.9, "weight_decay": 1e-3},
    "lion": {"lr": 1e-3, "weight_decay": 0.1},
}
# a few chunks plus a ragged tail (not a multiple of the group either), exactly two chunks, one
# chunk plus one element, a ragged single chunk, and smaller than a group
SIZES = (3 * CHUNK + 1000 + 7, 2 * CHUNK, CHUNK + 1, 5000, 7)


def one_line(err: pytest.ExceptionInfo) -> str:
    assert "\n" not in str(err.value)
    return str(err.value)


def _grads(params: list[torch.nn.Parameter], step: int) -> list[torch.Tensor]:
    """Gradients whose magnitude varies by orders across chunks, so each chunk gets its own
    gscale (a span with one gscale would code them differently)."""
    g = torch.Generator().manual_seed(100 + step)
    out = []
    for p in params:
        x = torch.randn(p.shape, generator=g)
        per_chunk = torch.exp2(torch.arange(p.numel()) // CHUNK * -7.0 + 3 * step)
        out.append((x * per_chunk * 1e-2).to(p.dtype))
    return out


def _run(
    name: str, dtype: torch.dtype, sizes: tuple[int, ...], steps: int, lr_decay: float = 1.0, **kw
) -> tuple:
    gen = torch.Generator().manual_seed(0)
    ps = [torch.nn.Parameter((torch.randn(n, generator=gen) * 0.05).to(dtype)) for n in sizes]
    opt = OURS[name](ps, **({"compile": False, "numerics_check_every": 0} | KW[name] | kw))
    for i in range(steps):
        for p, g in zip(ps, _grads(ps, i), strict=True):
            p.grad = g
        opt.step()
        for group in opt.param_groups:  # a learning-rate schedule
            group["lr"] *= lr_decay
    return ps, opt


def _assert_identical(a: tuple, b: tuple) -> None:
    (pa, oa), (pb, ob) = a, b
    for x, y in zip(pa, pb, strict=True):
        bits = torch.int16 if x.dtype == torch.bfloat16 else torch.int32
        assert torch.equal(x.detach().view(bits), y.detach().view(bits))
        sa, sb = oa.state[x], ob.state[y]
        assert sa.keys() == sb.keys()
        for key in sa:
            u, v = sa[key], sb[key]
            assert u.dtype == v.dtype and u.shape == v.shape, key
            if u.is_floating_point():  # fp16 scales, fp32 gscales: bit patterns (nan-safe)
                u, v = (
                    u.view(torch.int16 if u.element_size() == 2 else torch.int32),
                    v.view(torch.int16 if v.element_size() == 2 else torch.int32),
                )
            assert torch.equal(u, v), key


@pytest.mark.parametrize("name", ["adamw", "sgd", "lion"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_spans_are_bit_identical_to_chunks(name, dtype):
    one_chunk = _run(name, dtype, SIZES, 4, span_elements=CHUNK)
    for span in (2 * CHUNK, GPU_SPAN):
        _assert_identical(one_chunk, _run(name, dtype, SIZES, 4, span_elements=span))
    # the test is not vacuous: the chunks of the ragged parameter got different gscales
    gscale = next(k for k in one_chunk[1].state[one_chunk[0][0]] if k.endswith("_gscale"))
    assert one_chunk[1].state[one_chunk[0][0]][gscale].unique().numel() == 4


def test_spans_with_master_bits_and_group_sizes():
    """The 32-bit master (int16 correction), no correction, and larger groups."""
    for kw in ({"master_weight_bits": 32}, {"master_weight_bits": 16}, {"group_size": 128}):
        one = _run("adamw", torch.bfloat16, SIZES, 3, span_elements=CHUNK, **kw)
        _assert_identical(
            one, _run("adamw", torch.bfloat16, SIZES, 3, span_elements=3 * CHUNK, **kw)
        )


@settings(max_examples=15, deadline=None)
@given(
    st.integers(1, 4 * CHUNK + 100),
    st.sampled_from([1, 8, 32, 64, 256]),
    st.integers(2, 5),
)
def test_spans_match_chunks_for_any_size(n, group_size, span_chunks):
    one = _run("adamw", torch.bfloat16, (n,), 2, span_elements=CHUNK, group_size=group_size)
    many = _run(
        "adamw", torch.bfloat16, (n,), 2, span_elements=span_chunks * CHUNK, group_size=group_size
    )
    _assert_identical(one, many)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 600),
    st.sampled_from([1, 4, 8, 32]),
    st.integers(1, 6),
    st.booleans(),
    st.booleans(),
    st.integers(0, 2**31 - 1),
)
def test_coding_a_span_is_coding_each_chunk(n, group_size, chunk_groups, signed, companded, seed):
    """Coding with ``chunk_groups`` equals coding each chunk of ``chunk_groups`` groups alone:
    the same codes and fp16 scales, one gscale per chunk, and decoding matches too (small chunks
    here, so that many chunks and ragged tails are cheap)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=gen) * torch.exp2(torch.randn(n, generator=gen) * 8)
    if not signed:
        x = x * x
    quantize = cq.quantize_signed if signed else cq.quantize_second_moment
    dequantize = cq.dequantize_signed if signed else cq.dequantize_second_moment
    codes, scales, gscale = quantize(x, group_size, companded, chunk_groups)
    chunk = chunk_groups * group_size
    pieces = [quantize(x[i : i + chunk], group_size, companded) for i in range(0, n, chunk)]
    assert torch.equal(codes, torch.cat([c for c, _, _ in pieces]))
    assert torch.equal(
        scales.view(torch.int16), torch.cat([s for _, s, _ in pieces]).view(torch.int16)
    )
    assert torch.equal(gscale.reshape(-1), torch.stack([g for _, _, g in pieces]).reshape(-1))
    assert gscale.dim() == (0 if n <= chunk else 1)  # one chunk: a 0-d gscale, as before
    y = dequantize(codes, scales, gscale, n, group_size, companded, chunk_groups)
    each = [
        dequantize(c, s, g, min(chunk, n - i), group_size, companded)
        for i, (c, s, g) in zip(range(0, n, chunk), pieces, strict=True)
    ]
    assert torch.equal(y, torch.cat(each))


@pytest.fixture
def calls(monkeypatch) -> list[int]:
    """The element counts of the eager `update_span` calls made while the test runs."""
    seen: list[int] = []
    update_span = opt_mod.update_span

    def counted(*args):
        seen.append(args[1].numel())
        update_span(*args)

    monkeypatch.setattr(opt_mod, "update_span", counted)
    return seen


def test_default_span_is_one_chunk_on_cpu(calls):
    """CPU parameters are updated one chunk per call (cache-sized temporaries); an explicit
    ``span_elements`` covers a parameter of three chunks in two calls."""
    p = torch.nn.Parameter(torch.zeros(3 * CHUNK, dtype=torch.bfloat16))
    for span, expected in ((None, [CHUNK] * 3), (2 * CHUNK, [2 * CHUNK, CHUNK])):
        calls.clear()
        p.grad = torch.ones_like(p)
        AdamW([p], compile=False, span_elements=span).step()
        assert calls == expected


@settings(max_examples=12, deadline=None)
@given(
    st.lists(st.integers(1, 3 * CHUNK), min_size=1, max_size=9),
    st.sampled_from(["adamw", "sgd", "lion"]),
    st.sampled_from([torch.bfloat16, torch.float32]),
    st.sampled_from([8, 32, 128]),
    st.sampled_from([4 * CHUNK, 8 * CHUNK, GPU_SPAN]),
)
def test_buckets_are_bit_identical_to_updating_alone(sizes, name, dtype, group_size, span):
    """Small parameters updated together in buckets (each padded to whole chunks in one flat
    buffer) end with the same bits in weights, corrections, codes, scales and gscales as each
    updated alone, one chunk per call: every size, several buckets, ragged groups."""
    alone = _run(name, dtype, tuple(sizes), 3, span_elements=CHUNK, group_size=group_size)
    together = _run(name, dtype, tuple(sizes), 3, span_elements=span, group_size=group_size)
    _assert_identical(alone, together)


def test_buckets_take_few_calls(calls):
    """With GPU spans, 40 small parameters (GPT-2's biases and norms) take one call, a large one
    (above a quarter span) its own; with CPU spans each takes one."""
    sizes = [768, 3 * 768, 4 * 768] * 13 + [5, 17 * CHUNK - 3]
    ps = [torch.nn.Parameter(torch.zeros(n, dtype=torch.bfloat16)) for n in sizes]
    for p in ps:
        p.grad = torch.ones_like(p)
    AdamW(ps, compile=False, span_elements=64 * CHUNK).step()
    assert sorted(calls) == [17 * CHUNK - 3, 40 * CHUNK]
    calls.clear()
    AdamW(ps, compile=False).step()
    assert len(calls) == 40 + 17


def test_older_torch_gets_the_raised_recompile_limit(monkeypatch, graphs):
    """Where ``torch.compile`` takes no ``recompile_limit`` (torch 2.11 on the H200 hit dynamo's
    global 8 and ran the GPU step eagerly), dynamo's global limit is raised around our calls
    only: more graphs than the global limit compile, and the global setting is left as it was.
    With floats specialised (torch 2.11 guarded on their values), a learning rate and bias
    corrections that change every step compile nothing new after the first steps: they reach
    the graph as tensors."""
    monkeypatch.setattr(opt_mod, "_compile_takes_recompile_limit", lambda: False)
    with torch._dynamo.config.patch(
        fail_on_recompile_limit_hit=True, recompile_limit=2, specialize_float=True
    ):
        for span in (CHUNK, GPU_SPAN, 4 * CHUNK):
            run = _run("adamw", torch.bfloat16, SIZES, 3, compile=True, span_elements=span)
            assert run[1].compile  # no fallback to eager
        assert len(graphs) > 2
        for name in ("adamw", "sgd", "lion"):
            _run(name, torch.bfloat16, SIZES, 2, compile=True, span_elements=GPU_SPAN)
        before = len(graphs)
        for name in ("adamw", "sgd", "lion"):
            longer = _run(
                name,
                torch.bfloat16,
                SIZES,
                8,
                compile=True,
                span_elements=GPU_SPAN,
                lr_decay=0.9,
            )
            assert longer[1].compile
        assert len(graphs) == before
        assert torch._dynamo.config.recompile_limit == 2
        assert torch._dynamo.config.specialize_float


def _gpt2_like(layers: int = 2, d: int = 128) -> tuple[int, ...]:
    """Sizes of GPT-2's parameters (benchmarks/optim_shapes.py) at a small width."""
    sizes = [50304 * d, 1024 * d]
    for _ in range(layers):
        sizes += [d, d, 3 * d * d, 3 * d, d * d, d, d, d, 4 * d * d, 4 * d, 4 * d * d, d]
    return (*sizes, d, d)


def test_compiled_spans_compile_a_handful_of_times(graphs):
    """torch.compile over GPT-2-like shapes with CPU and GPU spans: few graphs, below dynamo's
    default limit of 8 per function (past which it silently runs eagerly); ragged sizes, one
    group and multi-chunk tails at an offset add a few more (this function's limit is raised
    where torch allows), then other sizes and span lengths add none; and the same weights as
    eager. `compiled_update_span`'s own settings, with a pass-through backend that counts graphs
    (no C++ compile)."""
    # hitting the limit raises (the optimizer then turns compile off) instead of running eagerly;
    # torch's own patch: monkeypatch.setattr on a torch config module leaves the key hidden
    # afterwards ("does not exist" to every later config.patch of it)
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
        _compile_a_handful_of_times(graphs)


def _compile_a_handful_of_times(graphs: list) -> None:
    for span in (CHUNK, GPU_SPAN, 4 * CHUNK):
        gpt = _run("adamw", torch.bfloat16, _gpt2_like(), 3, compile=True, span_elements=span)
        assert gpt[1].compile  # no fallback to eager
    assert 2 <= len(graphs) <= 9  # measured: 8 (buckets of small parameters add two)
    sizes = (5 * CHUNK + 1000, 7, 3 * CHUNK, 100, CHUNK, 4 * CHUNK + 32, 20_000, 2 * CHUNK + 5)
    for span in (CHUNK, 2 * CHUNK, 4 * CHUNK):
        fused = _run("adamw", torch.bfloat16, sizes, 3, compile=True, span_elements=span)
        assert fused[1].compile
    assert len(graphs) <= 14  # measured: 12, above the default limit, within ours
    before = len(graphs)
    sizes2 = (9 * CHUNK + 3, 3000, 6 * CHUNK, 3 * CHUNK + 96, 31)
    for span in (CHUNK, 3 * CHUNK, GPU_SPAN):
        more = _run("adamw", torch.bfloat16, sizes2, 3, compile=True, span_elements=span)
        assert more[1].compile
    assert len(graphs) == before  # other sizes and span lengths: no recompilation
    eager = _run("adamw", torch.bfloat16, sizes, 3, span_elements=4 * CHUNK)
    _assert_identical(eager, fused)  # a pass-through backend runs the eager ops


@pytest.mark.parametrize("value", [0, -CHUNK, CHUNK + 1, 1000, 2.0 * CHUNK, True, "big"])
def test_bad_span_elements(value):
    with pytest.raises(HwtuneInputError) as err:
        AdamW([torch.nn.Parameter(torch.zeros(2))], span_elements=value)
    msg = one_line(err)
    assert msg.startswith("span_elements: got ") and str(CHUNK) in msg


def test_default_compiles_on_cpu_only(monkeypatch):
    """``compile=None`` (the default) fuses the update on CPU and runs it eagerly elsewhere (the
    compiled GPU step measured slower than eager on an H200, BENCHMARKS.md); True fuses on any
    device. ``meta`` tensors stand in for a GPU: they take the GPU span and buckets."""
    fused = []
    monkeypatch.setattr(opt_mod, "compiled_update_span", lambda: lambda *a: fused.append(a[1]))
    for device, compile, expected in (("cpu", None, 1), ("meta", None, 0), ("meta", True, 1)):
        fused.clear()
        p = torch.nn.Parameter(torch.zeros(100, dtype=torch.bfloat16, device=device))
        p.grad = torch.ones_like(p)
        AdamW([p], compile=compile, numerics_check_every=0).step()
        assert len(fused) == expected, (device, compile)


@pytest.mark.parametrize("value", ["yes", 1, 0.0])
def test_bad_compile(value):
    with pytest.raises(HwtuneInputError) as err:
        AdamW([torch.nn.Parameter(torch.zeros(2))], compile=value)
    assert one_line(err).startswith("compile: got ")
