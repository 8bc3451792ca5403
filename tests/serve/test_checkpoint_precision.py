"""The serving weight format defaults to the checkpoint's (config.json ``quantization_config``)."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from hwtune.model.hf_config import checkpoint_precision, load_hf_config

CONFIGS = Path(str(resources.files("hwtune.model").joinpath("configs")))


def _spec(name: str):
    return load_hf_config(CONFIGS / f"{name}.json")


# --- reading the checkpoint's format -----------------------------------------------------------
@pytest.mark.parametrize(
    "name",
    [
        # model cards: "FP8 weights" (DeepSeek-V3 report §3.3, block-wise 128x128 e4m3)
        "deepseek-ai--DeepSeek-V3",
        "deepseek-ai--DeepSeek-R1",
        "Qwen--Qwen3-235B-A22B-FP8",
        "MiniMaxAI--MiniMax-M2.5",
    ],
)
def test_fp8_checkpoints_read_fp8(name):
    cfg = json.loads((CONFIGS / f"{name}.json").read_text())
    assert cfg["quantization_config"]["quant_method"] == "fp8"  # the fact the test rests on
    s = _spec(name)
    assert s.checkpoint_precision == "fp8"
    assert s.quantized_weights == "all"  # attention is fp8 too


@pytest.mark.parametrize("name", ["openai--gpt-oss-120b", "openai--gpt-oss-20b"])
def test_gpt_oss_reads_fp4_experts_only(name):
    # gpt-oss model card: MXFP4 for the MoE weights; attention, router, embeddings in bf16
    s = _spec(name)
    assert s.checkpoint_precision == "fp4"
    assert s.quantized_weights == "experts"


@pytest.mark.parametrize(
    "name",
    ["meta-llama--Meta-Llama-3.1-8B", "meta-llama--Meta-Llama-3.1-70B", "Qwen--Qwen3-235B-A22B"],
)
def test_unquantized_checkpoints_read_none(name):
    assert "quantization_config" not in json.loads((CONFIGS / f"{name}.json").read_text())
    assert _spec(name).checkpoint_precision is None


def test_int4_weight_only_is_not_called_fp4():
    # Kimi-K2.5: compressed-tensors, int weights of 4 bits in groups of 32 (W4A16): int4, a
    # weight-only format of its own, not fp4
    cfg = json.loads((CONFIGS / "moonshotai--Kimi-K2.5.json").read_text())
    q = cfg["text_config"]["quantization_config"]
    w = q["config_groups"]["group_0"]["weights"]
    assert (q["quant_method"], w["type"], w["num_bits"]) == ("compressed-tensors", "int", 4)
    assert _spec("moonshotai--Kimi-K2.5").checkpoint_precision == "int4"


def test_kimi_quantizes_only_its_routed_experts():
    # its compressed-tensors "ignore" list keeps attention, shared experts and dense MLPs 16-bit
    q = json.loads((CONFIGS / "moonshotai--Kimi-K2.5.json").read_text())["text_config"][
        "quantization_config"
    ]
    assert any("self_attn" in m for m in q["ignore"])
    assert any("shared_experts" in m for m in q["ignore"])
    assert _spec("moonshotai--Kimi-K2.5").quantized_weights == "experts"


def test_modelopt_fp8_in_a_separate_file_is_not_seen():
    # nvidia/Llama-3.1-70B-Instruct-FP8 keeps its quantization in hf_quant_config.json
    name = "nvidia--Llama-3.1-70B-Instruct-FP8"
    assert "quantization_config" not in json.loads((CONFIGS / f"{name}.json").read_text())
    assert _spec(name).checkpoint_precision is None


def test_modelopt_fp8_in_the_checkpoint_folder_is_read(tmp_path):
    # the checkpoint's folder: config.json and ModelOpt's hf_quant_config.json beside it
    name = "nvidia--Llama-3.1-70B-Instruct-FP8"
    (tmp_path / "config.json").write_text((CONFIGS / f"{name}.json").read_text())
    quant = {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}
    doc = {"producer": {"name": "modelopt"}, "quantization": quant}
    (tmp_path / "hf_quant_config.json").write_text(json.dumps(doc))
    assert load_hf_config(tmp_path).checkpoint_precision == "fp8"
    assert load_hf_config(tmp_path / "config.json").checkpoint_precision == "fp8"
    (tmp_path / "hf_quant_config.json").write_text("not json")
    assert load_hf_config(tmp_path).checkpoint_precision is None


def _ct(*weights: tuple[str, int]) -> dict:
    groups = {
        f"group_{i}": {"targets": ["Linear"], "weights": {"type": t, "num_bits": b}}
        for i, (t, b) in enumerate(weights)
    }
    return {"quantization_config": {"quant_method": "compressed-tensors", "config_groups": groups}}


@pytest.mark.parametrize(
    ("top", "expected"),
    [
        ({"quantization_config": {"quant_method": "fbgemm_fp8"}}, "fp8"),
        ({"quantization_config": {"quant_method": "modelopt", "quant_algo": "FP8"}}, "fp8"),
        ({"quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"}}, "fp4"),
        ({"quantization_config": {"quant_method": "modelopt", "quant_algo": "W4A8_AWQ"}}, None),
        (_ct(("float", 8)), "fp8"),  # llm-compressor FP8 (W8A8 e4m3)
        (_ct(("float", 4)), "fp4"),  # llm-compressor NVFP4
        (_ct(("int", 8)), None),  # W8A8 int8: no such serving precision
        (_ct(("float", 8), ("float", 4)), None),  # groups that disagree
        ({"quantization_config": {"quant_method": "compressed-tensors"}}, None),
        ({"quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": True}}, None),
        ({"quantization_config": {"quant_method": "no-such-method"}}, None),
        ({"quantization_config": "fp8"}, None),  # not a mapping
        ({"text_config": {"quantization_config": {"quant_method": "fp8"}}}, "fp8"),
        ({}, None),
    ],
)
def test_checkpoint_precision_of_quantization_configs(top, expected):
    assert checkpoint_precision(top) == expected


def test_an_unknown_quant_method_still_loads():
    cfg = json.loads((CONFIGS / "meta-llama--Meta-Llama-3.1-8B.json").read_text())
    cfg["quantization_config"] = {"quant_method": "something-new", "bits": 3}
    assert load_hf_config(cfg).checkpoint_precision is None


@pytest.mark.parametrize(
    ("quant", "described"),
    [
        ({"quant_method": "gptq", "bits": 3, "group_size": 128}, "gptq 3-bit weights"),
        ({"quant_method": "awq", "bits": 8}, "awq 8-bit weights"),
        ({"quant_method": "bitsandbytes", "load_in_4bit": True}, "bitsandbytes"),
        ({"quant_method": "modelopt", "quant_algo": "W4A8_AWQ"}, "modelopt W4A8_AWQ"),
        (_ct(("int", 8))["quantization_config"], "compressed-tensors weights"),
        ({"bits": 4}, "unnamed"),
        ({"quant_method": "gptq"}, "gptq weights of no stated width"),
        ({}, None),  # an empty quantization_config quantizes nothing
        ({"quant_method": "gptq", "bits": "4"}, None),  # int4, its width written as text
        # formats hwtune names, and configs that quantize only the KV cache: nothing to refuse
        ({"quant_method": "gptq", "bits": 4}, None),
        ({"quant_method": "fp8"}, None),
        ({"quant_method": "modelopt", "kv_cache_quant_algo": "FP8"}, None),
        ({"quant_method": "compressed-tensors", "kv_cache_scheme": {"num_bits": 8}}, None),
    ],
)
def test_unsupported_quantization_is_described(quant, described):
    from hwtune.model.hf_config import unsupported_quantization

    found = unsupported_quantization({"quantization_config": quant})
    if described is None:
        assert found is None
    else:
        assert found is not None and found.startswith(described)


def test_serving_an_unsupported_quantization_needs_an_explicit_precision(tmp_path, rejects):
    # a 3-bit GPTQ checkpoint is neither bf16 nor any serving precision: its engine loads it as
    # 3-bit, so simulating 16-bit weights (2 bytes where the checkpoint has ~0.4) is refused
    cfg = json.loads((CONFIGS / "meta-llama--Meta-Llama-3.1-8B.json").read_text())
    cfg["quantization_config"] = {"quant_method": "gptq", "bits": 3, "group_size": 128}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    line = rejects(_serve_path(path), "model.quantization_config", "gptq 3-bit", "--precision")
    assert "bf16, fp16, fp8, fp4, int4" in line
    # with a precision named it runs, as that precision
    out = _cli([*_serve_path(path), "--precision", "int4", "--json"])
    assert (out["precision"], out["precision_source"]) == ("int4", "option")
    # training plans do not read the serving format: the same config still loads
    assert load_hf_config(path).checkpoint_quantization == "gptq 3-bit weights"


def _serve_path(path: Path) -> list[str]:
    return ["serve", "--model", str(path), "--concurrency", "2",
            "--input-len", "128", "--output-len", "8", "--num-requests", "4"]  # fmt: skip


# --- the serving default -----------------------------------------------------------------------
def _cli(args: list[str]) -> dict:
    from typer.testing import CliRunner

    from hwtune.cli.main import app

    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def _serve(name: str, *extra: str) -> list[str]:
    return ["serve", "--model", str(CONFIGS / f"{name}.json"), "--concurrency", "2",
            "--input-len", "128", "--output-len", "8", "--num-requests", "4", *extra]  # fmt: skip


_V3 = "deepseek-ai--DeepSeek-V3"
_V3_TP8 = ("--gpu", "h200", "--tp", "8")


def test_weight_format_resolution():
    from hwtune.serve.config import weight_format

    v3, llama = _spec(_V3), _spec("meta-llama--Meta-Llama-3.1-8B")
    assert weight_format(v3, None) == ("fp8", "checkpoint")
    assert weight_format(v3, "bf16") == ("bf16", "option")
    assert weight_format(llama, None) == ("bf16", "default")
    assert weight_format(llama, "fp8") == ("fp8", "option")


def test_deepseek_v3_fits_8_h200_by_default_in_fp8():
    # 671B parameters at 2 bytes are ~168 GB per GPU over 8: more than an H200's 141 GB; the
    # checkpoint's fp8 weights (~84 GB per GPU) fit, as every engine serves it
    doc = _cli([*_serve(_V3, *_V3_TP8), "--json"])
    assert (doc["precision"], doc["precision_source"]) == ("fp8", "checkpoint")
    explicit = _cli([*_serve(_V3, *_V3_TP8, "--precision", "fp8"), "--json"])
    assert explicit["precision_source"] == "option"
    for key in ("ttft_s", "tpot_s", "kv_cache_tokens", "throughput_tokens_per_s"):
        assert doc[key] == explicit[key]


def test_explicit_bf16_still_refuses_with_a_hint(rejects):
    line = rejects([*_serve(_V3, *_V3_TP8, "--precision", "bf16")], "model", "bf16", "short by",
                   "the checkpoint ships fp8 weights: --precision fp8")  # fmt: skip
    assert line.rstrip().endswith("--precision fp8")


def test_no_hint_without_a_narrower_checkpoint(rejects):
    line = rejects(["serve", "--model", "llama3.1-405b", "--gpu", "h100"], "model", "bf16")
    assert "checkpoint ships" not in line


def test_llama_8b_defaults_to_bf16():
    doc = _cli([*_serve("meta-llama--Meta-Llama-3.1-8B", "--gpu", "h100"), "--json"])
    assert (doc["precision"], doc["precision_source"]) == ("bf16", "default")


def test_gpt_oss_defaults_to_its_fp4_experts():
    doc = _cli([*_serve("openai--gpt-oss-20b", "--gpu", "h100"), "--json"])
    assert (doc["precision"], doc["precision_source"]) == ("fp4", "checkpoint")


def test_human_output_names_the_format():
    from typer.testing import CliRunner

    from hwtune.cli.main import app

    r = CliRunner().invoke(app, _serve(_V3, *_V3_TP8), env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "fp8 weights (the checkpoint's)" in r.output


_PLAN = ("serve", "plan", "--gpu", "h200", "--max-gpus", "8", "--no-disagg", "--processes", "1",
         "--num-requests", "4", "--input-len", "128", "--output-len", "8")  # fmt: skip


def test_serve_plan_uses_the_same_default():
    doc = _cli([*_PLAN, "--model", str(CONFIGS / f"{_V3}.json"), "--top", "1", "--json"])
    assert (doc["precision"], doc["precision_source"]) == ("fp8", "checkpoint")
    assert doc["best"] and all(b["gpus"] == 8 for b in doc["best"])


def test_serve_plan_explicit_bf16_refuses_with_a_hint(rejects):
    rejects([*_PLAN, "--model", str(CONFIGS / f"{_V3}.json"), "--precision", "bf16"], "--max-gpus",
            "bf16", "the checkpoint ships fp8 weights: --precision fp8")  # fmt: skip
