"""A user's structured file: JSON content is read by the JSON parser whatever the file's name."""

from __future__ import annotations

import json

import pytest

from hwtune.errors import HwtuneInputError
from hwtune.structured_file import read_structured


def test_json_without_the_suffix_skips_the_yaml_parser(tmp_path, monkeypatch):
    """A large JSON file given where a YAML one is expected (a trace passed as --gpu) goes to the
    JSON parser: PyYAML's constructor took 44 s on a 2.8 MB Chrome trace, json 0.1 s."""
    import yaml

    def no_yaml(*a, **k):
        raise AssertionError("JSON content sent to the YAML parser")

    monkeypatch.setattr(yaml, "load", no_yaml)
    f = tmp_path / "trace"
    f.write_text(json.dumps({"traceEvents": [{"ph": "X", "ts": i} for i in range(1000)]}))
    assert len(read_structured(f, "--gpu")["traceEvents"]) == 1000


def test_json_without_the_suffix_still_refuses_a_repeated_key(tmp_path):
    f = tmp_path / "dev.yaml"
    f.write_text('{"name": "a", "name": "b"}')
    with pytest.raises(HwtuneInputError, match="given twice"):
        read_structured(f, "--gpu")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{a: 1, b: [x, y]}", {"a": 1, "b": ["x", "y"]}),  # YAML flow style, not JSON
        ("[1, 2, {k: v}]", [1, 2, {"k": "v"}]),
        ('{"a": 1}', {"a": 1}),
    ],
)
def test_flow_style_yaml_and_json_read_alike(tmp_path, text, expected):
    f = tmp_path / "x.yaml"
    f.write_text(text)
    assert read_structured(f, "x") == expected


def test_a_repeated_yaml_key_names_its_line(tmp_path):
    f = tmp_path / "d.yaml"
    f.write_text("a: 1\nb:\n  c: 2\n  c: 3\n")
    with pytest.raises(HwtuneInputError, match=r"'c' given twice \(line 4\)"):
        read_structured(f, "x")
