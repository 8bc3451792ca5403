"""Read-through of session 26's change: facts the launch, kernel and lowering code must keep.

Each test states an independent fact (what the CLI accepts, what a slice count means, that every
token passes through the LM head), not a value read from the code's own output."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hwtune.cli.main import app
from hwtune.cli.software import LAUNCH_KERNELS, check_launch_framework
from hwtune.cost.memory import LOSS_CHUNKS
from hwtune.model.catalog import get_model
from hwtune.model.lowering import Shard, lower_head
from hwtune.train.launch_torchtitan import torchtitan_launch, torchtitan_refusal
from hwtune.train.strategy import Strategy

TITAN = {"attention_kernel": "flex", "fused_elementwise": False, "fused_norm": True,
         "loss_kernel": "chunked", "grad_reduce_dtype": "fp32"}  # fmt: skip


def test_async_tp_refusal_names_a_framework_the_torchtitan_launch_accepts() -> None:
    """Async TP needs torch.compile; the refusal tells the user which ``--framework`` gives it.
    That framework must be one ``--launch torchtitan`` accepts (``torchtitan-compile`` is the
    Dec 2024 SDPA kernel set, refused with ``--launch torchtitan``)."""
    st = Strategy(**TITAN, dp=4, tp=2, sequence_parallel=True, overlap_tp_comm=True)
    refusal = torchtitan_refusal(st)
    assert refusal is not None and refusal.field == "overlap_tp_comm"
    named = re.findall(r"--framework ([\w-]+)", refusal.expected)
    assert named, refusal.expected
    for framework in named:
        assert framework in LAUNCH_KERNELS["torchtitan"]
        assert check_launch_framework("torchtitan", framework) == framework
        # and it is the compiled one: the eager set is what was refused
        assert framework != check_launch_framework("torchtitan", None)


@pytest.fixture
def four_slices(monkeypatch: pytest.MonkeyPatch) -> int:
    """The chunked loss's slice count changed where it is defined (`LOSS_CHUNKS`)."""
    monkeypatch.setitem(LOSS_CHUNKS, "chunked", 4)
    return 4


@pytest.mark.parametrize("model", ["llama3.1-8b", "mixtral-8x7b"])
def test_launch_note_slice_count_is_the_estimates(model: str, four_slices: int) -> None:
    """The note printed with the command states the slices the estimate priced: one number,
    `LOSS_CHUNKS`, not a copy of it in the text (a named and an unnamed configuration)."""
    st = Strategy(**TITAN, dp=8)
    note = torchtitan_launch(st, get_model(model), 8, 8).note
    counts = {int(n) for n in re.findall(r"(\d+)-slice", note)}
    assert counts == {four_slices}, note


def test_loss_refusal_slice_count_is_the_estimates(four_slices: int) -> None:
    refusal = torchtitan_refusal(Strategy(**{**TITAN, "loss_kernel": "pytorch"}, dp=8))
    assert refusal is not None and refusal.field == "loss_kernel"
    counts = {int(n) for n in re.findall(r"(\d+) slices", refusal.expected)}
    assert counts == {four_slices}, refusal.expected


@pytest.mark.parametrize("tokens", [4096, 4097, 8191, 1000])
def test_chunked_lm_head_covers_every_token(tokens: int) -> None:
    """Every token's hidden state goes through the LM head, however the tokens split into
    slices (torch.chunk gives ceil-sized slices, the last shorter): the slices' rows together
    are at least the tokens, and fewer than one extra row per slice."""
    spec = get_model("llama3.1-8b")
    c = 8
    (head,) = [op for op in lower_head(spec, Shard(tokens=tokens, seq=tokens, loss_chunks=c))
               if op.kind == "gemm"]  # fmt: skip
    assert head.batch == c
    assert tokens <= head.m * head.batch < tokens + c


def test_chunked_slice_rows_agree_with_memory() -> None:
    """The slice the memory model holds (`logits_bytes`) and the GEMM the time model runs have
    the same rows: one slice size, not two roundings."""
    from hwtune.cost.memory import LOSS_KERNELS, logits_bytes

    spec = get_model("llama3.1-8b")
    tokens, c = 4097, LOSS_CHUNKS["chunked"]
    (head,) = [op for op in lower_head(spec, Shard(tokens=tokens, seq=tokens, loss_chunks=c))
               if op.kind == "gemm"]  # fmt: skip
    grad = 4.0 * tokens * spec.d_model
    slice_rows = (logits_bytes(spec, tokens, 1, "chunked") - grad) / (
        LOSS_KERNELS["chunked"] * spec.vocab
    )
    assert head.m == slice_rows


H200_PROFILE = str(
    Path(__file__).resolve().parents[1] / "src/hwtune/hardware/profiles/nvidia-h200-sxm.yaml"
)


def _estimate_json(gpu: str, kernel: str) -> dict:
    res = CliRunner().invoke(app, ["estimate", "-m", "llama3.1-8b", "--gpu", gpu, "--gpus", "8",
                                   "--dp", "8", "--attention-kernel", kernel, "--json"])  # fmt: skip
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


@pytest.mark.parametrize("kernel", ["flex", "fa2"])
def test_tier2_attention_note_does_not_claim_an_unapplied_share(kernel: str) -> None:
    """A measured profile times the attention kernel the device's SDPA ran (`attention_time`):
    in tier 2 the step does not change with the kernel named, so the note must not state a
    share of the best kernel as if it priced the step; in tier 1 it does change, and says so."""
    best, named = _estimate_json(H200_PROFILE, "best"), _estimate_json(H200_PROFILE, kernel)
    assert named["step_time_s"] == best["step_time_s"]  # the fact: nothing applied
    (note,) = [n for n in named["notes"] if n.startswith("attention:")]
    assert "not applied" in note
    spec_best, spec_named = (_estimate_json("h200-sxm-141gb", k) for k in ("best", kernel))
    assert spec_named["step_time_s"] > spec_best["step_time_s"]  # slower kernel, tier 1
    (note,) = [n for n in spec_named["notes"] if n.startswith("attention:")]
    assert "not applied" not in note


def test_an_eager_rmsnorm_torchtitan_does_not_run_is_refused() -> None:
    """torchtitan's RMSNorm is ``nn.RMSNorm`` (models/common/nn_modules.py:134-148), one fused
    kernel with or without torch.compile; an eager strategy whose RMSNorm is seven kernels
    (``fused_norm`` off) is not the run the launch starts, so it is refused like the other
    kernels torchtitan does not run. Compiled, the norm is fused either way."""
    eager = Strategy(**{**TITAN, "fused_norm": False}, dp=8)
    refusal = torchtitan_refusal(eager)
    assert refusal is not None and refusal.field == "fused_norm"
    compiled = Strategy(**{**TITAN, "fused_norm": False, "fused_elementwise": True}, dp=8)
    assert torchtitan_refusal(compiled) is None
    assert torchtitan_refusal(Strategy(**TITAN, dp=8)) is None
