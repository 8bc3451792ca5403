"""The model catalog: names, aliases, paths, sources and errors."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from hwtune.errors import HwtuneInputError
from hwtune.model.catalog import catalog_entry, get_model, model_names
from hwtune.model.hf_config import parse_count
from hwtune.model.params import total_params

CONFIGS = Path(str(resources.files("hwtune.model").joinpath("configs")))
VALIDATION = (
    Path(__file__).resolve().parents[3] / "shared" / "validation" / "training_published.jsonl"
)

REQUIRED = [
    "llama3.1-8b",
    "llama3.1-70b",
    "llama3.1-405b",
    "llama3-8b",
    "llama3-70b",
    "llama2-7b",
    "llama2-13b",
    "llama2-70b",
    "mixtral-8x7b",
    "mixtral-8x22b",
    "qwen3-8b",
    "qwen3-32b",
    "qwen3-30b-a3b",
    "qwen3-235b-a22b",
    "deepseek-v3",
    "deepseek-r1",
    "kimi-k2.5",
    "glm-5",
    "minimax-m2.5",
    "qwen3.5-397b-a17b",
    "gpt-oss-20b",
    "gpt-oss-120b",
    "llama4-scout",
    "olmoe-1b-7b",
    "gpt3-175b",
    *[
        f"gpt-{s}"
        for s in ("1.7b", "3.6b", "7.5b", "18b", "39b", "76b", "145b", "310b", "530b", "1t")
    ],
]


def test_required_names_present():
    assert set(REQUIRED) <= set(model_names())


@pytest.mark.parametrize("name", model_names())
def test_every_entry_loads_with_source(name):
    s = get_model(name)
    e = catalog_entry(name)
    assert s.name == name
    assert s.source and e["source"]
    assert "params_published" in e or "params_nominal" in e
    if "params_published" in e:
        assert s.n_params_published == parse_count(e["params_published"])
    if "active_published" in e:
        assert s.moe is not None and s.n_active_params_published == parse_count(
            e["active_published"]
        )
    assert get_model(name) is s  # cached


def test_config_files_referenced_exist():
    for name in model_names():
        cfg = catalog_entry(name).get("config")
        if cfg:
            assert (CONFIGS / cfg).is_file(), cfg


@pytest.mark.parametrize(
    ("alias", "name"),
    [
        ("Meta-Llama-3.1-8B", "llama3.1-8b"),
        ("meta-llama/Meta-Llama-3.1-8B", "llama3.1-8b"),
        ("LLAMA3.1-8B", "llama3.1-8b"),
        ("  llama3.1-8b ", "llama3.1-8b"),
        ("meta-llama/Llama-3.1-8B-Instruct", "llama3.1-8b"),
        ("meta-llama/Llama-3.1-70B", "llama3.1-70b"),
        ("nvidia/Llama-3.1-70B-Instruct-FP8", "llama3.1-70b"),
        ("Qwen/Qwen3-235B-A22B-FP8", "qwen3-235b-a22b"),
        ("deepseek-ai/DeepSeek-R1", "deepseek-r1"),
        ("openai/gpt-oss-120b", "gpt-oss-120b"),
        ("someorg/Mixtral-8x7B-v0.1", "mixtral-8x7b"),  # unknown org: the model part still resolves
        ("GPT-1.7B (Megatron)", "gpt-1.7b"),
    ],
)
def test_aliases(alias, name):
    assert get_model(alias).name == name


def test_llama3_has_llama31_shapes():
    a, b = get_model("llama3-70b"), get_model("llama3.1-70b")
    fields = (
        "n_layers",
        "d_model",
        "n_heads",
        "n_kv_heads",
        "ffn_hidden",
        "vocab",
        "tied_embeddings",
    )
    assert all(getattr(a, f) == getattr(b, f) for f in fields)
    assert total_params(a) == total_params(b)


def test_spec_passes_through():
    s = get_model("llama3.1-8b")
    assert get_model(s) is s


def test_path_to_config(tmp_path):
    s = get_model(str(CONFIGS / "Qwen--Qwen3-8B.json"))
    assert s.d_model == 4096 and s.name == "Qwen--Qwen3-8B"
    d = tmp_path / "my-model"
    d.mkdir()
    (d / "config.json").write_text((CONFIGS / "Qwen--Qwen3-8B.json").read_text())
    assert get_model(d).name == "my-model"
    assert get_model(str(d / "config.json")).d_model == 4096


def test_missing_json_path():
    with pytest.raises(HwtuneInputError, match="config.json"):
        get_model("/no/such/config.json")


@pytest.mark.parametrize(
    ("typo", "expected"),
    [
        ("llama3.1-8", "llama3.1-8b"),
        ("deepsek-v3", "deepseek-v3"),
        ("mixtral-8x7", "mixtral-8x7b"),
        ("qwen3-8", "qwen3-8b"),
    ],
)
def test_unknown_name_suggests(typo, expected):
    with pytest.raises(HwtuneInputError) as ei:
        get_model(typo)
    assert ei.value.field == "model"
    assert expected in str(ei.value)
    assert "\n" not in str(ei.value)


def test_catalog_entry_unknown():
    with pytest.raises(HwtuneInputError):
        catalog_entry("no-such-model")


def test_import_is_lazy():
    """Importing the catalog reads no YAML and loads no model."""
    code = "import sys, hwtune.model.catalog; print('yaml' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_megatron_shapes_match_validation_data():
    """The catalog's Megatron GPT shapes equal those of training_published.jsonl (Narayanan Table 1)."""
    if not VALIDATION.is_file():
        pytest.skip("validation data not present")
    rows = {}
    for line in VALIDATION.read_text().splitlines():
        m = json.loads(line)["model"]
        if (
            m["name"].endswith("(Megatron)")
            and m["name"].startswith("GPT-")
            and m["seq_len"] == 2048
        ):
            rows[m["name"]] = m
    checked = 0
    for row_name, m in rows.items():
        try:
            s = get_model(row_name)
        except HwtuneInputError:
            continue  # a row the catalog does not name (e.g. GPT-22B of Korthikanti et al.)
        assert (s.n_layers, s.d_model, s.n_heads, s.ffn_hidden, s.vocab) == (
            m["n_layers"],
            m["d_model"],
            m["n_heads"],
            m["ffn_hidden"],
            m["vocab"],
        ), row_name
        assert (s.pos_emb, s.max_position, s.tied_embeddings, s.norm, s.ffn_act) == (
            "learned",
            2048,
            True,
            "layernorm",
            "gelu",
        )
        checked += 1
    assert checked >= 10
