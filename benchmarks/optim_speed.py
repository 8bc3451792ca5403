"""Optimizer step time for GPT-2 small's 124 M parameters on CPU (or other GPT-2 shapes, or a GPU):
hwtune.optim.AdamW (eager and ``compile=True``) against ``torch.optim.AdamW`` (foreach, fp32
weights = fp32 master), torchao's ``AdamW8bit`` and bitsandbytes' 8-bit ``AdamW``; also the bytes
per parameter each keeps (measured from storage). The figures of BENCHMARKS.md.

    python benchmarks/optim_speed.py                  # 1 thread, CPU time per step
    python benchmarks/optim_speed.py --threads 2 --only torch,ours-compiled
    python benchmarks/optim_speed.py --device cuda --layers 48 --d-model 1600   # GPT-2 XL, GPU
    python benchmarks/optim_speed.py --only ours-eager --span-elements 16777216  # GPU span on CPU

On a GPU the steps are timed by wall clock with the device synchronized around each, and
``torch-fused`` (``torch.optim.AdamW(fused=True)``, the fastest stock PyTorch AdamW there) joins.

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
from optim_shapes import parameters as _parameters

from hwtune.optim import AdamW, measure_footprint

DEVICE = "cpu"
SHAPE = {"layers": 12, "d": 768}
#: ``span_elements`` of our optimizers (None: the device's default)
OURS: dict = {"span_elements": None}


def parameters(dtype: torch.dtype):
    """The benchmark's GPT-2-shaped parameters on ``DEVICE`` with gradients (seeded)."""
    return _parameters(dtype, SHAPE["layers"], d=SHAPE["d"], device=DEVICE)


def sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def make(name: str):
    """(parameters, optimizer) for one contender."""
    if name == "torch-fused":
        ps = parameters(torch.float32)
        return ps, torch.optim.AdamW(ps, lr=1e-3, fused=True)
    if name == "torch-foreach":
        ps = parameters(torch.float32)
        return ps, torch.optim.AdamW(ps, lr=1e-3, foreach=True)
    if name == "ours-eager":
        ps = parameters(torch.bfloat16)
        return ps, AdamW(ps, lr=1e-3, compile=False, numerics_check_every=0, **OURS)
    if name == "ours-compiled":
        ps = parameters(torch.bfloat16)
        return ps, AdamW(ps, lr=1e-3, compile=True, numerics_check_every=0, **OURS)
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
        sync()
        warm = time.perf_counter() - t0
        cpu, wall = [], []
        for _ in range(steps):
            c, w = time.process_time(), time.perf_counter()
            opt.step()
            sync()
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
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--layers", type=int, default=12, help="GPT-2 blocks (12: small, 48: XL)")
    ap.add_argument("--d-model", type=int, default=768, help="GPT-2 width (768: small, 1600: XL)")
    ap.add_argument(
        "--span-elements",
        type=int,
        default=None,
        help="elements per update call of ours (a multiple of 65536; default: the device's)",
    )
    args = ap.parse_args()
    global DEVICE
    DEVICE = args.device
    OURS["span_elements"] = args.span_elements
    SHAPE.update(layers=args.layers, d=args.d_model)
    torch.set_num_threads(args.threads)
    rows = [bench(n, args.warmup, args.steps) for n in args.only.split(",")]
    gpu = DEVICE == "cuda"
    key = "wall_s" if gpu else "cpu_s"
    base_name = "torch-fused" if gpu and "torch-fused" in args.only else "torch-foreach"
    base = next((r for r in rows if r["optimizer"] == base_name and key in r), None)
    where = torch.cuda.get_device_name() if gpu else platform.processor() or platform.machine()
    span = f", span_elements={args.span_elements}" if args.span_elements else ""
    print(f"# {where}, {args.threads} thread(s), torch {torch.__version__}{span}")
    print(
        f"| optimizer | params | CPU s/step | wall s/step | vs {base_name} ({'wall' if gpu else 'CPU'}) "
        "| bytes/param | warm-up s |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['optimizer']} | — | — | — | — | — | error: {r['error']} |")
            continue
        ratio = f"{r[key] / base[key]:.2f}x" if base else "—"
        print(
            f"| {r['optimizer']} | {r['params'] / 1e6:.1f} M | {r['cpu_s']:.3f} | {r['wall_s']:.3f} "
            f"| {ratio} | {r['bytes_per_param']:.3f} | {r['warmup_s']:.1f} |"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
