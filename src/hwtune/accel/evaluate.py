"""One call from a workload and an accelerator to the cost of a training step (and, with a
memory limit, the activation-checkpointing plan that meets it)."""

from __future__ import annotations

from dataclasses import dataclass

from hwtune.accel.architecture import Accelerator
from hwtune.accel.checkpointing import CheckpointPlan, plan_checkpointing
from hwtune.accel.schedule import ScheduleResult, schedule
from hwtune.accel.training import lower_training
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
    plan = None
    dropped: frozenset[str] = frozenset()
    if activation_limit_bytes is not None:
        base = schedule(lower_training(graph, optimizer), accel, fusion_depth)
        cost = {o.name: o.end - o.start for o in base.ops if o.phase == "fwd"}
        plan = plan_checkpointing(graph, activation_limit_bytes, cost, checkpoint_method)
        dropped = plan.dropped
    tg = lower_training(graph, optimizer, dropped)
    return Evaluation(schedule(tg, accel, fusion_depth), plan)
