"""Bytes per parameter measured from the tensors' storage (not computed from a formula).

Counts each storage once (``untyped_storage().nbytes()``, deduplicated by address), split into
weights (the parameters), gradients (``.grad`` at the time of the call) and optimizer states
(every tensor in ``optimizer.state``). FSDP2 parameters count their local shard.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hwtune.optim.optimizer import local


@dataclass(frozen=True, slots=True)
class Footprint:
    """Measured bytes of one model's training state, and per parameter."""

    n_params: int
    weight_bytes: int
    grad_bytes: int
    state_bytes: int

    @property
    def total_bytes(self) -> int:
        """Weights + gradients + optimizer states."""
        return self.weight_bytes + self.grad_bytes + self.state_bytes

    @property
    def bytes_per_param(self) -> float:
        """Total bytes per parameter."""
        return self.total_bytes / self.n_params


def _plain(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """The tensors holding the bytes: DTensor local shards, and the inner tensors of wrapper
    subclasses (e.g. torchao's 8-bit optimizer states) via ``__tensor_flatten__``."""
    out = []
    for t in tensors:
        t = local(t)
        if type(t) is not torch.Tensor and hasattr(t, "__tensor_flatten__"):
            names, _ = t.__tensor_flatten__()
            out += _plain([getattr(t, n) for n in names])
        else:
            out.append(t)
    return out


def _storage_bytes(tensors: list[torch.Tensor], seen: set[int]) -> int:
    total = 0
    for t in _plain(tensors):
        s = t.untyped_storage()
        if s.data_ptr() in seen or s.nbytes() == 0:
            continue
        seen.add(s.data_ptr())
        total += s.nbytes()
    return total


def measure_footprint(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Footprint:
    """Measure the weights, gradients and optimizer states that are alive now."""
    params = list(model.parameters())
    seen: set[int] = set()
    weights = _storage_bytes(params, seen)
    grads = _storage_bytes([p.grad for p in params if p.grad is not None], seen)
    states = [
        v for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)
    ]
    return Footprint(
        n_params=sum(local(p).numel() for p in params),
        weight_bytes=weights,
        grad_bytes=grads,
        state_bytes=_storage_bytes(states, seen),
    )
