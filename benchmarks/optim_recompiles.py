"""Graphs that ``torch.compile`` builds for the compact optimizer's update, step by step: after
the first steps there should be none, also when the learning rate follows a schedule. Run it
under the torch version in question; with ``TORCH_LOGS=recompiles`` dynamo prints why it
compiles again.

    python benchmarks/optim_recompiles.py                         # GPU spans and buckets, CPU
    TORCH_LOGS=recompiles python benchmarks/optim_recompiles.py --layers 2 --d-model 256

GPU spans (`GPU_SPAN` elements per call, with buckets of small parameters) are forced on the CPU
by default, so the GPU's call pattern is checked on a machine without one.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch._dynamo.utils as dynamo_utils
from optim_shapes import parameters

from hwtune.optim import AdamW
from hwtune.optim.optimizer import GPU_SPAN


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=2, help="GPT-2 blocks")
    ap.add_argument("--d-model", type=int, default=256, help="GPT-2 width")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--span-elements", type=int, default=GPU_SPAN)
    ap.add_argument("--lr-decay", type=float, default=0.95, help="lr factor per step (schedule)")
    args = ap.parse_args()
    ps = parameters(torch.bfloat16, args.layers, d=args.d_model, device="cpu")
    opt = AdamW(ps, lr=1e-3, compile=True, numerics_check_every=0, span_elements=args.span_elements)
    gen = torch.Generator().manual_seed(0)
    for p in ps:
        p.grad = (torch.randn(p.shape, generator=gen) * 1e-3).to(p.dtype)
    print(f"# torch {torch.__version__}, {len(ps)} tensors, span {args.span_elements}")
    print("| step | s | graphs so far |")
    print("|---|---|---|")
    for i in range(args.steps):
        t = time.perf_counter()
        opt.step()
        graphs = dynamo_utils.counters["stats"]["unique_graphs"]
        print(f"| {i + 1} | {time.perf_counter() - t:.2f} | {graphs} |", flush=True)
        for group in opt.param_groups:
            group["lr"] *= args.lr_decay


if __name__ == "__main__":
    main()
