"""Energy of one training step from the estimator's breakdown (used by the planner's energy
objective and by `hwtune energy step`).

Energy per step integrates the power model over the estimator's step breakdown on every GPU
(`hwtune.cost.power.step_energy_j`, the integral of `power_at_frequency`, for each part): static
power over the whole step; dynamic power at the (power-capped) clock while compute runs;
``comm_activity`` of it while exposed communication runs (NCCL kernels keep a few SMs and the
copy engines busy, not the tensor cores: an ASSUMPTION, 0.3 by default, to be replaced by a
measurement); static only through pipeline bubbles.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from hwtune.cost.power import clock_fraction, device_power_figures, step_energy_j
from hwtune.train.estimator import EXPOSED_COMM_PARTS


class PowerFigures(Protocol):
    """What a fitted power model provides (``hwtune.energy.PowerModel`` does)."""

    static_w: float
    dynamic_w: float
    v_floor: float
    memory_w: float


COMM_ACTIVITY = 0.3
"""Share of the dynamic power drawn during exposed communication (ASSUMPTION, see above)."""

COMPUTE_PARTS = ("forward", "backward", "recompute", "optimizer")
COMM_PARTS = (*EXPOSED_COMM_PARTS, "offload", "activation_offload")


@dataclass(frozen=True, slots=True)
class StepEnergy:
    """Energy of one training step on the whole cluster, SI units."""

    energy_j: float
    energy_per_token_j: float
    avg_power_w_per_gpu: float
    step_time_s: float
    n_gpus: int
    tokens_per_step: int
    parts_j: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        return {
            "energy_j": self.energy_j,
            "energy_per_token_j": self.energy_per_token_j,
            "avg_power_w_per_gpu": self.avg_power_w_per_gpu,
            "step_time_s": self.step_time_s,
            "n_gpus": self.n_gpus,
            "tokens_per_step": self.tokens_per_step,
            "parts_j": dict(self.parts_j),
        }


def step_energy(
    estimate: object,
    cluster: object,
    power: PowerFigures | None = None,
    comm_activity: float = COMM_ACTIVITY,
) -> StepEnergy:
    """Energy per step and per token of an `Estimate` on its `Cluster`.

    ``power``: the device's power model (default: the catalog's ``idle_w``/reference power with
    the cube law, the model `clock_fraction` uses for the capped clock)."""
    est, cl = estimate, cluster
    dev = cl.device  # type: ignore[attr-defined]
    cap = cl.power_cap_w  # type: ignore[attr-defined]
    if power is None:
        static, dyn = device_power_figures(dev)
        v_floor = 0.0
        f_ratio = clock_fraction(dev, cap) if cap is not None else clock_fraction(dev, dev.tdp_w)
    else:
        static, dyn, v_floor = power.static_w, power.dynamic_w, power.v_floor
        f_ratio = 1.0 if cap is None else clock_fraction(dev, cap)
    bd = est.breakdown  # type: ignore[attr-defined]
    t = est.step_time_s  # type: ignore[attr-defined]
    compute = sum(bd.get(k, 0.0) for k in COMPUTE_PARTS)
    comm = sum(bd.get(k, 0.0) for k in COMM_PARTS)
    idle = max(0.0, t - compute - comm)
    n = est.n_gpus  # type: ignore[attr-defined]

    def part(seconds: float, activity: float) -> float:
        # static power over ``seconds``, dynamic power over ``activity`` of them; no DRAM term
        # (the breakdown does not split memory-bound time out of compute)
        return n * step_energy_j(seconds, activity * seconds, static, dyn, f_ratio, v_floor)

    parts = {
        "compute": part(compute, 1.0),
        "communication": part(comm, comm_activity),
        "idle": part(idle, 0.0),
    }
    total = sum(parts.values())
    tokens = est.tokens_per_step  # type: ignore[attr-defined]
    return StepEnergy(
        energy_j=total,
        energy_per_token_j=total / tokens if tokens else 0.0,
        avg_power_w_per_gpu=total / (n * t) if t > 0 else 0.0,
        step_time_s=t,
        n_gpus=n,
        tokens_per_step=tokens,
        parts_j=parts,
    )
