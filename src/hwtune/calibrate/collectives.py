"""Collective microbenchmark through `torch.distributed`: all-reduce, reduce-scatter,
all-gather, all-to-all and send/recv over message sizes, as nccl-tests measures them.

Conventions (nccl-tests ``doc/PERFORMANCE.md``): the size S is the full logical buffer (the
all-reduce buffer, the reduce-scatter input, the all-gather output, what each rank sends in all
for all-to-all, what each rank sends for send/recv); the time is the mean over ranks of each
rank's mean time per operation; algbw = S / t and busbw = algbw * factor, with factor 2(n-1)/n
for all-reduce, (n-1)/n for reduce-scatter, all-gather and all-to-all, 1 for send/recv, so that
busbw compares with the link bandwidth whatever the number of ranks.

Locally the ranks are N processes on 127.0.0.1 (gloo on a CPU, NCCL/RCCL on GPUs, one GPU per
rank), started as torchrun's local launcher starts them; across nodes, run this module under
torchrun::

    torchrun --nnodes 2 --nproc-per-node 8 --rdzv-endpoint HOST:29500 \\
        -m hwtune.calibrate.collectives --output coll.json

and pass the file to ``hwtune bench --collectives-from coll.json``. An operation the backend
lacks (gloo has no reduce-scatter) is recorded as skipped with the backend's message.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from hwtune.calibrate.harness import Backend, Budget, Skip, clock_fn, cpu_count, failure_reason

OPS: tuple[str, ...] = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "send_recv")
TEARDOWN_S = 1.0
"""Seconds kept at the end of the collectives' budget for the ranks to leave the process group
and exit, and for the points to be read back."""


def bus_factor(op: str, n: int) -> float:
    """nccl-tests busbw / algbw for ``op`` over ``n`` ranks."""
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op == "send_recv":
        return 1.0
    return (n - 1) / n


def bandwidths(point: dict) -> tuple[float, float]:
    """(algbw, busbw) in bytes/s of one profile ``collectives`` point."""
    alg = point["bytes"] / point["seconds"]
    return alg, alg * bus_factor(point["op"], point["ranks"])


def message_sizes(mode: str) -> list[int]:
    """1 KiB to 64 MiB, 16x apart (quick), or 1 KiB to 1 GiB, 4x apart (thorough)."""
    if mode == "quick":
        return [2**e for e in range(10, 27, 4)]
    return [2**e for e in range(10, 31, 2)]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _op_fn(op: str, nbytes: int, n: int, rank: int, dev: torch.device, dt: torch.dtype) -> Callable:
    eb = torch.tensor([], dtype=dt).element_size()
    elems = max(n, (nbytes // eb) // n * n)  # a multiple of the ranks
    if op == "all_reduce":
        x = torch.ones(elems, dtype=dt, device=dev)
        return lambda: dist.all_reduce(x)
    if op == "reduce_scatter":
        x = torch.ones(elems, dtype=dt, device=dev)
        y = torch.empty(elems // n, dtype=dt, device=dev)
        rs = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        return lambda: rs(y, x)
    if op == "all_gather":
        x = torch.ones(elems // n, dtype=dt, device=dev)
        y = torch.empty(elems, dtype=dt, device=dev)
        ag = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        return lambda: ag(y, x)
    if op == "all_to_all":
        x = torch.ones(elems, dtype=dt, device=dev)
        y = torch.empty(elems, dtype=dt, device=dev)
        return lambda: dist.all_to_all_single(y, x)
    if op == "send_recv":
        x = torch.ones(elems, dtype=dt, device=dev)
        y = torch.empty(elems, dtype=dt, device=dev)
        nxt, prv = (rank + 1) % n, (rank - 1) % n

        def sr() -> None:
            reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, x, nxt),
                                           dist.P2POp(dist.irecv, y, prv)])  # fmt: skip
            for r in reqs:
                r.wait()

        return sr
    raise ValueError(f"unknown collective {op}")


def next_size_seconds(prev_mean: float, prev_bytes: float, nbytes: float, target_s: float) -> float:
    """Upper estimate of the seconds one more message size takes in `run_ranks`: a warm-up and
    a probe call, then the timed loop (about ``target_s``, at least 2 calls, at most 50), with
    the time per call at most linear in the bytes (from the last size measured)."""
    one = prev_mean * nbytes / prev_bytes
    return 2.0 * one + max(target_s, 2.0 * one)


def run_ranks(
    rank: int,
    world: int,
    dev: torch.device,
    ops: list[str],
    sizes: list[int],
    seconds: float,
    report: Callable[[str], None] = lambda _: None,
    target_s: float = 0.1,
    clock: str = "wall",
) -> tuple[list[dict], list[dict]]:
    """The measurement loop every rank runs inside an initialized process group: (points, skips)
    as rank 0 sees them. Every decision (go on, iterations) is agreed through the group.
    ``clock`` times the operations (wall, or the process's CPU time: `harness.resolve_clock`).
    A size starts only if its estimated time (`next_size_seconds`) fits in ``seconds``."""
    is_gpu = dev.type == "cuda"
    now = clock_fn(clock)
    dt = torch.bfloat16 if is_gpu else torch.float32

    def sync() -> None:
        if is_gpu:
            torch.cuda.synchronize(dev)

    def agree(x: float, op: dist.ReduceOp = dist.ReduceOp.MAX) -> float:
        t = torch.tensor([x], dtype=torch.float64, device=dev)
        dist.all_reduce(t, op=op)
        return float(t.item())

    start = time.perf_counter()
    points: list[dict] = []
    skips: list[dict] = []
    for op in ops:
        last: tuple[float, float] | None = None  # (mean seconds, bytes) of the last size measured
        for i, nbytes in enumerate(sizes):
            need = 0.0 if last is None else next_size_seconds(*last, nbytes, target_s)
            out_of_time = agree(1.0 if time.perf_counter() - start + need > seconds else 0.0)
            if out_of_time:
                skips.append({"section": "collectives", "what": f"{op} from {nbytes} B ({len(sizes) - i} sizes)",
                              "reason": "time budget"})  # fmt: skip
                break
            report(f"{op} {nbytes} B x{world}")
            try:
                fn = _op_fn(op, nbytes, world, rank, dev, dt)
                fn()  # warm-up (connections, buffers)
                sync()
                t0 = now()
                fn()
                sync()
                one = agree(now() - t0)
                iters = int(min(50, max(2, target_s / max(one, 1e-9))))
                dist.barrier()
                t0 = now()
                for _ in range(iters):
                    fn()
                sync()
                mean = agree((now() - t0) / iters, dist.ReduceOp.SUM) / world
            except (RuntimeError, ValueError, NotImplementedError, MemoryError) as e:
                skips.append({"section": "collectives", "what": f"{op} ({dist.get_backend()})",
                              "reason": failure_reason(e)})  # fmt: skip
                break  # the backend lacks the op (or memory): the larger sizes fail alike
            points.append({"op": op, "ranks": world, "bytes": float(nbytes), "seconds": mean})
            last = (mean, float(nbytes))
            del fn
    return points, skips


def bench_collectives(
    backend: Backend,
    ranks: int,
    mode: str,
    budget: Budget,
    skips: list[Skip],
    advance: Callable[[str], None] = lambda _: None,
    ops: list[str] | None = None,
    timings: dict[str, float] | None = None,
) -> list[dict]:
    """Profile ``collectives`` points from ``ranks`` local processes on 127.0.0.1, started the
    way torchrun's local launcher starts them (this module's `main` under RANK/WORLD_SIZE/
    MASTER_ADDR/MASTER_PORT), so that local and multi-node runs share one code path and no
    caller's ``__main__`` is re-imported.

    ``budget`` covers the whole section: the ranks get a wall-clock deadline (the budget's end
    less `TEARDOWN_S`), so their start-up (Python, torch, the process group) is measured and
    subtracted, not guessed; it goes into ``timings["startup"]`` (seconds from launch to the
    ranks' first operation)."""
    ops = list(ops or OPS)
    if budget.left <= TEARDOWN_S:
        skips.append(Skip("collectives", "all", "time budget (spent before the ranks started)"))
        return []
    if ranks < 2:
        skips.append(Skip("collectives", "all", f"ranks={ranks}: a collective needs 2 or more"))
        return []
    if backend.is_gpu:
        have = torch.cuda.device_count()
        if have < ranks:
            skips.append(Skip("collectives", f"{ranks} ranks", f"only {have} GPU(s) visible"))
            return []
        if not dist.is_nccl_available():
            skips.append(Skip("collectives", "all", "torch.distributed has no NCCL/RCCL backend"))
            return []
    elif not dist.is_gloo_available():
        skips.append(Skip("collectives", "all", "torch.distributed has no gloo backend"))
        return []
    threads = max(1, cpu_count() // ranks) if not backend.is_gpu else 1
    clock = "cpu" if not backend.is_gpu and threads == 1 and backend.clock == "cpu" else "wall"
    # the ranks measure until a wall-clock deadline (shared by the processes of this machine):
    # what their start-up takes is subtracted as it happens
    secs = budget.left - TEARDOWN_S
    stop_at = time.time() + secs
    launched = time.perf_counter()
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="hwtune-coll-") as tmp:
        out = Path(tmp) / "points.json"
        procs = []
        for r in range(ranks):
            env = {**os.environ, "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(ranks),
                   "LOCAL_WORLD_SIZE": str(ranks), "MASTER_ADDR": "127.0.0.1",
                   "MASTER_PORT": str(port), "OMP_NUM_THREADS": str(threads),
                   "PYTHONWARNINGS": "ignore"}  # fmt: skip
            cmd = [sys.executable, "-m", "hwtune.calibrate.collectives", "--output", str(out),
                   "--seconds", f"{secs:.3f}", "--deadline", f"{stop_at:.3f}",
                   "--threads", str(threads), "--mode", mode, "--clock", clock,
                   "--ops", ",".join(ops)]  # fmt: skip
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True))  # fmt: skip
        # ranks still running when the budget ends are stopped: a start-up longer than the
        # budget left costs the budget, not more (rank 0 writes its points before leaving the
        # process group, so a rank stopped while it tears down loses nothing)
        late = threading.Event()

        def stop() -> None:
            late.set()
            for p in procs:
                if p.poll() is None:
                    p.kill()

        timer = threading.Timer(max(0.0, stop_at - time.time()) + TEARDOWN_S, stop)
        timer.daemon = True
        timer.start()
        err0: list[str] = []
        reader = threading.Thread(target=_pump, args=(procs[0].stderr, err0), daemon=True)
        reader.start()
        assert procs[0].stdout is not None
        try:
            for line in procs[0].stdout:
                if line.startswith("progress "):
                    if timings is not None and "startup" not in timings:
                        timings["startup"] = round(time.perf_counter() - launched, 2)
                    advance(f"collective {line[9:].strip()}")
            codes = [p.wait() for p in procs]
        finally:
            timer.cancel()
        reader.join(timeout=1)
        if not out.exists():
            if late.is_set():
                why = (f"time budget: the ranks were not done when it ended ({secs + TEARDOWN_S:.1f} s"
                       " left at their launch, start-up included)")  # fmt: skip
                skips.append(Skip("collectives", "all", why))
                return []
            tail = [ln for ln in err0 if ln.strip()][-1:] or [f"exit codes {codes}"]
            skips.append(Skip("collectives", "all", f"the ranks failed: {tail[0].strip()[:160]}"))
            return []
        result = json.loads(out.read_text())
    for s in result["skipped"]:
        skips.append(Skip(s["section"], s["what"], s["reason"]))
    return result["collectives"]


def _pump(stream: object, sink: list[str]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        sink.append(line)


def main(argv: list[str] | None = None) -> int:
    """One rank (under torchrun or `bench_collectives`): measure; rank 0 writes the points."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--output", required=True)
    ap.add_argument("--mode", choices=("quick", "thorough"), default="quick")
    ap.add_argument("--seconds", type=float, default=600.0)
    ap.add_argument(
        "--deadline", type=float, default=None, help="Unix time to stop by (start-up included)"
    )
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    a = ap.parse_args(argv)
    if "RANK" not in os.environ:
        sys.stderr.write("error: run under torchrun (RANK/WORLD_SIZE unset)\n")
        return 2
    if a.threads:
        torch.set_num_threads(a.threads)
    gpu = torch.cuda.is_available()
    if gpu:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group("nccl" if gpu else "gloo", timeout=timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", torch.cuda.current_device()) if gpu else torch.device("cpu")
    seconds = a.seconds if a.deadline is None else min(a.seconds, a.deadline - time.time())

    def report(s: str) -> None:
        if rank == 0:
            print(f"progress {s}", flush=True)

    try:
        points, skips = run_ranks(rank, world, dev, a.ops.split(","), message_sizes(a.mode),
                                  seconds, report, clock=a.clock)  # fmt: skip
        if rank == 0:
            tmp = Path(a.output).with_suffix(".part")
            tmp.write_text(json.dumps({"collectives": points, "skipped": skips}, indent=1))
            tmp.replace(a.output)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
