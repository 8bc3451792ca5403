"""`hwtune bench`: bad input exits 2 with one line naming the field and the value, before any
measuring (no test here runs a benchmark), without a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0"])
def test_budget(value: str, rejects):
    rejects(["bench", "--budget", value], "budget", value)


def test_output_in_a_missing_directory_fails_before_the_run(tmp_path: Path, rejects):
    rejects(["bench", "--output", str(tmp_path / "missing" / "p.yaml")], "output", "missing")


def test_empty_list_item_is_not_dropped(rejects):
    rejects(["bench", "--dtypes", "fp32,,bf16"], "dtypes", "fp32,,bf16")


def collectives(tmp_path: Path, points: list[dict]) -> str:
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"collectives": points}))
    return str(f)


GOOD = {"op": "all_reduce", "ranks": 2, "bytes": 1024, "seconds": 1e-5}


def test_collectives_file_without_the_collectives_section(tmp_path: Path, rejects):
    f = collectives(tmp_path, [GOOD])
    rejects(["bench", "--sections", "gemm,memory", "--collectives-from", f], "collectives-from")


def test_collectives_file_with_ranks(tmp_path: Path, rejects):
    f = collectives(tmp_path, [GOOD])
    rejects(["bench", "--collectives-from", f, "--ranks", "4"], "ranks", "4")


@pytest.mark.parametrize("bad", [{k: v for k, v in GOOD.items() if k != "seconds"},
                                 {**GOOD, "bytes": "1k"}, {**GOOD, "seconds": -1.0}])  # fmt: skip
def test_bad_collective_points_fail_before_measuring(tmp_path: Path, bad: dict, rejects):
    rejects(["bench", "--collectives-from", collectives(tmp_path, [GOOD, bad])], "collectives[1]")


def test_non_utf8_collectives_file(tmp_path: Path, rejects):
    f = tmp_path / "c.json"
    f.write_bytes(b"\xff\xfe\x00bad")
    rejects(["bench", "--collectives-from", str(f)], "collectives-from", "utf-8")


def test_collectives_file_with_a_key_given_twice(tmp_path: Path, rejects):
    # json.loads kept the last "seconds" of the point, silently
    f = tmp_path / "c.json"
    f.write_text('{"collectives": [{"op": "all_reduce", "ranks": 2, "bytes": 1024, '
                 '"seconds": 1e-5, "seconds": 2e-5}]}')  # fmt: skip
    rejects(["bench", "--collectives-from", str(f)], "--collectives-from", "c.json",
            "each key once in a mapping ('seconds' given twice)")  # fmt: skip
