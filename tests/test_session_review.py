"""Findings of the before-stop review of the session d68ef10..c638cf5, each pinned by a test."""

from __future__ import annotations

import pytest

from hwtune.energy.meters.base import MeterError
from hwtune.energy.meters.replay import ReplayDevice


def test_replay_refuses_a_column_the_first_row_left_empty() -> None:
    """A trace whose first row leaves energy_j empty and a later row fills it: the columns
    are the first row's, so the later cell would be ignored; it is refused in one line (it
    used to raise KeyError from the energy_j monotonicity check)."""
    rows = [
        {"time_s": 0, "power_w": 1, "energy_j": ""},
        {"time_s": 1, "power_w": 1, "energy_j": 5},
    ]
    with pytest.raises(MeterError, match="energy_j"):
        ReplayDevice(rows)
