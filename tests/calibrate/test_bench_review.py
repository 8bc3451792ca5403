"""Review checks of `hwtune bench` profiles: fitted quantities on synthetic data with known
answers, and bad profiles refused with one line naming the field, the value and what was
expected."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from calib_profile_data import make_doc


def _write(tmp_path: Path, doc: dict) -> str:
    p = tmp_path / "prof.yaml"
    p.write_text(yaml.safe_dump(doc))
    return str(p)


ESTIMATE = ["estimate", "-m", "llama3.1-8b", "--gpus", "1", "--gpu"]


@pytest.mark.parametrize(
    ("section", "key", "value", "words"),
    [
        ("gemm", "seconds", float("inf"), ("inf", "finite")),
        ("gemm", "dtype", "fp99", ("fp99", "fp32")),
        ("memory", "copy_bytes_per_s", float("inf"), ("inf", "finite")),
        ("collectives", "seconds", float("inf"), ("inf", "finite")),
    ],
)
def test_non_finite_or_unknown_dtype_profile_values(
    tmp_path: Path, section: str, key: str, value: object, words: tuple[str, ...], rejects
):
    """An infinite time or rate, or a GEMM of a dtype bench never measures, was accepted and
    silently ignored or used (estimate ran with exit 0)."""
    doc = make_doc()
    if section == "memory":
        doc["memory"] = {"copy_bytes_per_s": 1e10, "launch_s": 5e-6}
        doc["memory"][key] = value
        field = f"memory.{key}"
    else:
        if not doc.get(section):
            doc[section] = [{"op": "all_reduce", "ranks": 2, "bytes": 1024.0, "seconds": 1e-4}]
        doc[section][0][key] = value
        field = f"{section}.0.{key}"
    rejects([*ESTIMATE, _write(tmp_path, doc)], field, *words)
