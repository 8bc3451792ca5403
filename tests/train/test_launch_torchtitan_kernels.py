"""`--launch torchtitan` is estimated with the kernels torchtitan runs at the launch's commit.

References: pytorch/torchtitan at b5bcd76c66d0acb1a08b176d9639425bc55e0b2a (2026-08-21):
- ``torchtitan/models/llama3/__init__.py:369-377``: ``model_registry(flavor, attn_backend="flex")``;
  ``config_registry.py:195, 268``: ``llama3_8b`` and ``llama3_70b`` call ``model_registry("8B")``
  / ``("70B")``, keeping flex;
- ``torchtitan/models/common/config_utils.py:97-101``: ``get_attention_config("sdpa")`` raises
  ("sdpa is no longer supported for language models");
- ``tests/unit_tests/test_no_new_cli_options.py:18-242``: no ``model.`` option, so no launch
  reaches the attention backend;
- ``config_registry.py:197-201, 270-274``: ``loss=ChunkedLossWrapper.Config(loss_fn=
  CrossEntropyLoss.Config(...))``; ``components/loss.py:544``: ``num_chunks: int = 8``;
  ``loss.py:604-607``: the local token count must divide by ``num_chunks``; ``loss.py:57-62``:
  ``F.cross_entropy(pred.float(), ...)`` per slice, ``loss.py:682-700``: the slice's bf16
  ``logits`` stay alive through its backward; ``loss.py:432, 639-643``: an fp32 buffer shaped
  like the hidden states gathers their gradient.
FlexAttention's speed: "90% of FlashAttention2's performance in the forward pass and 85% in the
backward pass" (causal, A100), PyTorch blog "FlexAttention: The Flexibility of PyTorch with the
Performance of FlashAttention", 2024-08-07, section "Performance"."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from hwtune.cli.main import app
from hwtune.cost.compute import attention_time
from hwtune.cost.memory import logits_bytes
from hwtune.errors import HwtuneInputError
from hwtune.hardware.catalog import get_device
from hwtune.model.catalog import get_model
from hwtune.model.lowering import Shard, lower_head, lower_layer
from hwtune.train.frameworks import FRAMEWORKS
from hwtune.train.launch_torchtitan import torchtitan_launch, torchtitan_refusal
from hwtune.train.strategy import Strategy

NOW = {"attention_kernel": "flex", "fused_elementwise": False, "fused_norm": True,
       "loss_kernel": "chunked", "grad_reduce_dtype": "fp32"}  # fmt: skip
"""torchtitan at b5bcd76c: flex attention, the 8-slice chunked loss, fp32 gradient reduction."""
DEC_2024 = {**NOW, "attention_kernel": "fa2", "loss_kernel": "pytorch"}
"""torchtitan of the Dec 2024 benchmark runs: SDPA's flash backend, one F.cross_entropy."""


def _estimate(*extra: str) -> dict:
    res = CliRunner().invoke(
        app,
        ["estimate", "-m", "llama3.1-8b", "--gpus", "8", "--dp", "8", "--zero", "3", "--seq",
         "8192", "--global-batch", "8", "--launch", "torchtitan", *extra, "--json"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


@pytest.mark.parametrize("compiled", [False, True])
def test_the_launched_run_is_the_estimated_one(compiled: bool) -> None:
    doc = _estimate(*(["--framework", "torchtitan-flex-compile"] if compiled else []))
    st = doc["strategy"]
    assert st["attention_kernel"] == "flex"  # __init__.py:371, config_utils.py:83-84
    assert st["loss_kernel"] == "chunked"  # config_registry.py:197-201
    assert st["fused_elementwise"] == compiled
    assert "--config llama3_8b" in doc["launch"]["command"]
    assert ("--compile.enable " in doc["launch"]["command"]) == compiled


@pytest.mark.parametrize("framework", ["torchtitan", "torchtitan-compile"])
def test_the_sdpa_kernels_of_2024_are_not_launched(rejects, framework: str) -> None:  # noqa: ANN001
    # config_utils.py:97-101: an SDPA Llama no longer builds, and no option selects another
    rejects(
        ["estimate", "--framework", framework, "--launch", "torchtitan"],
        "--framework", framework, "torchtitan-flex",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"attention_kernel": "fa2"}, "attention_kernel"),  # config_utils.py:97-101
        ({"loss_kernel": "pytorch"}, "loss_kernel"),  # config_registry.py:197-201
    ],
)
def test_other_kernels_are_refused(fields: dict, field: str) -> None:
    st = Strategy(**{**NOW, "dp": 8, **fields})
    e = torchtitan_refusal(st)
    assert e is not None and e.field == field
    assert "flex" in e.expected or "chunk" in e.expected.lower()
    assert torchtitan_refusal(Strategy(**NOW, dp=8)) is None


def test_tokens_the_chunked_loss_cannot_slice_are_refused() -> None:
    # loss.py:604-607: each rank's tokens (mb x seq / cp) split into num_chunks = 8 (loss.py:544)
    bad = Strategy(**NOW, dp=8, seq=4100)  # 4100 = 8 x 512 + 4
    e = torchtitan_refusal(bad, get_model("llama3.1-8b"))
    assert e is not None and e.field == "seq"
    with pytest.raises(HwtuneInputError):
        torchtitan_launch(bad, get_model("llama3.1-8b"), 8, 8)
    assert (
        torchtitan_refusal(Strategy(**NOW, dp=4, cp=2, seq=8192), get_model("llama3.1-8b")) is None
    )


def test_the_dec_2024_presets_stay_for_the_published_runs() -> None:
    # the Dec 2024 benchmark runs (llama3_h100_202412_torchtitan.md) ran SDPA and one loss
    for name in ("torchtitan", "torchtitan-compile"):
        assert FRAMEWORKS[name]["attention_kernel"] == "fa2"
        assert FRAMEWORKS[name]["loss_kernel"] == "pytorch"
    for name in ("torchtitan-flex", "torchtitan-flex-compile"):
        assert FRAMEWORKS[name]["attention_kernel"] == "flex"
        assert FRAMEWORKS[name]["loss_kernel"] == "chunked"
    assert FRAMEWORKS["torchtitan-flex-compile"]["fused_elementwise"] is True


@pytest.mark.parametrize(("backward", "share"), [(False, 0.90), (True, 0.85)])
def test_flex_runs_at_the_blogs_share_of_flashattention2(backward: bool, share: float) -> None:
    a100 = get_device("a100-sxm4-80gb")  # the blog's GPU; no measured profile: spec-sheet path
    assert a100.profile is None
    flops = 1e15  # compute-bound: the launch overhead is negligible
    fa2 = attention_time(flops, 1.0, a100, "bf16", backward, "fa2")
    flex = attention_time(flops, 1.0, a100, "bf16", backward, "flex")
    assert fa2 / flex == pytest.approx(share, rel=1e-4)


def test_flex_and_flashattention2_on_hopper_are_below_the_best_kernel() -> None:
    # FA3 paper: FA2 at 0.57x FA3 on H100; PyTorch FlexAttention + FlashAttention-4 blog
    # (2026-03-05): FlexAttention's Triton kernel at roughly 60% of FA3 on Hopper
    h100 = get_device("h100-sxm-80gb")
    for backward in (False, True):
        fa2 = attention_time(1e15, 1.0, h100, "bf16", backward, "fa2")
        best = attention_time(1e15, 1.0, h100, "bf16", backward, "best")
        flex = attention_time(1e15, 1.0, h100, "bf16", backward, "flex")
        assert best < fa2
        assert best < flex


def test_chunked_loss_memory_is_one_slice_and_an_fp32_gradient() -> None:
    spec = get_model("llama3.1-8b")
    t, v, d = 8192, spec.vocab, spec.d_model
    # one slice of t/8 tokens: F.cross_entropy on fp32 (12 B per logit, as the unchunked loss)
    # with the slice's bf16 logits still alive (2 B); the fp32 hidden-state gradient: 4 B
    assert logits_bytes(spec, t, 1, "chunked") == pytest.approx(14 * (t // 8) * v + 4 * t * d)
    assert logits_bytes(spec, t, 1, "chunked") < logits_bytes(spec, t, 1, "pytorch") / 5
    # loss parallel: the vocabulary splits over TP (the hidden-state buffer does not)
    assert logits_bytes(spec, t, 8, "chunked") == pytest.approx(
        14 * (t // 8) * -(-v // 8) + 4 * t * d
    )


def test_chunked_head_does_the_same_flops_in_eight_gemms() -> None:
    spec = get_model("llama3.1-8b")
    whole = {op.name: op for op in lower_head(spec, Shard(tokens=8192, seq=8192))}
    sliced = {op.name: op for op in lower_head(spec, Shard(tokens=8192, seq=8192, loss_chunks=8))}
    assert sliced["lm_head"].flops == whole["lm_head"].flops == 2.0 * 8192 * spec.vocab * 4096
    assert sliced["lm_head"].batch == 8 and sliced["lm_head"].m == 1024
    assert sliced["cross_entropy"].bytes == whole["cross_entropy"].bytes


def test_the_estimate_prices_less_loss_memory_for_the_chunked_run() -> None:
    now = _estimate()["memory_per_gpu_bytes"]["transient"]
    spec = get_model("llama3.1-8b")
    # the unchunked loss of the Dec 2024 kernels alone holds 12 B x 8192 x vocab
    assert now < 12 * 8192 * spec.vocab


def test_eager_torchtitan_norm_is_pytorchs_fused_rmsnorm() -> None:
    # models/common/nn_modules.py:134-148: RMSNorm(nn.RMSNorm); PyTorch's rms_norm dispatches to
    # _fused_rms_norm (layer_norm.cpp rms_norm_symint, PR #153666): one kernel, read x, write y;
    # SwiGLU (feed_forward.py:54) and the complex rotary (rope.py:260-264) stay eager
    assert FRAMEWORKS["torchtitan-flex"]["fused_norm"] is True
    assert FRAMEWORKS["torchtitan-flex"]["fused_elementwise"] is False
    spec = get_model("llama3.1-8b")
    sh = Shard(tokens=8192, seq=8192, fused=False, fused_norm=True)
    ops = {op.name: op for op in lower_layer(spec, "full", False, sh)}
    assert ops["norms"].kernels == 2  # attention_norm and ffn_norm, one kernel each
    assert ops["norms"].bytes == pytest.approx(2 * 2.0 * 2 * 8192 * spec.d_model)
    eager = {op.name: op for op in lower_layer(spec, "full", False, Shard(8192, 8192, fused=False))}
    assert ops["rotary"].bytes == eager["rotary"].bytes
    assert ops["mlp_act"].bytes == eager["mlp_act"].bytes
    assert ops["norms"].bytes < eager["norms"].bytes
