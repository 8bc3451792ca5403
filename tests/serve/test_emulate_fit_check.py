"""`hwtune serve emulate` refuses at startup a deployment that cannot fit, instead of listening
and failing every request."""

from __future__ import annotations

import subprocess
import sys


def test_unfit_model_exits_2_before_listening() -> None:
    r = subprocess.run([sys.executable, "-m", "hwtune.cli.serve", "emulate", "-m", "llama3.1-405b",
                        "--port", "0"], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 2
    assert r.stderr.startswith("error: --model:") and "short by" in r.stderr
    assert r.stderr.count("\n") == 1
    assert "emulating" not in r.stderr
