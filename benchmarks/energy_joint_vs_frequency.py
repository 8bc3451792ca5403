"""Time to target of joint batch-size x GPU-clock tuning vs frequency-only throttling under a
power cap, on the Jetson Orin edge profiles — SIMULATED from the profiles (see
BENCHMARKS-energy.md for which inputs are measurements and which are assumptions).

    .venv/bin/python benchmarks/energy_joint_vs_frequency.py            # tables to stdout
    .venv/bin/python benchmarks/energy_joint_vs_frequency.py --quick    # AGX Orin only

Per cap and scenario (noise scale B_noise, the user's batch B0):
- frequency-only: B0 kept, the highest clock whose power fits (what DVFS capping does);
- batch-only: the clock frequency-only chose, the best batch at that clock;
- joint: the best (batch, clock) under the cap (`co_optimize` on the true models);
- online: the `OnlineTuner` on the simulated device (2% step-time noise), its final point and
  the simulated seconds it spent profiling.
"""

from __future__ import annotations

import argparse
import statistics
import time

from hwtune.energy.convergence import CriticalBatch
from hwtune.energy.cooptimizer import co_optimize, evaluate, power_of_two_batches
from hwtune.energy.meters.simulated import SimulatedDevice
from hwtune.energy.profiles import get_profile
from hwtune.energy.tuner import OnlineTuner
from hwtune.energy.workloads import HOST_S, edge_step_model

BATCHES = power_of_two_batches(1, 256)
SCENARIOS = [(8.0, 64), (32.0, 64), (32.0, 256), (128.0, 256), (512.0, 256)]
CAPS = {
    "jetson-agx-orin-64gb": [15.0, 20.0, 25.0, 30.0, 40.0],
    "jetson-orin-nx-16gb": [9.0, 10.0, 12.0, 15.0],
    "jetson-orin-nano-8gb": [7.0, 8.0, 10.0],
}


def run_online(step, power, table, cap, b0, conv, seed=0):
    sim = SimulatedDevice(step, power, table, seed=seed, time_noise=0.02)
    tuner = OnlineTuner(sim, cap, BATCHES, base_batch=b0, convergence=conv, control_interval_s=2.0)
    t_profile = None
    for _ in range(400):
        plan = tuner.step_begin()
        sim.run_step(plan.batch_size)
        tuner.step_end()
        if t_profile is None and tuner.phase == "run":
            t_profile = sim.now_s()
    run_ = worst = 0
    for iv in tuner.history:
        run_ = run_ + 1 if iv.over_cap else 0
        worst = max(worst, run_)
    return tuner.batch_size, tuner.frequency_hz, t_profile or float("nan"), worst, tuner


def table_for(profile_name, caps):
    prof = get_profile(profile_name)
    step = edge_step_model(prof)
    power = prof.default_power_model()
    table = prof.frequencies_hz
    print(f"\n### {prof.name} (GPT-2 124M, seq 256, bf16; host {HOST_S[0] * 1e3:.0f} ms + "
          f"{HOST_S[1] * 1e3:.1f} ms/sample)\n")  # fmt: skip
    print(
        "| cap W | B_noise | B0 | frequency-only (B0, MHz) | batch-only | joint (B, MHz, W) "
        "| joint speedup | energy ratio | online (B, MHz) | online / joint | profiling s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    speedups, worst_runs = [], []
    for cap in caps:
        for b_noise, b0 in SCENARIOS:
            conv = CriticalBatch(b_noise, 1.0)
            try:
                res = co_optimize(step, power, conv, BATCHES, table, cap, user_batch=b0)
            except ValueError as e:
                print(f"| {cap:g} | {b_noise:g} | {b0} | infeasible: {e} |")
                continue
            fo = res.frequency_only
            if fo is None:
                print(f"| {cap:g} | {b_noise:g} | {b0} | B0 fits at no clock | | "
                      f"{res.best.batch}, {res.best.frequency_hz / 1e6:.0f}, {res.best.power_w:.1f} | | | | | |")  # fmt: skip
                continue
            bo = min(
                (evaluate(b, fo.frequency_hz, step, power, conv, cap) for b in BATCHES),
                key=lambda p: p.time_to_target_s if p.feasible else float("inf"),
            )
            ob, of, t_prof, worst, _ = run_online(step, power, table, cap, b0, conv)
            worst_runs.append(worst)
            on = evaluate(ob, of, step, power, conv, cap)
            speedups.append(res.speedup)
            print(
                f"| {cap:g} | {b_noise:g} | {b0} | {fo.frequency_hz / 1e6:.0f} "
                f"| {fo.time_to_target_s / bo.time_to_target_s:.2f}x (B={bo.batch}) "
                f"| {res.best.batch}, {res.best.frequency_hz / 1e6:.0f}, {res.best.power_w:.1f} "
                f"| **{res.speedup:.2f}x** | {res.energy_ratio:.2f}x "
                f"| {ob}, {of / 1e6:.0f}{'' if on.feasible else ' (over cap!)'} "
                f"| {on.time_to_target_s / res.best.time_to_target_s:.3f} | {t_prof:.0f} |"
            )
    if worst_runs:
        print(f"\nonline tuner: longest run of control intervals over the cap = {max(worst_runs)}")
    if speedups:
        print(f"\njoint vs frequency-only: min {min(speedups):.2f}x, median "
              f"{statistics.median(speedups):.2f}x, max {max(speedups):.2f}x over {len(speedups)} cases")  # fmt: skip


def speed():
    prof = get_profile("jetson-agx-orin-64gb")
    step, power = edge_step_model(prof), prof.default_power_model()
    conv = CriticalBatch(32.0, 1.0)
    n = 200
    t0 = time.perf_counter()
    for _ in range(n):
        co_optimize(step, power, conv, BATCHES, prof.frequencies_hz, 20.0, user_batch=64)
    dt = (time.perf_counter() - t0) / n
    pts = len(BATCHES) * len(prof.frequencies_hz)
    print(f"\nco_optimize: {dt * 1e3:.2f} ms per call ({pts} (batch, clock) points, "
          f"{pts / dt:,.0f} points/s)")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    for name, caps in CAPS.items():
        table_for(name, caps)
        if args.quick:
            break
    speed()


if __name__ == "__main__":
    main()
