"""Bad input that a CLI fuzzing review (2026-12-07) found taken silently, misnamed or ending in
a traceback: each now a one-line error naming the option or field (exit code 2)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from hwtune.cli.main import app

DSV3 = "deepseek-v3"


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["estimate", "--gpu", ""], "--gpu"),
        (["plan", "--precision="], "--precision"),
        (["serve", "--trace", " "], "--trace"),
    ],
)
def test_an_empty_value_is_refused_not_replaced_by_the_default(rejects, args, field):
    # before, `estimate --gpu ""` ran on the default H100 and `--precision ""` meant bf16
    rejects(args, field, "got ''" if "" in args or args[-1].endswith("=") else "got ' '",
            "a non-empty value")  # fmt: skip


def test_sizing_a_model_with_leading_dense_layers_keeps_them(tmp_path):
    """DeepSeek-V3 has 3 dense layers before its MoE layers; proposals for 100B params used to
    build 1- and 2-layer probes and fail validation (a traceback). The layer count now grows
    past the dense ones: every proposal keeps them and lands within the tolerance."""
    r = CliRunner().invoke(app, ["size", "-m", DSV3, "--target", "100B", "--json"])
    assert r.exit_code == 0, r.output
    proposals = json.loads(r.output)["proposals"]
    assert proposals
    for p in proposals:
        cfg = p["config"]
        assert cfg["moe"]["first_k_dense_layers"] == 3 < cfg["n_layers"]
        assert abs(p["params"] / 100e9 - 1) <= 0.02  # the default tolerance


def test_leading_dense_layers_beyond_the_model_name_the_config_key(rejects, tmp_path):
    cfg = tmp_path / "c.json"
    base = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
            "hidden_size": 1024, "intermediate_size": 2048, "moe_intermediate_size": 256,
            "num_attention_heads": 8, "num_key_value_heads": 8, "num_hidden_layers": 4,
            "vocab_size": 1000, "n_routed_experts": 8, "num_experts_per_tok": 2,
            "first_k_dense_replace": 9, "kv_lora_rank": 128, "q_lora_rank": 256,
            "qk_nope_head_dim": 64, "qk_rope_head_dim": 32, "v_head_dim": 64,
            "n_shared_experts": 1, "max_position_embeddings": 4096}  # fmt: skip
    cfg.write_text(json.dumps(base))
    rejects(["estimate", "-m", str(cfg)], "first_k_dense", "got 9", "at most n_layers = 4")


def test_moe_imbalance_is_bounded_by_experts_over_top_k(rejects):
    # a token reaches an expert at most once: Mixtral's busiest of 8 experts (top-2) takes at
    # most 8 / 2 = 4 times the mean; 1e300 used to overflow in the GEMM model (a traceback)
    rejects(["estimate", "-m", "mixtral-8x7b", "--ep", "8", "--moe-imbalance", "1e300"],
            "--moe-imbalance", "8 / 2 = 4")  # fmt: skip
    rejects(["estimate", "-m", "llama3.1-8b", "--moe-imbalance", "1.5"], "--moe-imbalance",
            "dense model")  # fmt: skip


def test_a_layer_count_no_model_has_is_refused(rejects, tmp_path):
    # 1e12 layers ran out of memory (killed, no message) building per-layer tables
    cfg = tmp_path / "deep.json"
    cfg.write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                               "hidden_size": 512, "intermediate_size": 1024,
                               "num_attention_heads": 8, "num_hidden_layers": 10**12,
                               "vocab_size": 1000}))  # fmt: skip
    rejects(["estimate", "-m", str(cfg)], "n_layers", "10000")


def test_a_knob_fixed_twice_or_fixed_above_its_maximum_is_refused(rejects):
    rejects(["plan", "--gpus", "8", "--fix", "tp=8", "--fix", "tp=4"], "--fix", "tp=8 given")
    rejects(["plan", "--gpus", "64", "--fix", "tp=8", "--max", "tp=4"], "--max tp",
            "at least --fix tp=8")  # fmt: skip
    rejects(["plan", "--gpus", "8", "--fix", "zero=0"], "--fix zero", "estimate --zero 0")


def test_megatron_args_with_both_bf16_and_fp16_are_refused(rejects):
    rejects(["estimate", "--gpus", "8", "--megatron-args", "--seq-length 4096 --bf16 --fp16"],
            "--fp16", "--bf16")  # fmt: skip


def test_dualpipe_names_the_micro_batches_it_got(rejects):
    rejects(["estimate", "-m", DSV3, "--gpus", "2048", "--ep", "64", "--pp", "16",
             "--schedule", "dualpipe"], "--global-batch", "it gives 1")  # fmt: skip


def test_a_cluster_file_names_its_own_device_field(rejects, tmp_path):
    c = tmp_path / "c.yaml"
    c.write_text("device: nosuch\nn_gpus: 8\n")
    out = rejects(["estimate", "--cluster", str(c)], "c.yaml.device", "'nosuch'")
    assert "--gpu" not in out


def test_energy_options_are_named_as_typed(rejects):
    rejects(["energy", "optimize", "--seq", "0"], "--seq", "got 0")
    rejects(["energy", "step", "--power-cap", "0"], "--power-cap", "got 0")


def test_energy_optimize_refuses_a_model_whose_training_does_not_fit_the_device(rejects):
    # Llama-3.1-70B's weights and Adam states alone are ~1.1 TB; the Jetson has 64 GB. It was
    # reported feasible (the co-optimizer checks only power)
    rejects(["energy", "optimize", "--model", "llama3.1-70b"], "--model",
            "fits the jetson-agx-orin-64gb's memory", "of 64 GiB")  # fmt: skip


def test_energy_step_says_out_of_memory_as_estimate_does():
    args = ["energy", "step", "-m", DSV3, "--gpus", "64", "--pp", "8"]
    text = CliRunner().invoke(app, args)
    assert text.exit_code == 0 and "OUT OF MEMORY" in text.output, text.output
    doc = json.loads(CliRunner().invoke(app, [*args, "--json"]).output)
    assert doc["fits"] is False


def test_a_power_trace_reading_no_device_draws_is_refused(rejects, tmp_path):
    trace = tmp_path / "p.csv"
    trace.write_text("time_s,power_w\n0,100\n1,1e308\n")
    rejects(["energy", "measure", "--backend", "replay", "--seconds", "1", "--trace", str(trace)],
            "line 3", "power_w in [0, 100,000] W")  # fmt: skip
