"""MoE and quantized-checkpoint details of a prefill step (`hwtune.serve.iteration`): expert
rows at full hit, permutation bytes per EP rank, and checkpoints that quantize only their
experts (gpt-oss MXFP4)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hwtune.cost.compute import gemm_time
from hwtune.cost.quantized_gemm import serving_gemm_time
from hwtune.hardware.catalog import get_device
from hwtune.model.catalog import get_model
from hwtune.model.hf_config import load_hf_config
from hwtune.serve.config import ReplicaConfig
from hwtune.serve.iteration import IterationModel, expert_load, permute_bytes
from hwtune.serve.memory import weight_bytes_per_gpu


def test_deepseek_prefill_of_1024_tokens_has_32_rows_per_expert():
    """1,024 tokens x top-8 over 256 experts hit all of them (1 - (1 - 8/256)^1024 ~ 1 - 8e-15),
    8,192 slots: 32 rows each, 256 experts on one rank, 32 on each of 8 EP ranks."""
    assert expert_load(1024, 256, 8, 1) == (256, 32)
    assert expert_load(1024, 256, 8, 8) == (32, 32)
    assert expert_load(1, 256, 8, 1) == (8, 1)  # one token: its eight experts, one row each


@given(st.integers(1, 20000), st.sampled_from([(256, 8), (128, 4), (128, 8), (32, 4)]),
       st.sampled_from([1, 2, 4, 8]))  # fmt: skip
def test_expert_rows_cover_every_slot(t, ek, ep):
    """However many tokens: the experts on all ranks times their rows hold every slot, and once
    every expert is hit each holds exactly ceil(t k / E) rows (no row added by rounding)."""
    E, k = ek
    local, rows = expert_load(t, E, k, ep)
    assert local * ep * rows >= t * k * (1 - 1e-9)
    assert 1 <= local <= -(-E // ep) and rows >= 1
    if (1 - k / E) ** t < 1e-12:
        assert rows == -(-t * k // E) and local == -(-E // ep)


def test_permutation_under_tensor_parallel_experts_is_all_slots():
    """TP 8 with EP 1: every rank permutes all t k hidden vectors (read + write, there and back:
    4 x 2 bytes x 1024 x 8 x 7168 = 470 MB); EP 8 takes an eighth."""
    assert permute_bytes(1024, 8, 7168, 2, 1) == pytest.approx(4 * 2 * 1024 * 8 * 7168)
    assert permute_bytes(1024, 8, 7168, 2, 8) == pytest.approx(4 * 2 * 1024 * 7168)


def test_gpt_oss_checkpoint_quantizes_only_its_experts():
    assert get_model("gpt-oss-120b").quantized_weights == "experts"
    assert get_model("deepseek-v3").quantized_weights == "all"
    cfg = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
           "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100,
           "quantization_config": {"quant_method": "mxfp4",
                                   "modules_to_not_convert": ["model.layers.*.self_attn"]}}  # fmt: skip
    assert load_hf_config(cfg).quantized_weights == "experts"
    cfg["quantization_config"] = {"quant_method": "fp8"}
    assert load_hf_config(cfg).quantized_weights == "all"


def test_gpt_oss_attention_gemms_run_in_bf16_and_experts_in_mxfp4():
    """On an H200 with vLLM's Marlin for the MXFP4 experts: an attention projection is a bf16
    GEMM, an expert GEMM the weight-only Marlin one."""
    dev = get_device("h200-sxm-141gb")
    cfg = ReplicaConfig(get_model("gpt-oss-120b"), dev, tp=2, weight_dtype="fp4",
                        weight_only_kernel="marlin")  # fmt: skip
    m = IterationModel(cfg)
    assert m._gemm(1024, 2560, 2880) == gemm_time(1024, 2560, 2880, dev, "bf16")
    assert m._gemm(32, 2880, 2880, 16, expert=True) == serving_gemm_time(
        32, 2880, 2880, dev, "fp4", 16, "marlin"
    )
    # and the weights: everything but the routed experts at 2 bytes, not 0.5
    mixed = weight_bytes_per_gpu(cfg)
    assert mixed > weight_bytes_per_gpu(cfg.with_(model=get_model("gpt-oss-120b").model_copy(
        update={"quantized_weights": "all"})))  # fmt: skip
