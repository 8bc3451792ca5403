"""Transformer Engine's cross-entropy (what every Megatron-Bridge performance script selects) and
the recomputation Megatron-Bridge's 25.09 DeepSeek-V3 H100 run set in its launcher."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as hs

from hwtune.cost.memory import LOSS_KERNELS, logits_bytes, state_bytes_per_param
from hwtune.errors import HwtuneInputError
from hwtune.hardware.cluster import make_cluster
from hwtune.model.catalog import get_model
from hwtune.train.estimator import _estimate
from hwtune.train.frameworks import framework_fields
from hwtune.train.launch import megatron_launch
from hwtune.train.published import load_published
from hwtune.train.strategy import Strategy

BLACKWELL = "benchmarks/data/training_blackwell.jsonl"


def _fits(run) -> bool:  # noqa: ANN001
    """Whether the estimate fits a published run (every one of them ran)."""
    return _estimate(run.spec, run.cluster, run.strategy).fits


@given(tokens=hs.integers(1, 65536), tp=hs.sampled_from([1, 2, 4, 8]))
def test_te_loss_keeps_the_16bit_logits_and_three_floats_a_row(tokens: int, tp: int) -> None:
    # TE's online softmax writes the gradient into the bf16 logits (2 B each) and keeps m, d and
    # the target's logit in fp32 for each token, gathered from every rank of the vocabulary split
    spec = get_model("llama3.1-8b")
    shard = -(-spec.vocab // tp)
    assert logits_bytes(spec, tokens, tp, "te") == 2 * tokens * shard + 3 * 4 * tokens * tp


def test_te_loss_is_the_lightest_unchunked_one() -> None:
    # no fp32 working copy of the logits, unlike Megatron's own kernel or F.cross_entropy
    assert LOSS_KERNELS["te"] < LOSS_KERNELS["fused"] < LOSS_KERNELS["pytorch"]


def test_megatron_bridge_preset_runs_te_loss() -> None:
    f = framework_fields("megatron-bridge")
    assert f["loss_kernel"] == "te"
    assert {k: v for k, v in f.items() if k != "loss_kernel"} == {
        k: v for k, v in framework_fields("megatron").items() if k != "loss_kernel"
    }


def test_megatron_launch_refuses_te_loss() -> None:
    # Megatron-LM's arguments.py asserts against --cross-entropy-fusion-impl te (since 2026-06)
    with pytest.raises(HwtuneInputError, match="loss_kernel"):
        megatron_launch(Strategy(dp=8, loss_kernel="te"), get_model("llama3.1-8b"), 8, 8)


def test_cli_takes_te_loss_and_the_preset(rejects) -> None:  # noqa: ANN001
    from typer.testing import CliRunner

    from hwtune.cli.main import app

    base = ["estimate", "--model", "llama3.1-8b", "--gpu", "h100-sxm-80gb", "--gpus", "8", "--json"]
    for extra in (["--loss", "te"], ["--framework", "megatron-bridge"]):
        r = CliRunner().invoke(app, base + extra)
        assert r.exit_code == 0, r.output
    rejects(base + ["--framework", "megatron-bridge", "--launch", "megatron"], "--framework")


def test_te_loss_lowers_the_last_stage_by_four_bytes_a_logit() -> None:
    spec = get_model("llama3.1-8b")
    cl = make_cluster("h100-sxm-80gb", 8)
    st = dict(dp=1, pp=8, micro_batch=1, global_batch=64, seq=8192)
    fused = _estimate(spec, cl, Strategy(**st, loss_kernel="fused"))  # type: ignore[arg-type]
    te = _estimate(spec, cl, Strategy(**st, loss_kernel="te"))  # type: ignore[arg-type]
    saved = fused.memory.transient - te.memory.transient
    assert saved == pytest.approx(4 * 8192 * spec.vocab - 12 * 8192, rel=1e-9)


# ---- the published runs that ran


def test_megatron_bridge_rows_run_te_loss() -> None:
    rows = [r for r in load_published(BLACKWELL) if not r.skip_reason]
    assert rows and all(r.strategy.loss_kernel == "te" for r in rows)


def test_published_qwen3_30b_run_fits(published_runs) -> None:  # noqa: ANN001
    # Megatron-Bridge 25.11 on 16 H100s; without TE's loss the last stage held 83.5 GiB
    run = published_runs["mbridge-25.11-h100-qwen3-30b-a3b-fp8-cs-16gpu"]
    assert run.strategy.loss_kernel == "te"
    assert _fits(run)


def test_deepseek_2509_h100_recomputes_what_its_launcher_set(published_runs) -> None:  # noqa: ANN001
    # run_script.py of v0.1.0rc3/rc4 sets recompute_modules ["mla_up_proj", "mlp"] on H100
    run = published_runs["mbridge-25.09-h100-deepseek-v3-na-1024gpu"]
    assert run.strategy.recompute == "selective"
    assert run.strategy.recompute_modules == ("mla_up_proj", "mlp")
    assert _fits(run)


# ---- flash-attn's cross-entropy (llm-foundry) and NeMo 24.07's bf16 optimizer state


def test_flash_loss_saves_logits_and_writes_a_new_gradient() -> None:
    # flash-attn's CrossEntropyLoss without inplace_backward: the saved 16-bit logits and a new
    # 16-bit gradient (2 + 2 B a logit), and an fp32 log-sum-exp per token
    spec = get_model("llama3.1-8b")
    assert logits_bytes(spec, 1000, 1, "flash") == 4 * 1000 * spec.vocab + 4 * 1000


def test_llm_foundry_preset_runs_flash_loss() -> None:
    assert framework_fields("llm-foundry")["loss_kernel"] == "flash"


def test_published_mpt13b_on_40gb_fits(published_runs) -> None:  # noqa: ANN001
    # llm-foundry's 13B benchmark ran on 128 A100-40GB; with F.cross_entropy's 12 B a logit
    # the estimate wanted 41.4 GiB
    run = published_runs["mpt-a100-40gb-13b-s2048-128gpu"]
    assert run.strategy.loss_kernel == "flash"
    assert _fits(run)


def test_nemotron_340b_keeps_bf16_adam_state_as_its_recipe_set(published_runs) -> None:  # noqa: ANN001
    # NeMo-Framework-Launcher 24.07 nemotron_340b.yaml: distributed_fused_adam, dtype bf16,
    # grad_sync_dtype bf16; NeMo stores no parameter copy when that dtype is the model's:
    # 2 (weights) + 2 (gradients) + 2 x 2 (moments, sharded over the 2 DP ranks) per parameter
    run = published_runs["nemo2407-h100-fp8-nemotron-340b-128gpu"]
    assert run.strategy.optimizer == "adam-bf16"
    assert run.strategy.grad_reduce_dtype == "bf16"
    est = _estimate(run.spec, run.cluster, run.strategy)
    m = est.memory
    assert m.optimizer == pytest.approx(m.weights * 4 / 2 / 2, rel=1e-9)
    assert m.gradients == pytest.approx(m.weights, rel=1e-9)
    assert est.fits, m.total / 2**30


def test_other_nemo_2407_rows_keep_master_weight_remainders(published_runs) -> None:  # noqa: ANN001
    # NeMo's setup_optimization: fp32 optimizer over a bf16 model -> store_param_remainders; the
    # moments stay fp32: 4 + 4 + 2 bytes of optimizer state per parameter
    others = {r.strategy.optimizer for i, r in published_runs.items()
              if i.startswith("nemo2407") and "nemotron-340b" not in i}  # fmt: skip
    assert others == {"adam-remainders"}
    full = state_bytes_per_param("bf16", "adam", fp32_grads=True)
    rem = state_bytes_per_param("bf16", "adam-remainders", fp32_grads=True)
    assert (rem.weights, rem.grads, full.optimizer - rem.optimizer) == (2.0, 4.0, 2.0)
