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
ZeRO-0, by their own distributed optimizer over that sub-mesh at ZeRO-1 (`make_optimizer`), by
FSDP2 over that sub-mesh at ZeRO-2/3 (`apply_fsdp`)."""

from __future__ import annotations

import contextlib

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh

from hwtune.parallel.runtime.distributed_optimizer import DistributedOptimizer


def expert_param_names(model: nn.Module) -> list[str]:
    """The routed experts' parameters (``layers.<i>.feed_forward.experts.*``)."""
    return [n for n, _ in model.named_parameters() if ".feed_forward.experts." in n]


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


def apply_fsdp(
    model: nn.Module, dp_mesh: DeviceMesh, zero: int, edp_mesh: DeviceMesh | None = None
) -> nn.Module:
    """FSDP2 over ``dp_mesh``, per block and at the root. With expert parallelism
    (``edp_mesh``: each expert's replicas), the routed experts are left out of the dp sharding:
    their gradient already sums the tokens of its ep group (the all-to-all's backward) and must
    be summed over its replicas only, then divided by the whole dp (the mean of the dp ranks'
    losses, as the dense weights' average over dp). With replicas (edp > 1) each MoE block's
    experts are sharded first, on their own, over ``edp_mesh`` (torchtitan's ``apply_fsdp`` with
    ``dp_mod_ep``), reduce-scattered with that divisor; without (edp = 1: every rank of an ep
    group holds other experts) there is nothing to shard or reduce, and FSDP2 ignores them:
    `scale_unsharded_experts` divides their gradients by dp after the backward."""
    from torch.distributed.fsdp import fully_shard

    reshard = zero >= 3
    ignored: set[nn.Parameter] = set()
    for block in model.layers.values():
        if edp_mesh is not None and getattr(block, "moe", False):
            experts = block.feed_forward.experts
            if edp_mesh.size() == 1:
                ignored |= set(experts.parameters())
            else:
                ex = fully_shard(experts, mesh=edp_mesh, reshard_after_forward=reshard)
                ex.set_gradient_divide_factor(float(dp_mesh.size()))
                # a sum and a separate scaling (gloo has no PREMUL_SUM, the op a factor needs)
                ex.set_force_sum_reduction_for_comms(True)
        fully_shard(block, mesh=dp_mesh, reshard_after_forward=reshard, ignored_params=ignored)
    fully_shard(model, mesh=dp_mesh, reshard_after_forward=reshard, ignored_params=ignored)
    return model


def scale_unsharded_experts(
    params: list[nn.Parameter], experts: set[int], dp: int, edp_mesh: DeviceMesh | None
) -> None:
    """After a step's backward under FSDP2 with expert parallelism and no expert replicas
    (edp = 1, `apply_fsdp`): the experts' gradients (ids in ``experts``), which FSDP2 ignored,
    / ``dp``, as the sharded weights' reduction divides theirs."""
    if edp_mesh is None or edp_mesh.size() > 1:
        return
    for p in params:
        if id(p) in experts and p.grad is not None:
            p.grad.div_(dp)


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
    eps: float | None = None,
) -> torch.optim.Optimizer | DistributedOptimizer | Optimizers:
    """AdamW; under ZeRO-1 a `DistributedOptimizer` (Megatron-Core's: one gradient
    reduce-scatter, the shard's AdamW, one parameter all-gather) for the dense parameters over
    ``dp_mesh`` and one for the routed experts (``experts``: ids of their parameters) over
    ``edp_mesh``, the ranks that hold the same experts (Megatron-Core's expert-data-parallel
    distributed optimizer); both divide the gradients by the size of ``dp_mesh`` (an expert's
    gradient already sums its ep group's tokens). ``model``: a module (not wrapped in DDP: the
    optimizer reduces the gradients), or the parameters of a rank's pipeline stages."""
    adamw = {} if eps is None else {"eps": eps}  # None: torch's default
    ps = model.parameters() if isinstance(model, nn.Module) else model
    params = [p for p in ps if p.requires_grad]
    if zero == 1 and dp_mesh is not None and dp_mesh.size() > 1:
        n = dp_mesh.size()
        ex = experts or set()
        dense = [p for p in params if id(p) not in ex]
        routed = [p for p in params if id(p) in ex]
        opts = [DistributedOptimizer(dense, dp_mesh, n, lr, **adamw)] if dense else []
        if routed:
            opts.append(DistributedOptimizer(routed, edp_mesh, n, lr, **adamw))
        return opts[0] if len(opts) == 1 else Optimizers(opts)
    return torch.optim.AdamW(params, lr=lr, **adamw)
