"""Tensor parallelism with DTensor: Megatron's column/row split of attention and FFN
(Shoeybi et al. 2019 §3) through ``torch.distributed.tensor.parallel.parallelize_module``, as
torchtitan's ``apply_tp``. A module annotated with tp=1 stays replicated."""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module


def apply_tp(
    model: nn.Module, tp_mesh: DeviceMesh, attention: bool = True, ffn: bool = True
) -> None:
    """Shard every block's attention (q, k, v by heads; o by rows) and dense FFN (w1, w3 by
    columns; w2 by rows): one all-reduce after each, forward and backward."""
    plan = {}
    if attention:
        plan.update({"attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(),
                     "attention.wv": ColwiseParallel(), "attention.wo": RowwiseParallel()})  # fmt: skip
    for block in model.layers.values():
        p = dict(plan)
        if ffn and not block.moe:
            p.update({"feed_forward.w1": ColwiseParallel(), "feed_forward.w3": ColwiseParallel(),
                      "feed_forward.w2": RowwiseParallel()})  # fmt: skip
        if p:
            parallelize_module(block, tp_mesh, p)


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's local shard (tensor parallelism, FSDP2; under ``no_grad`` the storage
    itself, so writing it writes the parameter), else the tensor."""
    from torch.distributed.tensor import DTensor

    return t.to_local() if isinstance(t, DTensor) else t
