"""Deployment search (``hwtune serve plan``): the layouts that meet latency SLOs with the fewest
GPUs (or the lowest hourly cost), each candidate simulated on the same workload.

Candidates: tensor parallelism over powers of two up to the scale-up domain, pipeline stages
{1, 2}, expert parallelism {1, tp} for MoE models, replicas up to the GPU budget, batch limits
``max_num_seqs`` in {64, 256}, aggregated or disaggregated (prefill and decode pools with their
own tensor parallelism). Layouts whose weights do not fit are dropped before simulating; the rest
run in parallel on local processes (spawn context) or a Ray cluster (`hwtune.workers`), in batches
of whole GPU counts, fewest first, until a batch holds a layout that meets the SLOs (`plan`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from hwtune.errors import HwtuneInputError
from hwtune.model.spec import ModelSpec
from hwtune.serve.config import Deployment, ReplicaConfig
from hwtune.serve.correction import ServeCorrection
from hwtune.serve.memory import ModelDoesNotFit, checkpoint_hint, replica_memory
from hwtune.serve.request import Workload
from hwtune.serve.simulator import check_request_limits
from hwtune.workers import check_workers, job_runner


@dataclass(frozen=True)
class SLO:
    """Latency targets on percentiles of the simulated requests (None = no target)."""

    ttft_p90_s: float | None = None
    tpot_p90_s: float | None = None
    e2e_p90_s: float | None = None

    def __post_init__(self) -> None:
        for k in ("ttft_p90_s", "tpot_p90_s", "e2e_p90_s"):
            v = getattr(self, k)
            if v is not None and not 0 < v < math.inf:  # inf would be no target, silently
                raise HwtuneInputError(k, v, "a positive finite number of seconds (leave the "
                                       "option out for no target)")  # fmt: skip


@dataclass(frozen=True)
class PlanResult:
    """One simulated candidate."""

    deployment: Deployment
    gpus: int
    cost_per_hour: float | None
    ttft_p90_s: float
    tpot_p90_s: float
    e2e_p90_s: float
    throughput_tokens_per_s: float
    meets: bool
    error: str = ""
    margin: dict | None = None
    replicas_used: int = 0
    """Replicas of the (decode) pool the simulation routed a request to
    (`hwtune.serve.simulator.SimResult.replicas_used`)."""
    prefill_replicas_used: int = 0
    """The same for a disaggregated layout's prefill pool (0 when aggregated)."""
    falls_behind: bool = False
    """The layout fell behind the workload's arrivals (`hwtune.serve.backlog`): its latencies
    grow with the run's length, so it does not meet the SLOs whatever its percentiles."""

    def describe(self) -> str:
        d = self.deployment
        r = d.replica
        s = f"{d.replicas} x (tp={r.tp} pp={r.pp} ep={r.ep} seqs={r.max_num_seqs})"
        if d.prefill is not None:
            p = d.prefill
            s = f"prefill {d.prefill_replicas} x tp={p.tp} ep={p.ep} + decode " + s
        return s

    def to_dict(self) -> dict:
        d = self.deployment
        out = {
            "layout": self.describe(), "gpus": self.gpus, "cost_per_hour": self.cost_per_hour,
            "disaggregated": d.prefill is not None, "replicas": d.replicas,
            "tp": d.replica.tp, "pp": d.replica.pp, "ep": d.replica.ep,
            "max_num_seqs": d.replica.max_num_seqs, "ttft_p90_s": self.ttft_p90_s,
            "tpot_p90_s": self.tpot_p90_s, "e2e_p90_s": self.e2e_p90_s,
            "throughput_tokens_per_s": self.throughput_tokens_per_s, "meets_slo": self.meets,
            "falls_behind": self.falls_behind,
        }  # fmt: skip
        if d.prefill is not None:
            out.update(prefill_replicas=d.prefill_replicas, prefill_tp=d.prefill.tp,
                       prefill_ep=d.prefill.ep)  # fmt: skip
        if self.margin is not None:
            out["margin"] = self.margin
        return out


def _fits(cfg: ReplicaConfig) -> bool:
    try:
        replica_memory(cfg)
    except HwtuneInputError:
        return False
    return True


PLAN_OPEN_LOOP_S = 120.0
"""Seconds of arrivals a plan simulates for an open loop without ``--num-requests`` (at least
400 requests): long enough for a layout near its capacity to build the queue it would hold, so
that its percentiles are not those of the first minute (`hwtune.serve.backlog`)."""

PLAN_MAX_NUM_SEQS: tuple[int, ...] = (64, 256)
"""The sequence limits a plan tries for each aggregated (and decode) replica."""

PREFILL_MAX_NUM_SEQS = 16
"""The sequence limit of a disaggregated layout's prefill pool (its batches are prompts)."""


def _tensor_parallel_sizes(spec: ModelSpec, max_gpus: int) -> list[int]:
    """The TP degrees a plan tries, smallest first: powers of two within one 8-GPU NVLink
    domain and ``max_gpus`` that divide the attention heads."""
    return [t for t in (1, 2, 4, 8) if t <= min(max_gpus, 8) and spec.n_heads % t == 0]


def _raise_limit_refusal(base: ReplicaConfig, max_gpus: int) -> None:
    """No layout fits: when that is a batch limit's doing at the widest tensor parallelism the
    plan may use (the weights fit, the limit's reserved memory leaves no KV cache), raise that
    error (`hwtune.serve.memory`), which names the limit, rather than asking for more GPUs."""
    for tp in reversed(_tensor_parallel_sizes(base.model, max_gpus)):
        try:
            cfg = replace(base, tp=tp, pp=1, ep=1, dp_attention=1,
                          max_num_seqs=min(PLAN_MAX_NUM_SEQS))  # fmt: skip
        except HwtuneInputError:
            continue  # not a layout of this model
        try:
            replica_memory(cfg)
        except HwtuneInputError as e:
            if e.field != "model":
                raise
        return


def _replicas(
    base: ReplicaConfig, max_gpus: int, keep: Callable[[ReplicaConfig], bool] | None
) -> list[ReplicaConfig]:
    """The replica shapes a plan tries (see the module docstring) that fit and ``keep`` keeps."""
    spec = base.model
    reps: list[ReplicaConfig] = []
    for tp in _tensor_parallel_sizes(spec, max_gpus):
        for pp in (1, 2):
            if tp * pp > max_gpus:
                continue
            eps = (1, tp) if spec.moe is not None and tp > 1 else (1,)
            for ep in eps:
                if spec.moe is not None and spec.moe.n_routed_experts % ep:
                    continue
                for seqs in PLAN_MAX_NUM_SEQS:
                    try:
                        cfg = replace(base, tp=tp, pp=pp, ep=ep, dp_attention=1, max_num_seqs=seqs)
                    except HwtuneInputError:
                        continue
                    if _fits(cfg) and (keep is None or keep(cfg)):
                        reps.append(cfg)
    return reps


def _shortfall(base: ReplicaConfig, max_gpus: int) -> str:
    """By how much the plan's largest replica on ``max_gpus`` misses, and the fewest GPUs a
    replica the plan tries holds the model on (up to 64 x ``max_gpus``), for its refusal."""
    words = ""
    tps = _tensor_parallel_sizes(base.model, max_gpus)
    if tps:
        tp = max(tps)
        pp = 2 if 2 * tp <= max_gpus else 1
        try:
            replica_memory(replace(base, tp=tp, pp=pp, ep=1, dp_attention=1,
                                   max_num_seqs=min(PLAN_MAX_NUM_SEQS)))  # fmt: skip
        except ModelDoesNotFit as e:
            words = f" (tp={tp} pp={pp}: short by {e.short_gib:.1f} GiB per GPU)"
        except HwtuneInputError:
            pass  # another refusal (a batch limit): the fewest GPUs below still say it
    g = max_gpus
    while g < 64 * max_gpus:
        g *= 2
        reps = _replicas(base, g, None)
        if reps:
            return words + f"; the fewest that hold it: {min(r.gpus for r in reps)}"
    return words


class ReplicaSaturation:
    """Which layouts route every request as an already simulated one with fewer replicas does,
    so simulate alike on more GPUs (never better by GPUs or cost, same latencies and
    throughput) and need not be simulated.

    A simulation that left a pool's last replica without a request would not change with more
    replicas in that pool: the simulator routes to the lowest-numbered idle replica
    (least-tokens) or in order (round-robin), so a request reaches a further replica only when
    every replica before it is busy (or every one has had its turn), which never happened
    (`hwtune.serve.simulator.SimResult.replicas_used`). An aggregated replica shape that left
    one unused at ``n`` replicas covers every count above ``n``; a disaggregated pool pair at
    ``(nd, np)`` (decode, prefill replicas) covers more decode replicas at ``np`` when its
    decode pool left one unused, more prefill replicas at ``nd`` when its prefill pool did, and
    both when both did. ``skipped`` counts the layouts `candidate_tiers` left out for it."""

    def __init__(self) -> None:
        self.agg: dict[ReplicaConfig, int] = {}
        self.decode: dict[tuple, dict[int, int]] = {}  # pair -> {np: least nd, decode unused}
        self.prefill: dict[tuple, dict[int, int]] = {}  # pair -> {nd: least np, prefill unused}
        self.corners: dict[tuple, list[tuple[int, int]]] = {}  # both pools left one unused
        self.skipped = 0

    def note(self, r: PlanResult) -> None:
        """Learn from one simulated layout (a failed one teaches nothing)."""
        d = r.deployment
        if r.error:
            return
        if d.prefill is None:
            if r.replicas_used < d.replicas:
                self.agg[d.replica] = min(self.agg.get(d.replica, d.replicas), d.replicas)
            return
        key = (d.replica, d.prefill)
        nd, np_ = d.replicas, d.prefill_replicas
        du, pu = r.replicas_used < nd, r.prefill_replicas_used < np_
        if du:
            m = self.decode.setdefault(key, {})
            m[np_] = min(m.get(np_, nd), nd)
        if pu:
            m = self.prefill.setdefault(key, {})
            m[nd] = min(m.get(nd, np_), np_)
        if du and pu:
            self.corners.setdefault(key, []).append((nd, np_))

    def covers(self, cfg: ReplicaConfig, replicas: int) -> bool:
        """An aggregated layout of ``replicas`` x ``cfg`` simulates as a smaller one did."""
        return replicas > self.agg.get(cfg, replicas)

    def covers_pair(self, key: tuple, nd: int, np_: int) -> bool:
        """A disaggregated layout of pool pair ``key`` simulates as a smaller one did."""
        more_decode = nd > self.decode.get(key, {}).get(np_, nd)
        more_prefill = np_ > self.prefill.get(key, {}).get(nd, np_)
        return (
            more_decode
            or more_prefill
            or any(nd >= a and np_ >= b for a, b in self.corners.get(key, ()))
        )

    def pair_layouts(self, key: tuple, g: int, dg: int, pg: int) -> list[tuple[int, int]]:
        """The (decode, prefill) replica counts of pool pair ``key`` (``dg`` and ``pg`` GPUs a
        replica) on ``g`` GPUs that no smaller layout covers. With a corner (a, b) only
        ``nd < a`` or ``np < b`` can be left, so the walk is over those, not over all ``g``."""
        corners = self.corners.get(key)
        if corners:
            a, b = min(corners, key=sum)
            nds = set(range(1, min(a - 1, g // dg) + 1))
            for np_ in range(1, b):
                left = g - np_ * pg
                if left >= a * dg and left % dg == 0:
                    nds.add(left // dg)
        else:
            nds = set(range(1, g // dg + 1))
        out = []
        for nd in sorted(nds):
            left = g - nd * dg
            if left >= pg and left % pg == 0 and not self.covers_pair(key, nd, left // pg):
                out.append((nd, left // pg))
        self.skipped += _pool_splits(g, dg, pg) - len(out)
        return out


def _pool_splits(g: int, dg: int, pg: int) -> int:
    """How many (nd, np), both at least 1, have nd * dg + np * pg == g: the nd in
    [1, (g - pg) // dg] with nd * dg = g (mod pg), counted by residue rather than walked."""
    top = (g - pg) // dg
    n = 0
    for r in range(pg):
        first = r if r >= 1 else pg  # the least nd >= 1 with this residue
        if (r * dg - g) % pg == 0 and first <= top:
            n += (top - first) // pg + 1
    return n


def _layout_order(d: Deployment) -> tuple[int, bool, int, int]:
    return (d.gpus, d.prefill is not None, d.replica.tp, d.replica.pp)


def candidate_tiers(
    base: ReplicaConfig,
    max_gpus: int,
    disagg: bool = True,
    keep: Callable[[ReplicaConfig], bool] | None = None,
    keep_layout: Callable[[Deployment], bool] | None = None,
    disagg_router: str = "least-tokens",
    saturation: ReplicaSaturation | None = None,
) -> Iterator[list[Deployment]]:
    """The layouts of `candidates`, one list per GPU count, fewest GPUs first, each built only
    when it is asked for (a budget of thousands of GPUs has millions of disaggregated pool
    pairings; the search stops at the first count that meets the SLOs). With ``saturation``
    (filled in by the caller as layouts are simulated) the layouts it covers are left out."""
    reps = _replicas(base, max_gpus, keep)
    big = [c for c in reps if c.max_num_seqs == max(PLAN_MAX_NUM_SEQS) and c.pp == 1]
    pools = [(d, replace(p, max_num_seqs=PREFILL_MAX_NUM_SEQS)) for d in big for p in big]
    sat = saturation if saturation is not None else ReplicaSaturation()
    for g in range(1, max_gpus + 1):
        tier = []
        for c in reps:
            if g % c.gpus == 0:
                if sat.covers(c, g // c.gpus):
                    sat.skipped += 1
                else:
                    tier.append(Deployment(c, replicas=g // c.gpus, router="least-tokens"))
        if disagg:
            for dcfg, pcfg in pools:
                for nd, np_ in sat.pair_layouts((dcfg, pcfg), g, dcfg.gpus, pcfg.gpus):
                    tier.append(Deployment(dcfg, nd, disagg_router, pcfg, np_))
        if keep_layout is not None:
            tier = [d for d in tier if keep_layout(d)]
        if tier:
            yield sorted(tier, key=_layout_order)


def candidates(
    base: ReplicaConfig,
    max_gpus: int,
    disagg: bool = True,
    keep: Callable[[ReplicaConfig], bool] | None = None,
    keep_layout: Callable[[Deployment], bool] | None = None,
    disagg_router: str = "least-tokens",
) -> list[Deployment]:
    """Layouts of ``base`` (its model, device, precision) on at most ``max_gpus`` GPUs, fewest
    GPUs first; with ``keep``, only replicas it keeps (``serve plan --launch``: those the engine
    runs as simulated, `hwtune.serve.launch.launch_refusal`), and with ``keep_layout`` only the
    deployments it keeps (a disaggregated one's pools and router,
    `hwtune.serve.launch.disagg_launch_refusal`). ``disagg_router``: the router of the
    disaggregated layouts (``round-robin`` where the launched engine's router has no
    least-tokens policy)."""
    tiers = candidate_tiers(base, max_gpus, disagg, keep, keep_layout, disagg_router)
    return [d for tier in tiers for d in tier]


def margin_correction(dep: Deployment, wl: Workload) -> tuple[ServeCorrection, dict] | None:
    """``--margin likely``: the simulated latencies of ``dep`` scaled by the upper ends of the
    likely band of its published cell (`hwtune.serve.accuracy.likely_margin`: mode, model kind,
    a closed loop's clients per replica), as a tier-3-shaped map (scale only), and what to
    report of it. The band describes mean latencies; it is applied to every request, so to the
    percentiles as well. None without a track record."""
    from hwtune.serve.accuracy import clients_per_replica, likely_margin
    from hwtune.serve.correction import AffineMap

    clients = clients_per_replica(wl.mode, wl.concurrency, dep.replicas)
    m = likely_margin(dep.prefill is not None, dep.replica.model.moe is not None, clients)
    if m is None:
        return None
    corr = ServeCorrection(ttft=AffineMap(scale=m["ttft"]), tpot=AffineMap(scale=m["tpot"]),
                           runs=m["runs"], source=f"likely band of {m['basis']}")  # fmt: skip
    return corr, {"ttft_factor": m["ttft"], "tpot_factor": m["tpot"], "basis": m["basis"]}


def _evaluate(
    args: tuple[Deployment, Workload, SLO, ServeCorrection | None, bool],
) -> PlanResult:
    from hwtune.serve.correction import corrected_stats
    from hwtune.serve.metrics import backlog_of, per_request, summarize
    from hwtune.serve.simulator import simulate

    dep, wl, slo, corr, margin = args
    info = None
    if margin:
        got = margin_correction(dep, wl)
        if got is not None:
            corr, info = got
    price = dep.replica.device.price_per_hour_usd
    cost = price * dep.gpus if price is not None else None
    try:
        res = simulate(dep, wl)
    except HwtuneInputError as e:
        nan = math.nan
        return PlanResult(dep, dep.gpus, cost, nan, nan, nan, 0.0, False, str(e))
    s = summarize(res)
    if info is not None:
        info |= {"simulated_ttft_p90_s": s["ttft_s"]["p90"],
                 "simulated_tpot_p90_s": s["tpot_s"]["p90"]}  # fmt: skip
    pr = per_request(res)
    if corr is not None:  # tier 3 or the margin: SLOs checked on the corrected latencies
        s |= corrected_stats(corr, pr["ttft"], pr["tpot"], pr["output"])
    t, p, e = s["ttft_s"]["p90"], s["tpot_s"]["p90"], s["e2e_s"]["p90"]
    behind = backlog_of(res, pr).falls_behind
    ok = (
        not behind
        and (slo.ttft_p90_s is None or t <= slo.ttft_p90_s)
        and (slo.tpot_p90_s is None or (p != p) or p <= slo.tpot_p90_s)
        and (slo.e2e_p90_s is None or e <= slo.e2e_p90_s)
    )
    return PlanResult(dep, dep.gpus, cost, t, p, e, s["throughput_tokens_per_s"]["total"], ok,
                      margin=info, replicas_used=res.replicas_used,
                      prefill_replicas_used=res.prefill_replicas_used,
                      falls_behind=behind)  # fmt: skip


def _run_batch(
    run: Callable,
    jobs: list[tuple],
    before: int,
    progress: Callable[[int, int], None] | None,
    stop: bool = True,
) -> list[PlanResult]:
    """The results of a batch's layouts (``jobs``, fewest GPUs first); with ``stop``, only up to
    the fewest GPUs on which one meets the SLOs (all of them where none does). The workers take the jobs in
    order; once a layout meets the SLOs on ``g`` GPUs and every layout on at most ``g`` has
    been simulated, the ones on more GPUs are cancelled (a worker busy with one finishes it,
    and its result is dropped, so the answer does not depend on the workers' timing): a batch
    of one to eight GPUs whose answer is two simulated every layout before."""
    got: dict[int, PlanResult] = {}
    fewest = math.inf  # GPUs of the smallest layout found to meet the SLOs
    need = len(jobs)  # jobs to wait for: those on at most `fewest` GPUs
    have = 0  # of them, those done
    it = run(_evaluate, jobs)
    try:
        for i, r in it:
            told = (have, need)
            got[i] = r
            if stop and r.meets and r.gpus < fewest:
                fewest = r.gpus
                need = sum(1 for d, *_ in jobs if d.gpus <= fewest)
            have = sum(1 for j in got if jobs[j][0].gpus <= fewest)
            if progress and (have, need) != told:  # a dropped result moves nothing
                progress(before + have, before + need)
            if have == need:
                break
    finally:
        it.close()  # cancels the jobs not begun
    return [got[i] for i in sorted(got) if jobs[i][0].gpus <= fewest]


def plan(
    base: ReplicaConfig,
    workload: Workload,
    slo: SLO,
    max_gpus: int = 8,
    objective: str = "gpus",
    disagg: bool = True,
    processes: int | None = None,
    batch: int = 400,
    correction: ServeCorrection | None = None,
    margin: bool = False,
    ray_address: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    keep: Callable[[ReplicaConfig], bool] | None = None,
    keep_layout: Callable[[Deployment], bool] | None = None,
    disagg_router: str = "least-tokens",
    saturation: ReplicaSaturation | None = None,
    max_layouts: int | None = None,
    every_layout: bool = False,
) -> list[PlanResult]:
    """Simulate the candidates (in parallel) and return them best first: those that meet the
    SLO by GPUs (or cost), then the rest by how far they miss. Raises `HwtuneInputError` with the
    best achievable percentiles when no layout meets the SLO. With ``correction`` (tier 3,
    `hwtune.serve.correction`) the percentiles and the SLO checks are the corrected ones; with
    ``margin`` they are the simulated ones times the upper ends of each layout's likely band
    (`margin_correction`), so the SLOs hold unless the simulator errs as seldom as its published
    record's worst tenth. ``processes`` local processes (default: all cores) or ``ray_address``
    run the simulations (`hwtune.workers.job_runner`: one pool for all batches);
    ``progress(done, total)`` follows them (``total``: the layouts of the batches begun so
    far); ``keep``, ``keep_layout`` and ``disagg_router`` limit the layouts searched
    (`candidates`).

    The layouts are simulated in batches of whole GPU counts, fewest GPUs first
    (`candidate_tiers`), each batch growing by GPU counts until it holds ``batch`` layouts, and
    the search stops after the first batch in which some layout meets the SLOs: every layout on
    fewer GPUs than the best has been simulated, and none is left out unsaid (the larger ones
    are not simulated). Without a layout that meets them, every layout up to ``max_gpus`` is,
    but for those that would simulate alike to a smaller one (`ReplicaSaturation`: more
    replicas than a simulation used; pass one to learn how many were left out). With
    ``max_layouts``, no further batch begins once that many layouts have been simulated: the
    answer then covers the GPU counts searched, which the refusal names. Within a batch the
    layouts on more GPUs than the first answer are cancelled (`_run_batch`). ``every_layout``
    simulates every layout up to ``max_gpus`` (less those `ReplicaSaturation` finds alike)
    and ranks them all: the alternatives on more GPUs, at their throughput."""
    if objective not in ("gpus", "cost"):
        raise HwtuneInputError("objective", objective, "gpus or cost")
    if margin and correction is not None:
        raise HwtuneInputError("margin", "likely", "no tier-3 correction beside it (the "
                               "correction already maps to measured latencies)")  # fmt: skip
    if disagg and correction is not None:  # fitted to aggregated runs only
        raise HwtuneInputError("disagg", True, "--no-disagg beside --correction "
                               "(`serve calibrate` fits aggregated runs)")  # fmt: skip
    if slo.tpot_p90_s is not None and workload.outputs and max(workload.outputs) <= 1:
        raise HwtuneInputError("tpot_p90", slo.tpot_p90_s, "no TPOT SLO for one-token outputs "
                               "(TPOT is the time between output tokens: undefined)")  # fmt: skip
    if max_gpus < 1:
        raise HwtuneInputError("max_gpus", max_gpus, "a positive integer")
    check_workers(processes, ray_address, "processes")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise HwtuneInputError("batch", batch, "a positive integer of layouts")
    if max_layouts is not None and (
        isinstance(max_layouts, bool) or not isinstance(max_layouts, int) or max_layouts < 1
    ):
        raise HwtuneInputError("max_layouts", max_layouts, "a positive integer of layouts")
    # what every layout would refuse alike (a request past the context), before any is tried
    check_request_limits(workload.make_requests(), base)
    sat = saturation if saturation is not None else ReplicaSaturation()
    tiers = candidate_tiers(base, max_gpus, disagg, keep, keep_layout, disagg_router, sat)
    todo = next(tiers, None)
    limited = keep is not None or keep_layout is not None
    if todo is None and limited and next(candidate_tiers(base, max_gpus, disagg), None):
        raise HwtuneInputError("max_gpus", max_gpus, "enough GPUs for a layout that the launched "
                               "engine runs as simulated")  # fmt: skip
    if todo is None:
        _raise_limit_refusal(base, max_gpus)
        raise HwtuneInputError(
            "max_gpus",
            max_gpus,
            f"enough GPUs to hold {base.model.name} in {base.weight_dtype}"
            + _shortfall(base, max_gpus)
            + checkpoint_hint(base),
        )
    results: list[PlanResult] = []
    stopped = 0  # the GPU counts searched when max_layouts stopped the search (0: it did not)
    with job_runner(processes, ray_address, "spawn") as run:  # one pool for every batch
        while todo:
            skipped_by = {todo[0].gpus: sat.skipped}  # sat.skipped once each tier was built
            while len(todo) < batch:  # whole GPU counts, fewest first
                more = next(tiers, None)
                if more is None:
                    break
                todo += more
                skipped_by[more[0].gpus] = sat.skipped
            jobs = [(d, workload, slo, correction, margin) for d in todo]
            got = _run_batch(run, jobs, len(results), progress, stop=not every_layout)
            results += got
            for r in got:
                sat.note(r)
            if not every_layout and any(r.meets for r in got):  # every smaller one was run
                sat.skipped = skipped_by[max(r.gpus for r in got)]  # none past the answer
                break
            skipped = sat.skipped
            todo = next(tiers, None)
            if todo and max_layouts is not None and len(results) >= max_layouts:
                stopped = max(r.gpus for r in results)
                sat.skipped = skipped  # the count left out below the stop, not in the tier past it
                break

    def key(r: PlanResult) -> tuple:
        money = r.cost_per_hour if r.cost_per_hour is not None else r.gpus
        first = money if objective == "cost" else r.gpus
        return (first, -r.throughput_tokens_per_s)

    ok = sorted((r for r in results if r.meets), key=key)
    if not ok:
        valid = [r for r in results if not r.error]
        if not valid:
            same = HwtuneInputError.from_message(results[0].error)
            if same is not None and len({r.error for r in results}) == 1:
                raise same  # the input, not a layout, is refused: its own error
            raise HwtuneInputError("workload", "every layout failed", results[0].error)
        bt = min(valid, key=lambda r: r.ttft_p90_s)
        bp = min(valid, key=lambda r: r.tpot_p90_s if r.tpot_p90_s == r.tpot_p90_s else math.inf)
        be = min(valid, key=lambda r: r.e2e_p90_s)
        behind = sum(r.falls_behind for r in valid)
        raise HwtuneInputError(
            "slo",
            {k: v for k, v in vars(slo).items() if v is not None},
            f"targets some layout on {stopped or max_gpus} GPUs can meet"
            + (" with the likely band's margin" if margin else "")
            + f"; best achievable p90 TTFT "
            f"{bt.ttft_p90_s:.3f} s ({bt.describe()}), best p90 TPOT {bp.tpot_p90_s * 1e3:.1f} ms "
            f"({bp.describe()}), best p90 E2E {be.e2e_p90_s:.3f} s ({be.describe()})"
            + (f"; {behind} of the {len(valid)} layouts fell behind the arrivals (their "
               "latencies grow with the run)" if behind else "")
            + (f" ({sat.skipped} layouts with more replicas than a smaller one's simulation "
               "used were not simulated: they run alike)" if sat.skipped else "")
            + (f"; the search stopped at {stopped} GPUs after {len(results)} layouts "
               f"(max_layouts {max_layouts}), short of max_gpus {max_gpus}: raise max_layouts "
               "to search further" if stopped else ""),
        )  # fmt: skip
    rest = sorted((r for r in results if not r.meets), key=key)
    return ok + rest
