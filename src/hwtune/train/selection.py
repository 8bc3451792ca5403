"""Hardware and network selection: the same job planned on several devices or networks.

`compare_hardware` plans the job on each device and reports time to train, cost and energy of
its best strategy. `network_whatif` re-plans with one network figure varied (NIC bandwidth,
scale-up domain size, oversubscription) and finds the least network that keeps a target
fraction of the best throughput in the sweep.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pydantic import ValidationError

from hwtune.errors import HwtuneInputError, from_validation_error
from hwtune.hardware.cluster import Cluster
from hwtune.model.spec import ModelSpec
from hwtune.train.objectives import objective_value
from hwtune.train.search import Constraints, PlanResult, plan

WHATIF_FIELDS = {
    "nic": "nic_gbps_per_gpu",
    "domain": "scaleup_domain",
    "oversubscription": "oversubscription",
}


@dataclass
class HardwareChoice:
    cluster: Cluster
    result: PlanResult
    time_to_train_s: float | None
    cost_usd: float | None
    energy_j: float | None


def compare_hardware(
    spec: ModelSpec,
    clusters: Sequence[Cluster],
    global_batch: int,
    seq: int,
    tokens_to_train: float = 1e12,
    price_per_gpu_hour: float | None = None,
    progress: Callable[[int, int], None] | None = None,
    **plan_kw: object,
) -> list[HardwareChoice]:
    """Plan the job on each cluster; best first under the plan's objective (``objective`` in
    ``plan_kw``: throughput and time-to-train by time to train, cost by cost, energy by energy).
    Infeasible devices come last with no figures. ``progress(done, total)`` is called before
    each cluster and once all are planned."""
    out = []
    for i, cl in enumerate(clusters):
        if progress:
            progress(i, len(clusters))
        r = plan(spec, cl, global_batch, seq, price_per_gpu_hour=price_per_gpu_hour,
                 tokens_to_train=tokens_to_train, **plan_kw)  # type: ignore[arg-type]  # fmt: skip
        if not r.top:
            out.append(HardwareChoice(cl, r, None, None, None))
            continue
        best = r.top[0]
        ttt = tokens_to_train / best.tokens_per_s
        price = (
            price_per_gpu_hour if price_per_gpu_hour is not None else cl.device.price_per_hour_usd
        )
        cost = price * best.n_gpus * ttt / 3600.0 if price is not None else None
        energy = objective_value("energy", best, cl) * tokens_to_train
        out.append(HardwareChoice(cl, r, ttt, cost, energy))
    if progress:
        progress(len(clusters), len(clusters))
    metric = {"cost": "cost_usd", "energy": "energy_j"}.get(
        str(plan_kw.get("objective", "throughput")), "time_to_train_s"
    )
    out.sort(key=lambda h: (getattr(h, metric) is None, getattr(h, metric) or 0.0))
    return out


@dataclass
class WhatIfPoint:
    value: float
    result: PlanResult
    throughput: float  # tokens/s of the best strategy (0 when none fits)
    efficiency: float  # throughput / best throughput in the sweep


def network_whatif(
    spec: ModelSpec,
    cluster: Cluster,
    field: str,
    values: Sequence[float],
    global_batch: int,
    seq: int,
    target_efficiency: float = 0.9,
    progress: Callable[[int, int], None] | None = None,
    constraints: Constraints | None = None,
    **plan_kw: object,
) -> tuple[list[WhatIfPoint], float | None]:
    """Re-plan with ``field`` (nic, domain or oversubscription) set to each of ``values``.

    Returns the points and the least network value (smallest NIC or domain, largest
    oversubscription) whose best throughput reaches ``target_efficiency`` of the sweep's best.
    """
    if field not in WHATIF_FIELDS:
        raise HwtuneInputError("what-if field", field, f"one of {', '.join(WHATIF_FIELDS)}")
    if not 0 < target_efficiency <= 1:
        raise HwtuneInputError("target_efficiency", target_efficiency, "a fraction in (0, 1]")
    key = WHATIF_FIELDS[field]
    if len(set(values)) != len(values):  # a repeated value would be a repeated row
        raise HwtuneInputError(f"--what-if {field}", list(values), "each value once")
    clusters = []  # every value is checked before the first search
    for v in values:
        if not math.isfinite(v) or (field == "domain" and not (v == int(v) and v >= 1)):
            kind = "a positive whole number of GPUs" if field == "domain" else "a finite number"
            raise HwtuneInputError(f"--what-if {field}", v, kind)
        upd = {key: int(v) if field == "domain" else float(v)}
        if field == "domain":
            upd["gpus_per_node"] = min(cluster.gpus_per_node, int(v))
        try:
            clusters.append(Cluster(**{**cluster.__dict__, **upd}))
        except ValidationError as e:  # a NIC <= 0, a domain that does not nest, etc.
            err = from_validation_error(e)
            expected = err.expected
            if field == "domain" and err.field != key:  # the nodes it makes do not take the GPUs
                n, per_node = cluster.n_gpus, cluster.gpus_per_node
                expected = (f"a divisor of the {n} GPUs up to {per_node} (GPUs per node), or a "
                            f"multiple of {per_node}")  # fmt: skip
            raise HwtuneInputError(
                f"--what-if {field}", int(v) if field == "domain" else v, expected
            ) from None
    points = []
    for i, (v, cl) in enumerate(zip(values, clusters, strict=True)):
        if progress:
            progress(i, len(values))
        r = plan(spec, cl, global_batch, seq, constraints=constraints, **plan_kw)  # type: ignore[arg-type]
        thr = r.top[0].tokens_per_s if r.top else 0.0
        points.append(WhatIfPoint(float(v), r, thr, 0.0))
    best = max((p.throughput for p in points), default=0.0)
    for p in points:
        p.efficiency = p.throughput / best if best else 0.0
    ok = [p for p in points if p.efficiency >= target_efficiency]
    least = None
    if ok:
        pick = max if field == "oversubscription" else min
        least = pick(ok, key=lambda p: p.value).value
    return points, least
