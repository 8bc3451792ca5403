"""Genetic architecture search (NSGA-II, Deb et al., IEEE TEVC 2002, via pymoo) over core count,
PE array shape, dataflow, buffer sizes and DRAM bandwidth, with layer fusion depth as a
schedule gene; objectives: step latency, step energy and area (or peak DRAM memory); budget
constraints on area and average power. Evaluation runs on local processes.

With an activation limit (``activation_limit_bytes``; `hwtune accel search
--activation-limit-mib`) each architecture's step is costed under the checkpointing plan that
`checkpointing.plan_checkpointing` chooses for that limit with that architecture's forward
times as the recompute cost (`evaluate.checkpointed`, as `hwtune accel evaluate
--activation-limit-mib` does): latency and energy include the recomputation and the memory
objective is the planned step's peak DRAM bytes. A third constraint, (planned activation peak -
limit) / limit <= 0, makes an architecture that no plan fits (not even recomputing everything
recomputable) infeasible. When every saved activation fits the limit nothing is recomputed and
no plan is made (the planner's cheapest fitting plan then drops nothing).

Genes (integers; MONET, arXiv 2603.15002, searches the same kind of space with a GA):
  cores 1..8 | log2 PE rows 2..7 | log2 PE cols 2..7 | log2 local buffer KiB 4..12 |
  shared SRAM MiB index (0, 0.5, 1, ..., 32) | DRAM GB/s index | dataflow | fusion depth 1..6
Energies, clock, link and area constants come from a template accelerator.
"""

from __future__ import annotations

import math
import multiprocessing as mp
from dataclasses import dataclass, field

import numpy as np

from hwtune.accel.architecture import Accelerator, CoreType
from hwtune.accel.evaluate import checkpointed
from hwtune.accel.mapper import map_mac_op
from hwtune.accel.schedule import MAX_FUSION_DEPTH, schedule
from hwtune.accel.training import TrainingGraph, saved_roots
from hwtune.errors import HwtuneInputError
from hwtune.workers import check_workers

SHARED_MIB = (0, 0.5, 1, 2, 4, 8, 16, 32)
DRAM_GBPS = (4, 8, 16, 25.6, 51.2, 102.4)
DATAFLOWS = {
    "weight-stationary": (("C", "K"),),
    "output-stationary": (("K", "N"),),
    "row-stationary": (("R", "N"), ("C", "N"), ("K", "N")),
}
DATAFLOW_NAMES = tuple(DATAFLOWS)
#        cores rows cols buf  shared dram flow fuse
XL = np.array([1, 2, 2, 4, 0, 0, 0, 1])
XU = np.array([8, 7, 7, 12, len(SHARED_MIB) - 1, len(DRAM_GBPS) - 1, len(DATAFLOWS) - 1,
               MAX_FUSION_DEPTH])  # fmt: skip
GENES = (
    "cores",
    "log2_pe_rows",
    "log2_pe_cols",
    "log2_local_kib",
    "shared_idx",
    "dram_idx",
    "dataflow",
    "fusion_depth",
)


def decode(x: np.ndarray | list[int], template: Accelerator) -> tuple[Accelerator, int]:
    """(accelerator, fusion depth) of a genome."""
    x = [int(round(v)) for v in x]
    base = template.cores[0]
    core = CoreType(
        name="core",
        count=x[0],
        pe_rows=2 ** x[1],
        pe_cols=2 ** x[2],
        spatial=DATAFLOWS[DATAFLOW_NAMES[x[6]]],
        simd_lanes=base.simd_lanes,
        local_buffer_kib=float(2 ** x[3]),
        local_bandwidth_bytes_per_cycle=base.local_bandwidth_bytes_per_cycle,
        mac_energy_pj=base.mac_energy_pj,
        vector_op_energy_pj=base.vector_op_energy_pj,
        local_access_pj_per_byte=base.local_access_pj_per_byte,
    )
    shared = template.shared_memory.model_copy(update={"size_mib": SHARED_MIB[x[4]]})
    dram = template.dram.model_copy(update={"bandwidth_gbps": DRAM_GBPS[x[5]]})
    acc = template.model_copy(
        update={"name": "candidate", "cores": (core,), "shared_memory": shared, "dram": dram}
    )
    acc.__dict__.pop("core_list", None)
    return acc, x[7]


def smallest_area_mm2(template: Accelerator) -> float:
    """The least area of any architecture in the search space: every gene at its lower bound
    (area grows with each gene but the dataflow and fusion depth, which do not change it)."""
    return decode(XL, template)[0].area_mm2()


@dataclass(frozen=True)
class Budget:
    area_mm2: float | None = None
    power_w: float | None = None

    def __post_init__(self) -> None:
        for name, v in (("area-budget-mm2", self.area_mm2), ("power-budget-w", self.power_w)):
            if v is not None and not (v > 0 and math.isfinite(v)):
                raise HwtuneInputError(name, v, "a positive finite budget")


@dataclass(frozen=True)
class Checkpointing:
    """Plan activation checkpointing for every evaluated architecture: the limit on activation
    memory (bytes) and the planner's method (auto | chain | greedy, as `plan_checkpointing`)."""

    limit_bytes: float
    method: str = "auto"

    def __post_init__(self) -> None:
        if not (self.limit_bytes > 0 and math.isfinite(self.limit_bytes)):
            raise HwtuneInputError(
                "activation_limit_bytes", self.limit_bytes, "a positive finite number of bytes"
            )
        if self.method not in ("auto", "chain", "greedy"):
            raise HwtuneInputError("checkpoint-method", self.method, "auto, chain or greedy")


_STATE: dict = {}


def _init(
    tg: TrainingGraph,
    template: Accelerator,
    third: str,
    budget: Budget,
    ckpt: Checkpointing | None = None,
) -> None:
    all_kept = sum(tg.tensors[r].nbytes for r in saved_roots(tg.graph)) if ckpt else 0
    _STATE.update(tg=tg, template=template, third=third, budget=budget, ckpt=ckpt,
                  all_kept=all_kept)  # fmt: skip


def evaluate_genome(x: np.ndarray | list[int]) -> tuple[list[float], list[float]]:
    """(objectives, constraints <= 0) of one genome, in the worker's state."""
    f, g, _ = evaluate_genome_plan(x)
    return f, g


def evaluate_genome_plan(
    x: np.ndarray | list[int],
) -> tuple[list[float], list[float], dict | None]:
    """(objectives, constraints <= 0, checkpointing summary or None) of one genome, in the
    worker's state. The summary (with an activation limit; None without one or where a layer
    fits no core): planned activation peak, kept activation bytes, recomputed tensors and
    MACs, and whether the plan meets the limit."""
    tg, template, third, budget = (
        _STATE["tg"],
        _STATE["template"],
        _STATE["third"],
        _STATE["budget"],
    )
    ckpt: Checkpointing | None = _STATE.get("ckpt")
    acc, depth = decode(x, template)
    area = acc.area_mm2()
    try:
        r = schedule(tg, acc, fusion_depth=depth)
    except HwtuneInputError:  # a layer fits no core: infeasible, worst objectives
        return [1e9, 1e9, 1e9], [1e9] * (3 if ckpt else 2), None
    info = None
    if ckpt is not None:
        all_kept = _STATE["all_kept"]
        if all_kept <= ckpt.limit_bytes:  # everything kept fits: nothing to recompute
            info = {"activation_peak_bytes": float(all_kept), "kept_bytes": all_kept,
                    "recomputed": 0, "recompute_macs": 0, "limit_met": True}  # fmt: skip
        else:
            ev = checkpointed(tg, acc, depth, r, ckpt.limit_bytes, ckpt.method)
            assert ev.plan is not None
            r, p = ev.result, ev.plan
            info = {"activation_peak_bytes": p.predicted_peak_bytes, "kept_bytes": p.kept_bytes,
                    "recomputed": len(p.dropped), "recompute_macs": r.recompute_macs,
                    "limit_met": p.feasible}  # fmt: skip
    energy = r.total_energy_j
    obj3 = area if third == "area" else r.peak_bytes["dram"]
    g_area = area - budget.area_mm2 if budget.area_mm2 else -1.0
    g_power = energy / r.latency_s - budget.power_w if budget.power_w else -1.0
    g = [g_area, g_power]
    if ckpt is not None:
        assert info is not None
        g.append((info["activation_peak_bytes"] - ckpt.limit_bytes) / ckpt.limit_bytes)
    return [r.latency_s, energy, obj3], g, info


@dataclass
class SearchResult:
    X: np.ndarray  # Pareto genomes
    F: np.ndarray  # their objectives (latency s, energy J, area mm^2 or DRAM bytes)
    evaluations: int
    seconds: float
    third: str
    all_F: np.ndarray  # every evaluated point (feasible ones)
    checkpointing: Checkpointing | None = None
    # with checkpointing: each feasible genome's plan summary (`evaluate_genome_plan`)
    plans: dict[tuple[int, ...], dict] = field(default_factory=dict)
    infeasible: int = 0  # evaluations that violate a constraint or fit no core
    over_limit: int = 0  # of those, the ones no checkpointing plan fits
    met_limit: int = 0  # evaluations a plan fits (whether or not they meet the budgets)
    smallest_activation_bytes: float | None = None  # least planned peak of those over it

    def rows(self, template: Accelerator) -> list[dict]:
        out = []
        for x, f in sorted(
            zip(self.X.tolist(), self.F.tolist(), strict=True), key=lambda t: t[1][0]
        ):
            acc, depth = decode(x, template)
            c = acc.cores[0]
            out.append({
                "cores": c.count, "pe_rows": c.pe_rows, "pe_cols": c.pe_cols,
                "dataflow": DATAFLOW_NAMES[int(round(x[6]))], "local_kib": c.local_buffer_kib,
                "shared_mib": acc.shared_memory.size_mib, "dram_gbps": acc.dram.bandwidth_gbps,
                "fusion_depth": depth, "latency_s": f[0], "energy_j": f[1], self.third: f[2],
                "area_mm2": acc.area_mm2(),
            })  # fmt: skip
            if self.checkpointing is not None:
                info = self.plans[tuple(int(round(v)) for v in x)]
                out[-1].update(
                    activation_limit_bytes=self.checkpointing.limit_bytes,
                    **{k: v for k, v in info.items() if k != "limit_met"},
                )
        return out


MAX_EVALUATIONS = 1_000_000
"""The most genomes a search evaluates: a million, 200 times the default (about 7 ms each on
a 2-core machine, so about two hours); a typo such as 1e20 is refused instead of running for
ever."""


def search(
    tg: TrainingGraph,
    template: Accelerator,
    evaluations: int = 5000,
    pop_size: int = 100,
    workers: int = 1,
    seed: int = 0,
    third: str = "area",
    budget: Budget | None = None,
    checkpointing: Checkpointing | None = None,
) -> SearchResult:
    """NSGA-II over the genes above; exactly ``evaluations`` genomes are evaluated (population
    x generations; the last generation is cut short when it does not divide). With
    ``checkpointing`` every architecture's step is planned to its activation limit (module
    docstring) and a third constraint holds the planned activation peak to that limit."""
    import time

    from pymoo.algorithms.moo.nsga2 import NSGA2
    from pymoo.core.problem import Problem
    from pymoo.operators.crossover.sbx import SBX
    from pymoo.operators.mutation.pm import PM
    from pymoo.operators.repair.rounding import RoundingRepair
    from pymoo.operators.sampling.rnd import IntegerRandomSampling
    from pymoo.optimize import minimize

    if third not in ("area", "memory"):
        raise HwtuneInputError("objective", third, "area or memory")
    if pop_size < 4:
        raise HwtuneInputError("pop-size", pop_size, "a population of at least 4")
    if not pop_size <= evaluations <= MAX_EVALUATIONS:
        raise HwtuneInputError("evaluations", evaluations, f"from the population ({pop_size}) "
                               f"to {MAX_EVALUATIONS:,}")  # fmt: skip
    if not 0 <= seed < 2**32:  # numpy's seed range; a negative seed raised deep inside pymoo
        raise HwtuneInputError("seed", seed, "an integer in [0, 2**32)")
    check_workers(workers, None)
    if checkpointing is not None and tg.dropped:
        raise HwtuneInputError("dropped", sorted(tg.dropped)[0], "a training graph lowered "
                               "with every activation kept (the search plans what to drop)")  # fmt: skip
    budget = budget or Budget()
    least = smallest_area_mm2(template)
    if budget.area_mm2 is not None and budget.area_mm2 < least:  # no genome can meet it
        up = math.ceil(least * 1000) / 1000
        raise HwtuneInputError("area-budget-mm2", budget.area_mm2, f"at least {up:g} mm2, the "
                               "smallest area in the search space (every gene at its lower "
                               f"bound, with {template.name}'s area model)")  # fmt: skip
    seen: list[list[float]] = []
    plans: dict[tuple[int, ...], dict] = {}
    tally = {"infeasible": 0, "over_limit": 0, "met_limit": 0}
    smallest: list[float] = []
    args = (tg, template, third, budget, checkpointing)
    pool = mp.get_context("fork").Pool(workers, _init, args) if workers > 1 else None
    if pool is None:
        map_mac_op.cache_clear()
        _init(*args)
    n_constr = 2 if checkpointing is None else 3

    class _P(Problem):
        def __init__(self) -> None:
            super().__init__(n_var=len(XL), n_obj=3, n_ieq_constr=n_constr, xl=XL, xu=XU, vtype=int)

        def _evaluate(self, X: np.ndarray, out: dict, *args: object, **kw: object) -> None:
            rows = [list(map(int, x)) for x in X]
            res = (
                pool.map(evaluate_genome_plan, rows, chunksize=max(1, len(rows) // (4 * workers)))
                if pool
                else [evaluate_genome_plan(r) for r in rows]
            )
            out["F"] = np.array([r[0] for r in res])
            out["G"] = np.array([r[1] for r in res])
            for x, (f, g, info) in zip(rows, res, strict=True):
                if info is not None and info["limit_met"]:
                    tally["met_limit"] += 1
                if max(g) <= 0 and f[0] < 1e9:
                    seen.append(f)
                    if info is not None:
                        plans[tuple(x)] = info
                else:
                    tally["infeasible"] += 1
                    if info is not None and not info["limit_met"]:
                        tally["over_limit"] += 1
                        smallest.append(info["activation_peak_bytes"])

    class _Budgeted(NSGA2):
        """NSGA-II that stops at ``evaluations`` exactly: a generation that would pass it is cut
        to the evaluations left (pymoo's n_evals termination is checked per generation)."""

        def _infill(self):  # noqa: ANN202
            off = super()._infill()
            left = evaluations - self.evaluator.n_eval
            return off if off is None or len(off) <= left else off[:left]

    algo = _Budgeted(
        pop_size=pop_size,
        sampling=IntegerRandomSampling(),
        crossover=SBX(prob=0.9, eta=15, vtype=float, repair=RoundingRepair()),
        mutation=PM(eta=20, vtype=float, repair=RoundingRepair()),
        eliminate_duplicates=True,
    )
    t0 = time.perf_counter()
    try:
        res = minimize(_P(), algo, ("n_evals", evaluations), seed=seed, verbose=False)
    finally:
        if pool is not None:
            pool.close()
            pool.join()
    dt = time.perf_counter() - t0
    if res.X is None:
        X, F = np.zeros((0, len(XL))), np.zeros((0, 3))
    else:
        X, F = np.atleast_2d(res.X), np.atleast_2d(res.F)
    return SearchResult(
        X,
        F,
        int(res.algorithm.evaluator.n_eval),
        dt,
        third,
        np.array(seen) if seen else np.zeros((0, 3)),
        checkpointing,
        plans,
        tally["infeasible"],
        tally["over_limit"],
        tally["met_limit"],
        min(smallest) if smallest else None,
    )
