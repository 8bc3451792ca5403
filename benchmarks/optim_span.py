"""Update calls and aten ops dispatched per optimizer step, by span (elements per update call):
one chunk (the CPU default) against `GPU_SPAN` (the default on GPUs), for GPT-2 shapes; with
``--time``, also the eager step time of each span on this CPU.

The per-call cost that made per-chunk updates slow on a GPU (about 120 aten ops each, eager: as many kernel launches)
does not depend on the device, so the counts are measured here, on CPU tensors (or on ``meta``
tensors, which dispatch the same ops without computing: seconds for GPT-2 XL).

    python benchmarks/optim_span.py --layers 48 --d-model 1600          # GPT-2 XL counts
    python benchmarks/optim_span.py --device meta --layers 48 --d-model 1600
    python benchmarks/optim_span.py --time --steps 5                    # GPT-2 small, CPU time

Counts are of the second step (the first creates the states). Ops are the aten operators the
dispatcher runs (`TorchDispatchMode`); "compute ops" leaves out views (slices, reshapes), which
launch no kernel.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

import torch
from optim_shapes import parameters
from torch.utils._python_dispatch import TorchDispatchMode

from hwtune.optim import AdamW
from hwtune.optim import optimizer as opt_mod


class OpCounter(TorchDispatchMode):
    """Counts the aten ops dispatched inside it (all, and those that are not views)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.views = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        self.ops[str(func.overloadpacket)] += 1
        self.views += bool(getattr(func, "is_view", False))
        return func(*args, **(kwargs or {}))


def measure(span: int, args: argparse.Namespace) -> dict:
    """Calls and ops of one step with ``span`` elements per call; CPU time per step if asked."""
    ps = parameters(torch.bfloat16, args.layers, d=args.d_model, device=args.device)
    opt = AdamW(ps, lr=1e-3, compile=False, numerics_check_every=0, span_elements=span)
    opt.step()  # creates the states
    calls = 0
    update_span = opt_mod.update_span

    def counted(*a: object) -> None:
        nonlocal calls
        calls += 1
        update_span(*a)

    opt_mod.update_span = counted
    try:
        with OpCounter() as ops:
            opt.step()
    finally:
        opt_mod.update_span = update_span
    total = sum(ops.ops.values())
    row = {
        "span_elements": span,
        "params": sum(p.numel() for p in ps),
        "tensors": len(ps),
        "update_calls": calls,
        "aten_ops": total,
        "compute_ops": total - ops.views,
        "top_ops": dict(ops.ops.most_common(5)),
    }
    if args.time:
        cpu = []
        for _ in range(args.steps):
            t = time.process_time()
            opt.step()
            cpu.append(time.process_time() - t)
        row["cpu_s_best"] = min(cpu)
        row["cpu_s_median"] = sorted(cpu)[len(cpu) // 2]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=12, help="GPT-2 blocks (12: small, 48: XL)")
    ap.add_argument("--d-model", type=int, default=768, help="GPT-2 width (768: small, 1600: XL)")
    ap.add_argument("--device", choices=("cpu", "meta"), default="cpu")
    ap.add_argument(
        "--spans",
        default=f"{opt_mod.CHUNK},{opt_mod.GPU_SPAN}",
        help="comma-separated span_elements to compare (multiples of 65536)",
    )
    ap.add_argument("--time", action="store_true", help="also time eager steps (CPU only)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.time and args.device != "cpu":
        ap.error("--time needs --device cpu")
    torch.set_num_threads(args.threads)
    rows = [measure(int(s), args) for s in args.spans.split(",")]
    print(
        f"# GPT-2 layers={args.layers} d={args.d_model}, AdamW eager, bf16, {args.device}, "
        f"{args.threads} thread(s), torch {torch.__version__}"
    )
    timed = " CPU s/step (best, median) |" if args.time else ""
    print(f"| span_elements | params | tensors | update calls | aten ops | compute ops |{timed}")
    print("|---|---|---|---|---|---|" + ("---|" if args.time else ""))
    for r in rows:
        t = f" {r['cpu_s_best']:.3f}, {r['cpu_s_median']:.3f} |" if args.time else ""
        print(
            f"| {r['span_elements']:,} | {r['params'] / 1e6:.1f} M | {r['tensors']} "
            f"| {r['update_calls']:,} | {r['aten_ops']:,} | {r['compute_ops']:,} |{t}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
