"""Helpers for the energy tests: writing fake sysfs files and a hand-moved clock."""

from __future__ import annotations

from pathlib import Path


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


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
