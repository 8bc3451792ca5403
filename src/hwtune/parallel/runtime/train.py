"""One rank's training loop under a strategy, and the single-process reference it must match."""

from __future__ import annotations

import gc
import json
import os
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from hwtune.parallel.runtime.comm import CommCounter
from hwtune.parallel.runtime.models import TinyConfig, batch, build, loss_fn
from hwtune.parallel.runtime.tensor_parallel import local_tensor as _local

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh


@dataclass
class RunConfig:
    """What the runtime needs of a compiled strategy (plain data, picklable)."""

    model: TinyConfig = field(default_factory=TinyConfig)
    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1  # context parallel: each sequence over cp ranks (`context_parallel.py`)
    ep: int = 1
    ep_over_tp: bool = False  # experts unsharded, ep over the tp ranks (MoE parallel folding)
    zero: int = 0
    n_micro: int = 1  # micro-batches per data-parallel rank
    micro_batch: int = 2
    stage_layers: list[list[int]] | None = None  # layers of each pipeline stage
    orders: dict[int, list[str]] | None = None  # per-rank actions (hwtune notation)
    tp_attention: bool = True
    tp_ffn: bool = True
    recompute: dict[int, str] = field(default_factory=dict)  # layer -> none/selective/full
    placement: list[list[int]] | None = None  # experts on each expert-parallel rank
    bidirectional: bool = False  # DualPipe: two directions, stages 0..2p-1 (`dualpipe.py`)
    steps: int = 3
    seed: int = 0
    lr: float = 1e-2
    # AdamW's eps; the default is torch's. AdamW's step is nearly invariant to a gradient's
    # scale (m / sqrt(v)), so losses alone do not show a gradient reduced with the wrong
    # divisor; with eps well above |g| the step is ~ lr g / eps, which they do (tests)
    adam_eps: float = 1e-8
    device: str = "cpu"  # "cpu" (gloo) or "cuda" (NCCL, one GPU per process): `device.py`
    schedule: str = ""  # the pipeline schedule's name (recorded in checkpoints)
    # checkpoints (`checkpoint.py`): the run's steps are first_step..steps-1
    first_step: int = 0
    resume: str | None = None  # the checkpoint file it starts from (its step is first_step)
    save_dir: str | None = None  # writes save_dir/step-<k>.pt (k: steps done)
    save_every: int = 0  # every this many steps; 0: only after the last step
    fail_at: list[int] | None = None  # [step, rank]: that rank exits at that step's start

    @property
    def world(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def global_batch(self) -> int:
        return self.micro_batch * self.n_micro * self.dp


def reference_losses(cfg: RunConfig) -> list[float]:
    """The same model, data and optimizer in one process, whole batch at once, no
    recomputation; from the run's checkpoint when it resumes one (steps first_step..)."""
    return reference_run(cfg)[0]


def reference_run(
    cfg: RunConfig,
) -> tuple[list[float], torch.nn.Module, torch.optim.Optimizer]:
    """`reference_losses`, with the model and its AdamW after the last step."""
    model = build(cfg.model, cfg.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, eps=cfg.adam_eps)
    if cfg.resume is not None:
        from hwtune.parallel.runtime.checkpoint import load_reference

        load_reference(model, opt, torch.load(cfg.resume, map_location="cpu", weights_only=True))
    out = []
    for step in range(cfg.first_step, cfg.steps):
        x, y = batch(cfg.model, cfg.global_batch, step, cfg.seed)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        out.append(loss.item())
    return out, model, opt


INJECTED_FAILURE_EXIT = 3
"""Exit status of a rank that ``fail_at`` stops (``os._exit``, as a crashed process)."""


class Checkpointing:
    """One rank's side of checkpoints (`checkpoint.py`), inert when the run neither saves nor
    resumes: the model's element ids (`mark_ids`, right after the build), the true weights
    written into the rank's parameters after the layout's setup (`place`), the AdamW states
    loaded into its optimizer (`load`), and per step: the progress file, the injected failure
    (`begin`), the save when one is due (`end`)."""

    def __init__(
        self, cfg: RunConfig, model: torch.nn.Module, rank: int, progress: Path | None
    ) -> None:
        from hwtune.parallel.runtime import checkpoint as ck

        self.cfg, self.rank, self.progress = cfg, rank, progress
        self.on = cfg.save_dir is not None or cfg.resume is not None
        self.ids_of: dict[int, torch.Tensor] = {}
        self.saved: list[str] = []
        self.state: tuple = ()
        if self.on:
            self.state = ck.initial_state(cfg, model)
            ck.mark_ids(model)

    def place(self, params: list[torch.nn.Parameter]) -> None:
        """After the layout's setup, before the optimizer exists."""
        from hwtune.parallel.runtime.checkpoint import place

        if self.on:
            self.ids_of = place(params, self.state[0])

    def load(self, opt: object) -> None:
        """The checkpoint's AdamW states into the rank's optimizer(s)."""
        from hwtune.parallel.runtime.checkpoint import load_moments

        if self.cfg.resume is not None:
            load_moments(opt, self.ids_of, self.state[1], self.state[2], self.cfg.first_step)
        self.state = ()

    def begin(self, step: int) -> None:
        if self.progress is not None:
            self.progress.write_text(str(step))
        fail = self.cfg.fail_at
        if fail is not None and fail[0] == step and fail[1] == self.rank:
            os._exit(INJECTED_FAILURE_EXIT)

    def end(
        self, step: int, params: list[torch.nn.Parameter], opt: object, dev: torch.device
    ) -> None:
        """After step ``step`` (0-based): save ``step + 1`` steps done when it is due, then a
        barrier, so that no rank runs on (and may fail) before the file is whole."""
        from hwtune.parallel.runtime.checkpoint import save

        cfg, done = self.cfg, step + 1
        if cfg.save_dir is None:
            return
        if done != cfg.steps and not (cfg.save_every and done % cfg.save_every == 0):
            return
        path = save(cfg, done, params, opt, self.ids_of, self.rank)
        if path is not None:
            self.saved.append(str(path))
        barrier(dev)


def _state_bytes(modules: list[torch.nn.Module], opt: object) -> dict[str, float]:
    params = {id(p): p for m in modules for p in m.parameters()}.values()
    w = sum(_local(p).numel() * _local(p).element_size() for p in params)
    g = sum(
        _local(p.grad).numel() * _local(p.grad).element_size() for p in params if p.grad is not None
    )
    o = 0
    for one in getattr(opt, "opts", [opt]):
        inner = getattr(one, "optim", one)  # a DistributedOptimizer keeps its shard's here
        for st in inner.state.values():
            for v in st.values():
                if torch.is_tensor(v) and v.numel() > 1:
                    o += _local(v).numel() * _local(v).element_size()
    return {"weights": float(w), "gradients": float(g), "optimizer": float(o)}


def init_group(rank: int, world: int, device: str) -> torch.device:
    """Join the process group (``MASTER_ADDR``/``MASTER_PORT`` from the environment) with the
    device's backend (gloo for cpu, NCCL for cuda); returns the device this rank computes on
    (for cuda: GPU ``LOCAL_RANK`` under torchrun, else the rank modulo the visible GPUs, made
    the current device before the group binds to it)."""
    from hwtune.parallel.runtime.device import backend_for, local_rank, visible_gpus

    backend = backend_for(device)
    torch.set_num_threads(1)
    kw: dict = {}
    if device == "cuda":
        dev = torch.device("cuda", local_rank(rank, visible_gpus(), os.environ))
        torch.cuda.set_device(dev)
        kw["device_id"] = dev
    else:
        dev = torch.device("cpu")
    dist.init_process_group(
        backend, rank=rank, world_size=world, timeout=timedelta(seconds=120), **kw
    )
    return dev


def barrier(dev: torch.device) -> None:
    """``dist.barrier`` on this rank's GPU under NCCL (no guess of the device)."""
    if dev.type == "cuda":
        dist.barrier(device_ids=[dev.index])
    else:
        dist.barrier()


def worker(rank: int, world: int, port: int, cfgs: list[RunConfig], outdir: str) -> None:
    """Entry point of one process (torch.multiprocessing.spawn): runs each config in turn on
    one process group (one start-up for several strategies; one device for all of them)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dev = init_group(rank, world, cfgs[0].device)
    try:
        for i, cfg in enumerate(cfgs):
            out = Path(outdir) / str(i)
            out.mkdir(exist_ok=True)
            doc = _train(rank, cfg, dev, progress=out / f"rank{rank}.step")
            (out / f"rank{rank}.json").write_text(json.dumps(doc))
            barrier(dev)
        # every rank's wrappers (DDP's reducer holds gloo work) are released inside `_train`;
        # one more barrier so no rank tears the group down while a peer still uses it
        gc.collect()
        barrier(dev)
    finally:
        dist.destroy_process_group()


def _train(
    rank: int, cfg: RunConfig, dev: torch.device | None = None, progress: Path | None = None
) -> dict:
    """One config on this rank (the group already up): its losses (Python floats; only the
    ranks that compute the loss have them) and state bytes; ``progress``: a file that holds the
    step this rank runs (the launcher reads it when a rank dies)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.nn.parallel import DistributedDataParallel as DDP

    from hwtune.parallel.runtime.comm import count_ddp
    from hwtune.parallel.runtime.context_parallel import apply_cp
    from hwtune.parallel.runtime.data_parallel import (
        accumulate,
        apply_ddp,
        apply_fsdp,
        expert_param_names,
        make_optimizer,
        scale_unsharded_experts,
    )
    from hwtune.parallel.runtime.recompute import SavedActivations, apply_recompute
    from hwtune.parallel.runtime.tensor_parallel import apply_tp

    if dev is None:
        dev = torch.device(cfg.device)
    edp_mesh = None
    if cfg.ep > 1 and not cfg.ep_over_tp:
        # expert parallelism folded over data parallelism (Megatron-Core's "expert data
        # parallel"): dp = (dp/ep replicas) x (ep expert ranks); the all-to-all runs over the
        # inner "ep" sub-mesh, each expert's gradients are reduced over its dp/ep replicas
        # ("edp"), dense gradients over the flattened "dp"
        # with pp > 1 every pipeline stage has its own (edp, ep) sub-mesh: the all-to-all of a
        # stage's MoE layers runs among the ranks holding that stage
        if cfg.dp % cfg.ep or cfg.tp > 1:
            raise ValueError("runtime: ep must divide dp (tp = 1) for expert parallelism")
        mesh = init_device_mesh(
            dev.type, (cfg.pp, cfg.dp // cfg.ep, cfg.ep, cfg.tp),
            mesh_dim_names=("pp", "edp", "ep", "tp"),
        )  # fmt: skip
        dp_mesh = mesh["edp", "ep"]._flatten("dp")
        edp_mesh = mesh["edp"]
    elif cfg.cp > 1:
        # Megatron's order, tp innermost, then cp, dp, pp; the cp ranks hold the same weights,
        # so gradients are reduced over the flattened dp x cp ranks (Megatron's
        # "data-parallel group with context parallel"); with tp > 1 the attention's local heads
        # all-gather their K/V over cp, and FSDP2 shards the TP DTensors over dp x cp
        if cfg.bidirectional or (cfg.tp > 1 and cfg.pp > 1):
            raise ValueError("runtime: context parallelism, with tp > 1 only at pp = 1")
        mesh = init_device_mesh(
            dev.type, (cfg.pp, cfg.dp, cfg.cp, cfg.tp), mesh_dim_names=("pp", "dp", "cp", "tp")
        )
        dp_mesh = mesh["dp", "cp"]._flatten("dp_cp") if cfg.dp > 1 else mesh["cp"]
    else:
        mesh = init_device_mesh(
            dev.type, (cfg.pp, cfg.dp, cfg.tp), mesh_dim_names=("pp", "dp", "tp")
        )
        dp_mesh = mesh["dp"]
    tp_mesh = mesh["tp"]
    # the batch is split over dp only; dp_mesh (gradients, ZeRO) spans dp x cp
    dp_rank = mesh["dp"].get_local_rank() if cfg.cp > 1 else dp_mesh.get_local_rank()
    pp_rank = mesh["pp"].get_local_rank()
    cp_group = mesh["cp"].get_group() if cfg.cp > 1 else None
    model = build(cfg.model, cfg.seed).to(dev)  # built on CPU: the reference's weights
    # saving or resuming: the parameters hold their element ids until `ck.place`
    ck = Checkpointing(cfg, model, rank, progress)
    apply_recompute(model, cfg.recompute)
    tokens = None  # this cp rank's token positions
    if cp_group is not None and cfg.pp == 1:
        tokens = apply_cp(model, cp_group, cfg.model.seq)
    ep_group = None
    if cfg.ep_over_tp:  # experts over the tp ranks, each routing 1/tp of the pairs
        ep_group = tp_mesh.get_group()
        shard_experts(model, ep_group, cfg.placement)
        for block in model.layers.values():
            if block.moe:
                block.feed_forward.fold_group = ep_group
    elif cfg.ep > 1:
        ep_group = mesh["ep"].get_group()
        if cfg.pp == 1:  # pipelines: on the stages' copies (below)
            shard_experts(model, ep_group, cfg.placement)
    if cfg.tp > 1:
        apply_tp(model, tp_mesh, cfg.tp_attention, cfg.tp_ffn)
    per_dp = cfg.global_batch // cfg.dp
    # routed experts sharded over the dp ranks (an edp sub-mesh): reduced over their replicas;
    # unsharded ones (ep 1, or folded over tp at dp 1) are replicated like the dense weights
    expert_names = set(expert_param_names(model)) if edp_mesh is not None else set()
    losses: list[float] = []
    counter = CommCounter()  # the collectives of each step (`comm.py`)
    comm: list[dict] = []

    # ZeRO-1: the distributed optimizer reduces the gradients (`distributed_optimizer.py`)
    sharded_opt = cfg.zero == 1 and dp_mesh.size() > 1
    if cfg.pp == 1:
        wrapped = model
        # ZeRO-0 with tensor parallelism: DDP takes no DTensor parameters (its first broadcast
        # fails), so the step's gradients are all-reduced by hand, one flat bucket of the local
        # shards over dp, as the pipelines' stages are (`reduce_grads`)
        by_hand = dp_mesh.size() > 1 and cfg.zero == 0 and cfg.tp > 1
        if dp_mesh.size() > 1 and cfg.zero >= 2:
            wrapped = apply_fsdp(model, dp_mesh, cfg.zero, edp_mesh)
        elif dp_mesh.size() > 1 and not sharded_opt and not by_hand:
            wrapped = apply_ddp(model, dp_mesh, sorted(expert_names))
        experts = {id(p) for n, p in model.named_parameters() if n in expert_names}
        params = list(wrapped.parameters())
        ck.place(params)
        opt = make_optimizer(wrapped, cfg.zero, dp_mesh, cfg.lr, experts, edp_mesh, cfg.adam_eps)
        ck.load(opt)
        if isinstance(wrapped, DDP):
            count_ddp(wrapped, dp_mesh.get_group())
        acts: dict[int, float] = {}
        for step in range(cfg.first_step, cfg.steps):
            ck.begin(step)
            x, y = batch(cfg.model, cfg.global_batch, step, cfg.seed)
            x, y = (
                x[dp_rank * per_dp : (dp_rank + 1) * per_dp],
                y[dp_rank * per_dp : (dp_rank + 1) * per_dp],
            )
            if tokens is not None:
                x, y = x[:, tokens], y[:, tokens]
            x, y = x.to(dev), y.to(dev)
            total = torch.zeros((), device=dev)
            with counter:  # what the plan prices: forward, backward, reductions, optimizer
                for mb in range(cfg.n_micro):
                    sl = slice(mb * cfg.micro_batch, (mb + 1) * cfg.micro_batch)
                    with accumulate(wrapped, cfg.zero, last=mb == cfg.n_micro - 1):
                        if step == cfg.first_step and mb == 0 and cfg.zero < 2:
                            # activation bytes kept for the backward, per layer (FSDP2's gathered
                            # weights live in fresh storages: not measured under ZeRO-2/3)
                            with SavedActivations(model) as meter:
                                loss = loss_fn(wrapped(x[sl]), y[sl]) / cfg.n_micro
                            acts = meter.layers()
                        else:
                            loss = loss_fn(wrapped(x[sl]), y[sl]) / cfg.n_micro
                        loss.backward()
                    total += loss.detach()
                if by_hand:
                    reduce_grads(params, experts, dp_mesh, edp_mesh)
                elif cfg.ep > 1 and cfg.zero >= 2:
                    scale_unsharded_experts(params, experts, cfg.dp, edp_mesh)
                elif cfg.ep > 1 and cfg.zero == 0:  # ZeRO-1: the distributed optimizers
                    # an expert's gradient summed the tokens of its ep group's ranks; the sum over
                    # its dp/ep replicas adds the other groups' tokens; / dp: the mean of the ranks'
                    # losses (DDP averages the dense gradients the same way)
                    for n, p in model.named_parameters():
                        if n in expert_names and p.grad is not None:
                            if edp_mesh is not None and edp_mesh.size() > 1:
                                dist.all_reduce(p.grad, group=edp_mesh.get_group())
                            p.grad.div_(cfg.dp)
                opt.step()  # states measured after it: the first step creates AdamW's
            comm.append(counter.take())
            mem = _state_bytes([wrapped], opt)
            opt.zero_grad()
            if dp_mesh.size() > 1:  # the mean of the ranks' means: every rank has as many tokens
                dist.all_reduce(total, group=dp_mesh.get_group())
                total /= dp_mesh.size()
            losses.append(total.item())
            ck.end(step, params, opt, dev)
        mem["params_local"] = float(sum(_local(p).numel() for p in wrapped.parameters()))
        mem["activations"] = acts
        del wrapped, opt
    elif cfg.bidirectional:
        losses, mem = _train_dualpipe(
            cfg, model, mesh, dp_mesh, edp_mesh, pp_rank, dp_rank, dev, counter, comm, ck
        )
    else:
        from hwtune.parallel.actions import parse_action
        from hwtune.parallel.runtime.pipeline import CompiledSchedule, build_stages

        assert cfg.orders is not None and cfg.stage_layers is not None
        orders = {int(r): [parse_action(a) for a in v] for r, v in cfg.orders.items()}
        stage_rank = {}
        for r, v in orders.items():
            for a in v:
                for p in a.parts:
                    stage_rank[p.stage] = r
        ranks = [stage_rank[s] for s in range(len(cfg.stage_layers))]
        stages, mods = build_stages(
            model, cfg.stage_layers, ranks, pp_rank, mesh["pp"].get_group(), dev
        )
        # after the stages' deep copies (a process group is not copied)
        for mod in mods:
            if cp_group is not None:
                tokens = apply_cp(mod, cp_group, cfg.model.seq)
            if ep_group is not None:
                shard_experts(mod, ep_group, cfg.placement)
        # ZeRO-2/3: FSDP2 stages over the dp (x cp) ranks; ZeRO-0: the stages' gradients
        # all-reduced by hand after the schedule (dense over dp x cp, routed experts over their
        # edp replicas); ZeRO-1: the distributed optimizer reduce-scatters them over the same
        # ranks and all-gathers the updated parameters
        manual = dp_mesh.size() > 1 and cfg.zero < 2
        if dp_mesh.size() > 1 and not manual:
            for mod in mods:
                apply_fsdp(mod, dp_mesh, cfg.zero, edp_mesh)
        sched = CompiledSchedule(stages, cfg.n_micro, loss_fn, orders)
        params = [p for m in mods for p in m.parameters()]
        experts = {id(p) for m in mods for n, p in m.named_parameters()
                   if edp_mesh is not None and n in set(expert_param_names(m))}  # fmt: skip
        ck.place(params)
        opt = make_optimizer(
            params, cfg.zero if manual else 0, dp_mesh, cfg.lr, experts, edp_mesh, cfg.adam_eps
        )
        ck.load(opt)
        has_first = any(s.is_first for s in stages)
        has_last = any(s.is_last for s in stages)
        for step in range(cfg.first_step, cfg.steps):
            ck.begin(step)
            x, y = batch(cfg.model, cfg.global_batch, step, cfg.seed)
            x, y = (
                x[dp_rank * per_dp : (dp_rank + 1) * per_dp],
                y[dp_rank * per_dp : (dp_rank + 1) * per_dp],
            )
            if tokens is not None:
                x, y = x[:, tokens], y[:, tokens]
            x, y = x.to(dev), y.to(dev)
            mb_losses: list[torch.Tensor] = []
            args = (x,) if has_first else ()
            with counter:
                sched.step(
                    *args, target=y if has_last else None, losses=mb_losses if has_last else None
                )
                if manual and not sharded_opt:
                    reduce_grads(params, experts, dp_mesh, edp_mesh)
                elif dp_mesh.size() > 1 and cfg.zero >= 2:  # FSDP2
                    scale_unsharded_experts(params, experts, cfg.dp, edp_mesh)
                opt.step()  # states measured after it: the first step creates AdamW's
            comm.append(counter.take())
            mem = _state_bytes(mods, opt)
            opt.zero_grad()
            total = torch.stack(mb_losses).mean() if has_last else torch.zeros((), device=dev)
            if dp_mesh.size() > 1:
                dist.all_reduce(total, group=dp_mesh.get_group())
                total /= dp_mesh.size()
            losses.append(total.item())
            ck.end(step, params, opt, dev)
        mem["params_local"] = float(sum(_local(p).numel() for p in params))
        if not has_last:
            losses = []
        del sched, stages, mods, opt
    del model
    gc.collect()
    return {"rank": rank, "losses": losses, "memory": mem, "collectives": comm, "saved": ck.saved}


def _train_dualpipe(
    cfg: RunConfig,
    model: torch.nn.Module,
    mesh: DeviceMesh,
    dp_mesh: DeviceMesh,
    edp_mesh: DeviceMesh | None,
    pp_rank: int,
    dp_rank: int,
    dev: torch.device,
    counter: CommCounter,
    comm: list[dict],
    ck: Checkpointing,
) -> tuple[list[float], dict[str, float]]:
    """Bidirectional DualPipe (`dualpipe.DualPipeRunner`): both directions' chunks on each
    rank, the copies' gradients summed over the pipeline group, then averaged over dp (the
    routed experts of MoE chunks, sharded over the stage's ep sub-mesh: summed over their edp
    replicas, / dp): by hand at ZeRO-0, by the distributed optimizer at ZeRO-1."""
    from hwtune.parallel.actions import parse_action
    from hwtune.parallel.runtime.data_parallel import expert_param_names, make_optimizer
    from hwtune.parallel.runtime.dualpipe import DualPipeRunner

    assert cfg.orders is not None and cfg.stage_layers is not None
    order = [parse_action(a) for a in cfg.orders[pp_rank]]
    pp_group = mesh["pp"].get_group()
    runner = DualPipeRunner(model, cfg.stage_layers, pp_rank, pp_group, order, cfg.n_micro, loss_fn)
    mods = runner.modules()
    if cfg.ep > 1:  # both chunks' experts over this rank's ep sub-mesh (the same experts in
        # the two copies of a chunk: ranks r and p-1-r have the same ep coordinate)
        for mod in mods:
            shard_experts(mod, mesh["ep"].get_group(), cfg.placement)
    params = [p for m in mods for p in m.parameters()]
    experts = {id(p) for m in mods for n, p in m.named_parameters()
               if edp_mesh is not None and n in set(expert_param_names(m))}  # fmt: skip
    ck.place(params)
    # ZeRO-1 at dp > 1: the distributed optimizer reduce-scatters both chunks' (summed) gradients
    # and all-gathers the parameters, once per step (DeepSeek-V3 trains DualPipe under ZeRO-1)
    sharded = cfg.zero == 1 and dp_mesh.size() > 1
    opt = make_optimizer(params, cfg.zero, dp_mesh, cfg.lr, experts, edp_mesh, cfg.adam_eps)
    ck.load(opt)
    per_dp = cfg.global_batch // cfg.dp
    losses: list[float] = []
    for step in range(cfg.first_step, cfg.steps):
        ck.begin(step)
        x, y = batch(cfg.model, cfg.global_batch, step, cfg.seed)
        sl = slice(dp_rank * per_dp, (dp_rank + 1) * per_dp)
        with counter:
            total = runner.step(x[sl].to(dev), y[sl].to(dev), cfg.micro_batch)
            if cfg.dp > 1 and not sharded:
                reduce_grads(params, experts, dp_mesh, edp_mesh)
            opt.step()  # states measured after it: the first step creates AdamW's
        comm.append(counter.take())
        mem = _state_bytes(mods, opt)
        opt.zero_grad()
        dist.all_reduce(total, group=pp_group)  # direction 0's losses + direction 1's
        if cfg.dp > 1:
            dist.all_reduce(total, group=dp_mesh.get_group())
            total /= cfg.dp
        losses.append(total.item())
        ck.end(step, params, opt, dev)
    mem["params_local"] = float(sum(p.numel() for p in params))
    del runner, opt
    return losses, mem


def shard_experts(
    model: torch.nn.Module, group: dist.ProcessGroup, placement: list[list[int]] | None
) -> None:
    """Keep this rank's routed experts in every MoE layer of ``model`` (a whole model or a
    pipeline stage); tokens reach the others by all-to-all over ``group``."""
    for block in model.layers.values():
        if block.moe:
            block.feed_forward.shard_experts(group, placement)


def reduce_grads(
    params: list[torch.nn.Parameter],
    experts: set[int],
    dp_mesh: DeviceMesh,
    edp_mesh: DeviceMesh | None,
) -> None:
    """Gradients of a step to the mean over the dp (x cp) ranks' losses, by hand, once per
    step: dense parameters all-reduced over ``dp_mesh``; routed experts (ids in ``experts``),
    whose gradient already sums the tokens of their ep group, over their ``edp_mesh`` replicas
    only; both / the size of ``dp_mesh``. Each group's gradients go in one flat all-reduce (one
    bucket, as the plan prices one gradient all-reduce per step), not one call per tensor."""
    n = dp_mesh.size()
    # a DTensor's (tensor parallelism) local shard: each dp replica holds the same shard
    grads = [_local(p.grad) for p in params if p.grad is not None]
    dense = [_local(p.grad) for p in params if p.grad is not None and id(p) not in experts]
    routed = [_local(p.grad) for p in params if p.grad is not None and id(p) in experts]
    _all_reduce_flat(dense, dp_mesh.get_group())
    if edp_mesh is not None and edp_mesh.size() > 1:
        _all_reduce_flat(routed, edp_mesh.get_group())
    for g in grads:
        g.div_(n)


def _all_reduce_flat(grads: list[torch.Tensor], group: dist.ProcessGroup) -> None:
    """Sum ``grads`` over ``group`` in one all-reduce of their concatenation."""
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, group=group)
    for g, v in zip(grads, flat.split([g.numel() for g in grads]), strict=True):
        g.copy_(v.view_as(g))


def config_dict(cfg: RunConfig) -> dict:
    return asdict(cfg)
