"""`hwtune accel ... -w FILE`: a graph file that does not exist is reported as missing, naming
--workload and the path, before anything about the onnx package or the file's contents."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from hwtune.cli.main import app


@pytest.mark.parametrize(
    ("name", "kind"),
    [("missing.onnx", "ONNX"), ("missing.yaml", "YAML graph"), ("missing.yml", "YAML graph")],
)
@pytest.mark.parametrize("cmd", ["graph", "evaluate"])
def test_missing_graph_file_is_named_as_missing(tmp_path: Path, name: str, kind: str, cmd: str):
    path = tmp_path / name
    assert not path.exists()  # the reason the error must be about the file
    r = CliRunner().invoke(app, ["accel", cmd, "-w", str(path)])
    assert r.exit_code == 2, r.output
    assert r.output == f"error: --workload: got {str(path)!r}; expected an existing {kind} file\n"
    assert "onnx package" not in r.output  # before the fix: the missing package was blamed


def test_a_directory_named_like_a_graph_is_not_an_existing_file(tmp_path: Path):
    d = tmp_path / "model.onnx"
    d.mkdir()
    r = CliRunner().invoke(app, ["accel", "graph", "-w", str(d)])
    assert r.exit_code == 2
    assert "expected an existing ONNX file" in r.output


def test_an_existing_yaml_graph_still_loads(tmp_path: Path):
    # the check must not refuse a file that is there (the YAML importer needs no extra package)
    g = tmp_path / "g.yaml"
    g.write_text(
        "input: {name: x, shape: [1, 8]}\n"
        "layers:\n"
        "  - {name: fc, op: linear, input: x, out_features: 4}\n"
    )
    r = CliRunner().invoke(app, ["accel", "graph", "-w", str(g)])
    assert r.exit_code == 0, r.output
    assert "fc" in r.output
