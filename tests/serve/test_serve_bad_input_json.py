"""`--json` prints strict JSON: a statistic without a value (the TPOT of one-token outputs) is
null, never a bare NaN that JSON parsers reject."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from hwtune.cli.main import app


def strict(text: str) -> dict:
    def no_constants(name: str) -> None:
        raise AssertionError(f"{name} in the JSON output")

    return json.loads(text, parse_constant=no_constants)


def test_serve_json_with_one_token_outputs_is_strict():
    r = CliRunner().invoke(app, ["serve", "--concurrency", "2", "--input-len", "64",
                                 "--output-len", "1", "--num-requests", "4", "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = strict(r.stdout)
    assert doc["tpot_s"]["mean"] is None and doc["ttft_s"]["mean"] > 0


def test_plan_json_with_one_token_outputs_is_strict():
    r = CliRunner().invoke(app, ["serve", "plan", "--max-gpus", "1", "--concurrency", "2",
                                 "--input-len", "64", "--output-len", "1", "--num-requests", "4",
                                 "--ttft-p90", "10", "--processes", "1", "--no-disagg", "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = strict(r.stdout)
    assert doc["best"] and doc["best"][0]["tpot_p90_s"] is None
