"""Runs Zeus's trace-driven recurring-job simulator on traces written by
`benchmarks/energy_vs_zeus.py`. Runs in a Python that has Zeus (``zeus==0.16.0``), not in
hwtune's environment (hwtune does not depend on Zeus), and imports nothing from hwtune:

    /tmp/zeus-venv/bin/python benchmarks/energy_vs_zeus_runner.py CASES.json OUT.json

CASES.json: ``{"cases": [{"key", "train_csv", "power_csv", "dataset", "network",
"optimizer", "target_metric", "max_epochs", "default_bs", "recurrences", "eta", "beta",
"seeds": [...]}]}``. For each case and seed it builds Zeus's own policies as its NSDI'23
reproduction script does (`PruningGTSBatchSizeOptimizer(seed=seed)`,
`JITPowerLimitOptimizer()`, `Simulator(..., seed=seed)`) and writes each run's history
(batch size, power limit, energy J, time s, reached) to OUT.json.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import warnings

import numpy as np
import pandas as pd
from zeus._legacy.job import Job
from zeus._legacy.policy import JITPowerLimitOptimizer, PruningGTSBatchSizeOptimizer
from zeus._legacy.simulate import Simulator


def run_case(case: dict) -> dict[str, list[list[object]]]:
    train = pd.read_csv(case["train_csv"])
    power = pd.read_csv(case["power_csv"])
    job = Job(
        case["dataset"],
        case["network"],
        case["optimizer"],
        case["target_metric"],
        case["max_epochs"],
        case["default_bs"],
    )
    out: dict[str, list[list[object]]] = {}
    for seed in case["seeds"]:
        bso = PruningGTSBatchSizeOptimizer(seed=seed, verbose=False)
        plo = JITPowerLimitOptimizer(verbose=False)
        sim = Simulator(train, power, bso, plo, seed=seed, verbose=False)
        # the simulator prints one line per early-stopped launch even when not verbose; a
        # zero-variance arm makes numpy warn on 1/var (Zeus then samples the arm's mean)
        with (
            contextlib.redirect_stdout(io.StringIO()),
            warnings.catch_warnings(),
            np.errstate(divide="ignore"),
        ):
            warnings.simplefilter("ignore")
            hist = sim.simulate_one_job(job, case["recurrences"], case["beta"], case["eta"])
        out[str(seed)] = [
            [int(h.bs), int(h.pl), float(h.energy), float(h.time), bool(h.reached)] for h in hist
        ]
    return out


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit("usage: energy_vs_zeus_runner.py CASES.json OUT.json")
    with open(sys.argv[1]) as f:
        cases = json.load(f)["cases"]
    import zeus

    result = {"zeus_version": zeus.__version__, "runs": {}}
    for case in cases:
        result["runs"][case["key"]] = run_case(case)
    with open(sys.argv[2], "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
