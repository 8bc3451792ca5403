"""``python -m hwtune.parallel.runtime --spec s.yaml [--device cpu|cuda] [--steps N] [--moe]``:
train the tiny runtime model under a strategy YAML and print the run's JSON (losses, the
single-process reference, their largest difference, per-rank state bytes).

Started plainly, it spawns ``dp*tp*pp*cp`` processes on this machine (as `hwtune compile
--run`). Started by torchrun (``RANK``/``WORLD_SIZE``/``MASTER_ADDR``/``MASTER_PORT`` set), it is
one rank: e.g. on one node with 8 GPUs and a spec of world 8::

    torchrun --standalone --nproc-per-node 8 -m hwtune.parallel.runtime --spec s.yaml --device cuda

and rank 0 prints the JSON.

Exit status (as ``hwtune compile --run``): 0 when the run's losses match the single-process
reference, 1 when they do not (the JSON is printed first, its ``agrees`` false), 2 for bad
input (a missing or invalid spec, a bad option value, a run this machine cannot start), with
one line on stderr and no traceback."""

from __future__ import annotations

import argparse
import json
import os
import sys

from hwtune.errors import HwtuneInputError


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hwtune.parallel.runtime", description=__doc__)
    ap.add_argument("--spec", required=True, help="strategy YAML (as hwtune compile --strategy)")
    ap.add_argument("--device", default="cpu", help="cpu (gloo, default) or cuda (NCCL)")
    ap.add_argument("--steps", type=int, default=3, help="training steps")
    ap.add_argument(
        "--moe", action="store_true", help="the tiny MoE (default: when the spec places experts)"
    )
    ap.error = _one_line  # type: ignore[method-assign]
    args = ap.parse_args(argv)
    from hwtune.parallel.runtime.launch import (
        launch,
        launch_env,
        run_config,
        under_torchrun,
        wants_moe,
    )
    from hwtune.parallel.spec import load_spec

    try:
        if args.steps < 1:
            raise HwtuneInputError("--steps", args.steps, "a positive number of training steps")
        spec = load_spec(args.spec)
        moe = args.moe or wants_moe(spec)
        cfg = run_config(spec, args.steps, moe=moe, device=args.device)
        doc = launch_env(cfg) if under_torchrun(os.environ) else launch(cfg)
    except HwtuneInputError as e:
        return _one_line(str(e), exit=False)
    if doc is None:  # a rank other than 0 under torchrun
        return 0
    sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    if not doc["agrees"]:
        sys.stderr.write(
            f"error: run: losses differ from the single-process run by {doc['max_abs_diff']:.2e}"
            f" (expected within {doc['tolerance']:g} relative)\n"
        )
        return 1
    return 0


def _one_line(message: str, exit: bool = True) -> int:
    """Bad input: ``error: ...`` on stderr, one line, status 2 (argparse's own errors too,
    which would print the usage first)."""
    sys.stderr.write(f"error: {message}\n")
    if exit:
        raise SystemExit(2)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
