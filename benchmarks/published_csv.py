"""Published measurements kept as CSV with a commented header (``# source ...`` lines first):
how the ``*_vs_published`` benchmarks write what they extract and read it back, and where
NVIDIA's aiconfigurator keeps the per-op tables they extract from."""

from __future__ import annotations

import csv
from collections.abc import Iterable
from pathlib import Path

AICONFIGURATOR_GPUS = {"h200_sxm": "h200-sxm-141gb", "h100_sxm": "h100-sxm-80gb"}
"""aiconfigurator's system directory: the catalog device it measured."""


def aiconfigurator_data(src: Path) -> Path:
    """The per-op tables' root in a clone of ai-dynamo/aiconfigurator."""
    return src / "aic-core" / "src" / "aiconfigurator_core" / "systems" / "data"


def write_commented_csv(path: Path, header: str, fields: Iterable[str], rows: list[dict]) -> None:
    """``header`` (its lines start with ``#``) then ``rows`` under the column names ``fields``."""
    with open(path, "w", newline="") as f:
        f.write(header)
        w = csv.DictWriter(f, fieldnames=list(fields))
        w.writeheader()
        w.writerows(rows)


def read_commented_csv(path: Path) -> list[dict]:
    """The rows of a file written by `write_commented_csv`, the comment lines skipped."""
    with open(path) as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))
