"""Recomputation at run time: the plan's per-layer ``recompute`` applied to the blocks, and a
meter of the activation bytes autograd actually keeps for the backward.

Applying: each block runs under ``torch.utils.checkpoint(use_reentrant=False)`` (``full``) or
checkpoints only its attention core (``selective``), as torchtitan's ``apply_ac`` ("full" and
the Korthikanti-style selective mode). The compiled plan's ``R`` actions say *when* the
recomputation runs; torch's schedule runtime folds it into the stage's backward, which is where
the non-reentrant checkpoint reruns the forward (one recomputation per backward pass; an I/W
split reruns it for each half).

Measuring: ``SavedActivations`` counts, per block, the bytes of the distinct storages that
autograd saves for the backward (``torch.autograd.graph.saved_tensors_hooks``: the pack hook
sees every tensor saved outside a checkpoint region, and a checkpoint's own saved input),
parameters excluded. A storage is charged to the block that first saves it, so a block's input
(the previous block's output) is charged to it, as the estimator's model charges it
(`hwtune.cost.memory.layer_activation_bytes`).
"""

from __future__ import annotations

from collections import defaultdict
from types import TracebackType

import torch
from torch import nn

MODES = ("none", "selective", "full")


def apply_recompute(model: nn.Module, modes: dict[int, str]) -> None:
    """Set each block's recomputation (``modes``: layer index -> none/selective/full)."""
    for key, block in model.layers.items():
        block.set_recompute(modes.get(int(key), "none"))


def _storage(t: torch.Tensor) -> tuple[int, int] | None:
    from torch.distributed.tensor import DTensor

    if isinstance(t, DTensor):
        t = t.to_local()
    try:
        s = t.untyped_storage()
    except (RuntimeError, NotImplementedError):
        return None
    return s.data_ptr(), s.nbytes()


class SavedActivations:
    """Bytes autograd keeps for the backward, per block (``layers.<i>``) and ``other``; use as
    a context manager around one forward."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.by_layer: dict[str, float] = defaultdict(float)
        self._seen: set[int] = set()
        self._params = {_storage(p)[0] for p in model.parameters() if _storage(p) is not None}
        self._where = ["other"]
        self._handles: list = []
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        st = _storage(t)
        if st is not None and st[0] not in self._seen and st[0] not in self._params and st[1]:
            self._seen.add(st[0])
            self.by_layer[self._where[-1]] += float(st[1])
        return t

    def _enter_block(self, name: str):  # noqa: ANN202
        def hook(module: nn.Module, args: tuple) -> None:
            self._where.append(name)

        return hook

    def _leave_block(self, module: nn.Module, args: tuple, out: object) -> None:
        self._where.pop()

    def __enter__(self) -> SavedActivations:
        for key, block in self.model.layers.items():
            name = f"layers.{key}"
            self._handles.append(block.register_forward_pre_hook(self._enter_block(name)))
            self._handles.append(block.register_forward_hook(self._leave_block))
        self._hooks.__enter__()
        return self

    def __exit__(
        self,
        et: type[BaseException] | None,
        ev: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._hooks.__exit__(et, ev, tb)
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def layers(self) -> dict[int, float]:
        """Bytes kept per layer index."""
        return {
            int(k.split(".")[1]): v for k, v in self.by_layer.items() if k.startswith("layers.")
        }
