"""Session 49's calibration review: `serve measure` errors are one line."""

from __future__ import annotations

import socket

from typer.testing import CliRunner

from hwtune.cli.main import app


def _closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_measure_error_is_exactly_one_line():
    # --served-model skips discovery, so the refused connection is met inside the runs' progress
    # bar, which off a terminal used to end with an empty line before the error
    url = f"http://127.0.0.1:{_closed_port()}"
    r = CliRunner().invoke(app, ["serve", "measure", "--url", url, "--served-model", "m",
                                 "--concurrency", "1"])  # fmt: skip
    assert r.exit_code == 2
    assert r.stderr.startswith("error: --url: ")
    assert r.stderr.count("\n") == 1 and r.stderr.endswith("\n"), repr(r.stderr)
    assert r.stdout == ""
