"""The planner's search over composite strategies (`hwtune plan`).

Every valid combination of dp x tp x pp x ep x cp, sequence parallelism, ZeRO stage,
micro-batch, virtual stages, pipeline schedule, recomputation and offload is a candidate. The
search never estimates a candidate it can rule out:

1. **Validity**: degrees must divide what they split (heads, experts, GPUs, sequence, batch).
2. **Dominance**: a knob that only trades time for memory is taken at its cheapest level that
   fits. Sequence parallelism is always on with TP (it moves the same bytes as the all-reduce it
   replaces and stores less; Korthikanti et al. 2022, §4.2.2); ZeRO-0 is dominated by ZeRO-1
   (same traffic with a distributed optimizer, less memory; Rajbhandari et al. SC'20, §5).
   For each layout the memory knobs (ZeRO stage, recomputation, offload) are searched as a
   lattice: a setting is kept only if it fits and no cheaper setting in every knob also fits.
   ZeRO 3 stands apart from ZeRO 1-2 where their gradients differ in dtype (fp32 main grads
   against FSDP's bf16 by default): it moves fewer bytes then, and can be faster.
3. **Bound before memory**: a layout, micro-batch and schedule whose busiest pipeline rank
   without recomputation, with the schedule's bubble (`estimator.step_time_floor`), is already
   no faster than the k-th best found so far is dropped whole, before its memory is costed.
4. **Memory**: a candidate whose most loaded stage does not fit is dropped before its time is
   estimated (the memory model is ~10x cheaper than the time model).
5. **Bound**: a candidate whose busiest rank alone (its layers' compute, exposed in-layer
   communication and recomputation, and the bubble, `estimator.step_time_lower_bound`; no
   pipeline send/recv, data-parallel communication or optimizer) is no faster than the k-th
   best found so far is dropped.

Counts of what was pruned and why are part of the result.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import get_args

from hwtune.errors import HwtuneInputError
from hwtune.hardware.cluster import Cluster, require_cluster
from hwtune.model.spec import ModelSpec
from hwtune.train.estimator import (
    Estimate,
    _estimate,
    _resolve_model,
    check_attention_kernel,
    check_training_precision,
    default_precision,
    grads_in_fp32,
    memory_table,
    shard_of,
    step_time_floor,
    step_time_lower_bound,
)
from hwtune.train.objectives import OBJECTIVES, objective_value
from hwtune.train.pipeline_layout import is_layout, split_error, split_key
from hwtune.train.strategy import SCHEDULES, Precision, Strategy, make_strategy

RECOMPUTE_ORDER = ("none", "selective", "selective-op", "full")
ZERO_ORDER = (1, 2, 3)
KNOB_FIELDS = ("tp", "pp", "dp", "cp", "ep", "micro_batch", "vpp", "schedule", "recompute", "zero")


class NoLayoutError(HwtuneInputError):
    """No layout of the cluster's GPUs divides the job (a scaling sweep records such a point)."""


@dataclass(frozen=True)
class Constraints:
    """User constraints: fixed values (``--fix tp=8``), maxima (``--max pp=16``), allowed sets."""

    fixed: dict[str, object] = field(default_factory=dict)
    maxima: dict[str, int] = field(default_factory=dict)
    schedules: tuple[str, ...] | None = None
    allow_offload: bool = True
    recomputes: tuple[str, ...] | None = None  # allowed recomputation policies (None: all)
    runs: Callable[[Strategy], bool] | None = None  # a framework runs it (None: any)

    def allows(self, name: str, value: object) -> bool:
        if name in self.fixed and self.fixed[name] != value:
            return False
        mx = self.maxima.get(name)
        return not (mx is not None and isinstance(value, int) and value > mx)


@dataclass
class PlanResult:
    """The top-k strategies, best first, with what the search did."""

    top: list[Estimate]
    objective: str
    candidates: int
    evaluated: int
    pruned: Counter
    seconds: float
    shortfall: tuple[float, Strategy] | None = None  # smallest memory overshoot when none fits
    why_best: str = ""

    @property
    def best(self) -> Estimate:
        if not self.top:
            raise HwtuneInputError("plan", "no feasible strategy", "a job that fits in memory")
        return self.top[0]


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _pow2_upto(n: int) -> list[int]:
    out, x = [], 1
    while x <= n:
        out.append(x)
        x *= 2
    return out


def layouts(
    spec: ModelSpec, cl: Cluster, seq: int, gb: int, c: Constraints
) -> Iterator[tuple[int, int, int, int, int]]:
    """(tp, pp, cp, dp, ep) that divide what they split; TP stays inside one scale-up domain."""
    n = cl.n_gpus
    kv = spec.kv_heads
    for tp in _pow2_upto(min(cl.domain, spec.n_heads)):
        if spec.n_heads % tp or (spec.mla is None and kv % tp and tp % kv) or n % tp:
            continue
        if not c.allows("tp", tp):
            continue
        for pp in _divisors(n // tp):
            if pp > spec.n_layers or not c.allows("pp", pp):
                continue
            for cp in _pow2_upto(min(16, n // (tp * pp))):
                # CP splits each sequence into 2 x cp chunks (load balance); cp 1 splits none
                if (n // (tp * pp)) % cp or (cp > 1 and seq % (2 * cp)) or not c.allows("cp", cp):
                    continue
                dp = n // (tp * pp * cp)
                if gb % dp or not c.allows("dp", dp):
                    continue
                eps = [1]
                if spec.moe is not None:
                    eps = [e for e in _divisors(tp * cp * dp) if spec.moe.n_routed_experts % e == 0]
                for ep in eps:
                    if c.allows("ep", ep):
                        yield tp, pp, cp, dp, ep


def _layout_rule(spec: ModelSpec, cl: Cluster, seq: int, gb: int) -> str:
    """What `layouts` asks of the GPU count, in words, for the error when none divides it."""
    cps = [cp for cp in _pow2_upto(16) if cp == 1 or seq % (2 * cp) == 0]
    return (f"a count made as tp x pp x cp x dp: tp a power of 2 dividing the {spec.n_heads} "
            f"heads within the {cl.domain}-GPU scale-up domain, pp at most the "
            f"{spec.n_layers} layers, cp one of {', '.join(map(str, cps))} (seq {seq}), dp "
            f"dividing the batch {gb}")  # fmt: skip


def _schedules(spec: ModelSpec, pp: int, m: int, c: Constraints) -> Iterator[tuple[str, int]]:
    """(schedule, virtual stages) valid for ``pp`` ranks and ``m`` micro-batches and allowed by
    the constraints (``schedules``, ``--fix schedule=``, ``--fix/--max vpp=``)."""
    allowed = c.schedules or SCHEDULES
    if pp == 1:
        if c.allows("schedule", "1f1b") and c.allows("vpp", 1):
            yield "1f1b", 1
        return
    for s in allowed:
        if not c.allows("schedule", s):
            continue
        if s == "gpipe" and "schedule" not in c.fixed:
            continue  # dominated by 1F1B: same bubble, more activations in flight
        if s == "interleaved":
            if m % pp:
                continue
            vmax = spec.n_layers // pp
            for v in range(2, max(2, min(vmax, 16)) + 1):
                if spec.n_layers >= pp * v and c.allows("vpp", v):
                    yield s, v
            continue
        if s == "dualpipe" and (pp % 2 or m < 2 * pp):
            continue
        if c.allows("vpp", 1):
            yield s, 1


def _positive_int(field: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise HwtuneInputError(field, value, "a positive integer")


def check_search_job(
    global_batch: int, seq: int, precision: str, top_k: int, price: float | None, tokens: float
) -> None:
    """One-line errors for a job the search cannot take (before any layout is tried)."""
    _positive_int("global_batch", global_batch)
    _positive_int("seq", seq)
    _positive_int("top", top_k)
    precisions = get_args(Precision)
    if precision not in precisions:
        raise HwtuneInputError("precision", precision, f"one of {', '.join(precisions)}")
    if price is not None and not (math.isfinite(price) and price >= 0):
        raise HwtuneInputError("price_per_gpu_hour", price, "a finite price >= 0 (USD)")
    if not (math.isfinite(tokens) and tokens > 0):
        raise HwtuneInputError("tokens", tokens, "a positive finite token count")


SEARCHED_FIELDS = (
    "precision", "tp", "pp", "dp", "cp", "ep", "sequence_parallel", "zero", "micro_batch",
    "global_batch", "seq", "vpp", "schedule", "recompute", "offload_optimizer",
)  # fmt: skip
"""The `Strategy` fields `plan` sets on every candidate (from its arguments or the search)."""


def _checked_base(base: dict[str, object] | None) -> dict[str, object]:
    """``plan``'s ``base``: `Strategy` fields the search does not set, each value checked as the
    field checks it (an unknown field was a pydantic dump, a searched one a TypeError, a bad
    value a dump or a ValueError deep in the memory model)."""
    from typing import Annotated

    from pydantic import TypeAdapter, ValidationError

    from hwtune.errors import from_validation_error

    base = dict(base or {})
    for name, value in base.items():
        if name in SEARCHED_FIELDS:
            raise HwtuneInputError(
                f"base.{name}", value, "a field the search does not set (it sets "
                f"{', '.join(SEARCHED_FIELDS)}: fix a knob with constraints=Constraints(fixed=...))",
            )  # fmt: skip
        info = Strategy.model_fields.get(name)
        if info is None:
            raise HwtuneInputError(f"base.{name}", value, "a Strategy field (this one is unknown)")
        try:
            kind = (
                Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
            )
            TypeAdapter(kind).validate_python(value)
        except ValidationError as e:
            raise from_validation_error(e, where=f"base.{name}") from None
    return base


def _checked_micro_batches(micro_batches: Iterable[int] | None) -> list[int] | None:
    """``plan``'s micro-batch sizes as a list (an iterator was used up by the first layout, and
    the others searched none), refused when empty (it fell back to the default sizes) or not
    positive integers (0 divided by zero)."""
    if micro_batches is None:
        return None
    mbs = list(micro_batches)
    ok = all(isinstance(b, int) and not isinstance(b, bool) and b >= 1 for b in mbs)
    if not mbs or not ok:
        raise HwtuneInputError("micro_batches", mbs, "one or more positive integers (or None "
                               "for the divisors of each layout's sequences per rank)")  # fmt: skip
    return mbs


def _check_constraints(c: Constraints) -> None:
    """``--fix``/``--max`` name known knobs with values that they can take."""
    for name, v in c.fixed.items():
        if name not in KNOB_FIELDS + ("offload_optimizer",):
            raise HwtuneInputError("--fix", name, f"one of {', '.join(KNOB_FIELDS)}")
        allowed = {
            "schedule": SCHEDULES,
            "recompute": RECOMPUTE_ORDER,
            "zero": ZERO_ORDER,
            "offload_optimizer": (True, False),
        }.get(name)
        if allowed is not None and v not in allowed:
            why = (" (the search leaves ZeRO 0 out: ZeRO 1 moves the same bytes and holds less; "
                   "`hwtune estimate --zero 0` prices it)" if name == "zero" else "")  # fmt: skip
            raise HwtuneInputError(
                f"--fix {name}", v, f"one of {', '.join(map(str, allowed))}{why}"
            )
        if allowed is None:
            _positive_int(f"--fix {name}", v)
    for name, v in c.maxima.items():
        if name not in KNOB_FIELDS or name in ("schedule", "recompute"):
            names = [k for k in KNOB_FIELDS if k not in ("schedule", "recompute")]
            raise HwtuneInputError("--max", name, f"one of {', '.join(names)}")
        _positive_int(f"--max {name}", v)
        fixed = c.fixed.get(name)
        if isinstance(fixed, int) and fixed > v:
            raise HwtuneInputError(f"--max {name}", v, f"at least --fix {name}={fixed}")
    if c.schedules and "1f1b" not in c.schedules and 1 in (c.fixed.get("pp"), c.maxima.get("pp")):
        # one stage runs as 1F1B's single stage: another schedule would be silently replaced
        raise HwtuneInputError("--schedule", ",".join(c.schedules), "1f1b (one stage's "
                               "schedule) or none beside --fix pp=1 or --max pp=1")  # fmt: skip


def n_raw_for(tp: int, c: Constraints) -> int:
    """Raw candidates per (layout, micro-batch, schedule): ZeRO 0-3 x recomputation x offload
    x sequence parallel on/off (with TP)."""
    return 4 * len(RECOMPUTE_ORDER) * (2 if c.allow_offload else 1) * (2 if tp > 1 else 1)


def _complexity(st: Strategy) -> int:
    """How many parallel dimensions and memory savers a strategy uses (the tie-breaker)."""
    return (
        sum(d > 1 for d in (st.tp, st.pp, st.cp, st.ep))
        + (st.vpp > 1)
        + (st.recompute != "none")
        + st.offload_optimizer
    )


def _knob_lattice(allow_offload: bool) -> list[tuple[int, str, bool]]:
    offs = (False, True) if allow_offload else (False,)
    return [(z, r, o) for o in offs for z in ZERO_ORDER for r in RECOMPUTE_ORDER]


_RANK = {r: i for i, r in enumerate(RECOMPUTE_ORDER)}
BOUND = "bound: the busiest rank alone no faster than the top-k"
"""The pruning reason of both bounds (module docstring, 3 and 5)."""


def _dominated(
    a: tuple[int, str, bool], b: tuple[int, str, bool], zero3_apart: bool = False
) -> bool:
    """Whether knob setting ``b`` is no cheaper than ``a`` in every knob (so ``a`` dominates).
    With ``zero3_apart`` ZeRO 3 is not dominated by ZeRO 1-2: they reduce gradients in
    different dtypes (`estimator.grads_in_fp32`: fp32 main grads against FSDP's parameter
    dtype), so ZeRO 3 can move fewer bytes where the step waits on them."""
    if zero3_apart and (a[0] == 3) != (b[0] == 3):
        return False
    return a[0] <= b[0] and a[2] <= b[2] and _RANK[a[1]] <= _RANK[b[1]] and a != b


def plan(
    spec: ModelSpec | str,
    cl: Cluster,
    global_batch: int,
    seq: int,
    *,
    precision: str | None = None,
    objective: str = "throughput",
    constraints: Constraints | None = None,
    top_k: int = 5,
    micro_batches: Iterable[int] | None = None,
    progress: Callable[[int, int], None] | None = None,
    base: dict[str, object] | None = None,
    price_per_gpu_hour: float | None = None,
    tokens_to_train: float = 1e12,
) -> PlanResult:
    """Search the strategies of training ``spec`` on ``cl`` with ``global_batch`` sequences of
    ``seq`` tokens per step; rank by ``objective`` (see `objectives.OBJECTIVES`). ``spec``: a
    `ModelSpec`, a catalog name or a config.json path; ``cl``: a `Cluster`
    (`hwtune.hardware.cluster.make_cluster(gpu, n)` for a device's system preset); ``precision``:
    None for `default_precision` (bf16, fp16 on V100)."""
    spec = _resolve_model(spec)
    require_cluster(cl)
    if objective not in OBJECTIVES:
        raise HwtuneInputError("objective", objective, f"one of {', '.join(OBJECTIVES)}")
    precision = precision or default_precision(cl.device)
    check_search_job(global_batch, seq, precision, top_k, price_per_gpu_hour, tokens_to_train)
    check_training_precision(precision, cl.device)  # before any layout is tried
    c = constraints or Constraints()
    _check_constraints(c)
    base = _checked_base(base)
    micro_batches = _checked_micro_batches(micro_batches)
    mtp = int(base.get("mtp_layers", 0))  # type: ignore[call-overload]
    split = split_key(str(base.get("pipeline_split", "layers")), mtp)
    checked_split = split != "layers"  # the default even split fits every pp x vpp
    modules = tuple(base.pop("recompute_modules", ("core_attn",)))  # type: ignore[call-overload]
    act_offload = int(base.get("offload_activation_layers", 0))  # type: ignore[call-overload]
    check_attention_kernel(bool(base.get("flash_attention", True)),
                           str(base.get("attention_kernel", "best")), cl.device)  # fmt: skip
    zero3_only = base.get("zero3_gather", "layer") != "layer"  # typed: it prices ZeRO 3 alone
    if base.get("fp8_param_gather"):  # its one-line error before any layout is tried
        make_strategy(precision=precision, zero=1, dp=2, micro_batch=1, global_batch=2,
                      seq=seq, **base)  # fmt: skip

    def mods_for(rec: str) -> tuple[str, ...]:
        """The modules selective recomputation repeats (the others take the default)."""
        return modules if rec == "selective" else ("core_attn",)

    def base_for(rec: str) -> dict[str, object]:
        """``base``, its activation offload only where Megatron-Core runs it (no recompute)."""
        return (
            base if rec == "none" or not act_offload else {**base, "offload_activation_layers": 0}
        )

    t0 = time.perf_counter()
    pruned: Counter = Counter()
    top: list[tuple[tuple[float, int], Estimate]] = []
    evaluated = candidates = 0
    best_short: tuple[float, Strategy] | None = None
    refused_fit = False  # a strategy that fits was refused by the launch framework
    lattice = [
        k
        for k in _knob_lattice(c.allow_offload)
        if c.allows("zero", k[0]) and c.allows("recompute", k[1])
        and c.allows("offload_optimizer", k[2]) and (c.recomputes is None or k[1] in c.recomputes)
        # fp8 parameters live in Megatron's distributed optimizer (ZeRO 1 or 2), on the GPU
        and (not base.get("fp8_param_gather") or (k[0] in (1, 2) and not k[2]))
        and (not zero3_only or k[0] == 3)
    ]  # fmt: skip
    if not lattice:
        raise NoLayoutError(
            "constraints", {**c.fixed, **c.maxima} or "none",
            "a ZeRO stage, recomputation and optimizer offload they allow together"
            + (" (fp8_param_gather needs ZeRO 1 or 2 without offload)"
               if base.get("fp8_param_gather") else "")
            + (" (zero3_gather prices ZeRO 3 only)" if zero3_only else ""),
        )  # fmt: skip
    lay = list(layouts(spec, cl, seq, global_batch, c))
    if not lay:
        limits = {**c.fixed, **c.maxima}
        if limits:
            raise NoLayoutError("constraints", limits, f"a layout of {cl.n_gpus} GPUs that "
                                "divides the heads, layers, sequence and batch "
                                f"{global_batch} within them")  # fmt: skip
        raise NoLayoutError("cluster.n_gpus", cl.n_gpus, _layout_rule(spec, cl, seq, global_batch))
    cap = cl.device.memory_bytes
    sense = OBJECTIVES[objective]
    # step time orders throughput, cost and time-to-train alike (fixed GPUs and tokens per step)
    bounded = objective in ("throughput", "cost", "time-to-train")
    # ZeRO 3 against ZeRO 1-2 (`_dominated`): apart when their gradient dtypes differ
    zero3_apart = grads_in_fp32(base.get("grad_reduce_dtype"), 1) != grads_in_fp32(
        base.get("grad_reduce_dtype"), 3
    )
    firsts: dict[tuple[int, int, int, int], Strategy] = {}

    def strategy(
        tp: int, pp: int, dp: int, cp: int, ep: int, mb: int, sched: str, v: int,
        knobs: tuple[int, str, bool],
    ) -> Strategy:  # fmt: skip
        """The strategy of a layout, micro-batch, schedule and knob setting (ZeRO stage,
        recomputation, optimizer offload)."""
        z, r, o = knobs
        return Strategy(
            precision=precision, tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, sequence_parallel=tp > 1,
            zero=z, micro_batch=mb, global_batch=global_batch, seq=seq, vpp=v, schedule=sched,
            recompute=r, offload_optimizer=o, recompute_modules=mods_for(r), **base_for(r),
        )  # fmt: skip

    def first(tp: int, pp: int, dp: int, cp: int, ep: int, mb: int, sched: str, v: int) -> Strategy:
        """A strategy of this layout and micro-batch (the first knob setting's): its `Shard`
        and its overlap switches are those of every schedule and knob setting."""
        key = (tp, cp, ep, mb)
        if key not in firsts:
            firsts[key] = strategy(tp, pp, dp, cp, ep, mb, sched, v, lattice[0])
        return firsts[key]

    for li, (tp, pp, cp, dp, ep) in enumerate(lay):
        if progress:
            progress(li, len(lay))
        per_rank = global_batch // dp
        mbs = [b for b in (micro_batches or _divisors(min(per_rank, 64))) if per_rank % b == 0]
        mbs = [b for b in mbs if c.allows("micro_batch", b)]
        lightest = lattice[-1]  # the most memory-saving setting (lattice is in cost order)
        for mi, mb in enumerate(mbs):
            m = per_rank // mb
            any_fit = False
            for sched, v in _schedules(spec, pp, m, c):
                n_raw = n_raw_for(tp, c)
                candidates += n_raw
                if (
                    checked_split
                    and split_error(split, spec.n_layers, pp, v, mtp)
                    and (pp > 1 or is_layout(split))
                ):
                    why = ("pipeline layout: not pp x vpp chunks" if is_layout(split) else
                           "pipeline split: n_layers + 2 not divisible by pp x vpp")  # fmt: skip
                    pruned[why] += n_raw
                    continue
                if act_offload and pp > 1:
                    pruned["activation offload: no pipeline parallelism"] += n_raw
                    continue
                pruned["dominated (SP off with TP, ZeRO-0)"] += n_raw - len(lattice)
                if bounded and len(top) >= top_k:
                    st0 = first(tp, pp, dp, cp, ep, mb, sched, v)
                    floor = step_time_floor(
                        spec, cl, precision, shard_of(st0), st0.overlap_tp_comm,
                        st0.overlap_moe_a2a, pp, sched, v, split, m,
                    )  # fmt: skip
                    if floor >= top[-1][1].step_time_s:
                        pruned[BOUND] += len(lattice)
                        any_fit = True  # memory not costed: larger micro-batches stay in
                        continue
                fitting: list[tuple[int, str, bool]] = []
                b_ = base
                mems = memory_table(
                    spec, precision, str(b_.get("optimizer", "adam")), b_.get("grad_reduce_dtype"),  # type: ignore[arg-type]
                    tp, pp, dp, cp, ep, tp > 1, mb, seq, m, v, sched,
                    bool(b_.get("flash_attention", True)), bool(b_.get("dropout", False)),
                    float(b_.get("moe_imbalance", 1.0)), lattice,  # type: ignore[arg-type]
                    str(b_.get("loss_kernel", "fused")), bool(b_.get("fp8_saved_inputs", True)),
                    split, modules, act_offload, bool(b_.get("fp8_param_gather", False)),
                )  # fmt: skip
                if mems[lightest] > cap:
                    # if even the most memory-saving setting does not fit, none of them does
                    pruned["does not fit in memory"] += len(lattice)
                    # the closest miss: the least memory of the settings that could run (the
                    # launch framework's and activation offload's refusals, as below)
                    for knobs in sorted(lattice, key=mems.__getitem__):
                        over = mems[knobs] - cap
                        if best_short is not None and over >= best_short[0]:
                            break
                        if act_offload and knobs[1] != "none":
                            continue
                        short = strategy(tp, pp, dp, cp, ep, mb, sched, v, knobs)
                        if c.runs is None or c.runs(short):
                            best_short = (over, short)
                            break
                    continue
                any_fit = True
                for knobs in lattice:
                    if any(_dominated(f, knobs, zero3_apart) for f in fitting):
                        pruned["dominated (a cheaper memory setting fits)"] += 1
                        continue
                    if mems[knobs] > cap:
                        pruned["does not fit in memory"] += 1
                        continue
                    if act_offload and knobs[1] != "none":
                        pruned["activation offload: no recomputation"] += 1
                        continue
                    st = strategy(tp, pp, dp, cp, ep, mb, sched, v, knobs)
                    if c.runs is not None and not c.runs(st):
                        pruned["not run by the launch framework"] += 1
                        refused_fit = True
                        continue
                    fitting.append(knobs)
                    if (
                        bounded
                        and len(top) >= top_k
                        and step_time_lower_bound(spec, cl, st) >= top[-1][1].step_time_s
                    ):
                        pruned[BOUND] += 1
                        continue
                    est = _estimate(spec, cl, st)
                    evaluated += 1
                    # ties (to 6 significant digits) go to the simpler strategy
                    score = (
                        float(
                            f"{objective_value(objective, est, cl, price_per_gpu_hour, tokens_to_train) * sense:.6g}"
                        ),
                        _complexity(st),
                    )
                    if len(top) < top_k or score < top[-1][0]:
                        top.append((score, est))
                        top.sort(key=lambda x: x[0])
                        del top[top_k:]
                    else:
                        pruned["ranked below the top-k"] += 1
            if not any_fit:
                # activations grow with the micro-batch: no larger one fits either
                rest = mbs[mi + 1 :]
                skipped = sum(
                    len(list(_schedules(spec, pp, per_rank // b, c))) for b in rest
                ) * n_raw_for(tp, c)
                candidates += skipped
                pruned["does not fit in memory (larger micro-batch)"] += skipped
                break
    if not candidates:  # layouts, but no micro-batch or schedule that the constraints allow
        raise NoLayoutError(
            "constraints", {**c.fixed, **c.maxima},
            f"a micro-batch and schedule that divide the batch {global_batch} on a layout of "
            f"{cl.n_gpus} GPUs",
        )  # fmt: skip
    result = PlanResult(
        top=[e for _, e in top],
        objective=objective,
        candidates=candidates,
        evaluated=evaluated,
        pruned=pruned,
        seconds=time.perf_counter() - t0,
        # memory is not why nothing was found when the framework refused one that fits
        shortfall=best_short if not top and not refused_fit else None,
    )
    if len(result.top) >= 2:
        result.why_best = why_better(result.top[0], result.top[1])
    return result


_REASONS = {
    "pipeline_bubble": "a smaller pipeline bubble",
    "tp_comm_exposed": "less exposed tensor-parallel communication",
    "cp_comm_exposed": "less exposed context-parallel communication",
    "ep_comm_exposed": "less exposed expert all-to-all",
    "dp_comm_exposed": "less exposed data-parallel communication",
    "pp_p2p": "less pipeline point-to-point traffic",
    "recompute": "less recomputation",
    "optimizer": "a cheaper optimizer step",
    "offload": "no offload traffic",
    "activation_offload": "less exposed activation offload",
    "forward": "faster forward kernels",
    "backward": "faster backward kernels",
}


def why_better(a: Estimate, b: Estimate) -> str:
    """One line on why ``a`` beats ``b``: the breakdown part that differs most in a's favour."""
    diffs = {k: b.breakdown.get(k, 0.0) - a.breakdown.get(k, 0.0) for k in a.breakdown}
    k, d = max(diffs.items(), key=lambda kv: kv[1])
    gap = b.step_time_s - a.step_time_s
    if d <= 0 or gap <= 1e-9 * b.step_time_s:
        return "ties with the runner-up on step time (the simpler strategy ranks first)"
    if float(f"{d:.3g}") > float(f"{gap:.3g}"):  # the part is more than the whole gain
        return (
            f"{_REASONS.get(k, k)} (-{d:.3g} s, partly offset elsewhere): "
            f"{gap:.3g} s per step faster than the runner-up"
        )
    return (
        f"{_REASONS.get(k, k)}: {d:.3g} s of the {gap:.3g} s per step it gains over the runner-up"
    )


def strategy_label(st: Strategy) -> str:
    """A compact one-line strategy description."""
    parts = [f"dp{st.dp}", f"tp{st.tp}", f"pp{st.pp}"]
    if st.cp > 1:
        parts.append(f"cp{st.cp}")
    if st.ep > 1:
        parts.append(f"ep{st.ep}")
    parts.append(f"mb{st.micro_batch}")
    if st.pp > 1:
        parts.append(st.schedule + (f"/v{st.vpp}" if st.vpp > 1 else ""))
    parts.append(f"zero{st.zero}")
    if st.recompute != "none":
        parts.append(f"rc-{st.recompute}")
    if st.offload_optimizer:
        parts.append("offload")
    return " ".join(parts)
