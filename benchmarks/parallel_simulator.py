"""Speed of the compiler and the DAG simulator (DESIGN.md: speed is a feature).

    .venv/bin/python benchmarks/parallel_simulator.py

Prints ops, compile and simulate seconds, and ops per second for growing pipelines."""

from __future__ import annotations

import time

from hwtune.hardware.cluster import make_cluster
from hwtune.model.catalog import get_model
from hwtune.parallel.compiler import compile_plan
from hwtune.parallel.simulator import simulate
from hwtune.parallel.spec import make_spec

CASES = [
    ("llama3.1-70b", dict(tp=8, pp=4, dp=4, global_batch=64, schedule="1f1b")),
    (
        "llama3.1-70b",
        dict(tp=8, pp=8, dp=2, global_batch=128, schedule={"name": "interleaved", "vpp": 2}),
    ),
    ("llama3.1-405b", dict(tp=8, pp=16, dp=4, global_batch=256, schedule="zb-h1")),
    ("deepseek-v3", dict(pp=16, dp=32, ep=32, global_batch=1024, schedule="dualpipe")),
]


def main() -> None:
    for model, fields in CASES:
        spec = make_spec(seq=4096, **fields)
        cl = make_cluster("h100-sxm-80gb", spec.mesh.world)
        t0 = time.perf_counter()
        plan = compile_plan(spec, get_model(model), cl)
        t1 = time.perf_counter()
        res = simulate(plan)
        t2 = time.perf_counter()
        name = (
            fields["schedule"]
            if isinstance(fields["schedule"], str)
            else fields["schedule"]["name"]
        )
        print(f"{model:14s} {name:12s} gpus={spec.mesh.world:5d} ops={len(plan.ops):6d} "
              f"compile={t1 - t0:6.3f}s simulate={t2 - t1:6.3f}s ({len(plan.ops) / (t2 - t1):8.0f} ops/s) "
              f"step={res.step_time_s:.3f}s")  # fmt: skip


if __name__ == "__main__":
    main()
