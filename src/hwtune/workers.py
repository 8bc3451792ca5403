"""Where independent jobs run: in this process, on local worker processes, or on a Ray cluster.

One place for the fan-out that `hwtune study` (grid points) and `hwtune serve plan` (candidate
layouts) share: each job is a picklable argument to a module-level function, results come back
as they finish, tagged with their job's index so that a caller can restore the order.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from typing import TypeVar

from hwtune.errors import HwtuneInputError

J = TypeVar("J")
R = TypeVar("R")


PROBE_TIMEOUT_S = 5.0
"""How long `probe_ray` waits for a TCP connection to a Ray address before calling it
unreachable. Ray's own client retries a silent ``ray://`` address with growing gRPC timeouts
(5 + 10 + 15 s in ``ray.util.client.worker``, more for a GCS address) and offers no
``ray.init`` option to shorten that, so the address is probed first."""

HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
"""A client's HTTP/2 connection preface, then an empty SETTINGS frame (RFC 9113 §3.4, §6.5).
Both Ray endpoints, the client server (``ray://``) and the GCS (``host:port``), are gRPC servers,
and a gRPC server answers with its own preface, whose first frame is SETTINGS (type 0x4); a
service of another kind (an HTTP/1 server, SSH, Redis) answers something else or nothing."""

RAY_CLIENT_PORT = 10001
"""The port of a ``ray://`` address that names none (Ray's ``ray start --ray-client-server-port``
default)."""

MAX_PER_CPU = 4
"""More local processes than this per CPU only wait for one (and a typo of 100000 would fork
that many), so a larger count is refused rather than lowered."""


def check_workers(workers: int | None, ray_address: str | None, flag: str = "workers") -> None:
    """Reject a worker count below 1 or above `MAX_PER_CPU` per CPU, and one given beside a Ray address (Ray places the work,
    so the count would be silently ignored); reject a Ray address with a malformed port. (Whether
    the address answers is checked when the work starts: `probe_ray`.)"""
    if ray_address is not None and not ray_address.strip():
        raise HwtuneInputError("--ray", ray_address, "'local' or a Ray address (ray://host:port)")
    if ray_address is not None:
        ray_endpoint(ray_address)  # a malformed port fails here, before any work
    cap = MAX_PER_CPU * (os.cpu_count() or 1)
    if workers is not None and not 1 <= workers <= cap:
        raise HwtuneInputError(
            flag, workers, f"a number of processes in [1, {cap}] ({MAX_PER_CPU} per CPU here)"
        )
    if ray_address is not None and workers is not None:
        raise HwtuneInputError(
            flag, workers, f"no process count beside --ray {ray_address} (Ray places the work)"
        )


@contextmanager
def job_runner(
    workers: int | None = None,
    ray_address: str | None = None,
    context: str | None = None,
) -> Iterator[Callable[[Callable[[J], R], Sequence[J]], Iterator[tuple[int, R]]]]:
    """A `run_all` for several rounds of jobs that keeps one pool of local worker processes
    across the rounds (each worker keeps what it has cached, and no round waits for new
    processes to start); shut down on leaving. On Ray, or with one worker, each round is
    `run_all`'s own."""
    check_workers(workers, ray_address)
    n = _local_workers(workers)
    pool: ProcessPoolExecutor | None = None

    def run(fn: Callable[[J], R], jobs: Sequence[J]) -> Iterator[tuple[int, R]]:
        nonlocal pool
        if ray_address is not None or n <= 1 or len(jobs) <= 1:
            yield from run_all(fn, jobs, workers, ray_address, context)
            return
        if pool is None:  # spawn and forkserver start processes as jobs need them, up to n
            pool = _process_pool(n, context)
        yield from _as_finished(pool, fn, jobs)

    try:
        yield run
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


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
    n = _local_workers(workers)
    if n <= 1 or len(jobs) == 1:
        for i, job in enumerate(jobs):
            yield i, fn(job)
        return
    with _process_pool(min(n, len(jobs)), context) as pool:
        yield from _as_finished(pool, fn, jobs)


def _local_workers(workers: int | None) -> int:
    """Local processes to run on: ``workers``, else one per core."""
    return workers if workers is not None else (os.cpu_count() or 1)


def _process_pool(n: int, context: str | None) -> ProcessPoolExecutor:
    ctx = mp.get_context(context) if context else None
    return ProcessPoolExecutor(max_workers=n, mp_context=ctx)


def _as_finished(
    pool: ProcessPoolExecutor, fn: Callable[[J], R], jobs: Sequence[J]
) -> Iterator[tuple[int, R]]:
    """Every job submitted to ``pool``, yielded as ``(index, result)`` as each finishes."""
    futs = {pool.submit(fn, job): i for i, job in enumerate(jobs)}
    try:
        for fut in as_completed(futs):
            yield futs[fut], fut.result()
    finally:  # a caller that stops early (closes the generator): the jobs not begun are dropped
        for fut in futs:
            fut.cancel()


def ray_endpoint(address: str) -> tuple[str, int] | None:
    """(host, port) that a Ray address connects to: ``ray://host[:port]`` (port 10001 by
    default) or ``host:port`` (a cluster's GCS); None for one without a TCP endpoint to probe
    ('local', 'auto'). A port that is not a number in [1, 65535] is an error."""
    rest = address.strip()
    client = rest.startswith("ray://")
    if client:
        rest = rest[len("ray://") :]
    rest = rest.split("/", 1)[0]
    if rest.startswith("["):  # [IPv6]:port
        host, _, tail = rest[1:].partition("]")
        port_text = tail[1:] if tail.startswith(":") else ""
    elif rest.count(":") == 1:
        host, port_text = rest.split(":")
    else:
        host, port_text = rest, ""
    if not port_text:
        return (host, RAY_CLIENT_PORT) if client and host else None
    if not host or not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise HwtuneInputError("--ray", address, "'local' or a Ray address, ray://host:port")
    return host, int(port_text)


def _grpc_answer(end: tuple[str, int], timeout_s: float, tls: bool) -> str | None:
    """None if a gRPC (HTTP/2) server answers at ``end`` within ``timeout_s``, else why not.
    With ``tls`` (Ray's ``RAY_USE_TLS``) the endpoint expects a TLS handshake first, so only
    the TCP connection is checked."""
    deadline = time.monotonic() + timeout_s
    try:
        with socket.create_connection(end, timeout=timeout_s) as sock:
            if tls:
                return None
            sock.settimeout(max(0.1, deadline - time.monotonic()))
            sock.sendall(HTTP2_PREFACE)
            head = b""
            while len(head) < 9:
                sock.settimeout(max(0.1, deadline - time.monotonic()))
                part = sock.recv(9 - len(head))
                if not part:
                    return "closed the connection without a gRPC answer; not a Ray endpoint?"
                head += part
    except OSError as e:
        if isinstance(e, TimeoutError):
            return f"no answer within {timeout_s:g} s"
        return (e.strerror or type(e).__name__).lower()
    if head[3] != 0x4:
        return "a service answers, but not a gRPC one; not a Ray endpoint?"
    return None


def probe_ray(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Raise `HwtuneInputError` unless a gRPC server answers at ``address``'s endpoint
    (`ray_endpoint`; `HTTP2_PREFACE`) within ``timeout_s`` in all, the host name's lookup
    included (it runs on a thread that is left behind if the resolver hangs)."""
    end = ray_endpoint(address)
    if end is None:
        return
    tls = os.environ.get("RAY_USE_TLS", "0").strip().lower() in ("1", "true")
    verdict: list[str | None] = []
    t = threading.Thread(
        target=lambda: verdict.append(_grpc_answer(end, timeout_s, tls)), daemon=True
    )
    t.start()
    t.join(timeout_s + 0.5)
    why = verdict[0] if verdict else f"no answer within {timeout_s:g} s (host lookup)"
    if why is not None:
        raise HwtuneInputError(
            "--ray", address, f"a reachable Ray cluster ({end[0]}:{end[1]}: {why})"
        )


def _on_ray(fn: Callable[[J], R], jobs: Sequence[J], address: str) -> Iterator[tuple[int, R]]:
    try:
        import ray
    except ImportError:
        raise HwtuneInputError(
            "--ray", address, "the optional 'ray' extra: pip install 'hwtune[ray]'"
        ) from None
    probe_ray(address)
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
    try:
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            yield index[ready[0]], ray.get(ready[0])
    finally:  # a caller that stops early: the tasks not finished are cancelled
        for ref in pending:
            ray.cancel(ref)
