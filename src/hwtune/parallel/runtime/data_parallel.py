"""Data parallelism and ZeRO, on PyTorch's own building blocks:
- ZeRO-0: ``DistributedDataParallel`` (gradient all-reduce in buckets, overlapped), once per
  step: ``no_sync`` on all but the last micro-batch (`accumulate`);
- ZeRO-1: no DDP; the gradients accumulate whole over the step's micro-batches with no
  communication, and `distributed_optimizer.DistributedOptimizer` (Megatron-Core's distributed
  optimizer, as the plan and the estimator price it) reduce-scatters them once per step in one
  flat buffer, steps AdamW on the rank's shard (its states only) and all-gathers the updated
  parameters once; PyTorch has no such optimizer (``ZeroRedundancyOptimizer`` all-reduces and
  broadcasts, about twice the gradient bytes);
- ZeRO-2/3: FSDP2 ``fully_shard`` per block and at the root, as torchtitan's ``apply_fsdp``.
  ZeRO-3 (``reshard_after_forward=True``) gathers before each forward and backward and
  reduce-scatters after each backward, every micro-batch. ZeRO-2 is the ZeRO paper's P_os+g
  (Rajbhandari et al. SC'20 §5.2): the weights whole on every rank, only the gradient shard
  kept, so each micro-batch's backward reduce-scatters (FSDP2's default) while the weights,
  gathered once, stay whole over the step (``reshard_after_forward=False``, and
  ``set_reshard_after_backward`` False until the last micro-batch: PyTorch's FSDP2 docs,
  ``fully_shard`` / ``FSDPModule.set_reshard_after_backward``). FSDP2 alone would gather
  again for each micro-batch, which the plan (`compiler.py`) and the estimator do not price:
  one gather per step, one reduce-scatter per micro-batch.
  Pipeline stages are driven by torch.distributed.pipelining, which switches gradient sync and
  resharding off for every backward and reduce-scatters each stage once per step (its
  ``REDUCE_GRAD``), the gradients held whole over the step; the plan prices that too.
Routed experts (sharded by expert parallelism) are left out of the data-parallel reduction; their
gradients are summed over the replicas of each expert (the dp/ep "edp" sub-mesh): in `train` at
ZeRO-0, by their own distributed optimizer over that sub-mesh at ZeRO-1 (`make_optimizer`)."""

from __future__ import annotations

import contextlib

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh

from hwtune.parallel.runtime.distributed_optimizer import DistributedOptimizer


def expert_param_names(model: nn.Module) -> list[str]:
    return [n for n, _ in model.named_parameters() if ".feed_forward.w" in n and _is_moe(model, n)]


def _is_moe(model: nn.Module, name: str) -> bool:
    parts = name.split(".")
    return parts[0] == "layers" and getattr(model.layers[parts[1]], "moe", False)


def apply_ddp(model: nn.Module, dp_mesh: DeviceMesh, ignore: list[str]) -> nn.Module:
    """DDP over ``dp_mesh``, the parameters named in ``ignore`` (routed experts sharded by expert
    parallelism, reduced over their edp replicas instead) left out."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    if ignore:
        DDP._set_params_and_buffers_to_ignore_for_model(model, ignore)
    # no buffer sync in forward (every rank builds identical buffers): torch >= 2.13 names it
    # forward_sync_buffers and deprecates broadcast_buffers
    import inspect

    if "forward_sync_buffers" in inspect.signature(DDP.__init__).parameters:
        return DDP(model, process_group=dp_mesh.get_group(), forward_sync_buffers=False)
    return DDP(model, process_group=dp_mesh.get_group(), broadcast_buffers=False)


def apply_fsdp(model: nn.Module, dp_mesh: DeviceMesh, zero: int) -> nn.Module:
    from torch.distributed.fsdp import fully_shard

    reshard = zero >= 3
    for block in model.layers.values():
        fully_shard(block, mesh=dp_mesh, reshard_after_forward=reshard)
    fully_shard(model, mesh=dp_mesh, reshard_after_forward=reshard)
    return model


def accumulate(model: nn.Module, zero: int, last: bool) -> contextlib.AbstractContextManager:
    """Around one micro-batch's forward and backward of a step that accumulates gradients over
    several (``last``: the step's last), so that the run communicates what the plan prices
    (`compiler.compile_plan`, the estimator's data-parallel time):

    - DDP (ZeRO-0): ``no_sync()`` on all but the last micro-batch, which all-reduces the
      accumulated gradients once per step (PyTorch DDP docs, ``no_sync``: "gradients will be
      accumulated ... and synchronized in the first forward-backward pass exiting the context");
    - ZeRO-1: an unwrapped module, nothing to change (no communication in the backward; the
      distributed optimizer's step reduces the step's gradients);
    - FSDP2 at ZeRO-2: the parameters stay gathered from the first forward to the last
      backward (``set_reshard_after_backward(last)``; ``reshard_after_forward=False`` keeps them
      between a forward and its backward), one all-gather per step, while each micro-batch's
      backward reduce-scatters its gradients into the rank's shard, as ZeRO-2 holds only that
      shard (Rajbhandari et al. SC'20 §5.2, P_os+g; DeepSpeed stage 2 reduces every
      micro-step);
    - FSDP2 at ZeRO-3: nothing to change, gather before each forward and backward and
      reduce-scatter after each backward, every micro-batch (ZeRO-3 as the plan prices it).

    Anything else (one process, a pipeline stage that torch's schedule drives): nothing."""
    from torch.distributed.fsdp import FSDPModule
    from torch.nn.parallel import DistributedDataParallel as DDP

    if isinstance(model, DDP) and not last:
        return model.no_sync()
    if isinstance(model, FSDPModule) and zero == 2:
        model.set_reshard_after_backward(last)
    return contextlib.nullcontext()


class Optimizers:
    """Several optimizers stepped as one (dense parameters sharded over dp, routed experts over
    their own replicas)."""

    def __init__(self, opts: list[torch.optim.Optimizer | DistributedOptimizer]) -> None:
        self.opts = opts

    def step(self) -> None:
        for o in self.opts:
            o.step()

    def zero_grad(self) -> None:
        for o in self.opts:
            o.zero_grad()


def make_optimizer(
    model: nn.Module | list[nn.Parameter],
    zero: int,
    dp_mesh: DeviceMesh | None,
    lr: float,
    experts: set[int] | None = None,
    edp_mesh: DeviceMesh | None = None,
) -> torch.optim.Optimizer | DistributedOptimizer | Optimizers:
    """AdamW; under ZeRO-1 a `DistributedOptimizer` (Megatron-Core's: one gradient
    reduce-scatter, the shard's AdamW, one parameter all-gather) for the dense parameters over
    ``dp_mesh`` and one for the routed experts (``experts``: ids of their parameters) over
    ``edp_mesh``, the ranks that hold the same experts (Megatron-Core's expert-data-parallel
    distributed optimizer); both divide the gradients by the size of ``dp_mesh`` (an expert's
    gradient already sums its ep group's tokens). ``model``: a module (not wrapped in DDP: the
    optimizer reduces the gradients), or the parameters of a rank's pipeline stages."""
    ps = model.parameters() if isinstance(model, nn.Module) else model
    params = [p for p in ps if p.requires_grad]
    if zero == 1 and dp_mesh is not None and dp_mesh.size() > 1:
        n = dp_mesh.size()
        ex = experts or set()
        dense = [p for p in params if id(p) not in ex]
        routed = [p for p in params if id(p) in ex]
        opts = [DistributedOptimizer(dense, dp_mesh, n, lr)] if dense else []
        if routed:
            opts.append(DistributedOptimizer(routed, edp_mesh, n, lr))
        return opts[0] if len(opts) == 1 else Optimizers(opts)
    return torch.optim.AdamW(params, lr=lr)
