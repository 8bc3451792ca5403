"""Offline co-optimization of batch size and GPU clock under a power cap.

Time to target = steps(B) x T(B, f) (Ahmed et al. 2025, "Accelerated Training on Low-Power
Edge Devices", arXiv 2502.18323, §3: TT_acc(b, f) = T_s(b, f) x N_s,acc(b), minimized subject
to P(b, f) <= P_max). Steps come from the critical-batch model (`convergence.py`), T and P from
the step and power models. Objectives:

- ``time``: time to target; ``energy``: energy to target (steps x T x P);
- ``mix``: Zeus's cost η·E + (1 − η)·MAXPOWER·T (You, Chung & Chowdhury, NSDI'23, §3.1, Eq. 2,
  MAXPOWER the GPU's maximum power limit). MAXPOWER is a constant of the device, not the cap:
  weighting time by the cap would change the metric with the cap, so that a looser cap could
  choose a point that is worse by the metric of the tighter one. ``max_power_w`` names it
  (the CLI passes the profile's maximum module power); by default it is the model's power at
  the top clock with the device fully busy.

For each batch the clocks are scanned up the table; power rises with the clock (the f V^2 term
outgrows the small fall in utilization), so for the time objective the best clock of a batch is
its highest feasible one. The scan is over the whole (B, f) grid of the *models* — cheap — and
reports every point, the feasible time/energy Pareto frontier, and the baseline that throttles
the clock at the user's batch (frequency-only, what DVFS-based capping does).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Literal

from hwtune.energy.convergence import CriticalBatch
from hwtune.energy.meters.base import clock_table
from hwtune.energy.power_model import PowerModel
from hwtune.energy.step_model import StepTimeModel
from hwtune.errors import HwtuneInputError

Objective = Literal["time", "energy", "mix"]


@dataclass(frozen=True, slots=True)
class OperatingPoint:
    """One (batch, clock) evaluated by the models, SI units."""

    batch: int
    frequency_hz: float
    step_time_s: float
    power_w: float
    utilization: float
    steps: float
    time_to_target_s: float
    energy_to_target_j: float
    feasible: bool

    @property
    def samples_per_s(self) -> float:
        return self.batch / self.step_time_s

    def to_dict(self) -> dict[str, float | int | bool]:
        return asdict(self)


@dataclass(frozen=True)
class CoOptResult:
    """The choice, the frequency-only baseline at the user's batch, and the frontier."""

    cap_w: float
    objective: str
    best: OperatingPoint
    frequency_only: OperatingPoint | None
    frontier: tuple[OperatingPoint, ...]
    points: tuple[OperatingPoint, ...] = field(repr=False)

    @property
    def speedup(self) -> float | None:
        """Time-to-target gain of the choice over frequency-only throttling."""
        if self.frequency_only is None:
            return None
        return self.frequency_only.time_to_target_s / self.best.time_to_target_s

    @property
    def energy_ratio(self) -> float | None:
        """Energy to target of frequency-only throttling over that of the choice."""
        if self.frequency_only is None:
            return None
        return self.frequency_only.energy_to_target_j / self.best.energy_to_target_j

    def to_dict(self) -> dict[str, object]:
        return {
            "cap_w": self.cap_w,
            "objective": self.objective,
            "best": self.best.to_dict(),
            "frequency_only": self.frequency_only.to_dict() if self.frequency_only else None,
            "speedup_vs_frequency_only": self.speedup,
            "energy_ratio_vs_frequency_only": self.energy_ratio,
            "frontier": [p.to_dict() for p in self.frontier],
        }


def evaluate(
    batch: int,
    f_hz: float,
    step: StepTimeModel,
    power: PowerModel,
    convergence: CriticalBatch,
    cap_w: float,
) -> OperatingPoint:
    """One operating point under the models."""
    parts = step.parts(batch, f_hz)
    t = parts.total_s
    p = power.power_w(f_hz, parts.utilization, parts.mem_utilization)
    n = convergence.steps(batch)
    return OperatingPoint(
        batch=int(batch),
        frequency_hz=float(f_hz),
        step_time_s=t,
        power_w=p,
        utilization=parts.utilization,
        steps=n,
        time_to_target_s=n * t,
        energy_to_target_j=n * t * p,
        feasible=p <= cap_w,  # exactly: a point at the cap fits, one above never does
    )


def cost(
    point: OperatingPoint, objective: Objective, max_power_w: float, eta: float = 0.5
) -> float:
    """The objective's value of a point (lower is better); ``max_power_w`` is Zeus's MAXPOWER
    (NSDI'23 §3.1, Eq. 2), used by ``mix`` only."""
    if objective == "time":
        return point.time_to_target_s
    if objective == "energy":
        return point.energy_to_target_j
    if objective == "mix":
        return eta * point.energy_to_target_j + (1 - eta) * max_power_w * point.time_to_target_s
    raise HwtuneInputError("objective", objective, "time, energy or mix")


def pareto_frontier(points: Sequence[OperatingPoint]) -> tuple[OperatingPoint, ...]:
    """Feasible points not dominated in (time to target, energy to target), by time."""
    feas = sorted(
        (p for p in points if p.feasible), key=lambda p: (p.time_to_target_s, p.energy_to_target_j)
    )
    out: list[OperatingPoint] = []
    best_e = float("inf")
    for p in feas:
        if p.energy_to_target_j < best_e:
            out.append(p)
            best_e = p.energy_to_target_j
    return tuple(out)


def _check_inputs(
    batch_sizes: Sequence[int], frequencies_hz: Sequence[float], cap_w: float
) -> tuple[float, ...]:
    """The clock table (`clock_table`), once every input is checked."""
    if not batch_sizes or not all(_is_positive_int(b) for b in batch_sizes):
        raise HwtuneInputError("batch sizes", list(batch_sizes), "positive integers")
    table = clock_table(frequencies_hz)
    if not (cap_w > 0 and math.isfinite(cap_w)):
        raise HwtuneInputError("power cap", cap_w, "a positive finite power in W")
    return table


def _is_positive_int(b: object) -> bool:
    return (
        isinstance(b, int | float)
        and not isinstance(b, bool)
        and math.isfinite(b)
        and b == int(b)
        and b > 0
    )


def co_optimize(
    step: StepTimeModel,
    power: PowerModel,
    convergence: CriticalBatch,
    batch_sizes: Sequence[int],
    frequencies_hz: Sequence[float],
    cap_w: float,
    user_batch: int | None = None,
    objective: Objective = "time",
    eta: float = 0.5,
    max_power_w: float | None = None,
) -> CoOptResult:
    """Choose (batch, clock) minimizing ``objective`` subject to power <= ``cap_w``.

    ``user_batch`` (default: the largest candidate) is the batch the frequency-only baseline
    keeps; it is always a candidate too (keeping the current batch is an option), even when
    ``batch_sizes`` leaves it out. ``max_power_w`` is Zeus's MAXPOWER for ``mix`` (default: the power model at the
    top clock, fully busy). Raises when no candidate fits the cap (the message names the lowest
    power found)."""
    freqs = list(_check_inputs(batch_sizes, frequencies_hz, cap_w))
    if user_batch is not None and not _is_positive_int(user_batch):
        raise HwtuneInputError("user batch", user_batch, "a positive integer")
    if max_power_w is not None and not (
        isinstance(max_power_w, int | float) and max_power_w > 0 and math.isfinite(max_power_w)
    ):
        raise HwtuneInputError("max power", max_power_w, "a positive finite power in W")
    if objective not in ("time", "energy", "mix"):
        raise HwtuneInputError("objective", objective, "time, energy or mix")
    if not 0 <= eta <= 1:
        raise HwtuneInputError("eta", eta, "an energy weight in [0, 1]")
    batches = sorted(set(int(b) for b in batch_sizes))
    ub = int(user_batch) if user_batch is not None else batches[-1]
    if ub not in batches:
        batches = sorted({*batches, ub})
    points = tuple(evaluate(b, f, step, power, convergence, cap_w) for b in batches for f in freqs)
    feasible = [p for p in points if p.feasible]
    if not feasible:
        lowest = min(points, key=lambda p: p.power_w)
        raise HwtuneInputError(
            "power cap",
            cap_w,
            f"at least {lowest.power_w:.2f} W (the lowest power over the candidates: batch "
            f"{lowest.batch} at {lowest.frequency_hz / 1e6:.0f} MHz)",
        )
    p_max = max_power_w if max_power_w is not None else power.power_w(freqs[-1], 1.0, 1.0)
    best = min(feasible, key=lambda p: (cost(p, objective, p_max, eta), -p.frequency_hz))
    at_user = [p for p in feasible if p.batch == ub]
    freq_only = max(at_user, key=lambda p: p.frequency_hz) if at_user else None
    return CoOptResult(
        cap_w=cap_w,
        objective=objective,
        best=best,
        frequency_only=freq_only,
        frontier=pareto_frontier(points),
        points=points,
    )


def power_of_two_batches(lo: int, hi: int) -> list[int]:
    """Powers of two from ``lo`` to ``hi`` inclusive (rounded into range)."""
    if lo <= 0 or hi < lo:
        raise HwtuneInputError("batch range", (lo, hi), "0 < lo <= hi")
    out, b = [], 1
    while b <= hi:
        if b >= lo:
            out.append(b)
        b *= 2
    return out or [lo]
