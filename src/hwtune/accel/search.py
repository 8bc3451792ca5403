"""Genetic architecture search (NSGA-II, Deb et al., IEEE TEVC 2002, via pymoo) over core count,
PE array shape, dataflow, buffer sizes and DRAM bandwidth, with layer fusion depth as a
schedule gene; objectives: step latency, step energy and area (or peak DRAM memory); budget
constraints on area and average power. Evaluation runs on local processes.

Genes (integers; MONET, arXiv 2603.15002, searches the same kind of space with a GA):
  cores 1..8 | log2 PE rows 2..7 | log2 PE cols 2..7 | log2 local buffer KiB 4..12 |
  shared SRAM MiB index (0, 0.5, 1, ..., 32) | DRAM GB/s index | dataflow | fusion depth 1..6
Energies, clock, link and area constants come from a template accelerator.
"""

from __future__ import annotations

import math
import multiprocessing as mp
from dataclasses import dataclass

import numpy as np

from hwtune.accel.architecture import Accelerator, CoreType
from hwtune.accel.mapper import map_mac_op
from hwtune.accel.schedule import MAX_FUSION_DEPTH, schedule
from hwtune.accel.training import TrainingGraph
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


@dataclass(frozen=True)
class Budget:
    area_mm2: float | None = None
    power_w: float | None = None

    def __post_init__(self) -> None:
        for name, v in (("area-budget-mm2", self.area_mm2), ("power-budget-w", self.power_w)):
            if v is not None and not (v > 0 and math.isfinite(v)):
                raise HwtuneInputError(name, v, "a positive finite budget")


_STATE: dict = {}


def _init(tg: TrainingGraph, template: Accelerator, third: str, budget: Budget) -> None:
    _STATE.update(tg=tg, template=template, third=third, budget=budget)


def evaluate_genome(x: np.ndarray | list[int]) -> tuple[list[float], list[float]]:
    """(objectives, constraints <= 0) of one genome, in the worker's state."""
    tg, template, third, budget = (
        _STATE["tg"],
        _STATE["template"],
        _STATE["third"],
        _STATE["budget"],
    )
    acc, depth = decode(x, template)
    area = acc.area_mm2()
    try:
        r = schedule(tg, acc, fusion_depth=depth)
    except HwtuneInputError:  # a layer fits no core: infeasible, worst objectives
        return [1e9, 1e9, 1e9], [1e9, 1e9]
    energy = r.total_energy_j
    obj3 = area if third == "area" else r.peak_bytes["dram"]
    g_area = area - budget.area_mm2 if budget.area_mm2 else -1.0
    g_power = energy / r.latency_s - budget.power_w if budget.power_w else -1.0
    return [r.latency_s, energy, obj3], [g_area, g_power]


@dataclass
class SearchResult:
    X: np.ndarray  # Pareto genomes
    F: np.ndarray  # their objectives (latency s, energy J, area mm^2 or DRAM bytes)
    evaluations: int
    seconds: float
    third: str
    all_F: np.ndarray  # every evaluated point (feasible ones)

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
        return out


def search(
    tg: TrainingGraph,
    template: Accelerator,
    evaluations: int = 5000,
    pop_size: int = 100,
    workers: int = 1,
    seed: int = 0,
    third: str = "area",
    budget: Budget | None = None,
) -> SearchResult:
    """NSGA-II over the genes above; ``evaluations`` = population x generations."""
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
    if evaluations < pop_size:
        raise HwtuneInputError("evaluations", evaluations, f"at least the population ({pop_size})")
    if not 0 <= seed < 2**32:  # numpy's seed range; a negative seed raised deep inside pymoo
        raise HwtuneInputError("seed", seed, "an integer in [0, 2**32)")
    check_workers(workers, None)
    budget = budget or Budget()
    seen: list[list[float]] = []
    pool = (
        mp.get_context("fork").Pool(workers, _init, (tg, template, third, budget))
        if workers > 1
        else None
    )
    if pool is None:
        map_mac_op.cache_clear()
        _init(tg, template, third, budget)

    class _P(Problem):
        def __init__(self) -> None:
            super().__init__(n_var=len(XL), n_obj=3, n_ieq_constr=2, xl=XL, xu=XU, vtype=int)

        def _evaluate(self, X: np.ndarray, out: dict, *args: object, **kw: object) -> None:
            rows = [list(map(int, x)) for x in X]
            res = (
                pool.map(evaluate_genome, rows, chunksize=max(1, len(rows) // (4 * workers)))
                if pool
                else [evaluate_genome(r) for r in rows]
            )
            out["F"] = np.array([r[0] for r in res])
            out["G"] = np.array([r[1] for r in res])
            for f, g in res:
                if max(g) <= 0 and f[0] < 1e9:
                    seen.append(f)

    algo = NSGA2(
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
    )
