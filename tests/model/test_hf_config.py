"""Reading Hugging Face config.json files into ModelSpec."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from hwtune.errors import HwtuneInputError
from hwtune.model.hf_config import count_resolution, load_hf_config, parse_count
from hwtune.model.params import active_params, total_params

CONFIGS = Path(str(resources.files("hwtune.model").joinpath("configs")))
SHARED = Path(__file__).resolve().parents[3] / "shared" / "models"
VALIDATION = (
    Path(__file__).resolve().parents[3] / "shared" / "validation" / "training_published.jsonl"
)


def _config(name: str) -> Path:
    return CONFIGS / f"{name}.json"


def _shared_configs() -> list[Path]:
    return sorted(SHARED.glob("*.json")) if SHARED.is_dir() else []


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.json")), ids=lambda p: p.stem)
def test_every_packaged_config_loads(path):
    spec = load_hf_config(path)
    assert spec.name == path.stem
    assert total_params(spec) > 0


@pytest.mark.parametrize("path", _shared_configs(), ids=lambda p: p.stem)
def test_every_shared_config_loads(path):
    assert total_params(load_hf_config(path)) > 0


def test_shared_and_packaged_configs_agree():
    if not SHARED.is_dir():
        pytest.skip("../shared/models not present")
    for path in _shared_configs():
        assert (CONFIGS / path.name).read_bytes() == path.read_bytes(), path.name


def test_llama():
    s = load_hf_config(_config("meta-llama--Meta-Llama-3.1-8B"))
    assert (s.n_layers, s.d_model, s.n_heads, s.kv_heads, s.hd) == (32, 4096, 32, 8, 128)
    assert (s.ffn_hidden, s.ffn_act, s.vocab, s.norm, s.pos_emb) == (
        14336,
        "swiglu",
        128256,
        "rmsnorm",
        "rope",
    )
    assert not s.tied_embeddings and not s.qkv_bias and not s.mlp_bias
    assert s.moe is None and s.mla is None and s.attention_kind == "gqa"


def test_name_argument_and_directory(tmp_path):
    cfg = json.loads(_config("Qwen--Qwen3-8B").read_text())
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert load_hf_config(tmp_path).name == tmp_path.name
    assert load_hf_config(cfg, name="mine").name == "mine"


def test_deepseek_v3_mla_moe_mtp():
    s = load_hf_config(_config("deepseek-ai--DeepSeek-V3"))
    assert s.mla is not None
    assert (s.mla.q_lora_rank, s.mla.kv_lora_rank, s.mla.qk_nope_head_dim) == (1536, 512, 128)
    assert (s.mla.qk_rope_head_dim, s.mla.v_head_dim) == (64, 128)
    m = s.moe
    assert m is not None
    assert (m.n_routed_experts, m.top_k, m.expert_ffn_hidden, m.n_shared_experts) == (
        256,
        8,
        2048,
        1,
    )
    assert m.first_k_dense_layers == 3 and s.n_moe_layers == 58
    assert m.router_bias  # noaux_tc: e_score_correction_bias
    assert (m.n_groups, m.topk_groups) == (8, 4)  # node-limited routing, V3 report §2.1.2
    assert s.ffn_hidden == 18432
    assert s.mtp_layers == 1


def test_deepseek_moe_layer_freq_semantics():
    """DeepSeek's moe_layer_freq: layer i >= first_k_dense is sparse when i % freq == 0."""
    cfg = json.loads(_config("deepseek-ai--DeepSeek-V3").read_text())
    cfg.update(num_hidden_layers=8, first_k_dense_replace=1, moe_layer_freq=2)
    s = load_hf_config(cfg)
    assert [i for i in range(8) if s.is_moe_layer(i)] == [2, 4, 6]


def test_decoder_sparse_step_and_mlp_only_layers():
    """Qwen2/3-MoE: sparse when (i+1) % decoder_sparse_step == 0 and i not in mlp_only_layers."""
    cfg = json.loads(_config("Qwen--Qwen3-30B-A3B").read_text())
    cfg.update(num_hidden_layers=8, decoder_sparse_step=2, mlp_only_layers=[3])
    s = load_hf_config(cfg)
    assert [i for i in range(8) if s.is_moe_layer(i)] == [1, 5, 7]
    assert s.ffn_hidden == 6144  # dense layers use intermediate_size


def test_qwen3_qk_norm_and_moe():
    s = load_hf_config(_config("Qwen--Qwen3-30B-A3B"))
    assert s.qk_norm and s.hd == 128 and s.head_dim == 128  # 32 heads x 128 != 2048
    assert s.moe is not None and (s.moe.n_routed_experts, s.moe.top_k, s.moe.expert_ffn_hidden) == (
        128,
        8,
        768,
    )
    assert s.sliding_window is None and s.layer_types is None


def test_gpt_oss_layer_types_and_biases():
    s = load_hf_config(_config("openai--gpt-oss-20b"))
    assert s.layer_types is not None and s.layer_types[:4] == ("sliding", "full", "sliding", "full")
    assert s.sliding_window == 128
    assert s.qkv_bias and s.out_bias
    assert s.moe is not None and s.moe.router_bias and s.moe.expert_bias
    assert (s.moe.n_routed_experts, s.moe.top_k, s.moe.expert_ffn_hidden) == (32, 4, 2880)


def test_qwen3_5_hybrid_linear_attention():
    s = load_hf_config(_config("Qwen--Qwen3.5-397B-A17B"))
    assert s.d_model == 4096 and s.n_layers == 60  # read from text_config
    assert s.layer_types is not None
    assert s.layer_types.count("linear") == 45 and s.layer_types.count("full") == 15
    la = s.linear_attention
    assert la is not None
    assert (
        la.n_key_heads,
        la.n_value_heads,
        la.key_head_dim,
        la.value_head_dim,
        la.conv_kernel,
    ) == (16, 64, 128, 128, 4)
    assert s.moe is not None and s.moe.n_shared_experts == 1 and s.moe.shared_width == 1024
    assert (s.moe.n_routed_experts, s.moe.top_k) == (512, 10)
    assert not s.tied_embeddings  # from the top level
    assert s.mtp_layers == 1


def test_llama4_text_config_chunked_and_shared_expert():
    s = load_hf_config(_config("meta-llama--Llama-4-Scout-17B-16E-Instruct"))
    assert (s.d_model, s.n_layers, s.vocab) == (5120, 48, 202048)
    assert s.moe is not None
    assert (
        s.moe.n_routed_experts,
        s.moe.top_k,
        s.moe.expert_ffn_hidden,
        s.moe.n_shared_experts,
    ) == (16, 1, 8192, 1)
    assert s.n_moe_layers == 48
    assert s.ffn_hidden == 16384  # intermediate_size_mlp: the dense layers' width
    assert s.layer_types is not None and s.layer_types[:4] == (
        "chunked",
        "chunked",
        "chunked",
        "full",
    )


def test_llama4_interleaved_dense_layers():
    cfg = json.loads(_config("meta-llama--Llama-4-Scout-17B-16E-Instruct").read_text())
    cfg["text_config"]["interleave_moe_layer_step"] = 2
    s = load_hf_config(cfg)
    assert s.n_moe_layers == 24 and s.is_moe_layer(1) and not s.is_moe_layer(0)


def test_kimi_glm_minimax():
    k = load_hf_config(_config("moonshotai--Kimi-K2.5"))
    assert k.mla is not None and k.moe is not None
    assert (k.moe.n_routed_experts, k.moe.first_k_dense_layers, k.n_heads) == (384, 1, 64)
    g = load_hf_config(_config("zai-org--GLM-5"))
    assert g.mla is not None and (g.mla.qk_nope_head_dim, g.mla.v_head_dim, g.mla.q_lora_rank) == (
        192,
        256,
        2048,
    )
    assert g.moe is not None and g.n_moe_layers == 75 and g.mtp_layers == 1
    m = load_hf_config(_config("MiniMaxAI--MiniMax-M2.5"))
    assert m.qk_norm and m.mtp_layers == 3
    assert m.moe is not None and m.moe.router_bias and m.moe.n_shared_experts == 0


def test_gpt2_small_exact():
    """GPT-2 small (HF gpt2 config.json): 124,439,808 parameters (tied, learned positions, biases)."""
    cfg = {
        "model_type": "gpt2",
        "n_embd": 768,
        "n_layer": 12,
        "n_head": 12,
        "n_positions": 1024,
        "vocab_size": 50257,
        "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-5,
    }
    s = load_hf_config(cfg)
    assert (s.ffn_act, s.norm, s.pos_emb, s.max_position, s.ffn_hidden) == (
        "gelu",
        "layernorm",
        "learned",
        1024,
        3072,
    )
    assert s.tied_embeddings and s.qkv_bias and s.out_bias and s.mlp_bias
    assert total_params(s) == 124_439_808


def test_gpt_neox_pythia_160m_exact():
    """Pythia-160M (Biderman et al. 2023, Table 1): 162,322,944 total parameters; untied, rotary."""
    cfg = {
        "model_type": "gpt_neox",
        "hidden_size": 768,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "intermediate_size": 3072,
        "vocab_size": 50304,
        "hidden_act": "gelu",
        "layer_norm_eps": 1e-5,
        "rotary_pct": 0.25,
        "use_parallel_residual": True,
    }
    s = load_hf_config(cfg)
    assert (s.ffn_act, s.norm, s.pos_emb, s.tied_embeddings) == ("gelu", "layernorm", "rope", False)
    assert total_params(s) == 162_322_944


def test_deepseek_v2_published():
    """DeepSeek-V2 (DeepSeek-AI 2024, abstract): 236B total, 21B activated per token."""
    cfg = {
        "model_type": "deepseek_v2",
        "hidden_size": 5120,
        "num_hidden_layers": 60,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "first_k_dense_replace": 1,
        "moe_layer_freq": 1,
        "n_routed_experts": 160,
        "n_shared_experts": 2,
        "moe_intermediate_size": 1536,
        "intermediate_size": 12288,
        "num_experts_per_tok": 6,
        "vocab_size": 102400,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
    }
    s = load_hf_config(cfg)
    assert s.moe is not None and s.moe.shared_width == 2 * 1536 and not s.moe.router_bias
    assert abs(total_params(s) / 236e9 - 1) < 0.01
    assert round(active_params(s) / 1e9) == 21


def test_qwen2_moe_published():
    """Qwen1.5-MoE-A2.7B (Qwen blog, Mar 2024): 14.3B total, 2.7B activated; q/k/v biases only."""
    cfg = {
        "model_type": "qwen2_moe",
        "hidden_size": 2048,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "intermediate_size": 5632,
        "moe_intermediate_size": 1408,
        "shared_expert_intermediate_size": 5632,
        "num_experts": 60,
        "num_experts_per_tok": 4,
        "vocab_size": 151936,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
    }
    s = load_hf_config(cfg)
    assert s.qkv_bias and not s.out_bias
    assert abs(total_params(s) / 14.3e9 - 1) < 0.01
    assert abs(active_params(s) / 2.7e9 - 1) < 0.01


def test_zero_experts_is_dense():
    cfg = json.loads(_config("Qwen--Qwen3-8B").read_text())
    cfg.update(num_experts=0, num_experts_per_tok=0)
    assert load_hf_config(cfg).moe is None


def test_mistral_sliding_window_everywhere():
    cfg = {
        "model_type": "mistral",
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "vocab_size": 32000,
        "sliding_window": 4096,
        "rms_norm_eps": 1e-5,
    }
    s = load_hf_config(cfg)
    assert s.sliding_window == 4096 and s.layer_types is None and not s.tied_embeddings


def test_generic_family_reads_common_keys():
    cfg = {
        "model_type": "somefuture",
        "hidden_size": 1024,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "intermediate_size": 2816,
        "vocab_size": 32000,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
    }
    s = load_hf_config(cfg)
    assert (s.family, s.ffn_act, s.norm, s.kv_heads, s.tied_embeddings) == (
        "somefuture",
        "swiglu",
        "rmsnorm",
        2,
        True,
    )


# --- errors -----------------------------------------------------------------------------------
def test_malformed_json_names_file_and_position(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text('{"hidden_size": 4096,\n "num_hidden_layers": 32,,\n}')
    with pytest.raises(HwtuneInputError) as ei:
        load_hf_config(bad)
    msg = str(ei.value)
    assert "config.json" in msg and "line 2" in msg and "column" in msg
    assert "\n" not in msg


def test_missing_hidden_size_names_the_key():
    cfg = json.loads(_config("meta-llama--Meta-Llama-3.1-8B").read_text())
    del cfg["hidden_size"]
    with pytest.raises(HwtuneInputError) as ei:
        load_hf_config(cfg)
    assert "hidden_size" in ei.value.field and "n_embd" in ei.value.field
    assert "\n" not in str(ei.value)


def test_wrong_type_names_the_key():
    cfg = json.loads(_config("meta-llama--Meta-Llama-3.1-8B").read_text())
    cfg["num_hidden_layers"] = "thirty-two"
    with pytest.raises(HwtuneInputError) as ei:
        load_hf_config(cfg)
    assert "num_hidden_layers" in ei.value.field and ei.value.value == "thirty-two"


def test_bad_layer_types_names_the_key():
    cfg = json.loads(_config("openai--gpt-oss-20b").read_text())
    cfg["layer_types"][0] = "weird_attention"
    with pytest.raises(HwtuneInputError, match="layer_types"):
        load_hf_config(cfg)


def test_inconsistent_shapes_one_line_error():
    cfg = json.loads(_config("meta-llama--Meta-Llama-3.1-8B").read_text())
    cfg["num_key_value_heads"] = 7  # does not divide 32 heads
    with pytest.raises(HwtuneInputError) as ei:
        load_hf_config(cfg)
    assert "n_kv_heads" in str(ei.value) and "\n" not in str(ei.value)


def test_missing_file():
    with pytest.raises(HwtuneInputError, match="config.json"):
        load_hf_config("/nonexistent/dir/config.json")


def test_not_an_object(tmp_path):
    p = tmp_path / "config.json"
    p.write_text("[1, 2, 3]")
    with pytest.raises(HwtuneInputError, match="JSON object"):
        load_hf_config(p)


# --- hwtune's own vocabulary (validation data) ---------------------------------------------------
def _validation_models() -> list[dict]:
    if not VALIDATION.is_file():
        return []
    seen: dict[str, dict] = {}
    for line in VALIDATION.read_text().splitlines():
        m = json.loads(line)["model"]
        if m.get("vocab") and m.get("n_layers"):
            seen.setdefault(m["name"], m)
    return list(seen.values())


@pytest.mark.parametrize("model", _validation_models(), ids=lambda m: m["name"])
def test_validation_models_load(model):
    s = load_hf_config(model)
    assert (s.n_layers, s.d_model, s.n_heads, s.vocab) == (
        model["n_layers"],
        model["d_model"],
        model["n_heads"],
        model["vocab"],
    )


@pytest.mark.parametrize(
    "model",
    [
        m
        for m in _validation_models()
        if "(Megatron" in m["name"] or m["name"].startswith("LLaMA-65B")
    ],
    ids=lambda m: m["name"],
)
def test_validation_counts_match_papers(model):
    """Rows whose reported size is a count from the paper (Narayanan et al. SC'21 Table 1,
    Shoeybi et al. 2019 Table 1, Korthikanti et al. 2022, Touvron et al. 2023 LLaMA 65.2B) match
    within max(1%, the figure's rounding). Other rows report a name ("20B"), not a count."""
    s = load_hf_config(model)
    reported = str(model["n_params_reported"])
    published = parse_count(reported)
    assert abs(total_params(s) - published) <= max(0.01 * published, count_resolution(reported))


def test_mpt_benchmark_counts_exact():
    """llm-foundry's benchmark table prints exact counts (learned positions, biases, LayerNorm)."""
    rows = [m for m in _validation_models() if m["name"].startswith("MPT-")]
    if not rows:
        pytest.skip("validation data not present")
    for m in rows:
        assert total_params(load_hf_config(m)) == int(m["n_params_reported"]), m["name"]


def test_routing_groups_must_be_consistent():
    from hwtune.model.spec import MoE

    with pytest.raises(ValueError, match="go together"):
        MoE(n_routed_experts=8, top_k=2, expert_ffn_hidden=64, n_groups=4)
    with pytest.raises(ValueError, match="divide"):
        MoE(n_routed_experts=8, top_k=2, expert_ffn_hidden=64, n_groups=3, topk_groups=1)
    with pytest.raises(ValueError, match="exceeds"):
        MoE(n_routed_experts=8, top_k=2, expert_ffn_hidden=64, n_groups=4, topk_groups=5)
