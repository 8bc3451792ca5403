"""Start the processes of a run on 127.0.0.1 (torch.multiprocessing, a free port; gloo on CPU
or NCCL with one GPU per process, `RunConfig.device`) and compare their losses with the
single-process reference (on CPU). Under torchrun, `python -m hwtune.parallel.runtime` runs the
same training loop with ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` from the environment
(`__main__.py`; VALIDATION.md, "Programmable parallelism", NCCL). Checkpoints, resuming under
another layout and restarts after a rank dies: `with_checkpoints`, `launch`
(`checkpoint.py`)."""

from __future__ import annotations

import gc
import json
import logging
import os
import socket
import tempfile
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from hwtune.errors import HwtuneInputError
from hwtune.parallel.runtime.checkpoint import check_compatible, check_size, latest, read, resolve
from hwtune.parallel.runtime.device import backend_for, check_device, visible_gpus
from hwtune.parallel.runtime.models import TinyConfig, model_spec
from hwtune.parallel.runtime.train import RunConfig, reference_losses, worker

LOSS_TOL = 1e-5
"""Relative (absolute below 1) agreement of a run's losses with the single-process reference:
float32 sums in another order (what tests/parallel/test_runtime.py holds every strategy to)."""


def losses_agree(losses: list[float], ref: list[float]) -> bool:
    """Every step's loss within `LOSS_TOL` of the reference (relative, absolute below 1)."""
    return len(losses) == len(ref) and all(
        abs(a - b) <= LOSS_TOL * max(1.0, abs(b)) for a, b in zip(losses, ref, strict=True)
    )


MAX_PROCESSES = 16
"""The most processes a run starts on one machine, and at most `PROCESSES_PER_CPU` per CPU
core: the ranks of the tiny model are CPU-bound (one thread each), so more than a few per core
only time-slice, and a large mesh (dp*tp*pp*cp = 64) would start 64 interpreters that each
import torch and join one gloo group, which on a small machine runs out of memory or past
gloo's timeout instead of testing anything."""
PROCESSES_PER_CPU = 4


def max_processes(cpus: int | None = None) -> int:
    """The cap on a run's processes here: `MAX_PROCESSES`, or `PROCESSES_PER_CPU` per CPU this
    process may run on (`calibrate.harness.cpu_count`, the affinity mask) when that is fewer."""
    n = _cpus() if cpus is None else cpus
    return min(MAX_PROCESSES, PROCESSES_PER_CPU * max(1, n or 1))


def _cpus() -> int:
    from hwtune.calibrate.harness import cpu_count

    return cpu_count()


def check_processes(world: int, field: str = "dp*tp*pp*cp") -> None:
    """Refuse, in one line and before any process starts, a run of more processes than
    `max_processes` (``field``: the option or value that asked for them)."""
    cap = max_processes()
    if world > cap:
        raise HwtuneInputError(
            field, world,
            f"at most {cap} processes (dp*tp*pp*cp) on this machine (at most {MAX_PROCESSES}, "
            f"{PROCESSES_PER_CPU} per CPU it may use, {_cpus()}); run a smaller mesh, "
            "or one rank per process under torchrun",
        )  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RankFailed(RuntimeError):
    """A rank process of a run died (an exception, a signal, an injected failure): the step it
    ran, the first line of its error."""

    def __init__(self, step: int | None, error: str) -> None:
        self.step, self.error = step, error
        at = f" at step {step}" if step is not None else ""
        super().__init__(f"run: a rank process failed{at} ({error})")


def launch_named(cfgs: dict[str, RunConfig]) -> dict[str, dict]:
    """Run named configs of any world sizes, those of one size in one set of processes
    (`launch_many`); the results by name."""
    out: dict[str, dict] = {}
    for world in sorted({c.world for c in cfgs.values()}):
        names = [n for n, c in cfgs.items() if c.world == world]
        out.update(zip(names, launch_many([cfgs[n] for n in names]), strict=True))
    return out


def launch_many(cfgs: list[RunConfig]) -> list[dict]:
    """Run configs of one world size in one set of processes; per config: the losses, the
    per-rank state bytes, and the single-process reference. A rank that dies: `RankFailed`."""
    import torch.multiprocessing as mp
    from torch.multiprocessing.spawn import ProcessException

    world = cfgs[0].world
    if any(c.world != world for c in cfgs):
        raise HwtuneInputError("configs", [c.world for c in cfgs], "one world size per launch")
    device = cfgs[0].device
    if any(c.device != device for c in cfgs):
        raise HwtuneInputError("configs", [c.device for c in cfgs], "one device per launch")
    # refused here, in one line, before any process starts
    check_processes(world)
    check_device(device, world, visible_gpus() if device == "cuda" else 0)
    out = []
    # torch warns as it terminates the other ranks after one died: `RankFailed` says it once
    spawn_log = logging.getLogger("torch.multiprocessing.spawn")
    level = spawn_log.level
    with tempfile.TemporaryDirectory() as d:
        try:
            spawn_log.setLevel(logging.ERROR)
            mp.spawn(worker, args=(world, free_port(), cfgs, d), nprocs=world, join=True)
        except ProcessException as e:
            raise RankFailed(_failed_step(Path(d)), _first_line(e)) from e
        finally:
            spawn_log.setLevel(level)
        for i, cfg in enumerate(cfgs):
            ranks = [
                json.loads(p.read_text()) for p in sorted((Path(d) / str(i)).glob("rank*.json"))
            ]
            out.append(result(cfg, ranks))
    return out


def _failed_step(d: Path) -> int | None:
    """The step the ranks had reached when one died (their progress files: the latest)."""
    steps = [int(p.read_text() or -1) for p in d.glob("*/rank*.step")]
    return max(steps) if steps and max(steps) >= 0 else None


def _first_line(e: BaseException) -> str:
    """``process 1 terminated with exit code 3``, or the last line of a rank's traceback
    (its exception), with the process named."""
    text = str(e).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if len(lines) <= 1:
        return text
    return f"process {getattr(e, 'error_index', '?')}: {lines[-1]}"


def result(cfg: RunConfig, ranks: list[dict]) -> dict:
    """The run's document from its ranks' (``_train``'s): the losses of a rank that computes
    them, the single-process reference (on CPU), their largest difference, the state bytes."""
    losses = next(r["losses"] for r in ranks if r["losses"])
    ref = reference_losses(cfg)
    m = cfg.model
    kind = f"MoE ({m.n_experts} experts)" if m.n_experts else "GPT"
    return {
        # the tiny model the run trains, not the simulated one
        "model": f"tiny {kind}, {m.n_layers} layers, d_model {m.d_model}",
        "world": cfg.world,
        "device": cfg.device,
        "backend": backend_for(cfg.device),
        "losses": losses,
        "reference": ref,
        "max_abs_diff": max(abs(a - b) for a, b in zip(losses, ref, strict=True)),
        "tolerance": LOSS_TOL,
        "agrees": losses_agree(losses, ref),
        "memory": {r["rank"]: r["memory"] for r in ranks},
        # per rank and step: the collectives issued (`comm.CommCounter`), kind -> calls, bytes
        "collectives": {r["rank"]: r.get("collectives", []) for r in ranks},
        # checkpoints (`checkpoint.py`): the steps run here are first_step..steps-1, from the
        # checkpoint resumed (the reference starts from it too)
        "first_step": cfg.first_step,
        "resumed_from": cfg.resume,
        "saved": [f for r in ranks for f in r.get("saved", [])],
    }


def under_torchrun(environ: Mapping[str, str]) -> bool:
    """Whether this process was started by torchrun (or another launcher that sets the
    ``env://`` variables): then it is one rank, not the parent of the ranks."""
    return all(k in environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def launch_env(cfg: RunConfig, environ: Mapping[str, str] | None = None) -> dict | None:
    """Run ``cfg`` as one rank started by torchrun: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
    ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` from the environment (one
    process per GPU for cuda). The ranks' results are gathered on rank 0, which returns the
    run's document (as `launch`); the other ranks return None."""
    import torch.distributed as dist

    from hwtune.parallel.runtime.train import _train, barrier, init_group

    env = os.environ if environ is None else environ
    rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
    if world != cfg.world:
        raise HwtuneInputError("WORLD_SIZE", world, f"the spec's dp*tp*pp*cp = {cfg.world}")
    local_world = int(env.get("LOCAL_WORLD_SIZE", world))
    check_device(cfg.device, local_world, visible_gpus() if cfg.device == "cuda" else 0)
    dev = init_group(rank, world, cfg.device)
    try:
        doc = _train(rank, cfg, dev)
        docs: list | None = [None] * world if rank == 0 else None
        dist.gather_object(doc, docs, dst=0)
        gc.collect()
        barrier(dev)
    finally:
        dist.destroy_process_group()
    if docs is None:
        return None
    doc = result(cfg, docs)
    # restarts are torchrun's (--max-restarts): how many it made before this attempt
    doc["restarts"] = []
    doc["torchrun_restart_count"] = int(env.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
    return doc


def launch(cfg: RunConfig, max_restarts: int = 0) -> dict:
    """Run ``cfg`` in ``cfg.world`` processes and compare with the single-process run. When a
    rank dies, up to ``max_restarts`` times: start the whole run again from the latest
    checkpoint in ``cfg.save_dir`` (else the run's own ``resume``, else from scratch), without
    the injected failure; the document's ``restarts`` lists them. Out of restarts:
    `RankFailed`."""
    restarts: list[dict] = []
    attempt = cfg
    while True:
        try:
            doc = launch_many([attempt])[0]
        except RankFailed as e:
            if len(restarts) >= max_restarts:
                if restarts:
                    e.args = (f"{e.args[0]}, after {len(restarts)} restart(s)",)
                raise
            again = replace(cfg, fail_at=None)
            found = latest(cfg.save_dir)
            attempt = resume_config(again, found) if found is not None else again
            restarts.append({"failed_at_step": e.step, "error": e.error,
                             "resumed_from_step": attempt.first_step,
                             "resumed_from": attempt.resume})  # fmt: skip
            continue
        doc["restarts"] = restarts
        return doc


def resume_config(cfg: RunConfig, path: str | Path | None) -> RunConfig:
    """``cfg`` starting from checkpoint ``path`` (a file, or a directory: its latest step file;
    none there: from scratch), checked against the run (one line naming the file)."""
    if path is None:
        return cfg
    found = resolve(path, cfg.save_dir)
    if found is None:
        return replace(cfg, resume=None, first_step=0)
    doc = read(found)
    check_compatible(doc, found, cfg)
    return replace(cfg, resume=str(found), first_step=int(doc["step"]))


def with_checkpoints(
    cfg: RunConfig,
    save: str | Path | None = None,
    save_every: int | None = None,
    resume: str | Path | None = None,
    max_restarts: int | None = None,
    fail_at: str | None = None,
    torchrun: bool = False,
) -> RunConfig:
    """The run's checkpoint options (``--save``, ``--save-every``, ``--resume``,
    ``--max-restarts``, ``--fail-at``) checked, in one line each, before any process starts,
    and the run resolved against its checkpoint (its first step). ``torchrun``: one rank
    under torchrun (restarts are torchrun's; the failure is injected in its first attempt
    only, ``TORCHELASTIC_RESTART_COUNT`` 0)."""
    if save_every is not None and save is None:
        raise HwtuneInputError("--save-every", save_every, "--save DIR beside it")
    if save_every is not None and save_every < 1:
        raise HwtuneInputError("--save-every", save_every, "a positive number of steps")
    if max_restarts is not None:
        if max_restarts < 0:
            raise HwtuneInputError("--max-restarts", max_restarts, "0 or more restarts")
        if torchrun:
            raise HwtuneInputError(
                "--max-restarts", max_restarts, "torchrun's --max-restarts under torchrun"
            )
        if max_restarts > 0 and save is None:
            raise HwtuneInputError(
                "--max-restarts", max_restarts, "--save DIR beside it (restarts resume from it)"
            )
    if save is not None:
        if Path(save).exists() and not Path(save).is_dir():
            raise HwtuneInputError("--save", str(save), "a directory (it is a file)")
        cfg = replace(cfg, save_dir=str(save), save_every=save_every or 0)
    if save is not None or resume is not None:
        check_size(cfg.model)
    cfg = resume_config(cfg, resume)
    if fail_at is not None:
        step, _, rank = str(fail_at).partition(":")
        try:
            at = [int(step), int(rank) if rank else 0]
        except ValueError:
            raise HwtuneInputError("--fail-at", fail_at, "STEP or STEP:RANK (integers)") from None
        if not cfg.first_step <= at[0] < cfg.steps:
            raise HwtuneInputError(
                "--fail-at", fail_at,
                f"a step the run runs, {cfg.first_step}..{cfg.steps - 1} (0-based)",
            )  # fmt: skip
        if not 0 <= at[1] < cfg.world:
            raise HwtuneInputError(
                "--fail-at", fail_at, f"a rank of the run's {cfg.world} (0..{cfg.world - 1})"
            )
        if not (torchrun and int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0) > 0):
            cfg = replace(cfg, fail_at=at)
    return cfg


def run_config(
    spec,  # noqa: ANN001
    steps: int = 3,
    moe: bool = False,
    seed: int = 0,
    device: str = "cpu",
) -> RunConfig:
    """The `RunConfig` of a `ParallelSpec` on the tiny model (its mesh, ZeRO stage, stages,
    compiled orders and the annotations resolved per layer: recomputation, expert placement;
    4 layers, or as many as the stages need). What the runtime cannot run is refused here,
    one line naming the field."""
    from hwtune.parallel import schedules as S
    from hwtune.parallel.compiler import orders_for
    from hwtune.parallel.spec import validate

    backend_for(device)  # an unknown device: one line
    mesh = spec.mesh
    bidirectional = not spec.explicit and spec.schedule.name == "dualpipe" and mesh.pp > 1
    if mesh.cp > 1:
        _check_cp(spec, bidirectional)
    if bidirectional and (mesh.tp > 1 or (spec.zero_stage > 1 and mesh.dp > 1)):
        # ZeRO 2/3 are FSDP2 modules, which the hand-walked DualPipe does not drive
        raise HwtuneInputError(
            "schedule.name", "dualpipe", "tp = 1, and zero 0 or 1 with dp > 1, for a DualPipe run"
        )
    chunks = spec.n_chunks() if mesh.pp > 1 else 1
    layers = max(4, chunks)
    if spec.stages is not None and mesh.pp > 1:
        layers = sum(spec.stages)
    c = TinyConfig(n_layers=layers, n_experts=8 if moe else 0, flash=spec.flash_attention,
                   rope=mesh.cp > 1)  # fmt: skip
    ms = model_spec(c)
    plans = validate(spec, ms)  # the compiler's checks, against the model that runs
    if mesh.ep > 1 and mesh.tp > 1:
        raise HwtuneInputError("mesh.ep", mesh.ep, "tp = 1 with expert parallelism in the runtime")
    recompute = {lp.index: lp.recompute for lp in plans}
    bad = next((lp for lp in plans if lp.recompute not in ("none", "selective", "full")), None)
    if bad is not None:
        raise HwtuneInputError(
            f"layers.{bad.index}.recompute", bad.recompute, "none, selective or full in the runtime"
        )
    placement = None
    ep, ep_over_tp = mesh.ep, False
    eps = {lp.ep for lp in plans}
    if moe and mesh.ep == 1 and eps != {1}:
        # experts folded over the tp ranks, unsharded (Megatron-Core's parallel folding with
        # expert-TP = 1): "different TP degrees for attention and experts"
        ep_over_tp = True
        _check_fold(spec, plans)
        ep = mesh.tp
    if moe and ep > 1:
        places = {lp.placement for lp in plans}
        if eps != {ep} or len(places) > 1:
            raise HwtuneInputError(
                "modules.ep", sorted(eps), f"the mesh's ep={mesh.ep} on every layer in the runtime"
            )
        place = places.pop()
        placement = [list(g) for g in place] if place else None
    counts = [sum(1 for lp in plans if lp.stage == k) for k in range(chunks)]
    bounds = [sum(counts[:i]) for i in range(len(counts) + 1)]
    stage_layers = [list(range(bounds[i], bounds[i + 1])) for i in range(len(counts))]
    orders, split = None, False  # split: some action is an input-gradient-only backward (I)
    if mesh.pp > 1:
        if spec.explicit:
            acts = orders_for(spec, ())
            _check_loss_order(acts, chunks - 1)
        else:
            acts = S.generate(spec.schedule.name, mesh.pp, spec.n_micro, spec.schedule.vpp)
        orders = {r: [str(a) for a in v] for r, v in acts.items()}
        split = any(p.kind == "I" for v in acts.values() for a in v for p in a.parts)
    if split and spec.zero_stage >= 3 and mesh.dp * mesh.cp > 1:  # FSDP2 shards over dp x cp
        # FSDP2 stages resharded between a micro-batch's I and its W: torch's schedule runtime
        # then puts W's gradients on the sharded parameters, where no reduce-scatter sees them
        # (the run's losses differed from the reference by 5.7e-4 under zb-h1 and 1.3e-3 under
        # zbv at pp 2, dp 2; the last stage issued no reduce-scatter)
        raise HwtuneInputError(
            "zero", spec.zero_stage,
            "at most 2 with dp x cp > 1 under a schedule that splits the backward into I and W "
            f"({spec.schedule.name if not spec.explicit else 'explicit actions'}) for a run",
        )  # fmt: skip
    if bidirectional and device == "cuda":
        from hwtune.parallel.actions import parse_action
        from hwtune.parallel.runtime.dualpipe import in_posting_order

        parsed = {r: [parse_action(a) for a in v] for r, v in orders.items()}
        if not in_posting_order(parsed, mesh.pp):
            raise HwtuneInputError(
                "schedule.name", "dualpipe",
                "an order whose messages each rank receives in the order its peer sent them, "
                "for a DualPipe run on cuda (NCCL ignores tags)",
            )  # fmt: skip
    return RunConfig(model=c, dp=mesh.dp, tp=mesh.tp, pp=mesh.pp, cp=mesh.cp, ep=ep,
                     ep_over_tp=ep_over_tp,
                     zero=spec.zero_stage, n_micro=spec.n_micro, micro_batch=2,
                     stage_layers=stage_layers, orders=orders, recompute=recompute,
                     placement=placement, bidirectional=bidirectional, steps=steps,
                     seed=seed, device=device,
                     schedule=("explicit" if spec.explicit else spec.schedule.name)
                     if mesh.pp > 1 else "")  # fmt: skip


def _check_loss_order(orders, last: int) -> None:  # noqa: ANN001
    """torch's schedule runtime keeps the last stage's losses in the order its forwards ran and
    finds micro-batch i's at position i (``_maybe_get_loss``): an explicit order whose last
    stage runs its forwards out of micro-batch order is refused here, one line, before any
    process starts (it would crash the run, or pair a backward with another micro-batch's
    loss)."""
    for r, v in orders.items():
        fwd = [p.mb for a in v for p in a.parts if p.stage == last and p.kind == "F"]
        if fwd and fwd != sorted(fwd):
            raise HwtuneInputError(
                f"schedule.actions.{r}", " ".join(str(a) for a in v),
                f"the forwards of stage {last} (it computes the loss) in micro-batch order "
                f"({', '.join(f'{last}F{m}' for m in sorted(fwd))}) for a run",
            )  # fmt: skip


def _check_fold(spec, plans) -> None:  # noqa: ANN001
    """What the runtime's experts folded over tp (`experts.py`) cannot run, one line: the
    experts of every layer unsharded (tp 1) over ep = the mesh's tp ranks, with dp = pp = cp = 1
    (the expert all-to-all then runs over the tp group)."""
    mesh = spec.mesh
    eps = sorted({lp.ep for lp in plans})
    if eps != [mesh.tp] or mesh.tp == 1 or any(lp.tp_ffn != 1 for lp in plans):
        raise HwtuneInputError(
            "modules.ep", eps,
            f"ep = the mesh's tp={mesh.tp} with experts at tp 1 on every layer, or mesh.ep, "
            "for experts folded over tensor parallelism in the runtime",
        )  # fmt: skip
    if mesh.dp > 1 or mesh.pp > 1 or mesh.cp > 1:
        raise HwtuneInputError(
            "modules.ep", eps,
            "dp = pp = cp = 1 for experts folded over tensor parallelism in the runtime",
        )  # fmt: skip


def _check_cp(spec, bidirectional: bool) -> None:  # noqa: ANN001
    """What the runtime's context parallelism (`context_parallel.py`) cannot run, one line."""
    mesh = spec.mesh
    seq = TinyConfig().seq
    if seq % (2 * mesh.cp):
        raise HwtuneInputError(
            "mesh.cp", mesh.cp,
            f"a degree with 2*cp dividing the runtime model's {seq} tokens (2 chunks per rank)",
        )  # fmt: skip
    if mesh.tp > 1 and mesh.pp > 1:
        # TP's DTensor parameters with cp: FSDP2 over the dp x cp ranks (a 2-D mesh with tp)
        # at ZeRO-2/3, reduced by hand or by the distributed optimizer at ZeRO-0/1, without
        # pipeline stages
        raise HwtuneInputError(
            "mesh.cp", mesh.cp, "tp = 1, or pp = 1, with context parallelism in the runtime"
        )
    if mesh.ep > 1:
        raise HwtuneInputError("mesh.cp", mesh.cp, "ep = 1 with context parallelism in the runtime")
    if bidirectional:
        raise HwtuneInputError(
            "schedule.name", "dualpipe", "cp = 1 for a DualPipe run (not with context parallelism)"
        )


def wants_moe(spec) -> bool:  # noqa: ANN001
    """Whether the spec places experts (ep > 1 on the mesh, or an expert annotation): then
    the runtime trains the tiny MoE."""
    return spec.mesh.ep > 1 or any(a.ep is not None or a.placement for a in spec.modules)


def run_spec(
    spec,  # noqa: ANN001
    steps: int = 3,
    moe: bool | None = None,
    device: str = "cpu",
    save: str | Path | None = None,
    save_every: int | None = None,
    resume: str | Path | None = None,
    max_restarts: int | None = None,
    fail_at: str | None = None,
) -> dict:
    """`hwtune compile --run`: the spec on the tiny GPT (or MoE when it has ep > 1 on the
    mesh or in an expert annotation), on ``device`` ("cpu": gloo; "cuda": NCCL, one visible GPU
    per process); checkpoints and restarts as `with_checkpoints` and `launch` say."""
    cfg = run_config(spec, steps, moe=wants_moe(spec) if moe is None else moe, device=device)
    check_processes(cfg.world, "--dp x --tp x --pp x --cp (--run)")
    cfg = with_checkpoints(cfg, save, save_every, resume, max_restarts, fail_at)
    doc = launch(cfg, max_restarts or 0)
    doc["not_run"] = not_run(spec)
    return doc


def not_run(spec) -> list[str]:  # noqa: ANN001
    """The spec's settings that the tiny run does not reproduce (it checks the parallel layout
    against one process: fp32 for exact losses, AdamW, no sequence parallelism), so that the
    run is not taken for them."""
    out = []
    if spec.precision != "fp32":
        out.append(f"precision {spec.precision} (the run is fp32)")
    if spec.optimizer != "adam":
        out.append(f"optimizer {spec.optimizer} (the run uses AdamW)")
    if spec.sequence_parallel:
        out.append("sequence parallelism")
    return out
