"""The command listings of ``hwtune --help`` and its groups: one summary per command, with the
docstring's source line breaks joined (Typer's rich help keeps them in a listing, so a sentence
broke after "schedule," in the middle of a row)."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from hwtune.cli.main import app

GROUPS = [[], ["serve"], ["energy"], ["accel"]]


@pytest.mark.parametrize("group", GROUPS)
def test_every_listed_summary_is_one_paragraph(group, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # wide enough that no summary needs wrapping
    out = CliRunner().invoke(app, [*group, "--help"]).output
    rows = out.split("Commands", 1)[1].splitlines()[1:]
    body = [r for r in rows if r.startswith("│")]
    assert body, out
    for row in body:
        # a row that continues the previous one starts with blanks where the name would be
        assert re.match(r"│ [a-z]", row), f"a summary broke over lines: {row!r}"
