"""Idle and full-load power of an NVIDIA GPU read through hwtune's NVML meter, against the power
figures the cost model uses for it (`hwtune.cost.power.device_power_figures`).

    python benchmarks/energy_gemm_nvml.py --gpu h200 --seconds 6 --json out.json

It reads only (clocks and limits are left as they are): power and energy over an idle window,
then over a window of back-to-back bf16 GEMMs of 8192^3 (the heaviest steady load a training
step puts on the chip), with the SM clock and power sampled every 0.2 s. Prints idle W, load W,
the sustained SM clock, TFLOP/s, joules per TFLOP, and the model's static and full-power
figures for the catalog device.
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
    calls = 0
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
    m = mon.end("w")
    stop.set()
    th.join()
    late = [s for s in samples if s[0] - t0 > 1.0] or samples  # after the clocks settle
    return {
        "seconds": m.time_s,
        "energy_j": m.energy_j,
        "avg_power_w": m.avg_power_w,
        "calls": calls,
        "sampled_power_w_median": statistics.median(s[1] for s in late),
        "sm_clock_mhz_median": statistics.median((s[2] or 0) / 1e6 for s in late),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpu", default="h200", help="catalog name of this GPU (model figures)")
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    dev = NvmlDevice(0)
    idle = window(dev, a.seconds / 2)
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(a.n, a.n, device="cuda", generator=g, dtype=torch.bfloat16)
    y = torch.randn(a.n, a.n, device="cuda", generator=g, dtype=torch.bfloat16)
    for _ in range(20):  # warm-up: clocks up, cuBLAS heuristics chosen
        torch.mm(x, y)
    load = window(dev, a.seconds, lambda: torch.mm(x, y))
    flops = 2.0 * a.n**3 * load["calls"]
    tflops = flops / load["seconds"] / 1e12
    cat = get_device(a.gpu)
    static, dynamic = device_power_figures(cat)
    doc = {
        "gpu": torch.cuda.get_device_name(),
        "power_limit_w": dev.power_limit_w(),
        "idle": idle,
        "load": load,
        "gemm_tflops": tflops,
        "joules_per_tflop": load["energy_j"] / (flops / 1e12),
        "model": {
            "catalog": cat.name,
            "static_w": static,
            "full_w": static + dynamic,
            "boost_clock_mhz": cat.boost_clock_mhz,
        },  # fmt: skip
    }
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
