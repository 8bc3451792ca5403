"""What the planner ranks by: throughput, cost per token, energy per token, time to train.

Each objective maps an `Estimate` to a number; ``OBJECTIVES`` gives its sense (+1 minimize,
-1 maximize).
"""

from __future__ import annotations

from hwtune.cost.power import STATIC_FRACTION
from hwtune.errors import HwtuneInputError
from hwtune.hardware.cluster import Cluster
from hwtune.train.estimator import Estimate

OBJECTIVES: dict[str, int] = {
    "throughput": -1,  # tokens/s, maximized
    "cost": +1,  # USD per million tokens
    "energy": +1,  # joules per token
    "time-to-train": +1,  # seconds to train `tokens_to_train` tokens
}

COMM_ACTIVITY = 0.3
"""Share of the dynamic power a GPU draws while it waits on communication or a pipeline bubble
(NCCL kernels keep a few SMs and the copy engines busy); dense GEMMs run at the board limit.
An assumption until `hwtune energy` measures it."""


def step_energy_j(est: Estimate, cl: Cluster) -> float:
    """Energy of one step on all GPUs: static power all the time, dynamic power at the board
    limit while computing and at ``COMM_ACTIVITY`` of it while waiting (exposed communication,
    bubble). Board power = the cluster's power cap or the device TDP."""
    dev = cl.device
    board = min(dev.tdp_w, cl.power_cap_w or dev.tdp_w)
    static = dev.idle_w if dev.idle_w is not None else STATIC_FRACTION * dev.tdp_w
    b = est.breakdown
    busy = (
        b.get("forward", 0) + b.get("backward", 0) + b.get("recompute", 0) + b.get("optimizer", 0)
    )
    busy = min(busy, est.step_time_s)
    idle = est.step_time_s - busy
    per_gpu = static * est.step_time_s + (board - static) * (busy + COMM_ACTIVITY * idle)
    return per_gpu * est.n_gpus


def objective_value(
    name: str,
    est: Estimate,
    cl: Cluster,
    price_per_gpu_hour: float | None = None,
    tokens_to_train: float = 1e12,
) -> float:
    """The value of objective ``name`` for ``est`` (see ``OBJECTIVES`` for units)."""
    if name == "throughput":
        return est.tokens_per_s
    if name == "cost":
        price = (
            price_per_gpu_hour if price_per_gpu_hour is not None else cl.device.price_per_hour_usd
        )
        if price is None:
            raise HwtuneInputError(
                "price_per_hour_usd",
                None,
                f"a price for {cl.device.name} (pass --price-per-gpu-hour)",
            )
        return price * est.n_gpus * est.step_time_s / 3600.0 / est.tokens_per_step * 1e6
    if name == "energy":
        return step_energy_j(est, cl) / est.tokens_per_step
    if name == "time-to-train":
        return tokens_to_train / est.tokens_per_s
    raise HwtuneInputError("objective", name, f"one of {', '.join(OBJECTIVES)}")
