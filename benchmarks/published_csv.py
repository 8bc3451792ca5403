"""Published measurements kept as CSV with a commented header (``# source ...`` lines first):
how the ``*_vs_published`` benchmarks write what they extract and read it back."""

from __future__ import annotations

import csv
from collections.abc import Iterable
from pathlib import Path


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
