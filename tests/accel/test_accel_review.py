"""Review checks of `hwtune accel`: the cost, energy and memory models move in the right
direction (fusion, checkpointing, core count), the genetic search is seeded and elitist, and bad
input is refused with one line."""

from __future__ import annotations

import pytest

ACCEL = ["accel", "search", "-w", "gpt2", "--seq", "16", "--evaluations", "8", "--pop-size", "4"]


@pytest.mark.parametrize("seed", ["-1", str(2**32)])
def test_search_seed_out_of_numpys_range(seed: str, rejects):
    """A negative seed raised a numpy ValueError traceback from inside pymoo (exit 1)."""
    rejects([*ACCEL, "--seed", seed], "seed", seed)
