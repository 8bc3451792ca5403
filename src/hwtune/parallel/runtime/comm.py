"""The collectives one rank issues in a training step, counted: calls and bytes by kind, so
that a run can be set beside what its compiled plan prices (`compiler.py`: one gradient
all-reduce per step at ZeRO-0, one reduce-scatter and one all-gather at ZeRO-1, ...).

`CommCounter` wraps the ``torch.distributed`` functions that PyTorch's building blocks call
through the package (``dist.all_reduce`` from DDP's default comm hook and our own reductions,
``dist.all_gather_single`` / ``dist.reduce_scatter_single`` from FSDP2's
``_fsdp_collectives`` and from ZeRO-1's `distributed_optimizer`,
``dist.all_to_all_single`` from the experts' dispatch) while it is entered. DDP's reducer calls
the process group from C++; `count_ddp` routes it through ``dist.all_reduce`` by registering
torch's own ``allreduce_hook`` (``torch.distributed.algorithms.ddp_comm_hooks.default_hooks``:
divide by the group size, all-reduce, the same arithmetic as the built-in reduction). DTensor's
tensor-parallel collectives (and the experts' all-to-all inside autograd) run as functional
collectives (``torch.ops._c10d_functional``), which no ``torch.distributed`` function sees: a
dispatch mode counts them as ``"<kind> (functional)"`` (tp 2: 4 all-reduces per block and
micro-batch, 2 forward, 2 backward, one per row-parallel output and fused column-parallel input). Pipeline sends and receives
(``batch_isend_irecv``) are not collectives and are not counted. A call that imports a function
by name (``from torch.distributed import all_reduce``) bypasses it."""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

FUNCTIONAL = ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single")
"""The ``_c10d_functional`` ops `CommCounter` counts (the collectives; not ``wait_tensor``)."""

COUNTED = (
    "all_reduce",
    "reduce_scatter_single",
    "reduce_scatter_tensor",
    "all_gather_single",
    "all_gather_into_tensor",
    "all_gather",
    "broadcast",
    "all_to_all_single",
)


def _nbytes(args: tuple, kwargs: dict) -> int:
    """The largest tensor among a call's arguments (the whole buffer: an all-reduce's tensor,
    an all-gather's output, a reduce-scatter's input)."""
    ts: list[Any] = [*args, *kwargs.values()]
    flat = [t for x in ts for t in (x if isinstance(x, list | tuple) else [x])]
    return max((t.numel() * t.element_size() for t in flat if torch.is_tensor(t)), default=0)


class CommCounter:
    """Counts the collectives issued through ``torch.distributed`` while entered; `take`
    returns ``{kind: {"calls": n, "bytes": b}}`` since the last `take` and starts afresh."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.bytes: Counter[str] = Counter()
        self._saved: dict[str, Any] = {}

    def _wrap(self, name: str, f: Any) -> Any:  # noqa: ANN401
        def counted(*args: Any, **kwargs: Any) -> Any:  # noqa: ANN401
            self.calls[name] += 1
            self.bytes[name] += _nbytes(args, kwargs)
            return f(*args, **kwargs)

        return counted

    def __enter__(self) -> CommCounter:
        for name in COUNTED:
            if hasattr(dist, name):
                self._saved[name] = getattr(dist, name)
                setattr(dist, name, self._wrap(name, self._saved[name]))
        self._mode = _FunctionalCollectives(self)
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._mode.__exit__(*exc)
        for name, f in self._saved.items():
            setattr(dist, name, f)
        self._saved.clear()

    def take(self) -> dict[str, dict[str, int]]:
        out = {k: {"calls": n, "bytes": self.bytes[k]} for k, n in sorted(self.calls.items())}
        self.calls.clear()
        self.bytes.clear()
        return out


class _FunctionalCollectives(TorchDispatchMode):
    """Counts the functional collectives (``torch.ops._c10d_functional``) that DTensor issues
    for tensor parallelism (its redistributions, forward and backward), which do not go through
    the ``torch.distributed`` functions: as ``"<kind> (functional)"``, the bytes of the input."""

    def __init__(self, counter: CommCounter) -> None:
        super().__init__()
        self.counter = counter

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        if func.namespace == "_c10d_functional" and func._opname in FUNCTIONAL:
            key = f"{func._opname} (functional)"
            self.counter.calls[key] += 1
            self.counter.bytes[key] += _nbytes(tuple(args[:1]), {})
        return func(*args, **(kwargs or {}))


def count_ddp(ddp: torch.nn.Module, group: dist.ProcessGroup) -> None:
    """Route DDP's bucket all-reduces through ``dist.all_reduce`` (torch's default
    ``allreduce_hook``), where `CommCounter` sees them."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    ddp.register_comm_hook(group, allreduce_hook)  # type: ignore[operator]


def all_gather_single(out: torch.Tensor, inp: torch.Tensor, group: dist.ProcessGroup) -> None:
    """All-gather ``inp`` of each rank into ``out``, looked up on ``torch.distributed`` at the
    call (where `CommCounter` counts it): ``all_gather_single`` from torch 2.13, which
    deprecates ``all_gather_into_tensor``, the older name before."""
    f = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    f(out, inp, group=group)


def reduce_scatter_single(out: torch.Tensor, inp: torch.Tensor, group: dist.ProcessGroup) -> None:
    """Sum ``inp`` over ``group`` and keep this rank's slice in ``out`` (as
    `all_gather_single`: ``reduce_scatter_single``, else ``reduce_scatter_tensor``)."""
    f = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    f(out, inp, group=group)
