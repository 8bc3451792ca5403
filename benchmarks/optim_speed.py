"""Optimizer step time on CPU for GPT-2 small's 124 M parameters: hwtune.optim.AdamW (eager and
``compile=True``) against ``torch.optim.AdamW`` (foreach, fp32 weights = fp32 master), torchao's
``AdamW8bit`` and bitsandbytes' 8-bit ``AdamW``; also the bytes per parameter each keeps (measured
from storage). The figures of BENCHMARKS-optim.md.

    python benchmarks/optim_speed.py                  # 1 thread, CPU time per step
    python benchmarks/optim_speed.py --threads 2 --only torch,ours-compiled

Each optimizer gets fresh parameters with fixed random gradients; warm-up steps (compilation
happens here), then ``--steps`` timed steps: process CPU time (robust on a shared machine) and
wall time, best of the timed steps. Peers that fail to import or run are reported with their error.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import time
import traceback
from pathlib import Path

import torch
from optim_shapes import parameters

from hwtune.optim import AdamW, measure_footprint


def make(name: str):
    """(parameters, optimizer) for one contender."""
    if name == "torch-foreach":
        ps = parameters(torch.float32)
        return ps, torch.optim.AdamW(ps, lr=1e-3, foreach=True)
    if name == "ours-eager":
        ps = parameters(torch.bfloat16)
        return ps, AdamW(ps, lr=1e-3, compile=False, numerics_check_every=0)
    if name == "ours-compiled":
        ps = parameters(torch.bfloat16)
        return ps, AdamW(ps, lr=1e-3, compile=True, numerics_check_every=0)
    if name == "torchao-AdamW8bit":
        from torchao.optim import AdamW8bit

        ps = parameters(torch.float32)
        return ps, AdamW8bit(ps, lr=1e-3)
    if name == "bnb-AdamW8bit":
        import bitsandbytes as bnb

        ps = parameters(torch.float32)
        return ps, bnb.optim.AdamW8bit(ps, lr=1e-3)
    raise ValueError(name)


def bench(name: str, warmup: int, steps: int) -> dict:
    try:
        ps, opt = make(name)
        t0 = time.perf_counter()
        for _ in range(warmup):
            opt.step()
        warm = time.perf_counter() - t0
        cpu, wall = [], []
        for _ in range(steps):
            c, w = time.process_time(), time.perf_counter()
            opt.step()
            cpu.append(time.process_time() - c)
            wall.append(time.perf_counter() - w)
        fp = measure_footprint(ps, opt)
        row = {
            "optimizer": name,
            "params": fp.n_params,
            "cpu_s": min(cpu),
            "wall_s": min(wall),
            "warmup_s": warm,
            "bytes_per_param": fp.bytes_per_param,
        }
    except Exception as err:  # a peer that does not run here: record why
        row = {"optimizer": name, "error": f"{type(err).__name__}: {err}".splitlines()[0]}
        traceback.print_exc()
    gc.collect()
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument(
        "--only",
        default="torch-foreach,ours-eager,ours-compiled,torchao-AdamW8bit,bnb-AdamW8bit",
    )
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rows = [bench(n, args.warmup, args.steps) for n in args.only.split(",")]
    base = next((r for r in rows if r["optimizer"] == "torch-foreach" and "cpu_s" in r), None)
    print(
        f"# {platform.processor() or platform.machine()}, {args.threads} thread(s), torch {torch.__version__}"
    )
    print(
        "| optimizer | params | CPU s/step | wall s/step | vs torch (CPU) | bytes/param | warm-up s |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['optimizer']} | — | — | — | — | — | error: {r['error']} |")
            continue
        ratio = f"{r['cpu_s'] / base['cpu_s']:.2f}x" if base else "—"
        print(
            f"| {r['optimizer']} | {r['params'] / 1e6:.1f} M | {r['cpu_s']:.3f} | {r['wall_s']:.3f} "
            f"| {ratio} | {r['bytes_per_param']:.3f} | {r['warmup_s']:.1f} |"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
