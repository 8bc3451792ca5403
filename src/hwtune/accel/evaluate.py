"""One call from a workload and an accelerator to the cost of a training step (and, with a
memory limit, the activation-checkpointing plan that meets it)."""

from __future__ import annotations

from dataclasses import dataclass

from hwtune.accel.architecture import Accelerator
from hwtune.accel.checkpointing import CheckpointPlan, plan_checkpointing
from hwtune.accel.schedule import ScheduleResult, schedule
from hwtune.accel.training import TrainingGraph, lower_training
from hwtune.accel.workload import Graph


@dataclass
class Evaluation:
    result: ScheduleResult
    plan: CheckpointPlan | None

    def to_dict(self) -> dict:
        d = self.result.to_dict()
        if self.plan is not None:
            d["checkpointing"] = self.plan.to_dict()
        return d


def evaluate(
    graph: Graph,
    accel: Accelerator,
    fusion_depth: int = 1,
    optimizer: str = "adam",
    activation_limit_bytes: float | None = None,
    checkpoint_method: str = "auto",
) -> Evaluation:
    """Schedule one training step of ``graph`` on ``accel``. With ``activation_limit_bytes``
    the saved activations are planned (kept or recomputed) to fit it first; the forward time of
    each layer on this accelerator is the recomputation cost."""
    tg = lower_training(graph, optimizer)
    base = schedule(tg, accel, fusion_depth)
    if activation_limit_bytes is None:
        return Evaluation(base, None)
    return checkpointed(tg, accel, fusion_depth, base, activation_limit_bytes, checkpoint_method)


def checkpointed(
    tg: TrainingGraph,
    accel: Accelerator,
    fusion_depth: int,
    base: ScheduleResult,
    activation_limit_bytes: float,
    checkpoint_method: str = "auto",
) -> Evaluation:
    """The step of ``tg`` (lowered with every activation kept) under the checkpointing plan
    for ``activation_limit_bytes``, given ``base``, its schedule on ``accel``: the forward time
    of each layer in ``base`` is the recomputation cost; the planned step is lowered and
    scheduled again (``base`` itself when the plan recomputes nothing). No plan fits: the one
    with the smallest peak (``plan.feasible`` is false)."""
    cost = {o.name: o.end - o.start for o in base.ops if o.phase == "fwd"}
    plan = plan_checkpointing(tg.graph, activation_limit_bytes, cost, checkpoint_method)
    if not plan.dropped:
        return Evaluation(base, plan)
    planned = lower_training(tg.graph, tg.optimizer, plan.dropped)
    return Evaluation(schedule(planned, accel, fusion_depth), plan)
