"""How faithfully `hwtune serve emulate` serves its simulation, and what a re-simulation costs.

    .venv/bin/python benchmarks/serve_emulate.py [--json out.json]

Llama-3.1-8B on an H100 (tier 1), `serve measure`'s client in the same process (2C warm-up
requests, 10C measured from a burst of C) against the emulated endpoint, at several time
scales (~4.5 min on 2 cores); the simulation of the same closed loop (`simulate_run`) is the
reference. Results: BENCHMARKS.md, "serve emulate".
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import threading
import time

from hwtune.hardware.catalog import get_device
from hwtune.model.catalog import get_model
from hwtune.serve.config import ReplicaConfig
from hwtune.serve.emulator import EMULATOR_SWITCH_INTERVAL_S, EmulatedEngine, EmulatedTiming
from hwtune.serve.endpoint_bench import Endpoint, run_closed_loop
from hwtune.serve.measured_runs import MeasuredRun, simulate_run
from hwtune.serve.mock_server import MockServer

CASES = [
    (8, 512, 64, (1.0, 4.0, 16.0), None),
    (32, 1024, 128, (1.0, 4.0), None),
    (1, 256, 8, (1.0,), 1000),
]
"""(clients, prompt, output, time scales, measured requests or None for 10 C). The last case
is long: one client idles the deployment between requests, so each simulation holds only the
newcomer, and the 1,000th request is served as the first was."""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", help="write the rows here")
    a = ap.parse_args()
    sys.setswitchinterval(EMULATOR_SWITCH_INTERVAL_S)
    cfg = ReplicaConfig(get_model("llama3.1-8b"), get_device("h100-sxm-80gb"))
    rows = []
    for c, i, o, scales, n in CASES:
        sim_ttft, sim_tpot = simulate_run(cfg, MeasuredRun(c, i, o, 1.0, 1.0))
        for scale in scales:
            eng = EmulatedEngine(cfg, time_scale=scale)
            srv = MockServer(timing=EmulatedTiming(eng), model="llama")
            threading.Thread(target=srv.serve_forever, daemon=True).start()
            t = time.perf_counter()
            try:
                res = run_closed_loop(Endpoint(srv.url, "llama"), c, i, o, num_requests=n)
                s = res.summary()
                last = res.records[-100:]  # the end of a long run, where a growing history shows
            finally:
                srv.shutdown()
                srv.server_close()
            row = {"clients": c, "input": i, "output": o, "time_scale": scale,
                   "ttft_ratio": s["ttft_s"]["mean"] / scale / sim_ttft,  # type: ignore[index]
                   "tpot_ratio": s["tpot_s"]["mean"] / scale / sim_tpot,  # type: ignore[index]
                   "ttft_ratio_last_100": sum(r.ttft_s for r in last) / len(last) / scale
                   / sim_ttft,
                   "requests": eng.requests, "simulations": eng.simulations,
                   "ms_per_resimulation": eng.simulation_s / eng.simulations * 1e3,
                   "wall_s": time.perf_counter() - t}  # fmt: skip
            rows.append(row)
            print(f"C={c:3d} {i}/{o} scale {scale:4.0f}: TTFT x{row['ttft_ratio']:.3f}, TPOT "
                  f"x{row['tpot_ratio']:.3f} (last 100 TTFT x{row['ttft_ratio_last_100']:.3f}); "
                  f"{row['requests']} requests, "
                  f"{row['ms_per_resimulation']:.1f} ms per re-simulation, "
                  f"{row['wall_s']:.1f} s", flush=True)  # fmt: skip
    if a.json:
        doc = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, "
                          f"Python {platform.python_version()}", "rows": rows}  # fmt: skip
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=2)


if __name__ == "__main__":
    main()
