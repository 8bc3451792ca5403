"""KV bytes per token and attention over the cache (hwtune.cost.kv_cache), checked against the
architecture papers' own formulas worked by hand."""

from __future__ import annotations

import pytest

from hwtune.cost.compute import KERNEL_OVERHEAD_S
from hwtune.cost.kv_cache import (
    DECODE_ATTENTION_KERNELS,
    attention_shape,
    decode_attention_time,
    kv_bytes_per_token,
    prefill_attention_time,
    state_bytes_per_sequence,
)
from hwtune.hardware.catalog import get_device
from hwtune.model.catalog import get_model


def test_llama_gqa_kv_bytes():
    # 32 layers x 2 (K, V) x 8 KV heads x 128 dims x 2 bytes = 128 KiB per token
    spec = get_model("llama3.1-8b")
    assert kv_bytes_per_token(spec, "bf16") == 32 * 2 * 8 * 128 * 2 == 131072
    assert kv_bytes_per_token(spec, "fp8") == 65536
    assert kv_bytes_per_token(spec, "bf16", tp=2) == 65536
    # tp=16 > 8 KV heads: one replicated head per rank
    assert kv_bytes_per_token(spec, "bf16", tp=16) == 32 * 2 * 1 * 128 * 2
    # 70B: 80 layers, 8 KV heads -> 320 KiB per token (the often-quoted figure)
    assert kv_bytes_per_token(get_model("llama3.1-70b"), "bf16") == 80 * 2 * 8 * 128 * 2


def test_mla_latent_is_not_split_by_tp():
    # DeepSeek-V2 Table 1: (d_c + d_h^R) l = (512 + 64) * 61 elements per token
    spec = get_model("deepseek-v3")
    assert kv_bytes_per_token(spec, "bf16") == 576 * 61 * 2
    assert kv_bytes_per_token(spec, "bf16", tp=8) == 576 * 61 * 2


def test_pipeline_stage_holds_its_layers():
    spec = get_model("llama3.1-8b")
    assert kv_bytes_per_token(spec, "bf16", pp=4) == pytest.approx(131072 / 4)
    assert kv_bytes_per_token(spec, "bf16", pp=3) == pytest.approx(131072 * 11 / 32)


def test_linear_attention_layers_hold_state_not_tokens():
    spec = get_model("qwen3.5-397b-a17b")
    full = sum(1 for i in range(spec.n_layers) if spec.layer_type(i) == "full")
    assert kv_bytes_per_token(spec, "bf16") == full * 2 * spec.kv_heads * spec.hd * 2
    la = spec.linear_attention
    n_lin = spec.n_layers - full
    state = n_lin * la.n_value_heads * la.key_head_dim * la.value_head_dim * 4
    assert state_bytes_per_sequence(spec) >= state
    assert state_bytes_per_sequence(get_model("llama3.1-8b")) == 0


def test_decode_attention_is_bandwidth_bound_for_gqa():
    dev = get_device("h100-sxm-80gb")
    spec = get_model("llama3.1-8b")
    sh = attention_shape(spec, "full", 1)
    ctx = 64 * 4096
    t = decode_attention_time(sh, 64, ctx, dev, "bf16")
    # one layer reads 2 * 8 * 128 * 2 bytes per cached token
    expect = ctx * 4096 / (dev.memory_bandwidth_si * dev.memory_bw_efficiency)
    assert t == pytest.approx(expect + DECODE_ATTENTION_KERNELS * KERNEL_OVERHEAD_S, rel=0.02)
    # fp8 KV halves the bytes
    assert decode_attention_time(sh, 64, ctx, dev, "fp8") < 0.55 * t


def test_prefill_attention_flops_follow_the_causal_count():
    dev = get_device("h100-sxm-80gb")
    sh = attention_shape(get_model("llama3.1-8b"), "full", 1)
    q = 8192
    pairs = q * q / 2  # a whole prompt: each token sees half the prompt on average
    t = prefill_attention_time(sh, pairs, q, q, dev, "bf16")
    flops = pairs * 2 * 32 * 256  # 2 * heads * (d_qk + d_v) per pair
    assert t == pytest.approx(flops / (dev.peak_flops("bf16") * dev.attention_fwd_efficiency),
                              rel=0.01)  # fmt: skip
