"""Cluster scale: energy per training step and per token for a strategy, and per-pipeline-stage
clock planning that slows stages off the critical path without lengthening the step.

Energy per step integrates `hwtune.cost.power.power_at_frequency` over the estimator's step
breakdown on every GPU: static power over the whole step; dynamic power at the (power-capped)
clock while compute runs; ``comm_activity`` of it while exposed communication runs (NCCL
kernels keep a few SMs and the copy engines busy, not the tensor cores: an ASSUMPTION, 0.3 by
default, to be replaced by a measurement); static only through pipeline bubbles.

Per-stage planning follows Perseus (Chung et al., "Reducing Energy Bloat in Large Model
Training", SOSP'24, §3-4): in an imbalanced pipeline the stages that are not on the critical
path finish their work early and idle; running them at a lower clock (lower voltage) takes the
same step time and less energy. Perseus solves the full per-operation time-energy frontier;
here one clock per stage is chosen greedily: repeatedly lower the stage clock that saves the
most energy while a 1F1B simulation (PipeDream-Flush order, Narayanan et al. SC'21 §2.2.1) of
the step stays within ``tolerance`` of the original step time. Perseus reports up to 30% energy
saved on large-model training (REFERENCES.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from hwtune.energy.meters.base import clock_table
from hwtune.energy.power_model import PowerModel
from hwtune.errors import HwtuneInputError
from hwtune.train.schedules import MAX_MICRO_BATCHES
from hwtune.train.step_energy import (
    StepEnergy,
    step_energy,
)


def rank_by_energy(
    candidates: Sequence[tuple[object, object]], power: PowerModel | None = None
) -> list[tuple[StepEnergy, object]]:
    """(estimate, cluster) pairs sorted by energy per token, lowest first."""
    scored = [(step_energy(e, c, power), e) for e, c in candidates]
    return sorted(scored, key=lambda x: x[0].energy_per_token_j)


# --- per-stage clocks (Perseus) ---------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class StageWork:
    """One pipeline stage's time per micro-batch at the reference clock, and the share of it
    that is memory-bound (does not speed up or slow down with the clock)."""

    forward_s: float
    backward_s: float
    memory_share: float = 0.0

    def scaled(self, f_ratio: float) -> tuple[float, float]:
        k = self.memory_share + (1.0 - self.memory_share) / f_ratio
        return self.forward_s * k, self.backward_s * k


def one_f_one_b_time(stages: Sequence[StageWork], microbatches: int,
                     f_ratios: Sequence[float]) -> tuple[float, list[float]]:  # fmt: skip
    """Step time of a 1F1B pipeline (no p2p cost) and each stage's busy time at the reference
    clock's power, by simulating the dependency graph: F(s, i) after F(s-1, i); B(s, i) after
    B(s+1, i) and F(s, i); each stage runs its ops in 1F1B order (warm-up forwards, then one
    forward one backward).

    A stage's clock applies to its steady-state ops; its first forward and last backward lie on
    the pipeline's fill and drain path, which every stage shares, so they keep the top clock
    (Perseus sets clocks per computation for the same reason, SOSP'24 §4). ``busy`` is
    returned per stage as (seconds at the stage clock, seconds at the top clock)."""
    p, m = len(stages), microbatches
    orders: list[list[tuple[str, int]]] = []
    for s in range(p):
        w = min(p - s - 1, m)
        seq = [("F", i) for i in range(w)]
        for i in range(m - w):
            seq += [("F", w + i), ("B", i)]
        seq += [("B", i) for i in range(m - w, m)]
        orders.append(seq)
    durs = [st.scaled(r) for st, r in zip(stages, f_ratios, strict=True)]
    top = [st.scaled(1.0) for st in stages]
    done: dict[tuple[str, int, int], float] = {}
    free = [0.0] * p
    ptr = [0] * p
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for s in range(p):
            while ptr[s] < len(orders[s]):
                kind, i = orders[s][ptr[s]]
                if kind == "F":
                    dep = done.get(("F", s - 1, i)) if s > 0 else 0.0
                else:
                    dep = done.get(("B", s + 1, i)) if s < p - 1 else done.get(("F", s, i))
                if dep is None:
                    break
                start = max(free[s], dep)
                edge = (kind == "F" and i == 0) or (kind == "B" and i == m - 1)
                d = top[s] if edge else durs[s]
                end = start + (d[0] if kind == "F" else d[1])
                done[(kind, s, i)] = end
                free[s] = end
                ptr[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # cannot happen for a valid 1F1B order
            raise RuntimeError("pipeline simulation deadlocked")
    busy = [((m - 1) * (d[0] + d[1]), t[0] + t[1]) for d, t in zip(durs, top, strict=True)]
    return max(free), busy  # type: ignore[return-value]


@dataclass(frozen=True)
class StagePlan:
    """A clock per stage, with the step time and energy before and after."""

    frequencies_hz: tuple[float, ...]
    step_time_s: float
    baseline_step_time_s: float
    energy_j: float
    baseline_energy_j: float

    @property
    def saved_fraction(self) -> float:
        return 1.0 - self.energy_j / self.baseline_energy_j if self.baseline_energy_j else 0.0

    def to_dict(self) -> dict[str, object]:
        return {
            "frequencies_hz": list(self.frequencies_hz),
            "step_time_s": self.step_time_s,
            "baseline_step_time_s": self.baseline_step_time_s,
            "energy_j": self.energy_j,
            "baseline_energy_j": self.baseline_energy_j,
            "saved_fraction": self.saved_fraction,
        }


def _pipeline_energy(stages: Sequence[StageWork], m: int, freqs: Sequence[float],
                     power: PowerModel) -> tuple[float, float]:  # fmt: skip
    ratios = [f / power.f_ref_hz for f in freqs]
    t, busy = one_f_one_b_time(stages, m, ratios)
    top = power.f_ref_hz
    e = 0.0
    for st, f, (b_stage, b_top) in zip(stages, freqs, busy, strict=True):  # type: ignore[misc]
        # busy time at full utilization; its memory-bound share also draws DRAM power
        e += power.static_w * t
        e += (power.power_w(f, 1.0, st.memory_share) - power.static_w) * b_stage
        e += (power.power_w(top, 1.0, st.memory_share) - power.static_w) * b_top
    return t, e


def plan_stage_frequencies(
    stages: Sequence[StageWork],
    microbatches: int,
    frequencies_hz: Sequence[float],
    power: PowerModel,
    tolerance: float = 0.0,
) -> StagePlan:
    """Per-stage clocks for a 1F1B step (see the module docstring); every stage starts at the
    top clock, and the step may grow by at most ``tolerance`` (a fraction)."""
    if len(stages) < 1 or microbatches < 1:
        raise HwtuneInputError(
            "pipeline", (len(stages), microbatches), "stages >= 1, micro-batches >= 1"
        )
    if microbatches > MAX_MICRO_BATCHES:
        raise HwtuneInputError(
            "microbatches", microbatches, f"at most {MAX_MICRO_BATCHES:,} micro-batches per step"
        )
    if not (tolerance >= 0 and math.isfinite(tolerance)):
        raise HwtuneInputError("tolerance", tolerance, "a non-negative finite fraction")
    for i, st in enumerate(stages):
        if not (
            st.forward_s > 0 and st.backward_s > 0
            and math.isfinite(st.forward_s) and math.isfinite(st.backward_s)
            and 0 <= st.memory_share < 1
        ):  # fmt: skip
            raise HwtuneInputError(
                f"stage {i}", st, "positive finite times and a memory share in [0, 1)"
            )
    table = clock_table(frequencies_hz)
    if abs(table[-1] - power.f_ref_hz) > 1e3:
        raise HwtuneInputError(
            "frequencies",
            table[-1],
            f"a table topped by the power model's f_ref {power.f_ref_hz:g} Hz",
        )
    idx = [len(table) - 1] * len(stages)
    t0, e0 = _pipeline_energy(stages, microbatches, [table[i] for i in idx], power)
    limit = t0 * (1 + tolerance) + 1e-12
    t_cur, e_cur = t0, e0
    while True:
        best: tuple[float, int, float] | None = None
        for s in range(len(stages)):
            if idx[s] == 0:
                continue
            trial = list(idx)
            trial[s] -= 1
            t, e = _pipeline_energy(stages, microbatches, [table[i] for i in trial], power)
            if t <= limit and e < e_cur - 1e-12 and (best is None or e < best[0]):
                best = (e, s, t)
        if best is None:
            break
        e_cur, s, t_cur = best
        idx[s] -= 1
    return StagePlan(
        frequencies_hz=tuple(table[i] for i in idx),
        step_time_s=t_cur,
        baseline_step_time_s=t0,
        energy_j=e_cur,
        baseline_energy_j=e0,
    )
