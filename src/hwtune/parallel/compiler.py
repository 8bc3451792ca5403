"""Compile model + `ParallelSpec` + cluster into a device-level `Plan` (the global DAG).

1. `spec.validate` resolves the annotations per layer (one-line errors otherwise).
2. `costs.stage_costs` prices each model chunk from the estimator's cost functions.
3. The schedule gives each pipeline rank its order of actions (`schedules.generate`, or the
   user's explicit list, checked to run each stage's forward and backward once per micro-batch).
4. Each action becomes a compute op; a stage boundary between ranks becomes a send on the p2p
   stream that the next stage's op waits for; data-parallel gradient reduction (all-reduce, or
   reduce-scatter with ZeRO >= 1; ZeRO-2 without a pipeline after every micro-batch's backward,
   as it keeps only its gradient shard; a pipeline's ZeRO-3 stages once per stage and step, as
   torch.distributed.pipelining reduces FSDP2 stages, gathering a stage for a forward or
   backward that finds it sharded, a forward resharding it, a backward keeping it whole),
   parameter all-gathers (ZeRO >= 1 after the step, ZeRO-3 before
   every forward and backward; a separate recompute ``R`` reruns the forward and needs the
   parameters too, so the backward's gather moves before it and serves both, as FSDP gathers
   again for the backward; an overlapped ``FB`` pair gathers both of its chunks) and the
   optimizer step close the step, overlapped as the estimator
   assumes (Megatron/torchtitan bucketing: the first bucket is ready after one layer of the last
   backward, the last one after the backward ends).
5. `ir.check` refuses a plan whose orders and dependencies form a cycle (a deadlock).
"""

from __future__ import annotations

from hwtune.cost import collectives as coll
from hwtune.cost.compute import memory_time
from hwtune.cost.memory import (
    fsdp_pipelined,
    reduces_per_micro_batch,
    sharded_state_bytes,
    state_bytes_per_param,
)
from hwtune.cost.power import power_limited
from hwtune.errors import HwtuneInputError
from hwtune.hardware.cluster import Cluster
from hwtune.model.spec import ModelSpec
from hwtune.parallel import schedules as S
from hwtune.parallel.actions import Action
from hwtune.parallel.costs import StageCost, stage_costs
from hwtune.parallel.ir import Op, Plan, check
from hwtune.parallel.spec import LayerPlan, ParallelSpec, validate
from hwtune.train import estimator
from hwtune.train.estimator import (
    FRAMEWORK_RESERVE_BYTES,
    OPTIMIZER_BYTES_MOVED,
    expert_spans,
    grads_in_fp32,
)
from hwtune.train.strategy import expert_data_parallel


def _chain(spec: ParallelSpec, nst: int) -> tuple[list[int | None], list[int | None]]:
    """Previous and next stage of each stage (DualPipe: two chains, 0..p-1 and p..2p-1)."""
    pp = spec.mesh.pp
    ends = (
        {pp - 1, 2 * pp - 1}
        if (not spec.explicit and spec.schedule.name == "dualpipe")
        else {nst - 1}
    )
    nxt: list[int | None] = [None if s in ends else s + 1 for s in range(nst)]
    prv: list[int | None] = [None] * nst
    for s, n in enumerate(nxt):
        if n is not None:
            prv[n] = s
    return prv, nxt


def _micro_batches(spec: ParallelSpec, stage: int) -> range:
    m, pp = spec.n_micro, spec.mesh.pp
    if not spec.explicit and spec.schedule.name == "dualpipe":
        return range(0, m // 2) if stage < pp else range(m // 2, m)
    return range(m)


def orders_for(spec: ParallelSpec, costs: tuple[StageCost, ...]) -> dict[int, list[Action]]:
    """The per-rank action orders: the explicit list, or the named schedule's."""
    if spec.explicit:
        acts = spec.parsed_actions()
        return {r: acts.get(r, []) for r in range(spec.mesh.pp)}

    def cost(stage: int, kind: str) -> float:
        c = costs[spec.chunk_of_stage(stage)]
        return {"F": c.f, "I": c.i + c.rec, "W": c.w, "B": c.b + c.rec}[kind]

    return S.generate(spec.schedule.name, spec.mesh.pp, spec.n_micro, spec.schedule.vpp, cost)


def _check_orders(spec: ParallelSpec, orders: dict[int, list[Action]], nst: int) -> None:
    seen: dict[tuple[str, int, int], int] = {}
    for r, v in orders.items():
        for a in v:
            for p in a.parts:
                if p.is_comm:
                    continue  # sends and receives are derived from the dependencies
                k = (p.kind, p.stage, p.mb)
                if k in seen:
                    raise HwtuneInputError(
                        f"schedule.actions[{r}]", str(p), "each action once per step"
                    )
                seen[k] = r
    for s in range(nst):
        for mb in _micro_batches(spec, s):
            if ("F", s, mb) not in seen:
                raise HwtuneInputError(
                    "schedule",
                    f"{s}F{mb} missing",
                    f"a forward of stage {s} for micro-batch {mb} on rank {spec.stage_rank(s)}",
                )
            has_b = ("B", s, mb) in seen
            has_iw = ("I", s, mb) in seen and ("W", s, mb) in seen
            if has_b == has_iw or (has_b and (("I", s, mb) in seen or ("W", s, mb) in seen)):
                raise HwtuneInputError(
                    "schedule", f"stage {s} micro-batch {mb}", "one backward: B, or I and W"
                )


def _check_recompute(
    spec: ParallelSpec, orders: dict[int, list[Action]], layers: tuple[LayerPlan, ...]
) -> None:
    """An ``R`` (recompute before the backward) only where the annotations recompute something:
    otherwise the order and the annotations contradict each other."""
    chunks = {lp.stage for lp in layers if lp.recompute != "none"}
    for r, v in orders.items():
        for i, a in enumerate(v):
            for p in a.parts:
                if p.kind == "R" and spec.chunk_of_stage(p.stage) not in chunks:
                    raise HwtuneInputError(
                        f"schedule.actions[{r}][{i}]", str(p),
                        f"an R only on a stage with recomputed layers (stage {p.stage} keeps all "
                        "its activations: set recompute or a modules annotation)",
                    )  # fmt: skip


def _pipelined_gather(
    o: Op,
    fb_bwd: dict[int, tuple[int, int]],
    fb_split: set[int],
    chunk_of: list[int],
    gathered: set[tuple[int, int]],
    last_grad: dict[tuple[int, int], Op],
    costs: tuple[StageCost, ...],
    gather: object,
    dpn: int,
    new: list[Op],
    overlap: bool,
) -> None:
    """ZeRO-3 gathers of compute op ``o`` in a pipeline that torch.distributed.pipelining
    drives (``PipelineStage.backward_maybe_with_nosync`` sets ``reshard_after_backward`` and
    ``requires_gradient_sync`` False on an FSDP stage for every backward; ``REDUCE_GRAD``,
    after the chunk's last backward, reduce-scatters once): a chunk's parameters are gathered
    for a forward, backward or recompute that finds them sharded; a forward reshards them after
    it (``reshard_after_forward``), a backward keeps them. Records in ``last_grad`` the op
    after which each chunk's gradients are complete (B, W, or a pair's backward)."""
    if o.kind == "FB":
        fs, bs = chunk_of[o.stage], chunk_of[fb_bwd[o.id][0]]
        uses = [(fs, "F"), (bs, "I" if o.id in fb_split else "B")]
    else:
        uses = [(chunk_of[o.stage], o.kind)]
    need = [k for k, kind in uses if kind != "W" and (o.rank, k) not in gathered]
    if need:
        pd = sum(costs[k].dense_params for k in need)
        pe = sum(costs[k].expert_params for k in need)
        ag = Op(id=-1, rank=o.rank, kind="AG", stream="comm", seconds=gather(pd, pe),  # type: ignore[operator]
                label=f"AG {o.label}", stage=o.stage, mb=o.mb, group="dp", group_size=dpn,
                nbytes=2.0 * (pd + pe))  # fmt: skip
        new.append(ag)
        nl = max(1, sum(len(costs[k].layers) for k in need))
        if overlap:
            o.deps.append((ag, 1.0 / nl))  # type: ignore[arg-type]
            o.finish_after.append((ag, o.seconds / nl))  # type: ignore[arg-type]
        else:
            o.deps.append((ag, 1.0))  # type: ignore[arg-type]
    for k, kind in uses:
        if kind == "F":
            gathered.discard((o.rank, k))
        elif kind in ("B", "I", "R"):
            gathered.add((o.rank, k))
        if kind in ("B", "W"):
            last_grad[(o.rank, k)] = o


def compile_plan(spec: ParallelSpec, model: ModelSpec, cl: Cluster) -> Plan:
    """The device plan of ``spec`` for ``model`` on ``cl`` (validated, priced, checked); a
    ``spec`` that does not set its precision trains in `default_precision` (fp16 on V100)."""
    spec = estimator.with_default_precision(spec, cl.device)
    layers = validate(spec, model, cl.n_gpus)
    costs = stage_costs(spec, model, cl, layers)
    mesh, pp = spec.mesh, spec.mesh.pp
    nst = spec.n_stages()
    chunk_of = [spec.chunk_of_stage(s) for s in range(nst)]
    srank = [spec.stage_rank(s) for s in range(nst)]
    orders = orders_for(spec, costs)
    _check_orders(spec, orders, nst)
    _check_recompute(spec, orders, layers)
    prv, nxt = _chain(spec, nst)
    dev = power_limited(cl.device, cl.power_cap_w, cl.sustained_clocks)
    zero = spec.zero_stage
    ov = spec.overlap
    # the runtime drives a pipeline's stages with torch.distributed.pipelining (all but the
    # bidirectional DualPipe, walked by hand): FSDP2 stages reduce their gradients once per step
    pipelined = fsdp_pipelined(pp, "explicit" if spec.explicit else spec.schedule.name)
    per_rank = (
        mesh.tp * mesh.cp * mesh.dp
    )  # GPUs of one pipeline rank, consecutive (Megatron order)

    ops: list[Op] = []

    def add(**kw: object) -> Op:
        op = Op(id=len(ops), **kw)  # type: ignore[arg-type]
        ops.append(op)
        return op

    # ---- data-parallel groups and per-rank parameters (estimator conventions)
    dpn = mesh.dp * mesh.cp
    dp_span = cl.span(dpn, mesh.tp)
    # the experts' own EP degree (a modules annotation may fold them over tp with mesh.ep 1)
    ep_e = max((lp.ep for lp in layers), default=mesh.ep)
    edp = expert_data_parallel(mesh.tp, mesh.cp, mesh.dp, ep_e)
    edp_span = expert_spans(cl, mesh.tp, mesh.cp, mesh.dp, ep_e)[1]
    fp32_grads = grads_in_fp32(None, zero) or spec.precision == "fp32"
    gb = 4.0 if fp32_grads else 2.0
    sb = state_bytes_per_param(spec.precision, spec.optimizer, fp32_grads)
    rank_stages = {r: [s for s in range(nst) if srank[s] == r] for r in range(pp)}
    # a rank holds each model chunk it runs once (DualPipe: both directions' chunks)
    rank_chunks = {r: sorted({chunk_of[s] for s in rank_stages[r]}) for r in range(pp)}
    copies = 2 if (not spec.explicit and spec.schedule.name == "dualpipe" and pp > 1) else 1
    dense = [
        sum(costs[c].dense_params for c in rank_chunks[r])
        * (copies if len(rank_chunks[r]) == 1 else 1)
        for r in range(pp)
    ]
    expert = [
        sum(costs[c].expert_params for c in rank_chunks[r])
        * (copies if len(rank_chunks[r]) == 1 else 1)
        for r in range(pp)
    ]
    nlayers = [max(1, sum(len(costs[c].layers) for c in rank_chunks[r])) for r in range(pp)]
    static = []
    for r in range(pp):
        # a pipelined stage keeps whole gradients over the step (`sharded_state_bytes`)
        w1, g1, o1 = sharded_state_bytes(dense[r], sb, zero, dpn, pipelined=pipelined)
        w2, g2, o2 = sharded_state_bytes(expert[r], sb, zero, edp, pipelined=pipelined)
        static.append(w1 + w2 + g1 + g2 + o1 + o2 + FRAMEWORK_RESERVE_BYTES)

    def gather(params_d: float, params_e: float) -> float:
        return coll.all_gather_time(params_d * 2.0, dp_span, cl) + (
            coll.all_gather_time(params_e * 2.0, edp_span, cl) if params_e else 0.0
        )

    def reduce(params_d: float, params_e: float, scatter: bool) -> float:
        f = coll.reduce_scatter_time if scatter else coll.all_reduce_time
        return f(params_d * gb, dp_span, cl) + (
            f(params_e * gb, edp_span, cl) if params_e and edp > 1 else 0.0
        )

    # ---- ZeRO-1/2: parameters gathered after the previous step's optimizer, hidden behind the
    # first forward (Megatron's overlap_param_gather); modelled at the start of this step
    ag_start: dict[int, Op] = {}
    if 1 <= zero < 3 and dpn > 1:
        for r in range(pp):
            t = gather(dense[r], expert[r])
            if t > 0:
                ag_start[r] = add(rank=r, kind="AG", stream="comm", seconds=t, label="AG params",
                                  group="dp", group_size=dpn, nbytes=2.0 * (dense[r] + expert[r]))  # fmt: skip

    # ---- compute ops in each rank's program order
    fwd: dict[tuple[int, int], Op] = {}
    bwd: dict[tuple[int, int], Op] = {}  # B or I
    wgt: dict[tuple[int, int], Op] = {}
    rec: dict[tuple[int, int], Op] = {}
    first_f: dict[int, Op] = {}
    fb_split: set[int] = set()  # overlapped pairs whose backward is an I (its W comes later)
    fb_bwd: dict[int, tuple[int, int]] = {}  # overlapped pair -> (stage, mb) of its backward
    zero3_rs: dict[int, list[Op]] = {r: [] for r in range(pp)}
    for r in range(pp):
        for a in orders[r]:
            if a.is_comm:
                continue
            parts = a.parts
            if a.sub:
                fpart, bpart = parts if parts[0].kind == "F" else parts[::-1]
                cf, cb = costs[chunk_of[fpart.stage]], costs[chunk_of[bpart.stage]]
                compute = cf.f_compute + cb.b_compute + cb.rec
                comm = cf.f_comm_raw + cb.b_comm_raw
                # the pair hides its all-to-alls behind the other half's compute, which they
                # slow (estimator.OVERLAP_SLOWDOWN)
                secs = max(compute, comm) + estimator.OVERLAP_SLOWDOWN * min(compute, comm)
                if bpart.kind == "I":
                    secs -= cb.w
                    fb_split.add(len(ops))  # the id the pair gets: its W reduces the gradient
                op = add(rank=r, kind="FB", stream="compute", seconds=secs, label=str(a),
                         stage=fpart.stage, mb=fpart.mb,
                         mem_delta=cf.act_bytes - (cb.act_bytes if bpart.kind == "B" else 0.0),
                         transient=cb.transient_bytes)  # fmt: skip
                fwd[(fpart.stage, fpart.mb)] = op
                bwd[(bpart.stage, bpart.mb)] = op
                fb_bwd[op.id] = (bpart.stage, bpart.mb)
                first_f.setdefault(r, op)
                continue
            p = parts[0]
            c = costs[chunk_of[p.stage]]
            key = (p.stage, p.mb)
            if p.kind == "F":
                op = add(
                    rank=r,
                    kind="F",
                    stream="compute",
                    seconds=c.f,
                    label=str(p),
                    stage=p.stage,
                    mb=p.mb,
                    mem_delta=c.act_bytes,
                )
                fwd[key] = op
                first_f.setdefault(r, op)
            elif p.kind == "R":
                rec[key] = add(
                    rank=r,
                    kind="R",
                    stream="compute",
                    seconds=c.rec,
                    label=str(p),
                    stage=p.stage,
                    mb=p.mb,
                    transient=c.transient_bytes,
                )
            elif p.kind in ("B", "I"):
                extra = 0.0 if key in rec else c.rec
                secs = (c.b if p.kind == "B" else c.i) + extra
                op = add(rank=r, kind=p.kind, stream="compute", seconds=secs, label=str(p), stage=p.stage, mb=p.mb,
                         mem_delta=-c.act_bytes if p.kind == "B" else 0.0, transient=c.transient_bytes)  # fmt: skip
                bwd[key] = op
            else:  # W
                wgt[key] = add(
                    rank=r,
                    kind="W",
                    stream="compute",
                    seconds=c.w,
                    label=str(p),
                    stage=p.stage,
                    mb=p.mb,
                    mem_delta=-c.act_bytes,
                )

    # ---- dependencies, sends
    crosses: dict[tuple[int, int], bool] = {}  # per pair of pipeline ranks

    def link(src: Op, dst: Op, src_stage: int, dst_stage: int, kind: str) -> None:
        if srank[src_stage] == srank[dst_stage]:
            dst.deps.append((src.id, 1.0))
            return
        nb = costs[chunk_of[src_stage if kind == "SEND_F" else dst_stage]].p2p_bytes
        a, b = srank[src_stage], srank[dst_stage]
        if (a, b) not in crosses:
            crosses[(a, b)] = cl.crosses_domain(a * per_rank, b * per_rank, per_rank)
        cross = crosses[(a, b)]
        snd = add(rank=srank[src_stage], kind=kind, stream="p2p", seconds=coll.send_recv_time(nb, cross, cl),
                  label=f"{src_stage}{kind}{src.mb if src.kind != 'FB' else ''}", stage=src_stage,
                  peer=srank[dst_stage], nbytes=nb, deps=[(src.id, 1.0)])  # fmt: skip
        snd.label = f"{src_stage}{kind}{dst.mb if kind == 'SEND_F' else src.mb}"
        dst.deps.append((snd.id, 1.0))

    for (s, mb), op in list(fwd.items()):
        if prv[s] is not None:
            link(fwd[(prv[s], mb)], op, prv[s], s, "SEND_F")
    for (s, mb), op in list(bwd.items()):
        f = fwd[(s, mb)]
        if f.id != op.id:
            op.deps.append((f.id, 1.0))
        if (s, mb) in rec:
            rec[(s, mb)].deps.append((f.id, 1.0))
            op.deps.append((rec[(s, mb)].id, 1.0))
        if nxt[s] is not None:
            link(bwd[(nxt[s], mb)], op, nxt[s], s, "SEND_B")
        if (s, mb) in wgt:
            wgt[(s, mb)].deps.append((op.id, 1.0))
    for r, op in first_f.items():
        if r in ag_start:
            if ov.param_gather:
                op.finish_after.append((ag_start[r].id, 0.0))
            else:
                op.deps.append((ag_start[r].id, 1.0))

    # ---- ZeRO-3: gather before every forward and backward, reduce-scatter after the backward;
    # ZeRO-2 not pipelined: reduce-scatter after every backward (the parameters, gathered once
    # at the start, stay whole). A pipeline that torch.distributed.pipelining drives
    # (`pipelined`, `fsdp_pipelined`) reduce-scatters each chunk once per step instead (ZeRO-2:
    # after the last backward, below), and gathers as FSDP2 does there: a chunk stays gathered
    # from a backward to its next forward (see the module doc)
    zero_in_loop = reduces_per_micro_batch(zero, pipelined)  # its collectives among the ops
    if zero_in_loop and dpn > 1:
        compute_ops = [o for o in ops if o.stream == "compute"]
        gathered: set[tuple[int, int]] = set()  # (rank, chunk) held whole (pipelined)
        last_grad: dict[tuple[int, int], Op] = {}  # (rank, chunk) -> its last gradient op

        def grad_reduce_scatter(o: Op, c: object, deps: list, finish_after: list) -> Op:
            """The gradient reduce-scatter of the stage chunk ``o`` belongs to (ZeRO-2/3)."""
            return Op(
                id=-1, rank=o.rank, kind="RS", stream="comm",
                seconds=reduce(c.dense_params, c.expert_params, True),  # type: ignore[attr-defined]
                label=f"RS {o.label}", group="dp", group_size=dpn,
                nbytes=gb * (c.dense_params + c.expert_params),  # type: ignore[attr-defined]
                deps=deps, finish_after=finish_after,
            )  # fmt: skip

        new: list[Op] = []
        # the backward's gather, issued before a separate recompute R (which reruns the forward
        # and needs the parameters again, as FSDP re-gathers for the backward) and shared by the
        # backward that follows: per layer and micro-batch one gather for the forward, one for
        # the recompute + backward
        rec_ag: dict[tuple[int, int], Op] = {}
        for o in compute_ops:
            c = costs[chunk_of[o.stage]]
            nl = max(1, len(c.layers))
            if pipelined:
                _pipelined_gather(o, fb_bwd, fb_split, chunk_of, gathered, last_grad, costs, gather,
                                  dpn, new, ov.param_gather)  # fmt: skip
                continue
            if zero < 3:  # ZeRO-2: the gradients of each backward, reduce-scattered
                if o.kind in ("B", "W") or (o.kind == "FB" and o.id not in fb_split):
                    if o.kind == "FB":
                        c = costs[chunk_of[fb_bwd[o.id][0]]]
                    w = 1.0 / nl if ov.grad_reduce and o.kind != "W" else 1.0
                    rs = grad_reduce_scatter(o, c, [(o, w)], [])
                    if w < 1.0:
                        rs.finish_after.append((o, rs.seconds / nl))  # type: ignore[arg-type]
                    new.append(rs)
                    zero3_rs[o.rank].append(rs)
                continue
            if o.kind == "W":
                rs = grad_reduce_scatter(o, c, [(o, 1.0)], [])
                new.append(rs)
                zero3_rs[o.rank].append(rs)
                continue
            # the chunks whose parameters this op needs and that no earlier gather serves
            need = [chunk_of[o.stage]]
            if o.kind in ("B", "I") and (o.stage, o.mb) in rec_ag:
                need = []
                o.deps.append((rec_ag[(o.stage, o.mb)], 1.0))  # type: ignore[arg-type]
            if o.kind == "FB":  # an overlapped pair runs a forward and a backward chunk
                bkey = fb_bwd[o.id]
                if bkey in rec_ag:
                    o.deps.append((rec_ag[bkey], 1.0))  # type: ignore[arg-type]
                elif chunk_of[bkey[0]] not in need:
                    need.append(chunk_of[bkey[0]])
            if need:
                pd = sum(costs[k].dense_params for k in need)
                pe = sum(costs[k].expert_params for k in need)
                ag = Op(id=-1, rank=o.rank, kind="AG", stream="comm", seconds=gather(pd, pe),
                        label=f"AG {o.label}", stage=o.stage, mb=o.mb, group="dp",
                        group_size=dpn, nbytes=2.0 * (pd + pe))  # fmt: skip
                new.append(ag)
                if o.kind == "R":
                    rec_ag[(o.stage, o.mb)] = ag
                if ov.param_gather:
                    o.deps.append((ag, 1.0 / nl))  # type: ignore[arg-type]
                    o.finish_after.append((ag, o.seconds / nl))  # type: ignore[arg-type]
                else:
                    o.deps.append((ag, 1.0))  # type: ignore[arg-type]
            if o.kind == "R":
                continue
            if o.kind == "B" or (o.kind == "FB" and o.id not in fb_split):
                if o.kind == "FB":  # the gradients are the backward chunk's
                    c = costs[chunk_of[fb_bwd[o.id][0]]]
                rs = grad_reduce_scatter(o, c, [(o, 1.0 / nl if ov.grad_reduce else 1.0)], [])
                if ov.grad_reduce:  # the last layer's share finishes after the backward
                    rs.finish_after.append((o, rs.seconds / nl))  # type: ignore[arg-type]
                new.append(rs)
                zero3_rs[o.rank].append(rs)
        # torch's REDUCE_GRAD: each chunk's gradients reduce-scattered once, after the last
        # op that computes them on its rank
        for (r, k), o in sorted(last_grad.items(), key=lambda kv: kv[1].id):
            rs = grad_reduce_scatter(o, costs[k], [(o, 1.0)], [])
            new.append(rs)
            zero3_rs[r].append(rs)
        # number the new ops after the existing ones, keep their stream order
        for n in new:
            n.id = len(ops)
            ops.append(n)
        for o in ops:
            o.deps = [(d.id if isinstance(d, Op) else d, f) for d, f in o.deps]  # type: ignore[misc]
            o.finish_after = [(d.id if isinstance(d, Op) else d, t) for d, t in o.finish_after]  # type: ignore[misc]

    # ---- gradient reduction and optimizer
    for r in range(pp):
        comp = [o for o in ops if o.rank == r and o.stream == "compute"]
        last = next(o for o in reversed(comp) if o.kind in ("B", "I", "W", "FB"))
        after: list[tuple[int, float]] = [(last.id, 1.0)]
        if not zero_in_loop and dpn > 1:
            t = reduce(dense[r], expert[r], zero >= 1)
            if t > 0:
                nl = nlayers[r]
                # a pipelined ZeRO-2 stage reduces after its last backward (``REDUCE_GRAD``)
                ov_gr = ov.grad_reduce and not (zero == 2 and pipelined)
                gr = add(rank=r, kind="RS" if zero >= 1 else "AR", stream="comm", seconds=t, label="grad reduce",
                         group="dp", group_size=dpn, nbytes=gb * (dense[r] + expert[r]),
                         deps=[(last.id, 1.0 / nl if ov_gr else 1.0)],
                         finish_after=[(last.id, t / nl)] if ov_gr else [])  # fmt: skip
                after = [(gr.id, 1.0)]
        elif zero3_rs[r]:
            after = [(zero3_rs[r][-1].id, 1.0)]
        shards_d = dpn if zero >= 1 else 1
        opt_params = dense[r] / shards_d + expert[r] / (edp if zero >= 1 else 1)
        t_opt = memory_time(opt_params * OPTIMIZER_BYTES_MOVED[spec.optimizer], dev, kernels=2)
        add(rank=r, kind="OPT", stream="compute", seconds=t_opt, label="optimizer", deps=after)

    plan = Plan(pp=pp, n_micro=spec.n_micro, ops=ops, orders=orders, static_bytes=static,
                stage_rank=srank, schedule="explicit" if spec.explicit else spec.schedule.name,
                stages=costs, chunk_of=chunk_of)  # fmt: skip
    check(plan)
    return plan
