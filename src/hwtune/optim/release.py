"""Gradient release: each parameter is updated inside backward, as soon as its gradient is
complete, and the gradient is freed at once, so at most one parameter's gradient is alive and the
2 bytes per parameter of 16-bit gradients disappear from the peak (FlashOptim, Gonzalez Ortiz et
al. 2026, Table 1, "gradient release"; the same idea as LOMO, Lv et al. 2023, "Full Parameter
Fine-tuning for Large Language Models with Limited Resources", §3.2).

The hook is ``Tensor.register_post_accumulate_grad_hook`` (PyTorch >= 2.1), which runs once per
backward per leaf after its gradient has been accumulated (tied weights: after all uses). What it
cannot do is refused rather than done wrong:

- gradient accumulation across micro-batches: a second backward before ``optimizer.step()``
  raises (each backward already applied an update);
- global-norm clipping (``max_grad_norm``) and ``torch.amp.GradScaler``: both need every gradient
  before the first update;
- DDP and FSDP: they reduce gradients after the hook has run, so a run with more than one process
  is refused at construction (use the optimizers without release there).

``optimizer.step()`` must still be called once per iteration: it closes the iteration (and updates
any parameter whose gradient arrived without the hook, e.g. set by hand).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from hwtune.errors import HwtuneInputError

if TYPE_CHECKING:
    from hwtune.optim.optimizer import CompactOptimizer


class GradientRelease:
    """Registers the per-parameter update hooks of one optimizer and tracks the iteration."""

    def __init__(self, optimizer: CompactOptimizer) -> None:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            world = torch.distributed.get_world_size()
            if world > 1:
                raise HwtuneInputError(
                    "gradient_release",
                    f"True with {world} processes",
                    "a single process (DDP/FSDP reduce gradients after the release hook has run)",
                )
        self.optimizer = optimizer
        self.handles: list[Any] = []
        self.updated: set[int] = set()
        for group in optimizer.param_groups:
            self.watch(group)

    def watch(self, group: dict[str, Any]) -> None:
        """Register the hook on every trainable parameter of ``group``.

        The hook finds the group by its index, not by the dict: ``load_state_dict`` replaces
        every group dict (torch's loader builds new ones), and a hook holding the old dict kept
        updating with the old lr, blind to the loaded values and to LR schedulers after resume."""
        gi = next(i for i, g in enumerate(self.optimizer.param_groups) if g is group)
        for p in group["params"]:  # all checked before any hook is registered
            if p.dtype == torch.float16:
                raise HwtuneInputError(
                    f"parameter {self.optimizer.param_name(p)!r}.dtype",
                    p.dtype,
                    "torch.bfloat16 or float32 with gradient_release=True (fp16 needs a "
                    "GradScaler, which needs every gradient before the first update)",
                )
        for p in group["params"]:
            if p.requires_grad:
                self.handles.append(p.register_post_accumulate_grad_hook(self._hook(gi)))

    def _hook(self, gi: int) -> Any:
        def hook(p: torch.Tensor) -> None:
            if id(p) in self.updated:
                raise HwtuneInputError(
                    f"parameter {self.optimizer.param_name(p)!r}",
                    "a second backward before optimizer.step()",
                    "one backward per optimizer.step() with gradient_release=True (gradient "
                    "accumulation across micro-batches is not possible: each backward updates)",
                )
            if not self.updated:  # the iteration's first update: every group checked first
                self.optimizer._check_state_layouts()
            with torch.no_grad():
                self.optimizer._update(p, self.optimizer.param_groups[gi])
            p.grad = None
            self.updated.add(id(p))

        return hook

    def end_iteration(self) -> None:
        """Called by ``optimizer.step()``: the next backward starts a new iteration."""
        self.updated.clear()

    def remove(self) -> None:
        """Remove the hooks (the optimizer then needs gradients and ``step()`` as usual)."""
        for h in self.handles:
            h.remove()
        self.handles.clear()
