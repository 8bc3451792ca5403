"""Parameter counts against published figures, and their invariants."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwtune.model.catalog import catalog_entry, get_model, model_names
from hwtune.model.hf_config import count_resolution, parse_count
from hwtune.model.params import (
    active_layer_params,
    active_params,
    embedding_params,
    final_norm_params,
    input_embedding_params,
    layer_params,
    lm_head_params,
    non_embedding_params,
    routed_expert_params,
    total_params,
)
from hwtune.model.spec import MLA, LinearAttention, ModelSpec, MoE


def _within(ours: float, text: str, tolerance: float | None = None) -> bool:
    """A published figure is matched within max(1%, half a unit of its last printed digit)."""
    published = parse_count(text)
    allowed = max((tolerance or 0.01) * published, count_resolution(text))
    return abs(ours - published) <= allowed


def _with(key: str) -> list[str]:
    return [n for n in model_names() if key in catalog_entry(n)]


# --- published counts (sources in catalog.yaml) ------------------------------------------------
@pytest.mark.parametrize("name", _with("params_published"))
def test_total_matches_published(name):
    """Total parameters vs the published total. For multimodal checkpoints the published total
    includes the vision tower, which the catalog derives from the checkpoint's vision_config."""
    e = catalog_entry(name)
    ours = total_params(get_model(name)) + parse_count(e.get("vision_params", 0))
    assert _within(ours, e["params_published"], e.get("tolerance")), (name, ours / 1e9)


@pytest.mark.parametrize("name", _with("active_published"))
def test_active_matches_published(name):
    """Active parameters per token, counted with the publisher's convention (catalog.yaml)."""
    e = catalog_entry(name)
    s = get_model(name)
    ours = active_params(s)
    convention = e.get("active_convention", "all")
    if convention == "no_input_embedding":
        ours -= input_embedding_params(s)
    elif convention == "non_embedding":
        ours -= embedding_params(s)
    assert _within(ours, e["active_published"], e.get("tolerance")), (name, ours / 1e9)


@pytest.mark.parametrize("name", _with("non_embedding_published"))
def test_non_embedding_matches_published(name):
    e = catalog_entry(name)
    assert _within(non_embedding_params(get_model(name)), e["non_embedding_published"])


@pytest.mark.parametrize(
    ("name", "total", "active"),
    [
        ("llama3.1-8b", "8.03B", None),  # model card
        ("llama3.1-70b", "70.6B", None),
        ("llama3.1-405b", "405.9B", None),
        ("mixtral-8x7b", "46.7B", "12.9B"),  # Mistral AI, Dec 2023
        ("mixtral-8x22b", "141B", "39B"),  # Mistral AI, Apr 2024
        ("deepseek-v3", "671B", None),  # DeepSeek-V3 report (MTP excluded)
        ("qwen3-30b-a3b", "30.5B", None),  # model card
        ("qwen3-235b-a22b", "235B", "22B"),  # model card
        ("gpt-oss-120b", "116.83B", None),  # gpt-oss model card, Table 1
        ("gpt-oss-20b", "20.91B", None),
        ("olmoe-1b-7b", "6.9B", "1.3B"),  # OLMoE paper
        ("gpt3-175b", "175.0B", None),  # Brown et al. 2020, Table 2.1
        ("gpt-1t", "1008.0B", None),  # Narayanan et al. SC'21, Table 1
    ],
)
def test_headline_counts(name, total, active):
    s = get_model(name)
    assert _within(total_params(s), total)
    if active is not None:
        assert _within(active_params(s), active)


def test_llama31_8b_exact():
    """The checkpoint's safetensors index holds 8,030,261,248 parameters."""
    assert total_params(get_model("llama3.1-8b")) == 8_030_261_248


def test_deepseek_v3_mtp_not_counted():
    """671B main model; the hub's 685B adds the 14B MTP module (DeepSeek-V3 README)."""
    s = get_model("deepseek-v3")
    assert s.mtp_layers == 1
    assert total_params(s) < 672e9


def test_gpt_oss_breakdown():
    """gpt-oss model card, Table 1 (120b): embedding + unembedding 1.16B; MLP 114.71B + attention 0.96B."""
    s = get_model("gpt-oss-120b")
    assert _within(embedding_params(s), "1.16B")
    assert _within(non_embedding_params(s), "115.67B")


def test_megatron_formula():
    """Narayanan et al. SC'21 §5.1: P = 12 l h^2 (1 + 13/(12h) + (V+s)/(12lh)); we also count the
    final LayerNorm (2h), which the formula omits."""
    for name in ("gpt-1.7b", "gpt-145b", "gpt-1t"):
        s = get_model(name)
        n, h, v = s.n_layers, s.d_model, s.vocab
        formula = 12 * n * h * h + 13 * n * h + (v + 2048) * h
        assert total_params(s) == formula + 2 * h


def test_qwen35_linear_attention_layer():
    """Gated DeltaNet layer of Qwen3.5-397B-A17B (modeling_qwen3_next.py shapes)."""
    s = get_model("qwen3.5-397b-a17b")
    assert s.layer_type(0) == "linear" and s.layer_type(3) == "full"
    d = 4096
    k_dim, v_dim, n_v = 16 * 128, 64 * 128, 64
    attn = (
        d * (2 * k_dim + 2 * v_dim)
        + d * 2 * n_v
        + (2 * k_dim + v_dim) * 4
        + 2 * n_v
        + 128
        + v_dim * d
    )
    m = s.moe
    assert m is not None
    moe = d * m.n_routed_experts + m.n_routed_experts * 3 * d * 1024 + 3 * d * 1024
    assert layer_params(s, 0) == attn + moe + 2 * d
    assert layer_params(s, 3) != layer_params(s, 0)


# --- invariants -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", model_names())
def test_invariants(name):
    s = get_model(name)
    total, active = total_params(s), active_params(s)
    layers = sum(layer_params(s, i) for i in range(s.n_layers))
    assert total == embedding_params(s) + layers + final_norm_params(s)
    assert embedding_params(s) == input_embedding_params(s) + lm_head_params(s)
    assert non_embedding_params(s) == total - embedding_params(s)
    assert 0 < active <= total
    assert active == embedding_params(s) + sum(
        active_layer_params(s, i) for i in range(s.n_layers)
    ) + final_norm_params(s)
    for i in range(s.n_layers):
        assert 0 <= routed_expert_params(s, i) < layer_params(s, i)
        assert (routed_expert_params(s, i) > 0) == s.is_moe_layer(i)
    if s.moe is None:
        assert active == total
    else:
        assert active < total


def test_layer_index_checked():
    s = get_model("llama3.1-8b")
    with pytest.raises(IndexError):
        layer_params(s, 32)
    with pytest.raises(IndexError):
        layer_params(s, -1)


def test_tied_and_learned_positions():
    base = dict(n_layers=2, d_model=64, n_heads=4, ffn_hidden=256, vocab=1000)
    untied = ModelSpec(**base)
    tied = ModelSpec(**base, tied_embeddings=True)
    learned = ModelSpec(**base, tied_embeddings=True, pos_emb="learned", max_position=128)
    assert embedding_params(untied) - embedding_params(tied) == 1000 * 64
    assert embedding_params(learned) - embedding_params(tied) == 128 * 64


def test_each_feature_adds_what_it_should():
    d, h, kv, hd, f = 256, 8, 2, 32, 512
    base = dict(n_layers=1, d_model=d, n_heads=h, n_kv_heads=kv, ffn_hidden=f, vocab=100)
    plain = layer_params(ModelSpec(**base), 0)
    assert plain == d * h * hd + 2 * d * kv * hd + h * hd * d + 3 * d * f + 2 * d
    assert layer_params(ModelSpec(**base, qkv_bias=True), 0) - plain == h * hd + 2 * kv * hd
    assert layer_params(ModelSpec(**base, out_bias=True), 0) - plain == d
    assert layer_params(ModelSpec(**base, mlp_bias=True), 0) - plain == 2 * f + d
    assert layer_params(ModelSpec(**base, qk_norm=True), 0) - plain == 2 * hd
    assert layer_params(ModelSpec(**base, norm="layernorm"), 0) - plain == 2 * d
    assert plain - layer_params(ModelSpec(**base, ffn_act="gelu"), 0) == d * f


def test_mla_layer():
    """DeepSeek-V3 attention (modeling_deepseek_v3.py): q_a, q_a_norm, q_b, kv_a_with_mqa, kv_a_norm, kv_b, o."""
    d, h = 7168, 128
    mla = MLA(
        q_lora_rank=1536,
        kv_lora_rank=512,
        qk_nope_head_dim=128,
        qk_rope_head_dim=64,
        v_head_dim=128,
    )
    s = ModelSpec(n_layers=1, d_model=d, n_heads=h, ffn_hidden=18432, vocab=10, mla=mla)
    attn = d * 1536 + 1536 + 1536 * h * 192 + d * (512 + 64) + 512 + 512 * h * 256 + h * 128 * d
    assert layer_params(s, 0) == attn + 3 * d * 18432 + 2 * d
    full_q = ModelSpec(
        n_layers=1,
        d_model=d,
        n_heads=h,
        ffn_hidden=18432,
        vocab=10,
        mla=mla.model_copy(update={"q_lora_rank": None}),
    )
    assert layer_params(full_q, 0) - layer_params(s, 0) == d * h * 192 - (
        d * 1536 + 1536 + 1536 * h * 192
    )


def test_moe_layer_and_active():
    d, e, k, fe = 128, 8, 2, 64
    moe = MoE(
        n_routed_experts=e,
        top_k=k,
        expert_ffn_hidden=fe,
        n_shared_experts=1,
        router_bias=True,
        expert_bias=True,
    )
    s = ModelSpec(n_layers=1, d_model=d, n_heads=4, ffn_hidden=512, vocab=10, moe=moe)
    expert = 3 * d * fe + 2 * fe + d
    shared = 3 * d * fe
    attn = 4 * d * d
    assert layer_params(s, 0) == attn + d * e + e + e * expert + shared + 2 * d
    assert active_layer_params(s, 0) == attn + d * e + e + k * expert + shared + 2 * d
    assert routed_expert_params(s, 0) == e * expert


def test_linear_attention_counts():
    la = LinearAttention(
        n_key_heads=2, n_value_heads=4, key_head_dim=16, value_head_dim=8, conv_kernel=4
    )
    s = ModelSpec(
        n_layers=2,
        d_model=64,
        n_heads=4,
        ffn_hidden=128,
        vocab=10,
        linear_attention=la,
        layer_types=("linear", "full"),
    )
    k_dim, v_dim = 32, 32
    attn = 64 * (2 * k_dim + 2 * v_dim) + 64 * 8 + (2 * k_dim + v_dim) * 4 + 8 + 8 + v_dim * 64
    assert layer_params(s, 0) == attn + 3 * 64 * 128 + 2 * 64


def test_counts_are_computed_once_per_spec():
    """The planner calls these millions of times: the per-layer table must be built once per spec
    (speed itself is measured in benchmarks/, not here)."""
    from hwtune.model.params import _table

    s = get_model("deepseek-v3")
    total_params(s)
    misses = _table.cache_info().misses
    for _ in range(100):
        total_params(s)
        active_params(s)
        layer_params(s, 30)
    assert _table.cache_info().misses == misses


# --- hypothesis: random dense shapes ------------------------------------------------------------
dense_shapes = st.fixed_dictionaries(
    {
        "n_layers": st.integers(1, 64),
        "n_heads": st.sampled_from([1, 2, 4, 8, 16, 32]),
        "head_dim": st.sampled_from([16, 32, 64, 128]),
        "kv_div": st.sampled_from([1, 2, 4]),
        "ffn_mult": st.integers(1, 8),
        "vocab": st.integers(1, 200_000),
        "ffn_act": st.sampled_from(["swiglu", "gelu", "relu", "geglu"]),
        "norm": st.sampled_from(["rmsnorm", "layernorm"]),
        "tied": st.booleans(),
        "bias": st.booleans(),
        "learned": st.booleans(),
    }
)


def _dense(p: dict, n_layers: int | None = None, width: int = 0) -> ModelSpec:
    d = p["n_heads"] * p["head_dim"] + width * p["n_heads"]
    return ModelSpec(
        n_layers=n_layers or p["n_layers"],
        d_model=d,
        n_heads=p["n_heads"],
        n_kv_heads=max(1, p["n_heads"] // p["kv_div"]),
        ffn_hidden=p["ffn_mult"] * 64,
        vocab=p["vocab"],
        ffn_act=p["ffn_act"],
        norm=p["norm"],
        tied_embeddings=p["tied"],
        qkv_bias=p["bias"],
        out_bias=p["bias"],
        mlp_bias=p["bias"],
        pos_emb="learned" if p["learned"] else "rope",
        max_position=2048 if p["learned"] else 0,
    )


@settings(max_examples=200, deadline=None)
@given(dense_shapes, st.integers(1, 16))
def test_total_monotone_in_layers(p, extra):
    small = _dense(p)
    big = _dense(p, n_layers=p["n_layers"] + extra)
    assert total_params(big) > total_params(small)
    assert total_params(big) - total_params(small) == extra * layer_params(small, 0)
    assert active_params(small) == total_params(small)


@settings(max_examples=200, deadline=None)
@given(dense_shapes, st.integers(1, 64))
def test_total_monotone_in_width(p, extra):
    assert total_params(_dense(p, width=extra)) > total_params(_dense(p))


@settings(max_examples=100, deadline=None)
@given(
    st.integers(1, 64),
    st.integers(1, 8),
    st.integers(0, 2),
    st.integers(0, 3),
    st.integers(1, 3),
)
def test_moe_active_le_total(n_experts, top_k, n_shared, first_dense, freq):
    top_k = min(top_k, n_experts)
    moe = MoE(
        n_routed_experts=n_experts,
        top_k=top_k,
        expert_ffn_hidden=64,
        n_shared_experts=n_shared,
        first_k_dense_layers=first_dense,
        moe_layer_freq=freq,
    )
    s = ModelSpec(n_layers=6, d_model=128, n_heads=4, ffn_hidden=256, vocab=100, moe=moe)
    assert active_params(s) <= total_params(s)
    full = ModelSpec(**{**s.model_dump(), "moe": {**moe.model_dump(), "top_k": n_experts}})
    assert active_params(full) == total_params(full)
