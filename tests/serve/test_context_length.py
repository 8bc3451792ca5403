"""The context length a serving engine admits, from config.json, and requests beyond it."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hwtune.errors import HwtuneInputError
from hwtune.model.hf_config import load_hf_config

CONFIGS = Path(str(resources.files("hwtune.model").joinpath("configs")))


def _cfg(name: str) -> dict:
    return json.loads((CONFIGS / f"{name}.json").read_text())


@pytest.mark.parametrize(
    ("name", "context"),
    [
        # model cards: Llama 3.1 "128K" context (llama3 RoPE: the stated length is the extended)
        ("meta-llama--Meta-Llama-3.1-8B", 128 * 1024),
        # DeepSeek-V3: YaRN from a 4K pre-training window, factor 40 (its config.json)
        ("deepseek-ai--DeepSeek-V3", 4096 * 40),
        # gpt-oss: 128K via YaRN factor 32 over 4096 (OpenAI gpt-oss model card)
        ("openai--gpt-oss-120b", 4096 * 32),
        ("mistralai--Mixtral-8x7B-v0.1", 32 * 1024),  # Mixtral paper: 32k-token context
    ],
)
def test_context_lengths_of_shipped_configs(name, context):
    assert load_hf_config(_cfg(name)).max_context == context


def test_yarn_in_the_config_extends_qwen3_as_its_model_card_says():
    # Qwen3 model card: 32,768 tokens natively, 131,072 with YaRN factor 4 added to config.json
    cfg = _cfg("Qwen--Qwen3-8B")
    assert load_hf_config(cfg).max_context == 40960  # its config as shipped
    cfg["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0,
                           "original_max_position_embeddings": 32768}  # fmt: skip
    assert load_hf_config(cfg).max_context == 131072


@given(st.integers(128, 1 << 20), st.sampled_from([1.0, 2.0, 4.0, 8.0]))
def test_linear_scaling_multiplies_the_stated_length(rows, factor):
    cfg = _cfg("meta-llama--Meta-Llama-3.1-8B")
    cfg["max_position_embeddings"] = rows
    cfg["rope_scaling"] = {"type": "linear", "factor": factor}
    assert load_hf_config(cfg).max_context == int(rows * factor)
    cfg["seq_length"] = rows // 2  # the smallest length key counts
    assert load_hf_config(cfg).max_context == int(rows // 2 * factor)


@pytest.mark.parametrize("factor", [0, -2.0, "four", True, [2], float("inf")])
def test_an_unusable_rope_factor_is_refused_naming_it(factor):
    # vLLM multiplies the stated length by it (_get_and_verify_max_len): 0 would admit nothing
    cfg = _cfg("meta-llama--Meta-Llama-3.1-8B")
    cfg["rope_scaling"] = {"type": "dynamic", "factor": factor}
    with pytest.raises(
        HwtuneInputError, match=r"'rope_scaling': 'factor': got .*a positive number"
    ):
        load_hf_config(cfg)


@pytest.mark.parametrize(("factor", "context"), [(None, 4096), ("2", 8192), (2, 8192)])
def test_a_null_or_numeric_text_factor_is_read_as_vllm_reads_it(factor, context):
    cfg = _cfg("meta-llama--Meta-Llama-3.1-8B")
    cfg["max_position_embeddings"] = 4096
    cfg["rope_scaling"] = {"rope_type": "linear", "factor": factor}
    assert load_hf_config(cfg).max_context == context


def test_rope_parameters_float_originals_and_bad_keys():
    cfg = _cfg("Qwen--Qwen3-8B")
    # transformers v5 writes rope_parameters; a float original length is still a length
    cfg["rope_parameters"] = {"rope_type": "yarn", "factor": 4.0,
                              "original_max_position_embeddings": 32768.0}  # fmt: skip
    assert load_hf_config(cfg).max_context == 131072
    for key, bad in (("seq_length", 0), ("max_position_embeddings", -1), ("n_positions", 2.5)):
        cfg = _cfg("Qwen--Qwen3-8B")
        cfg[key] = bad  # vLLM takes the smallest length key as it is: 0 would admit nothing
        with pytest.raises(HwtuneInputError, match=rf"'{key}': got {bad}; expected an integer"):
            load_hf_config(cfg)
    cfg = _cfg("Qwen--Qwen3-8B")
    cfg["rope_parameters"] = {"rope_type": "yarn", "factor": 4.0,
                              "original_max_position_embeddings": 0}  # fmt: skip
    with pytest.raises(HwtuneInputError, match="'original_max_position_embeddings': got 0"):
        load_hf_config(cfg)


def test_gemma3_scaling_is_already_in_its_stated_length():
    cfg = _cfg("meta-llama--Meta-Llama-3.1-8B")
    cfg["model_type"] = "gemma3_text"
    cfg["rope_scaling"] = {"rope_type": "linear", "factor": 8.0}
    assert load_hf_config(cfg).max_context == 131072  # vLLM leaves Gemma 3's as stated


def test_serving_past_the_context_is_refused(rejects):
    base = ["serve", "--model", "llama3.1-8b", "--num-requests", "2", "--concurrency", "1"]
    line = rejects([*base, "--input-len", "131000", "--output-len", "73"],
                   "input-len + output-len", "131073", "at most 131072 tokens")  # fmt: skip
    assert "context length" in line
    from typer.testing import CliRunner

    from hwtune.cli.main import app

    r = CliRunner().invoke(app, [*base, "--input-len", "131000", "--output-len", "72", "--json"])
    assert r.exit_code == 0, r.output  # exactly the context: admitted


@pytest.mark.parametrize(
    ("name", "context"),
    # Llama 3 model card: 8K context (it reuses Llama 3.1's shapes); Llama 2 paper, Table 1: 4k;
    # OLMoE-1B-7B-0924's config.json: max_position_embeddings 4096, no RoPE scaling
    [
        ("llama3-8b", 8192),
        ("llama3-70b", 8192),
        ("llama2-7b", 4096),
        ("llama2-70b", 4096),
        ("olmoe-1b-7b", 4096),
    ],
)
def test_catalog_entries_state_their_own_context(name, context):
    from hwtune.model.catalog import get_model

    assert get_model(name).max_context == context
