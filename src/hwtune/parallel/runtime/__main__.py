"""``python -m hwtune.parallel.runtime --spec s.yaml [--device cpu|cuda] [--steps N] [--moe]``:
train the tiny runtime model under a strategy YAML and print the run's JSON (losses, the
single-process reference, their largest difference, per-rank state bytes).

Started plainly, it spawns ``dp*tp*pp*cp`` processes on this machine (as `hwtune compile
--run`). Started by torchrun (``RANK``/``WORLD_SIZE``/``MASTER_ADDR``/``MASTER_PORT`` set), it is
one rank: e.g. on one node with 8 GPUs and a spec of world 8::

    torchrun --standalone --nproc-per-node 8 -m hwtune.parallel.runtime --spec s.yaml --device cuda

and rank 0 prints the JSON.

Checkpoints (`checkpoint.py`): ``--save DIR`` writes ``DIR/step-<k>.pt`` after the last step
(``--save-every K``: also every K steps), the full model's weights and AdamW moments, loadable
under any layout; ``--resume PATH`` (a file, or a directory: its latest step file, none there:
from scratch) continues at step k, with the same data, under this spec's layout, and the
single-process reference starts from the same checkpoint. ``--max-restarts R`` restarts the
whole run from DIR's latest checkpoint when a rank process dies, at most R times; ``--fail-at
STEP[:RANK]`` makes that rank (default 0) exit at the start of that step (0-based) in the first
attempt only, to test that. Under torchrun, restarts are torchrun's::

    torchrun --standalone --nproc-per-node 2 --max-restarts 2 -m hwtune.parallel.runtime \
        --spec s.yaml --save ckpt --resume ckpt

(the failure injected while ``TORCHELASTIC_RESTART_COUNT`` is 0).

Exit status (as ``hwtune compile --run``): 0 when the run's losses match the single-process
reference, 1 when they do not (the JSON is printed first, its ``agrees`` false) or a rank
process died (out of restarts; one line on stderr), 2 for bad
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
    ap.add_argument("--save", help="write checkpoints DIR/step-<k>.pt (after the last step)")
    ap.add_argument("--save-every", type=int, help="with --save: also every K steps")
    ap.add_argument("--resume", help="a checkpoint file, or a directory: its latest step file")
    ap.add_argument(
        "--max-restarts", type=int, help="with --save: restart from its latest checkpoint"
    )
    ap.add_argument(
        "--fail-at", help="STEP[:RANK]: that rank exits at that step, first attempt only (a test)"
    )
    ap.error = _one_line  # type: ignore[method-assign]
    args = ap.parse_args(argv)
    from hwtune.parallel.runtime.launch import (
        RankFailed,
        check_processes,
        launch,
        launch_env,
        run_config,
        under_torchrun,
        wants_moe,
        with_checkpoints,
    )
    from hwtune.parallel.spec import load_spec

    try:
        if args.steps < 1:
            raise HwtuneInputError("--steps", args.steps, "a positive number of training steps")
        spec = load_spec(args.spec)
        moe = args.moe or wants_moe(spec)
        cfg = run_config(spec, args.steps, moe=moe, device=args.device)
        torchrun = under_torchrun(os.environ)
        if not torchrun:
            check_processes(cfg.world)
        cfg = with_checkpoints(cfg, args.save, args.save_every, args.resume, args.max_restarts,
                               args.fail_at, torchrun=torchrun)  # fmt: skip
        if torchrun:
            doc = launch_env(cfg)
        elif args.max_restarts:
            doc = launch(cfg, args.max_restarts)
        else:
            doc = launch(cfg)
    except HwtuneInputError as e:
        return _one_line(str(e), exit=False)
    except RankFailed as e:
        sys.stderr.write(f"error: {e}\n")
        return 1
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
