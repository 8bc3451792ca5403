"""What the planner ranks by: throughput, cost per token, energy per token, time to train.

Each objective maps an `Estimate` to a number; ``OBJECTIVES`` gives its sense (+1 minimize,
-1 maximize).
"""

from __future__ import annotations

from hwtune.errors import HwtuneInputError
from hwtune.hardware.cluster import Cluster
from hwtune.train.estimator import Estimate
from hwtune.train.step_energy import step_energy

OBJECTIVES: dict[str, int] = {
    "throughput": -1,  # tokens/s, maximized
    "cost": +1,  # USD per million tokens
    "energy": +1,  # joules per token
    "time-to-train": +1,  # seconds to train `tokens_to_train` tokens
}


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
        return step_energy(est, cl).energy_per_token_j
    if name == "time-to-train":
        return tokens_to_train / est.tokens_per_s
    raise HwtuneInputError("objective", name, f"one of {', '.join(OBJECTIVES)}")
