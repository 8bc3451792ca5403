"""Bytes per parameter measured from the tensors' storage, and checkpoint size, for hwtune.optim's
AdamW, SGD and Lion (with and without gradient release) against torch.optim.AdamW; the figures of
BENCHMARKS.md. Issue 5 targets: AdamW <= 7.1 (<= 5.1 with release), SGD and Lion <= 6.1
(<= 4.1); checkpoint <= 45% of torch.optim.AdamW's.

    python benchmarks/optim_footprint.py              # GPT-2 small shapes, 124 M parameters
    python benchmarks/optim_footprint.py --layers 2   # quicker

Per optimizer: GPT-2-shaped bf16 parameters with bf16 gradients (fp32 for torch.optim.AdamW), one
step so that every state exists, then `hwtune.optim.measure_footprint` (weights + gradients +
states, each storage counted once). Gradient release rows run a real backward (a loss whose
gradients are the fixed ones) in which the hooks update and free each gradient. Checkpoint:
``torch.save({"model": params.state_dict(), "optim": opt.state_dict()})`` to memory, in bytes.
"""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import torch
from optim_shapes import parameters

from hwtune.optim import SGD, AdamW, Lion, measure_footprint

CONTENDERS = {
    "torch.optim.AdamW (fp32)": (lambda ps, **kw: torch.optim.AdamW(ps), torch.float32, False),
    "AdamW": (lambda ps, **kw: AdamW(ps, compile=False, **kw), torch.bfloat16, False),
    "AdamW, gradient release": (
        lambda ps, **kw: AdamW(ps, compile=False, **kw),
        torch.bfloat16,
        True,
    ),
    "AdamW, group_size=64": (
        lambda ps, **kw: AdamW(ps, compile=False, group_size=64, **kw),
        torch.bfloat16,
        False,
    ),
    "AdamW, master_weight_bits=32": (
        lambda ps, **kw: AdamW(ps, compile=False, master_weight_bits=32, **kw),
        torch.bfloat16,
        False,
    ),
    "SGD (momentum)": (
        lambda ps, **kw: SGD(ps, momentum=0.9, compile=False, **kw),
        torch.bfloat16,
        False,
    ),
    "SGD, gradient release": (
        lambda ps, **kw: SGD(ps, momentum=0.9, compile=False, **kw),
        torch.bfloat16,
        True,
    ),
    "Lion": (lambda ps, **kw: Lion(ps, compile=False, **kw), torch.bfloat16, False),
    "Lion, gradient release": (
        lambda ps, **kw: Lion(ps, compile=False, **kw),
        torch.bfloat16,
        True,
    ),
}


def measure(name: str, layers: int) -> dict:
    make, dtype, release = CONTENDERS[name]
    ps = parameters(dtype, layers)
    if release:
        grads = [p.grad for p in ps]
        for p in ps:
            p.grad = None
        opt = make(ps, gradient_release=True)
        # a backward whose gradients are the fixed ones: the hooks update and free them
        sum((p * g).float().sum() for p, g in zip(ps, grads, strict=True)).backward()
        del grads
    else:
        opt = make(ps)
    opt.step()
    fp = measure_footprint(ps, opt)
    buf = io.BytesIO()
    torch.save({"model": ps.state_dict(), "optim": opt.state_dict()}, buf)
    return {
        "optimizer": name,
        "params": fp.n_params,
        "weights": fp.weight_bytes / fp.n_params,
        "grads": fp.grad_bytes / fp.n_params,
        "states": fp.state_bytes / fp.n_params,
        "total": fp.bytes_per_param,
        "checkpoint_bytes": len(buf.getvalue()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(1)
    rows = [measure(name, args.layers) for name in CONTENDERS]
    base = rows[0]["checkpoint_bytes"]
    print(f"# GPT-2 small shapes, {args.layers} layers, {rows[0]['params'] / 1e6:.1f} M parameters")
    print("| optimizer | weights | grads | states | **total B/param** | checkpoint | vs torch |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['optimizer']} | {r['weights']:.3f} | {r['grads']:.3f} | {r['states']:.3f} | "
            f"**{r['total']:.3f}** | {r['checkpoint_bytes'] / 2**20:.0f} MiB | "
            f"{r['checkpoint_bytes'] / base:.1%} |"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
