"""ZeRO-1 as the plan (`compiler.py`) and the estimator price it: Megatron-Core's distributed
optimizer (Rajbhandari et al. SC'20 §5.1, P_os; Megatron-LM ``docs/distrib_optimizer.md``).

Per step and per data-parallel group, after the step's last backward:

1. the rank's gradients, accumulated whole over the step's micro-batches with no communication,
   are copied into one flat buffer padded to a multiple of the group size, scaled by
   ``1 / divide_by`` (the mean over the data-parallel ranks' losses, as DDP's default hook
   divides before it sums) and reduce-scattered: ONE ``reduce_scatter_single``, after which the
   rank holds the summed gradients of its contiguous 1/n of the buffer;
2. ``torch.optim.AdamW`` steps that shard alone: one flat ``nn.Parameter`` (the parameters'
   values at the shard's positions) whose ``.grad`` is the reduced shard, so the states (two
   fp32 moments) exist for 1/n of the elements, and the update is plain AdamW's, element by
   element;
3. the updated shards are all-gathered into the flat buffer: ONE ``all_gather_single``, and
   copied back into the parameters (a DTensor parameter's local tensor under tensor
   parallelism).

PyTorch has no such optimizer: ``torch.distributed.optim.ZeroRedundancyOptimizer`` (which the
runtime used before) expects DDP's gradient all-reduce and broadcasts each rank's updated
parameters, about twice the gradient bytes the plan prices; FSDP2 at ZeRO-1 does not exist
(``fully_shard`` shards gradients too). Both collectives run on the mesh's process group
(gloo on CPU has both, as NCCL does). One bucket per group: the plan prices one gradient
reduce-scatter and one parameter all-gather per rank and step, not one per bucket. Megatron keeps
the parameters and gradients as views of persistent contiguous buffers; here the flat buffer
and the shard's values are transient (built at the step, released after it), so the states a
rank keeps are what the memory model counts (`cost.memory.sharded_state_bytes`: weights and
gradients whole, optimizer states / n), at the price of two copies per step."""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh

from hwtune.parallel.runtime.comm import all_gather_single, reduce_scatter_single
from hwtune.parallel.runtime.tensor_parallel import local_tensor as _local


class DistributedOptimizer:
    """AdamW over ``params`` with its states sharded over ``mesh`` (the module docstring):
    `step` reduce-scatters the gradients once, steps the rank's shard, all-gathers the
    parameters once. ``divide_by``: the gradients' divisor (the data-parallel ranks whose losses
    are averaged; for routed experts reduced over their edp replicas, still the dp size). A
    mesh of one rank (or none) communicates nothing and steps every element. ``adamw``: AdamW's
    other settings (betas, eps, weight_decay)."""

    def __init__(
        self,
        params: list[nn.Parameter],
        mesh: DeviceMesh | None,
        divide_by: int,
        lr: float,
        **adamw: float,
    ) -> None:
        self.params = list(params)
        if not self.params:
            raise ValueError("DistributedOptimizer: no parameters")
        local = [_local(p.detach()) for p in self.params]
        dtypes = {t.dtype for t in local}
        if len(dtypes) != 1:
            raise ValueError(
                f"DistributedOptimizer: one dtype per buffer, got {sorted(map(str, dtypes))}"
            )
        self.dtype, self.device = local[0].dtype, local[0].device
        self.group = mesh.get_group() if mesh is not None and mesh.size() > 1 else None
        self.n = mesh.size() if self.group is not None else 1
        rank = mesh.get_local_rank() if self.group is not None else 0
        self.sizes = [t.numel() for t in local]
        self.numel = sum(self.sizes)
        self.shard_numel = -(-self.numel // self.n)  # ceil: the buffer padded to n shards
        self.lo = rank * self.shard_numel
        self.divide_by = divide_by
        # this rank's shard of the parameters; its values are set at each step
        self.shard = nn.Parameter(torch.empty(0, dtype=self.dtype, device=self.device))
        self.optim = torch.optim.AdamW([self.shard], lr=lr, **adamw)

    def _flat_grads(self) -> torch.Tensor:
        """The gradients in one buffer of n shards (zeros where a parameter has none, and in the
        padding)."""
        flat = torch.zeros(self.shard_numel * self.n, dtype=self.dtype, device=self.device)
        off = 0
        for p, k in zip(self.params, self.sizes, strict=True):
            if p.grad is not None:
                flat[off : off + k].copy_(_local(p.grad).reshape(-1))
            off += k
        return flat

    def _shard_values(self) -> torch.Tensor:
        """The parameters' values at this rank's positions [lo, lo + shard_numel) of the flat
        buffer (only the parameters that overlap them are read)."""
        out = torch.zeros(self.shard_numel, dtype=self.dtype, device=self.device)
        lo, hi, off = self.lo, self.lo + self.shard_numel, 0
        for p, k in zip(self.params, self.sizes, strict=True):
            a, b = max(lo, off), min(hi, off + k)
            if a < b:
                out[a - lo : b - lo].copy_(_local(p.detach()).reshape(-1)[a - off : b - off])
            off += k
        return out

    @torch.no_grad()
    def step(self) -> None:
        flat = self._flat_grads()
        flat.div_(self.divide_by)
        if self.group is not None:
            grad = torch.empty(self.shard_numel, dtype=self.dtype, device=self.device)
            reduce_scatter_single(grad, flat, self.group)
        else:
            grad = flat
        self.shard.data = self._shard_values()
        self.shard.grad = grad
        self.optim.step()
        if self.group is not None:
            all_gather_single(flat, self.shard.detach(), self.group)  # the gradient buffer, reused
        else:
            flat = self.shard.detach()
        off = 0
        for p, k in zip(self.params, self.sizes, strict=True):
            t = _local(p.detach())
            t.copy_(flat[off : off + k].view_as(t))
            off += k
        # the shard's values and gradient are transient; AdamW's states stay (1/n)
        self.shard.grad = None
        self.shard.data = torch.empty(0, dtype=self.dtype, device=self.device)

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def state_numel(self) -> int:
        """Elements of the optimizer states this rank holds (its shard's AdamW moments)."""
        return sum(
            v.numel() for st in self.optim.state.values() for v in st.values()
            if torch.is_tensor(v) and v.numel() > 1
        )  # fmt: skip
