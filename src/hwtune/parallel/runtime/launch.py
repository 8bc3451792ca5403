"""Start the processes of a run on 127.0.0.1 (torch.multiprocessing, a free port, gloo) and
compare their losses with the single-process reference. Under torchrun the same `worker` runs
with ``RANK``/``WORLD_SIZE`` from the environment (see VALIDATION.md, "Programmable parallelism", for NCCL)."""

from __future__ import annotations

import json
import socket
import tempfile
from pathlib import Path

from hwtune.errors import HwtuneInputError
from hwtune.parallel.runtime.models import TinyConfig, model_spec
from hwtune.parallel.runtime.train import RunConfig, reference_losses, worker


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_many(cfgs: list[RunConfig]) -> list[dict]:
    """Run configs of one world size in one set of processes; per config: the losses, the
    per-rank state bytes, and the single-process reference."""
    import torch.multiprocessing as mp

    world = cfgs[0].world
    if any(c.world != world for c in cfgs):
        raise HwtuneInputError("configs", [c.world for c in cfgs], "one world size per launch")
    out = []
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(worker, args=(world, free_port(), cfgs, d), nprocs=world, join=True)
        for i, cfg in enumerate(cfgs):
            ranks = [
                json.loads(p.read_text()) for p in sorted((Path(d) / str(i)).glob("rank*.json"))
            ]
            losses = next(r["losses"] for r in ranks if r["losses"])
            ref = reference_losses(cfg)
            out.append({
                "world": world,
                "losses": losses,
                "reference": ref,
                "max_abs_diff": max(abs(a - b) for a, b in zip(losses, ref, strict=True)),
                "memory": {r["rank"]: r["memory"] for r in ranks},
            })  # fmt: skip
    return out


def launch(cfg: RunConfig) -> dict:
    """Run ``cfg`` in ``cfg.world`` processes and compare with the single-process run."""
    return launch_many([cfg])[0]


def run_config(spec, steps: int = 3, moe: bool = False, seed: int = 0) -> RunConfig:  # noqa: ANN001
    """The `RunConfig` of a `ParallelSpec` on the tiny model (its mesh, ZeRO stage, stages,
    compiled orders and the annotations resolved per layer: recomputation, expert placement;
    4 layers, or as many as the stages need). What the runtime cannot run is refused here,
    one line naming the field."""
    from hwtune.parallel import schedules as S
    from hwtune.parallel.compiler import orders_for
    from hwtune.parallel.spec import validate

    mesh = spec.mesh
    bidirectional = not spec.explicit and spec.schedule.name == "dualpipe" and mesh.pp > 1
    if mesh.cp > 1:
        _check_cp(spec, bidirectional)
    if mesh.pp > 1 and mesh.dp > 1 and mesh.cp == 1 and not bidirectional and spec.zero_stage < 2:
        raise HwtuneInputError(
            "zero", spec.zero_stage, "2 or 3 for a pipeline with dp > 1 and cp = 1 (FSDP2 stages)"
        )
    if bidirectional and (mesh.tp > 1 or (spec.zero_stage > 0 and mesh.dp > 1)):
        raise HwtuneInputError(
            "schedule.name", "dualpipe", "tp = 1, and zero = 0 with dp > 1, for a DualPipe run"
        )
    chunks = spec.n_chunks() if mesh.pp > 1 else 1
    layers = max(4, chunks)
    if spec.stages is not None and mesh.pp > 1:
        layers = sum(spec.stages)
    c = TinyConfig(n_layers=layers, n_experts=8 if moe else 0, flash=spec.flash_attention,
                   rope=mesh.cp > 1)  # fmt: skip
    ms = model_spec(c)
    plans = validate(spec, ms)  # the compiler's checks, against the model that runs
    if mesh.ep > 1 and (mesh.tp > 1 or mesh.pp > 1 or spec.zero_stage > 1):
        raise HwtuneInputError(
            "mesh.ep", mesh.ep, "tp = pp = 1 and zero <= 1 with expert parallelism in the runtime"
        )
    recompute = {lp.index: lp.recompute for lp in plans}
    bad = next((lp for lp in plans if lp.recompute not in ("none", "selective", "full")), None)
    if bad is not None:
        raise HwtuneInputError(
            f"layers.{bad.index}.recompute", bad.recompute, "none, selective or full in the runtime"
        )
    placement = None
    if moe and mesh.ep > 1:
        eps = {lp.ep for lp in plans}
        places = {lp.placement for lp in plans}
        if eps != {mesh.ep} or len(places) > 1:
            raise HwtuneInputError(
                "modules.ep", sorted(eps), f"the mesh's ep={mesh.ep} on every layer in the runtime"
            )
        place = places.pop()
        placement = [list(g) for g in place] if place else None
    counts = [sum(1 for lp in plans if lp.stage == k) for k in range(chunks)]
    bounds = [sum(counts[:i]) for i in range(len(counts) + 1)]
    stage_layers = [list(range(bounds[i], bounds[i + 1])) for i in range(len(counts))]
    orders = None
    if mesh.pp > 1:
        if spec.explicit:
            orders = {r: [str(a) for a in v] for r, v in orders_for(spec, ()).items()}
        else:
            gen = S.generate(spec.schedule.name, mesh.pp, spec.n_micro, spec.schedule.vpp)
            orders = {r: [str(a) for a in v] for r, v in gen.items()}
    return RunConfig(model=c, dp=mesh.dp, tp=mesh.tp, pp=mesh.pp, cp=mesh.cp, ep=mesh.ep,
                     zero=spec.zero_stage, n_micro=spec.n_micro, micro_batch=2,
                     stage_layers=stage_layers, orders=orders, recompute=recompute,
                     placement=placement, bidirectional=bidirectional, steps=steps,
                     seed=seed)  # fmt: skip


def _check_cp(spec, bidirectional: bool) -> None:  # noqa: ANN001
    """What the runtime's context parallelism (`context_parallel.py`) cannot run, one line."""
    mesh = spec.mesh
    seq = TinyConfig().seq
    if seq % (2 * mesh.cp):
        raise HwtuneInputError(
            "mesh.cp", mesh.cp,
            f"a degree with 2*cp dividing the runtime model's {seq} tokens (2 chunks per rank)",
        )  # fmt: skip
    if mesh.tp > 1:
        raise HwtuneInputError("mesh.cp", mesh.cp, "tp = 1 with context parallelism in the runtime")
    if mesh.ep > 1:
        raise HwtuneInputError("mesh.cp", mesh.cp, "ep = 1 with context parallelism in the runtime")
    if bidirectional:
        raise HwtuneInputError(
            "schedule.name", "dualpipe", "cp = 1 for a DualPipe run (not with context parallelism)"
        )


def run_spec(spec, steps: int = 3, moe: bool | None = None) -> dict:  # noqa: ANN001
    """`hwtune compile --run`: the spec on the tiny GPT (or MoE when it has ep > 1)."""
    cfg = run_config(spec, steps, moe=spec.mesh.ep > 1 if moe is None else moe)
    return launch(cfg)
