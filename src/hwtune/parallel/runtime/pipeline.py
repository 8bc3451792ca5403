"""Pipeline parallelism: cut the model into stages (torchtitan's ``pipeline_module_split``:
deep-copy and delete what a stage does not hold) and run our compiled per-rank orders on
``torch.distributed.pipelining``'s schedule runtime (``_PipelineScheduleRuntime``, which takes
explicit per-rank action lists and adds the sends and receives itself). Recomputation actions
(``R``) are dropped from the order: the layers the plan marks run under activation
checkpointing (`recompute.apply_recompute`), whose forward reruns inside the stage's backward."""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import nn
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining.schedules import (
    OVERLAP_F_B,
    _Action,
    _ComputationType,
    _PipelineScheduleRuntime,
)

from hwtune.parallel.actions import Action


def split_stage(model: nn.Module, layers: list[int], first: bool, last: bool) -> nn.Module:
    m = copy.deepcopy(model)
    keep = {str(i) for i in layers}
    for k in list(m.layers.keys()):
        if k not in keep:
            del m.layers[k]
    if not first:
        m.tok_embeddings = None
    if not last:
        m.norm = None
        m.output = None
    return m


def to_torch(orders: dict[int, list[Action]]) -> dict[int, list[_Action | None]]:
    """Our actions as torch's (``R`` dropped; overlapped pairs kept as OVERLAP_F_B)."""

    def one(a: Action) -> _Action:
        return _Action(a.stage, _ComputationType.from_str(a.kind), a.mb)

    out: dict[int, list[_Action | None]] = {}
    for r, v in orders.items():
        out[r] = []
        for a in v:
            if a.sub:
                out[r].append(_Action(-1, OVERLAP_F_B, None, tuple(one(p) for p in a.sub)))
            elif a.kind != "R" and not a.is_comm:
                out[r].append(one(a))
    return out


class CompiledSchedule(_PipelineScheduleRuntime):
    """torch's schedule runtime driven by an order compiled by hwtune."""

    def __init__(
        self,
        stages: list[PipelineStage],
        n_micro: int,
        loss_fn: Callable,
        orders: dict[int, list[Action]],
    ) -> None:
        super().__init__(stages=stages, n_microbatches=n_micro, loss_fn=loss_fn, scale_grads=True)
        self.pipeline_order = to_torch(orders)
        self._prepare_schedule_with_comms(self.pipeline_order)


def build_stages(
    model: nn.Module,
    stage_layers: list[list[int]],
    stage_rank: list[int],
    rank: int,
    group: object,
    device: torch.device | None = None,
) -> tuple[list[PipelineStage], list[nn.Module]]:
    """This rank's stages (deep copies of ``model``, on its device) and their modules;
    ``device``: where the stages compute and receive (default the CPU)."""
    if device is None:
        device = torch.device("cpu")
    n = len(stage_layers)
    stages, mods = [], []
    for s in range(n):
        if stage_rank[s] != rank:
            continue
        mod = split_stage(model, stage_layers[s], s == 0, s == n - 1)
        mods.append(mod)
        stages.append(PipelineStage(mod, s, n, device, group=group))
    return stages, mods
