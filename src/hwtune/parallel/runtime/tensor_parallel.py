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
    """Shard every block's attention (the fused q, k, v by heads; o by rows) and dense FFN (the
    fused gate-up by hidden units; w2 by rows): per block and micro-batch, Megatron's four
    all-reduces: the two row-parallel outputs forward, the two column-parallel input gradients
    backward (Shoeybi et al. 2019 §3, Fig. 4)."""
    plan = {}
    if attention:
        plan.update({"attention.wqkv": ColwiseParallel(), "attention.wo": RowwiseParallel()})
    for block in model.layers.values():
        p = dict(plan)
        if ffn and not block.moe:
            p.update({"feed_forward.w13": ColwiseParallel(), "feed_forward.w2": RowwiseParallel()})
        if p:
            parallelize_module(block, tp_mesh, p)


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's local shard (tensor parallelism, FSDP2; under ``no_grad`` the storage
    itself, so writing it writes the parameter), else the tensor."""
    from torch.distributed.tensor import DTensor

    return t.to_local() if isinstance(t, DTensor) else t
