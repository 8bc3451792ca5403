"""Helpers for the energy tests: writing fake sysfs files and a hand-moved clock."""

from __future__ import annotations

import os
import time
from pathlib import Path


def write(path: Path, text: str) -> Path:
    """``text`` into ``path`` atomically (written beside it, then renamed), so that a meter's
    sampler thread never reads a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


def wait_for(cond, timeout_s: float = 5.0) -> None:  # noqa: ANN001
    """Poll ``cond`` until it holds: a background sampler's tick."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "background sampler did not tick"
        time.sleep(0.002)


class Clock:
    """A hand-moved clock for meters that integrate over time."""

    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def run_steps(tuner, sim, steps: int, events=None) -> None:  # noqa: ANN001
    """Drive an online tuner on a simulated device for ``steps`` training steps; ``events``
    maps a step index to a call made just before it (a cap change, a power jump)."""
    for i in range(steps):
        if events and i in events:
            events[i]()
        plan = tuner.step_begin()
        sim.run_step(plan.batch_size)
        tuner.step_end()
