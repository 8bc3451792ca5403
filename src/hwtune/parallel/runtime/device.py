"""Where a run's processes compute: CPU with gloo (the default, what the tests run) or one CUDA
GPU per process with NCCL. The selection is pure (`backend_for`, `local_rank`, `check_device`)
so it is tested without a GPU; `visible_gpus` is the one call into torch.cuda."""

from __future__ import annotations

from collections.abc import Mapping

from hwtune.errors import HwtuneInputError

DEVICES = ("cpu", "cuda")
_BACKENDS = {"cpu": "gloo", "cuda": "nccl"}


def _expected(world: int) -> str:
    return f"cpu, or cuda on a machine with N >= {world} GPUs"


def backend_for(device: str) -> str:
    """The process-group backend of a device type: gloo for cpu, nccl for cuda."""
    try:
        return _BACKENDS[device]
    except KeyError:
        raise HwtuneInputError("device", device, "cpu or cuda") from None


def local_rank(rank: int, n_visible: int, environ: Mapping[str, str] | None = None) -> int:
    """This process's GPU: ``LOCAL_RANK`` when started by torchrun (``environ``), else the
    spawn rank modulo the visible GPUs."""
    if environ is not None and "LOCAL_RANK" in environ:
        return int(environ["LOCAL_RANK"])
    if n_visible < 1:
        raise HwtuneInputError("device", "cuda", _expected(1))
    return rank % n_visible


def check_device(device: str, world: int, n_visible: int) -> None:
    """Refuse, in one line and before any process starts, a device this machine cannot run
    ``world`` processes on (one GPU per process for cuda; ``n_visible``: the GPUs it sees)."""
    backend_for(device)
    if device == "cuda" and n_visible < world:
        raise HwtuneInputError(
            "device", device, f"{_expected(world)} (this machine sees {n_visible})"
        )


def visible_gpus() -> int:
    """CUDA GPUs visible to this process (0 without CUDA; does not initialise CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0
