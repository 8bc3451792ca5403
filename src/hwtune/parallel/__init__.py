"""Programmable parallelism: declarative strategies compiled into device plans, simulated as a
compute-communication DAG, and run on torch.distributed (`hwtune.parallel.runtime`, torch only).

    from hwtune.parallel import make_spec, compile_and_simulate
    spec = make_spec(pp=4, global_batch=16, schedule="dualpipev")
    plan, sim = compile_and_simulate("llama3.1-8b", spec, gpu="h100-sxm-80gb")

Everything here but `runtime` imports without torch.
"""

from __future__ import annotations

from hwtune.hardware.cluster import Cluster, make_cluster
from hwtune.model.spec import ModelSpec
from hwtune.parallel.compiler import compile_plan
from hwtune.parallel.ir import Plan
from hwtune.parallel.simulator import SimResult, simulate
from hwtune.parallel.spec import ParallelSpec, from_strategy, load_spec, make_spec, validate
from hwtune.train.strategy import Strategy

__all__ = [
    "ParallelSpec", "Plan", "SimResult", "compile_and_simulate", "compile_plan", "from_strategy",
    "load_spec", "make_spec", "simulate", "validate",
]  # fmt: skip


def compile_and_simulate(
    model: ModelSpec | str,
    spec: ParallelSpec | Strategy,
    cluster: Cluster | None = None,
    gpu: str = "h100-sxm-80gb",
) -> tuple[Plan, SimResult]:
    """Compile ``spec`` (or a `Strategy` preset) for ``model`` on ``cluster`` and simulate it."""
    from hwtune.train.estimator import _resolve_model

    m = _resolve_model(model)
    sp = from_strategy(spec) if isinstance(spec, Strategy) else spec
    cl = cluster or make_cluster(gpu, sp.mesh.world)
    plan = compile_plan(sp, m, cl)
    return plan, simulate(plan)
