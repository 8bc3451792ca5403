"""Idle and full-load power of an NVIDIA GPU read through hwtune's NVML meter, against the power
figures the cost model uses for it (`hwtune.cost.power.device_power_figures`).

    python benchmarks/energy_gemm_nvml.py [--gpu h100] --seconds 6 --json out.json

It reads only (clocks and limits are left as they are): power and energy over an idle window,
then a short burst of bf16 8192^3 GEMMs timed with CUDA events right after it (the chip cool and
under its limit: the rate microbenchmarks see), then a window of the same GEMMs back to back
(the heaviest steady load a training step puts on the chip), with the SM clock and power sampled
every 0.2 s and the rate taken after the first second. Prints idle W, load W, the sustained SM
clock, burst and sustained TFLOP/s and their ratio (the catalog's ``sustained_gemm_fraction``),
joules per TFLOP, and the model's static and full-power figures for the catalog device
(``--gpu``, default: the catalog entry matching the CUDA device name).
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time

import torch

from hwtune.cost.power import device_power_figures
from hwtune.energy.meters import EnergyMonitor
from hwtune.energy.meters.nvml import NvmlDevice
from hwtune.hardware.catalog import get_device


def sample(dev: NvmlDevice, stop: threading.Event, out: list) -> None:
    while not stop.is_set():
        out.append((time.perf_counter(), dev.power_w(), dev.frequency_hz()))
        stop.wait(0.2)


def window(dev: NvmlDevice, seconds: float, work: object = None) -> dict:
    """Energy, power and clocks over ``seconds``: idle (``work`` None) or calling ``work()``."""
    mon = EnergyMonitor(dev)
    samples: list = []
    stop = threading.Event()
    th = threading.Thread(target=sample, args=(dev, stop, samples), daemon=True)
    calls = late_calls = 0
    late_t0 = late_t1 = None
    torch.cuda.synchronize()
    mon.begin("w")
    th.start()
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        if work is None:
            time.sleep(0.05)
        else:
            for _ in range(10):
                work()
            calls += 10
            torch.cuda.synchronize()
            now = time.perf_counter()
            if now - t0 > 1.0:  # after the power limiter has settled the clock
                if late_t0 is None:
                    late_t0 = now
                else:
                    late_calls += 10
                    late_t1 = now  # the last synchronized batch ends the sustained window
    m = mon.end("w")
    stop.set()
    th.join()
    late = [s for s in samples if s[0] - t0 > 1.0] or samples  # after the clocks settle
    late_s = (late_t1 - late_t0) if late_t1 is not None else 0.0
    return {
        "late_calls": late_calls,
        "late_seconds": late_s,
        "seconds": m.time_s,
        "energy_j": m.energy_j,
        "avg_power_w": m.avg_power_w,
        "calls": calls,
        "sampled_power_w_median": statistics.median(s[1] for s in late),
        "sm_clock_mhz_median": statistics.median((s[2] or 0) / 1e6 for s in late),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--gpu", default=None, help="catalog name of this GPU (default: from the CUDA device name)"
    )
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    dev = NvmlDevice(0)
    idle = window(dev, a.seconds / 2)
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(a.n, a.n, device="cuda", generator=g, dtype=torch.bfloat16)
    y = torch.randn(a.n, a.n, device="cuda", generator=g, dtype=torch.bfloat16)
    for _ in range(3):  # cuBLAS heuristics chosen; too short to heat the chip
        torch.mm(x, y)
    torch.cuda.synchronize()
    time.sleep(2.0)  # back under the power limit before the burst
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        torch.mm(x, y)
    end.record()
    torch.cuda.synchronize()
    burst = 5 * 2.0 * a.n**3 / (start.elapsed_time(end) / 1e3) / 1e12
    load = window(dev, a.seconds, lambda: torch.mm(x, y))
    flops = 2.0 * a.n**3 * load["calls"]
    tflops = flops / load["seconds"] / 1e12
    sustained = (
        2.0 * a.n**3 * load["late_calls"] / load["late_seconds"] / 1e12
        if load["late_seconds"] > 0
        else tflops
    )
    cat = get_device(a.gpu or torch.cuda.get_device_name())
    static, dynamic = device_power_figures(cat)
    doc = {
        "gpu": torch.cuda.get_device_name(),
        "power_limit_w": dev.power_limit_w(),
        "idle": idle,
        "load": load,
        "gemm_tflops": tflops,
        "burst_tflops": burst,
        "sustained_tflops": sustained,
        "sustained_gemm_fraction": sustained / burst,
        "joules_per_tflop": load["energy_j"] / (flops / 1e12),
        "model": {
            "catalog": cat.name,
            "static_w": static,
            "full_w": static + dynamic,
            "boost_clock_mhz": cat.boost_clock_mhz,
        },  # fmt: skip
    }
    print(
        f"{doc['gpu']}: bf16 {a.n}^3 GEMMs {burst:.0f} TFLOP/s in a burst, {sustained:.0f} "
        f"sustained: sustained_gemm_fraction {sustained / burst:.3f} (catalog "
        f"{cat.sustained_gemm_fraction})"
    )
    print(
        f"{doc['gpu']}: idle {idle['avg_power_w']:.0f} W; bf16 {a.n}^3 GEMMs {tflops:.0f} TFLOP/s "
        f"at {load['avg_power_w']:.0f} W (SM clock {load['sm_clock_mhz_median']:.0f} MHz, limit "
        f"{doc['power_limit_w']} W), {doc['joules_per_tflop']:.2f} J/TFLOP; model: static "
        f"{static:.0f} W, full {static + dynamic:.0f} W, boost {cat.boost_clock_mhz:.0f} MHz"
    )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
