"""`hwtune estimate`: one JSON document with --json; bad input exits 2 with one line on stderr
naming the field and no traceback (DESIGN.md, Conventions and Interfaces)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hwtune.train.estimator import estimate

KEYS = ("step_time_s", "mfu", "hfu", "tflops_per_gpu", "tokens_per_s", "tokens_per_s_per_gpu",
        "memory_per_gpu_bytes", "fits", "breakdown")  # fmt: skip
CONFIG = (
    Path(__file__).resolve().parents[2]
    / "src/hwtune/model/configs/meta-llama--Meta-Llama-3.1-8B.json"
)


def hwtune(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the real command in a child process (no terminal: stdout/stderr are pipes)."""
    return subprocess.run(
        [sys.executable, "-m", "hwtune.cli.main", *args],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_default_estimate_exits_zero():
    r = hwtune("estimate")
    assert r.returncode == 0, r.stderr
    assert "step time" in r.stdout
    assert "Traceback" not in r.stderr


def test_json_is_one_document_with_the_keys():
    r = hwtune("estimate", "--json", "--gpus", "8", "--tp", "2", "--global-batch", "16")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)  # raises on anything but exactly one JSON document
    assert isinstance(doc, dict)
    for key in KEYS:
        assert key in doc, key
    for key in ("weights", "gradients", "optimizer", "activations"):
        assert key in doc["memory_per_gpu_bytes"], key
    assert doc["n_gpus"] == 8
    assert doc["strategy"]["tp"] == 2 and doc["strategy"]["dp"] == 4


def test_json_matches_the_library():
    # Everything the CLI does is one call away: the same configuration gives the same numbers.
    r = hwtune("estimate", "--json", "--model", "llama3.1-8b", "--gpus", "8", "--tp", "2",
               "--pp", "2", "--global-batch", "32", "--seq", "4096", "--recompute", "selective",
               "--zero", "1")  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    lib = estimate("llama3.1-8b", gpu="h100-sxm-80gb", gpus=8, tp=2, pp=2, global_batch=32,
                   seq=4096, recompute="selective", zero=1)  # fmt: skip
    assert doc["step_time_s"] == pytest.approx(lib.step_time_s)
    assert doc["mfu"] == pytest.approx(lib.mfu)
    assert doc["memory_per_gpu_bytes"]["total"] == pytest.approx(lib.memory.total)


def test_config_json_path_is_accepted():
    r = hwtune("estimate", "--json", "--model", str(CONFIG), "--gpus", "8", "--seq", "4096")
    assert r.returncode == 0, r.stderr
    json.loads(r.stdout)


def bad(*args: str) -> str:
    """Run a failing command; return its stderr as one string (lines joined)."""
    r = hwtune("estimate", "--json", *args)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    assert r.stdout == ""  # no half-written JSON on stdout
    assert r.stderr.strip(), "an error message is expected on stderr"
    return " ".join(r.stderr.split())


def test_unknown_model_suggests_close_names():
    msg = bad("--model", "llama3.1-8bb")
    assert "model" in msg and "llama3.1-8bb" in msg
    assert "llama3.1-8b," in msg or "llama3.1-8b " in msg  # the close catalog name is suggested


def test_unknown_gpu():
    msg = bad("--gpu", "h1000")
    assert "gpu" in msg and "h1000" in msg
    assert "h100-sxm-80gb" in msg


def test_tp_not_dividing_heads():
    # Llama 3.1 8B has 32 attention heads; 3 GPUs so that the GPU count itself is consistent.
    msg = bad("--gpus", "3", "--tp", "3")
    assert "tp: got 3" in msg and "32" in msg


def test_malformed_config_json(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"hidden_size": 4096, "num_attention_heads": ')
    msg = bad("--model", str(path))
    assert "config.json" in msg
    assert "JSON" in msg or "json" in msg


def test_missing_config_field(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 4096}))
    bad("--model", str(path))


def test_unknown_schedule():
    msg = bad("--schedule", "foo")
    assert "schedule" in msg and "foo" in msg
    assert "1f1b" in msg  # lists what is accepted


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("--recompute", "sometimes"), "recompute"),
        (("--precision", "fp9"), "precision"),
        (("--zero", "4"), "zero"),
        (("--gpus", "8", "--global-batch", "12"), "--global-batch"),
        (("--ep", "2", "--gpus", "2"), "ep"),
        (("--sequence-parallel",), "--sequence-parallel"),
        (("--gpu", "a100-sxm4-80gb", "--precision", "fp8"), "precision"),
    ],
)
def test_bad_strategy_fields(args, field):
    msg = bad(*args)
    assert field in msg


def test_tp_zero_names_tp():
    # The option the user gave is named, not a quantity derived from it.
    msg = bad("--tp", "0")
    assert "tp: got 0" in msg


def test_long_error_stays_on_one_line():
    # DESIGN.md: bad input gets a one-line error. The unknown-model message with its
    # suggestions is longer than 80 characters.
    r = hwtune("estimate", "--model", "llama3.1-8bb")
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_short_error_is_one_line():
    r = hwtune("estimate", "--gpus", "3", "--tp", "3")
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["estimate", "--gpus", "abc"], ("--gpus", "'abc'", "a valid integer")),
        (["serve", "plan", "--ttft-p90", "soon"], ("--ttft-p90", "'soon'", "a valid number")),
        (["serve", "--no-such-flag", "1"], ("--no-such-flag", "hwtune serve --help")),
        (["no-such-command"], ("no-such-command", "hwtune --help")),
        (["serve", "--input-len"], ("--input-len", "requires an argument")),
    ],
)
def test_usage_errors_are_one_line(args: list[str], words: tuple[str, ...], rejects):
    """Errors that typer finds while parsing (a value of the wrong type, an unknown option or
    command, a missing value) are one line with exit code 2, like hwtune's own."""
    rejects(args, *words)


@pytest.mark.parametrize(
    ("text", "field", "words"),
    [
        ("n_gpus: 8\ngpus_per_node: eight\n", "gpus_per_node", ("'eight'", "a valid integer")),
        ("n_gpus: 8\nnic_gbps_per_gpu: -5\n", "nic_gbps_per_gpu", ("-5", "greater than 0")),
        ("n_gpus: 8\nfoo: 3\n", "foo", ("a known field name",)),
    ],
)
def test_cluster_file_errors_in_plain_words(tmp_path, text, field, words, rejects):
    """A cluster file's bad field says what was expected without pydantic's "Input should
    be" / "Extra inputs are not permitted"."""
    f = tmp_path / "c.yaml"
    f.write_text("device: h100-sxm-80gb\n" + text)
    line = rejects(["estimate", "--cluster", str(f)], f"c.yaml.{field}", *words)
    assert "Input should" not in line and "Extra inputs" not in line


@pytest.mark.parametrize(
    ("name", "text", "words"),
    [
        (
            "c.yaml",
            "device: h100-sxm-80gb\nn_gpus: 8\nn_gpus: 16\n",
            ("'n_gpus' given twice", "line 3"),
        ),
        (
            "c.json",
            '{"device": "h100-sxm-80gb", "n_gpus": 8, "n_gpus": 16}',
            ("'n_gpus' given twice",),
        ),
    ],
)
def test_a_key_given_twice_in_a_file_is_refused(tmp_path, name, text, words, rejects):
    """YAML and JSON parsers keep the last of two equal keys; a user file that gives one twice
    is refused instead of running with whichever came last."""
    f = tmp_path / name
    f.write_text(text)
    rejects(["estimate", "--cluster", str(f)], "cluster", name, "each key once", *words)


def test_yaml_merge_keys_still_override(tmp_path):
    """A YAML merge (`<<`) followed by an explicit key is an override, not a repeated key."""
    from hwtune.structured_file import read_structured

    f = tmp_path / "m.yaml"
    f.write_text("base: &b {n_gpus: 8, nic_gbps_per_gpu: 400}\nc:\n  <<: *b\n  n_gpus: 16\n")
    assert read_structured(f, "x")["c"] == {"n_gpus": 16, "nic_gbps_per_gpu": 400}


@pytest.mark.parametrize(
    ("msg", "expected"),
    [
        ("Input should be greater than 0", "a value greater than 0"),
        ("Input should be less than or equal to 3", "a value less than or equal to 3"),
        ("Input should be a finite number", "a finite number"),
        (
            "Input should be a valid integer, unable to parse string as an integer",
            "a valid integer",
        ),
        ("Extra inputs are not permitted", "a known field name (this one is unknown)"),
        ("Value error, a ZeRO stage 0-3", "a ZeRO stage 0-3"),
    ],
)
def test_pydantic_messages_are_reworded_as_what_was_expected(msg, expected):
    from hwtune.errors import expected_from_pydantic

    assert expected_from_pydantic(msg) == expected
