"""Scaling sweeps (`hwtune scale`): where adding accelerators stops paying.

At each accelerator count the best strategy is searched (`search.plan`); the sweep reports
throughput, scaling efficiency, MFU, the share of the step each parallel dimension's exposed
communication takes, and the strategy. Knees are where the marginal throughput of an added
accelerator falls below fractions of linear scaling (Amdahl-style diminishing returns; the
"inflection points" of the scaling study), and regime changes are where the best strategy's
shape changes.

Batch policies: ``strong`` keeps the global batch fixed; ``weak`` keeps the sequences per GPU
fixed (global batch = per-GPU batch x GPUs).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from hwtune.errors import HwtuneInputError
from hwtune.hardware.cluster import Cluster
from hwtune.model.spec import ModelSpec
from hwtune.train.estimator import EXPOSED_COMM_PARTS, Estimate
from hwtune.train.search import NoLayoutError, PlanResult, plan, strategy_label

SHARE_KEYS = {
    "tp": "tp_comm_exposed",
    "cp": "cp_comm_exposed",
    "ep": "ep_comm_exposed",
    "dp": "dp_comm_exposed",
    "pp_p2p": "pp_p2p",
    "bubble": "pipeline_bubble",
    "recompute": "recompute",
    "offload": "offload",
}


RESOURCE = {
    "tp": "scale-up link (tensor-parallel traffic)",
    "cp": "network (context-parallel K/V exchange)",
    "ep": "network (expert all-to-all)",
    "dp": "NIC (data-parallel gradient traffic)",
    "pp_p2p": "network (pipeline point-to-point)",
    "bubble": "pipeline bubble (too few micro-batches per pipeline)",
    "recompute": "memory (recomputation forced by capacity)",
    "offload": "host link (optimizer states offloaded by capacity)",
}


@dataclass
class ScalePoint:
    n_gpus: int
    global_batch: int
    result: PlanResult
    best: Estimate | None
    throughput: float  # tokens/s of the whole job
    efficiency: float = 0.0  # per-GPU throughput / per-GPU throughput at the first point
    shares: dict[str, float] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return strategy_label(self.best.strategy) if self.best else "no strategy fits"

    @property
    def shortfall_bytes(self) -> float | None:
        """Where no strategy fits: the least memory per GPU the closest one lacks (None where
        one fits, or where no layout of the GPUs divides the job)."""
        if self.best is not None or self.result is None or not self.result.shortfall:
            return None
        return self.result.shortfall[0]

    @property
    def exposed_comm(self) -> float:
        """Share of the step spent in exposed communication (all dimensions together)."""
        return sum(
            self.shares.get(k, 0.0) for k, part in SHARE_KEYS.items() if part in EXPOSED_COMM_PARTS
        )

    @property
    def regime(self) -> str:
        """The strategy's regime (parallel shape, ZeRO stage, recomputation, offload): what a
        regime change compares and the plot shades."""
        return _regime(self.best) if self.best else "no strategy fits"


@dataclass
class Knee:
    kind: str  # "efficiency" or "regime"
    n_gpus: int
    detail: str
    fraction: float | None = None
    resource: str = ""
    # efficiency knees: the marginal throughput per added GPU of the step into this count, as a
    # fraction of linear (what fell below ``fraction``), and the count the step starts from
    marginal: float | None = None
    from_gpus: int | None = None


@dataclass
class ScaleResult:
    points: list[ScalePoint]
    knees: list[Knee]
    policy: str


def marginal_fractions(ns: Sequence[float], thr: Sequence[float]) -> list[float]:
    """Marginal throughput per added accelerator between consecutive points, as a fraction of
    the first point's per-accelerator throughput (1.0 = linear). Index i is the step into i."""
    if len(ns) != len(thr) or not ns:
        raise HwtuneInputError("sweep", len(ns), "as many throughputs as accelerator counts")
    base = thr[0] / ns[0]
    out = [1.0]
    for i in range(1, len(ns)):
        dn = ns[i] - ns[i - 1]
        if dn <= 0:
            raise HwtuneInputError("gpus", list(ns), "strictly increasing accelerator counts")
        out.append((thr[i] - thr[i - 1]) / dn / base if base > 0 else 0.0)
    return out


def find_knees(
    ns: Sequence[float], thr: Sequence[float], fractions: Sequence[float] = (0.9, 0.5)
) -> list[tuple[float, float]]:
    """(fraction, accelerators) for each fraction: the first count at which the marginal
    throughput per added accelerator falls below that fraction of linear."""
    marg = marginal_fractions(ns, thr)
    out = []
    for f in sorted(fractions, reverse=True):
        for i in range(1, len(ns)):
            if marg[i] < f:
                out.append((f, ns[i]))
                break
    return out


def _regime(est: Estimate) -> str:
    st = est.strategy
    dims = {"tensor": st.tp, "pipeline": st.pp, "context": st.cp, "expert": st.ep}
    heavy = [k for k, v in dims.items() if v >= 4]
    shape = "+".join(heavy) + "-heavy" if heavy else "data-parallel"
    return (
        f"{shape}, ZeRO-{st.zero}"
        + (f", {st.recompute} recompute" if st.recompute != "none" else "")
        + (", optimizer offload" if st.offload_optimizer else "")
    )


def _shares(est: Estimate) -> dict[str, float]:
    return {k: est.breakdown.get(v, 0.0) / est.step_time_s for k, v in SHARE_KEYS.items()}


def saturating_resource(prev: ScalePoint, cur: ScalePoint) -> str:
    """The resource that accounts for most of the GPU time per token added between two points.

    Strong or weak, a perfectly scaling job keeps its GPU-seconds per token (``n_gpus /
    throughput``) constant; scaling efficiency falls exactly as they grow. Each share of the
    step (exposed communication of a dimension, bubble, recomputation) times the GPU-seconds
    per token is that part's GPU time per token, so the growth of the total splits into the
    growth of each part plus the rest (the compute kernels themselves, which lose efficiency
    as per-GPU work shrinks). The resource named is the part that grew most, provided it grew
    more than the rest; a share that grew while the step shrank does not saturate anything.
    """
    if not prev.shares or not cur.shares or prev.throughput <= 0 or cur.throughput <= 0:
        return "memory (no strategy fits)"
    t0 = prev.n_gpus / prev.throughput  # GPU-seconds per token
    t1 = cur.n_gpus / cur.throughput
    if t1 <= t0:
        return "none (GPU time per token did not grow)"
    growth = {k: cur.shares.get(k, 0.0) * t1 - prev.shares.get(k, 0.0) * t0 for k in SHARE_KEYS}
    k, g = max(growth.items(), key=lambda kv: kv[1])
    rest = (t1 - t0) - sum(growth.values())
    if g <= 0 or g <= rest:
        return "none dominant (per-GPU work shrinks: kernels get smaller and less efficient)"
    return RESOURCE[k]


def scale_sweep(
    spec: ModelSpec | str,
    cluster_for: Callable[[int], Cluster],
    gpus: Sequence[int],
    seq: int,
    policy: str = "strong",
    global_batch: int | None = None,
    seqs_per_gpu: float | None = None,
    fractions: Sequence[float] = (0.9, 0.5),
    progress: Callable[[int, int], None] | None = None,
    **plan_kw: object,
) -> ScaleResult:
    """Best strategy at each accelerator count; knees and regime changes."""
    # whole counts only: int() would truncate 8.5 to 8 without a word
    if not gpus or not all(
        isinstance(g, numbers.Integral) and not isinstance(g, bool) and g >= 1 for g in gpus
    ):
        raise HwtuneInputError("gpus", list(gpus), "positive whole accelerator counts")
    ns = sorted(int(g) for g in gpus)
    if len(set(ns)) != len(ns):
        raise HwtuneInputError("gpus", list(gpus), "each accelerator count once")
    if policy not in ("strong", "weak"):
        raise HwtuneInputError(
            "policy", policy, "strong (fixed global batch) or weak (fixed per-GPU batch)"
        )
    if policy == "strong" and not (isinstance(global_batch, int) and global_batch > 0):
        raise HwtuneInputError("global_batch", global_batch, "a positive integer")
    if policy == "weak":
        spg = seqs_per_gpu
        if not (isinstance(spg, int | float) and math.isfinite(spg) and spg > 0):
            raise HwtuneInputError("seqs_per_gpu", spg, "a positive finite number")
        for n in ns:
            if spg * n != round(spg * n):
                raise HwtuneInputError(
                    "seqs_per_gpu", spg, f"whole sequences at every count ({n} GPUs: {spg * n:g})"
                )
    for f in fractions:
        # 1 would call any step short of exactly linear a knee (rounding included)
        if not (isinstance(f, int | float) and 0 < f < 1):
            raise HwtuneInputError("knees", f, "fractions of linear scaling in (0, 1)")
    if len(set(fractions)) != len(fractions):
        raise HwtuneInputError("knees", list(fractions), "each fraction once")
    # a bad GPU or network option, or a count the nodes do not divide, is an error (not an empty
    # point), found before the first search
    clusters = [cluster_for(n) for n in ns]
    points: list[ScalePoint] = []
    for i, (n, cl) in enumerate(zip(ns, clusters, strict=True)):
        if progress:
            progress(i, len(ns))
        gb = int(global_batch) if policy == "strong" else round(seqs_per_gpu * n)  # type: ignore[arg-type, operator]
        try:
            r = plan(spec, cl, gb, seq, **plan_kw)  # type: ignore[arg-type]
        except NoLayoutError:
            # no layout of n GPUs divides this job (e.g. more data-parallel ranks than sequences)
            points.append(ScalePoint(n, gb, None, None, 0.0))  # type: ignore[arg-type]
            continue
        best = r.top[0] if r.top else None
        points.append(
            ScalePoint(
                n,
                gb,
                r,
                best,
                best.tokens_per_s if best else 0.0,
                shares=_shares(best) if best else {},
            )  # fmt: skip
        )
    valid = [p for p in points if p.best]
    if valid:
        base = valid[0].throughput / valid[0].n_gpus
        for p in points:
            p.efficiency = p.throughput / p.n_gpus / base if base else 0.0
    knees: list[Knee] = []
    if len(valid) >= 2:
        vn = [p.n_gpus for p in valid]
        marg = marginal_fractions(vn, [p.throughput for p in valid])
        for f, n in find_knees(vn, [p.throughput for p in valid], fractions):
            idx = vn.index(n)
            knees.append(
                Knee(
                    "efficiency",
                    int(n),
                    f"marginal throughput per added GPU from {vn[idx - 1]} GPUs "
                    f"{marg[idx]:.0%} of linear, below {f:.0%}",
                    f,
                    saturating_resource(valid[idx - 1], valid[idx]),
                    marg[idx],
                    vn[idx - 1],
                )  # fmt: skip
            )
        for a, b in zip(valid, valid[1:], strict=False):
            ra, rb = a.regime, b.regime
            if ra != rb:
                knees.append(
                    Knee(
                        "regime",
                        b.n_gpus,
                        f"best strategy changes: {ra} -> {rb}",
                        resource=saturating_resource(a, b),
                    )  # fmt: skip
                )
    knees.sort(key=lambda k: (k.n_gpus, k.kind != "efficiency"))  # in the order of the sweep
    return ScaleResult(points, knees, policy)
