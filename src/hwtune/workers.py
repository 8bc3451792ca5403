"""Where independent jobs run: in this process, on local worker processes, or on a Ray cluster.

One place for the fan-out that `hwtune study` (grid points) and `hwtune serve plan` (candidate
layouts) share: each job is a picklable argument to a module-level function, results come back
as they finish, tagged with their job's index so that a caller can restore the order.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import TypeVar

from hwtune.errors import HwtuneInputError

J = TypeVar("J")
R = TypeVar("R")


MAX_PER_CPU = 4
"""More local processes than this per CPU only wait for one (and a typo of 100000 would fork
that many), so a larger count is refused rather than lowered."""


def check_workers(workers: int | None, ray_address: str | None, flag: str = "workers") -> None:
    """Reject a worker count below 1 or above `MAX_PER_CPU` per CPU, and one given beside a Ray address (Ray places the work,
    so the count would be silently ignored)."""
    if ray_address is not None and not ray_address.strip():
        raise HwtuneInputError("--ray", ray_address, "'local' or a Ray address (ray://host:port)")
    cap = MAX_PER_CPU * (os.cpu_count() or 1)
    if workers is not None and not 1 <= workers <= cap:
        raise HwtuneInputError(
            flag, workers, f"a number of processes in [1, {cap}] ({MAX_PER_CPU} per CPU here)"
        )
    if ray_address is not None and workers is not None:
        raise HwtuneInputError(
            flag, workers, f"no process count beside --ray {ray_address} (Ray places the work)"
        )


def run_all(
    fn: Callable[[J], R],
    jobs: Sequence[J],
    workers: int | None = None,
    ray_address: str | None = None,
    context: str | None = None,
) -> Iterator[tuple[int, R]]:
    """Yield ``(index, fn(jobs[index]))`` for every job as it finishes.

    ``ray_address``: 'local' starts (or joins) a Ray instance on this machine, anything else is
    passed to ``ray.init(address=...)``. Otherwise ``workers`` local processes (default: all
    cores; 1 or a single job: in this process) started with the multiprocessing ``context``
    ('spawn', 'fork', 'forkserver'; default: the platform's)."""
    check_workers(workers, ray_address)
    if not jobs:
        return
    if ray_address is not None:
        yield from _on_ray(fn, jobs, ray_address)
        return
    n = workers if workers is not None else (os.cpu_count() or 1)
    if n <= 1 or len(jobs) == 1:
        for i, job in enumerate(jobs):
            yield i, fn(job)
        return
    ctx = mp.get_context(context) if context else None
    with ProcessPoolExecutor(max_workers=min(n, len(jobs)), mp_context=ctx) as pool:
        futs = {pool.submit(fn, job): i for i, job in enumerate(jobs)}
        for fut in as_completed(futs):
            yield futs[fut], fut.result()


def _on_ray(fn: Callable[[J], R], jobs: Sequence[J], address: str) -> Iterator[tuple[int, R]]:
    try:
        import ray
    except ImportError:
        raise HwtuneInputError(
            "--ray", address, "the optional 'ray' extra: pip install 'hwtune[ray]'"
        ) from None
    try:
        ray.init(address=None if address == "local" else address, ignore_reinit_error=True,
                 include_dashboard=False, log_to_driver=False)  # fmt: skip
    except (ValueError, ConnectionError, RuntimeError, TimeoutError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise HwtuneInputError(
            "--ray", address, f"'local' or a reachable Ray address, ray://host:port ({first})"
        ) from None
    remote = ray.remote(fn)
    index = {remote.remote(job): i for i, job in enumerate(jobs)}
    pending = list(index)
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        yield index[ready[0]], ray.get(ready[0])
