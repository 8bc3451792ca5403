"""Layout-free checkpoints of a runtime run (weights and AdamW moments of the full tiny model),
and resuming one under any other layout.

A checkpoint is one file per saved step, ``DIR/step-<k>.pt`` (k: steps done), written by rank 0
to a temporary file and renamed (``os.replace``), so a reader sees a whole file or none::

    {"format": "hwtune-runtime-checkpoint/1", "step": k,
     "model": {fqn: tensor}, "exp_avg": {fqn: tensor}, "exp_avg_sq": {fqn: tensor},
     "meta": {"model": TinyConfig fields, "seed", "lr", "global_batch", "layout": {...}}}

with the names and shapes of the full (unsharded) model's ``named_parameters()``: any layout can
load it, and ``torch.load`` reads it with nothing of hwtune.

**Element ids.** Which elements of the full tensors a rank holds (a TP DTensor's shard, an FSDP2
shard, a pipeline stage's copy, a rank's experts, DualPipe's two copies of a chunk, the ZeRO-1
distributed optimizer's flat shard spanning several parameters) is not computed from each
layout's rules but read back: right after the model is built, every parameter is overwritten
with its global element ids (float32 ``arange`` over all parameters concatenated, exact below
2**24 elements: `MAX_ELEMENTS`), the layout's own setup runs unchanged (TP ``distribute_tensor``,
FSDP2 ``fully_shard``, pipeline stages' deep copies, ``shard_experts``, DDP's broadcast: they
move and copy values, and the ids are equal on every rank), and each rank then reads the ids of
its local tensors (`place`) and writes the true values there, before the optimizer exists. The
same ids say where an optimizer state belongs: torch's AdamW keeps its moments in the shape of
the parameter's local tensor; the distributed optimizer's shard covers positions
[lo, lo + shard_numel) of its parameters' concatenated local tensors (past their end: padding,
no element). Saving gathers (ids, values) pieces on rank 0 (``gather_object``: gloo and NCCL)
and checks that every element of the full model was held by some rank."""

from __future__ import annotations

import math
import os
import re
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch import nn

from hwtune.errors import HwtuneInputError
from hwtune.parallel.runtime.distributed_optimizer import DistributedOptimizer
from hwtune.parallel.runtime.models import TinyConfig, build
from hwtune.parallel.runtime.tensor_parallel import local_tensor as _local

if TYPE_CHECKING:
    from hwtune.parallel.runtime.train import RunConfig

FORMAT = "hwtune-runtime-checkpoint/1"
MAX_ELEMENTS = 2**24
"""float32 holds every integer below 2**24 exactly (24-bit significand): the element ids are
exact up to there; a larger model is refused for checkpointing."""
STEP_FILE = re.compile(r"step-(\d+)\.pt")
MOMENTS = ("exp_avg", "exp_avg_sq")
# TinyConfig fields that do not change the model's function (the attention kernel)
_SAME_MODEL_IGNORES = ("flash",)


def param_layout(c: TinyConfig) -> list[tuple[str, tuple[int, ...]]]:
    """Names and shapes of the full tiny model's parameters, in ``named_parameters()`` order."""
    with torch.device("meta"):
        model = build(c, 0)
    return [(n, tuple(p.shape)) for n, p in model.named_parameters()]


def n_elements(c: TinyConfig) -> int:
    return sum(math.prod(s) for _, s in param_layout(c))


def check_size(c: TinyConfig) -> None:
    """Refuse, in one line, a model too large for exact float32 element ids."""
    n = n_elements(c)
    if n >= MAX_ELEMENTS:
        raise HwtuneInputError(
            "--save/--resume", f"{n} parameters",
            f"fewer than 2**24 = {MAX_ELEMENTS} elements for a runtime checkpoint "
            "(the element ids are float32)",
        )  # fmt: skip


def flat(
    tensors: dict[str, torch.Tensor], layout: list[tuple[str, tuple[int, ...]]]
) -> torch.Tensor:
    """The named tensors concatenated in ``layout``'s order (float32, CPU)."""
    return torch.cat([tensors[n].detach().float().cpu().reshape(-1) for n, _ in layout])


def unflat(v: torch.Tensor, layout: list[tuple[str, tuple[int, ...]]]) -> dict[str, torch.Tensor]:
    out, off = {}, 0
    for n, s in layout:
        k = math.prod(s)
        out[n] = v[off : off + k].reshape(s).clone()
        off += k
    return out


@torch.no_grad()
def mark_ids(model: nn.Module) -> None:
    """Overwrite every parameter of the full ``model`` with its global element ids."""
    total = sum(p.numel() for p in model.parameters())
    if total >= MAX_ELEMENTS:
        raise ValueError(f"checkpoint: {total} elements, at most {MAX_ELEMENTS - 1} (float32 ids)")
    off = 0
    for p in model.parameters():
        k = p.numel()
        p.copy_(torch.arange(off, off + k, dtype=torch.float32, device=p.device).view_as(p))
        off += k


@torch.no_grad()
def place(params: list[nn.Parameter], weights: torch.Tensor) -> dict[int, torch.Tensor]:
    """After the layout's setup: read the element ids each of this rank's parameters holds
    (its local tensor for a DTensor), write the true values ``weights[ids]`` there; returns
    id(parameter) -> the ids (int64, CPU) of its local tensor's elements, flattened."""
    out: dict[int, torch.Tensor] = {}
    n = weights.numel()
    for p in params:
        if id(p) in out:
            continue
        t = _local(p.detach())
        v = t.reshape(-1).float().cpu()
        ids = v.round().long()
        if ids.numel() and (not torch.equal(ids.float(), v) or ids.min() < 0 or ids.max() >= n):
            raise RuntimeError(
                "checkpoint: a parameter holds no element ids after the layout's setup "
                "(the setup changed the values it copies)"
            )
        t.copy_(weights[ids].view(t.shape).to(t.device))
        out[id(p)] = ids
    return out


def _parts(opt: object) -> list:
    return list(getattr(opt, "opts", [opt]))


def _shard_ids(o: DistributedOptimizer, ids_of: dict[int, torch.Tensor]) -> torch.Tensor:
    """The element ids at the distributed optimizer's shard positions (-1: padding)."""
    buf = torch.full((o.shard_numel * o.n,), -1, dtype=torch.long)
    off = 0
    for p, k in zip(o.params, o.sizes, strict=True):
        buf[off : off + k] = ids_of[id(p)]
        off += k
    return buf[o.lo : o.lo + o.shard_numel]


def _step_tensor(step: int) -> torch.Tensor:
    # torch's AdamW keeps "step" as a float32 scalar on the CPU (neither fused nor capturable)
    return torch.tensor(float(step), dtype=torch.float32)


@torch.no_grad()
def load_moments(
    opt: object, ids_of: dict[int, torch.Tensor], m: torch.Tensor, v: torch.Tensor, step: int
) -> None:
    """Set the AdamW states of this rank's optimizer(s) from the full moments ``m``, ``v``
    (flat, in the full model's order) after ``step`` steps."""
    for o in _parts(opt):
        if isinstance(o, DistributedOptimizer):
            ids = _shard_ids(o, ids_of)
            keep = ids >= 0
            st = {"step": _step_tensor(step)}
            for name, full in zip(MOMENTS, (m, v), strict=True):
                t = torch.zeros(o.shard_numel, dtype=o.dtype)
                t[keep] = full[ids[keep]]
                st[name] = t.to(o.device)
            o.optim.state[o.shard] = st
            continue
        for group in o.param_groups:
            for p in group["params"]:
                ids = ids_of[id(p)]
                st = {"step": _step_tensor(step)}
                for name, full in zip(MOMENTS, (m, v), strict=True):
                    t = torch.zeros_like(p, memory_format=torch.preserve_format)
                    loc = _local(t)
                    loc.copy_(full[ids].view(loc.shape).to(loc.device))
                    st[name] = t
                o.state[p] = st


@torch.no_grad()
def pieces(params: list[nn.Parameter], opt: object, ids_of: dict[int, torch.Tensor]) -> dict:
    """This rank's (ids, values) of the weights and of the AdamW moments, on the CPU, and the
    step counts of its states."""
    w, mv, steps = [], [], set()
    seen: set[int] = set()
    for p in params:
        if id(p) not in seen:
            seen.add(id(p))
            w.append((ids_of[id(p)], _local(p.detach()).reshape(-1).float().cpu()))
    for o in _parts(opt):
        if isinstance(o, DistributedOptimizer):
            st = o.optim.state.get(o.shard)
            if not st:
                continue
            ids = _shard_ids(o, ids_of)
            keep = ids >= 0
            mv.append((ids[keep], *(st[k].reshape(-1).cpu()[keep] for k in MOMENTS)))
            steps.add(float(st["step"]))
            continue
        for group in o.param_groups:
            for p in group["params"]:
                st = o.state.get(p)
                if not st:
                    continue
                mv.append(
                    (ids_of[id(p)], *(_local(st[k]).reshape(-1).float().cpu() for k in MOMENTS))
                )
                steps.add(float(st["step"]))
    return {"weights": w, "moments": mv, "steps": sorted(steps)}


def assemble(parts: list[dict], cfg: RunConfig, step: int) -> dict:
    """The checkpoint document from every rank's `pieces`; raises when an element of the full
    model is held by no rank (a bug: the id map missed a layout)."""
    layout = param_layout(cfg.model)
    n = sum(math.prod(s) for _, s in layout)
    full = {k: torch.zeros(n) for k in ("model", *MOMENTS)}
    held = {k: torch.zeros(n, dtype=torch.bool) for k in ("model", "exp_avg")}
    for part in parts:
        for ids, vals in part["weights"]:
            full["model"][ids] = vals
            held["model"][ids] = True
        for ids, m, v in part["moments"]:
            full["exp_avg"][ids] = m
            full["exp_avg_sq"][ids] = v
            held["exp_avg"][ids] = True
        bad = [s for s in part["steps"] if s != step]
        if bad:
            raise RuntimeError(f"checkpoint: AdamW states at step {bad[0]:g}, expected {step}")
    for k, h in held.items():
        if not bool(h.all()):
            raise RuntimeError(
                f"checkpoint: {int((~h).sum())} of {n} elements of {k} held by no rank "
                f"(layout dp={cfg.dp} tp={cfg.tp} pp={cfg.pp} cp={cfg.cp} ep={cfg.ep} "
                f"zero={cfg.zero})"
            )
    return {
        "format": FORMAT,
        "step": step,
        "model": unflat(full["model"], layout),
        "exp_avg": unflat(full["exp_avg"], layout),
        "exp_avg_sq": unflat(full["exp_avg_sq"], layout),
        "meta": meta(cfg),
    }


def meta(cfg: RunConfig) -> dict:
    return {
        "model": asdict(cfg.model),
        "seed": cfg.seed,
        "lr": cfg.lr,
        "global_batch": cfg.global_batch,
        "layout": {
            "dp": cfg.dp, "tp": cfg.tp, "pp": cfg.pp, "cp": cfg.cp, "ep": cfg.ep,
            "ep_over_tp": cfg.ep_over_tp, "zero": cfg.zero, "n_micro": cfg.n_micro,
            "micro_batch": cfg.micro_batch, "schedule": cfg.schedule,
            "bidirectional": cfg.bidirectional, "device": cfg.device,
        },
    }  # fmt: skip


def save(
    cfg: RunConfig,
    step: int,
    params: list[nn.Parameter],
    opt: object,
    ids_of: dict[int, torch.Tensor],
    rank: int,
) -> Path | None:
    """Gather every rank's pieces on rank 0, which writes ``save_dir/step-<step>.pt``
    atomically; a collective over the default group (every rank calls it). Returns the file on
    rank 0."""
    mine = pieces(params, opt, ids_of)
    world = dist.get_world_size()
    got: list | None = [None] * world if rank == 0 else None
    dist.gather_object(mine, got, dst=0)
    if rank != 0:
        return None
    assert got is not None and cfg.save_dir is not None
    doc = assemble(got, cfg, step)
    path = Path(cfg.save_dir) / f"step-{step}.pt"
    write(path, doc)
    return path


def write(path: Path, doc: dict) -> None:
    """``torch.save`` to a temporary file beside ``path``, then ``os.replace``: a reader (a
    restarted run) finds the whole file or none."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    torch.save(doc, tmp)
    os.replace(tmp, path)


def step_files(d: Path) -> list[tuple[int, Path]]:
    """The ``step-<k>.pt`` files of a directory, by k."""
    out = []
    for p in d.iterdir():
        m = STEP_FILE.fullmatch(p.name)
        if m and p.is_file():
            out.append((int(m.group(1)), p))
    return sorted(out)


def latest(d: str | Path | None) -> Path | None:
    """The latest step file of directory ``d`` (None: no directory, or none there)."""
    if d is None or not Path(d).is_dir():
        return None
    files = step_files(Path(d))
    return files[-1][1] if files else None


def resolve(path: str | Path, save_dir: str | Path | None) -> Path | None:
    """``--resume``'s file: the file itself, or a directory's latest step file; None (start
    fresh) for a directory without one, or for ``--save``'s directory not made yet (the same
    command under torchrun's restarts)."""
    p = Path(path)
    if p.is_dir():
        return latest(p)
    if p.is_file():
        return p
    if save_dir is not None and p.resolve() == Path(save_dir).resolve():
        return None
    raise HwtuneInputError(
        "--resume", str(path), "a checkpoint file or a directory of step-<k>.pt files (not found)"
    )


def read(path: Path) -> dict:
    """A checkpoint file, checked to be one (one line otherwise)."""
    try:
        doc = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unreadable file is bad input
        why = (str(e).strip().splitlines() or [type(e).__name__])[0][:120]
        raise HwtuneInputError(
            "--resume", str(path), f"a checkpoint written by --save (torch.load: {why})"
        ) from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise HwtuneInputError("--resume", str(path), f"a checkpoint of format {FORMAT}")
    return doc


def check_compatible(doc: dict, path: Path, cfg: RunConfig) -> None:
    """The checkpoint is of this run's tiny model and recipe (seed, lr, global batch: the same
    data from step k on) and has fewer steps than the run: else one line naming the file and
    the first mismatch."""
    saved = doc.get("meta", {})
    here = asdict(cfg.model)
    there = saved.get("model", {})
    for k, v in here.items():
        if k not in _SAME_MODEL_IGNORES and there.get(k) != v:
            raise HwtuneInputError(
                "--resume", str(path),
                f"a checkpoint of this run's tiny model ({k} {there.get(k)!r} there, {v!r} here)",
            )  # fmt: skip
    for k, v in (("seed", cfg.seed), ("lr", cfg.lr), ("global_batch", cfg.global_batch)):
        if saved.get(k) != v:
            # `launch.run_config`: micro-batches of cfg.micro_batch sequences, as many per
            # data-parallel rank as the spec's (global batch / (micro-batch x dp))
            hint = (
                f"; the run trains {cfg.micro_batch} x --global-batch / --micro-batch sequences "
                "per step"
                if k == "global_batch"
                else ""
            )
            raise HwtuneInputError(
                "--resume", str(path),
                f"a checkpoint of the same training data and recipe ({k} {saved.get(k)!r} "
                f"there, {v!r} here){hint}",
            )  # fmt: skip
    layout = param_layout(cfg.model)
    for key in ("model", *MOMENTS):
        got = doc.get(key)
        if not isinstance(got, dict) or any(
            n not in got or tuple(got[n].shape) != s for n, s in layout
        ):
            raise HwtuneInputError(
                "--resume", str(path), f"the full tiny model's tensors under {key!r}"
            )
    step = doc.get("step")
    if not isinstance(step, int) or step < 0:
        raise HwtuneInputError("--resume", str(path), "a checkpoint with its step count")
    if step >= cfg.steps:
        raise HwtuneInputError(
            "--steps", cfg.steps,
            f"more than the {step} steps done in the checkpoint {path} (the run's total)",
        )  # fmt: skip


def initial_state(
    cfg: RunConfig, model: nn.Module
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """The run's starting weights and moments, flat in the full model's order: the
    checkpoint's (``cfg.resume``), else the built model's weights and no moments."""
    layout = [(n, tuple(p.shape)) for n, p in model.named_parameters()]
    if cfg.resume is None:
        return flat(dict(model.named_parameters()), layout), None, None
    doc = torch.load(cfg.resume, map_location="cpu", weights_only=True)
    if doc["step"] != cfg.first_step:
        raise RuntimeError(
            f"checkpoint {cfg.resume}: step {doc['step']}, run from {cfg.first_step}"
        )
    w, m, v = (flat(doc[k], layout) for k in ("model", *MOMENTS))
    return w, m, v


def load_reference(model: nn.Module, opt: torch.optim.Optimizer, doc: dict) -> None:
    """The single-process reference from a checkpoint, by name (no element ids: a second,
    independent path to the same state)."""
    model.load_state_dict(doc["model"])
    for n, p in model.named_parameters():
        opt.state[p] = {
            "step": _step_tensor(doc["step"]),
            "exp_avg": doc["exp_avg"][n].clone(),
            "exp_avg_sq": doc["exp_avg_sq"][n].clone(),
        }
