"""Training commands: a bad model config.json, device YAML or cluster YAML is one line naming
the file or field (exit 2), never a traceback, a page-long dump of the mapping, or dropped."""

from __future__ import annotations

import json

import pytest

from hwtune.model.catalog import get_model


@pytest.mark.parametrize("option", ["--model", "--gpu", "--cluster"])
def test_non_utf8_file_is_one_line(tmp_path, rejects, option):
    f = tmp_path / ("config.json" if option == "--model" else "x.yaml")
    f.write_bytes(b"\xff\xfe\x00not utf-8")
    field = {"--model": "model", "--gpu": "gpu", "--cluster": "cluster"}[option]
    assert "UTF-8" in rejects(["estimate", option, str(f)], field)


def _config(tmp_path, text: str):
    f = tmp_path / "config.json"
    f.write_text(text)
    return str(f)


def test_config_nan_integer_named(tmp_path, rejects):
    base = json.dumps({"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 2,
                       "num_attention_heads": 32, "intermediate_size": 14336, "vocab_size": 1000})  # fmt: skip
    path = _config(tmp_path, base.replace("4096", "NaN"))
    assert "hidden_size" in rejects(["estimate", "-m", path], "hidden_size")
    path = _config(tmp_path, base.replace("4096", "Infinity"))
    rejects(["estimate", "-m", path], "hidden_size")


def test_config_cross_field_check_names_the_field(tmp_path, rejects):
    cfg = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 2,
           "num_attention_heads": 32, "num_key_value_heads": 3, "intermediate_size": 14336,
           "vocab_size": 1000}  # fmt: skip
    line = rejects(["estimate", "-m", _config(tmp_path, json.dumps(cfg))], "n_kv_heads")
    assert "got 3" in line and "'family'" not in line  # not the whole mapping


def test_cluster_cross_field_checks_name_the_field(tmp_path, rejects):
    f = tmp_path / "c.yaml"
    f.write_text("device: h100\nn_gpus: 12\n")
    line = rejects(["estimate", "--cluster", str(f)], "c.yaml.n_gpus")
    assert "got 12" in line and "Device(" not in line
    line = rejects(["estimate", "--gpus-per-node", "3"], "--gpus", "8")
    assert "Device(" not in line
    rejects(["estimate", "--scaleup-domain", "3"], "--scaleup-domain", "--gpus-per-node (= 8)")


def test_cluster_name_not_a_string_is_an_error_not_dropped(tmp_path, rejects):
    f = tmp_path / "c.yaml"
    f.write_text("device: h100\nn_gpus: 8\nname: 5\n")
    rejects(["estimate", "--cluster", str(f)], "c.yaml.name")


def test_catalog_still_loads():
    assert get_model("llama3.1-8b").n_layers == 32
