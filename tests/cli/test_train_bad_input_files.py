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


def test_config_key_given_twice(tmp_path, rejects):
    # json.loads kept the last: this config silently became a 2-layer model
    text = ('{"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, '
            '"num_attention_heads": 32, "intermediate_size": 14336, "vocab_size": 1000, '
            '"num_hidden_layers": 2}')  # fmt: skip
    rejects(["estimate", "-m", _config(tmp_path, text)], "--model", "config.json",
            "each key once in a mapping ('num_hidden_layers' given twice)")  # fmt: skip


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


DEVICE = """name: mydev
peak_tflops: {bf16: 989}
memory_gib: 80
memory_bandwidth_tbps: 3.35
sm_count: 132
boost_clock_mhz: 1980
tdp_w: 700
"""


@pytest.mark.parametrize(
    ("extra", "field", "value", "expected"),
    [
        # a min clock above the boost clock priced a 695 W cap at 1.5x the peak clock (1355 W)
        ("min_clock_mhz: 3000", "min_clock_mhz", "3000.0", "at most boost_clock_mhz (1980 MHz)"),
        ("base_clock_mhz: 5000", "base_clock_mhz", "5000.0", "at most boost_clock_mhz"),
        ("base_clock_mhz: 1000\nmin_clock_mhz: 1500", "min_clock_mhz", "1500.0",
         "at most base_clock_mhz (1000 MHz)"),
        # idle power at the board power left no dynamic power (taken as 0 W), and the default
        # cap was refused as a "power cap" no one had given
        ("idle_w: 900", "idle_w", "900.0", "below tdp_w (700 W)"),
        ("reference_power_w: 500\nidle_w: 600", "idle_w", "600.0", "below reference_power_w (500 W)"),
    ],
)  # fmt: skip
def test_device_clocks_and_powers_out_of_order(tmp_path, rejects, extra, field, value, expected):
    f = tmp_path / "dev.yaml"
    f.write_text(DEVICE + extra + "\n")
    for cmd in (["estimate"], ["energy", "step", "--power-cap", "695"]):
        rejects([*cmd, "--gpu", str(f)], f"dev.yaml.{field}", f"got {value}", expected)


def test_device_with_clocks_and_idle_power_in_order_loads(tmp_path):
    from hwtune.hardware.device import load_device_file

    f = tmp_path / "dev.yaml"
    f.write_text(DEVICE + "min_clock_mhz: 345\nbase_clock_mhz: 1590\nidle_w: 80\n")
    assert load_device_file(f).idle_w == 80
