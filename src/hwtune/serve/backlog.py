"""Whether a simulated deployment falls behind an open-loop (or trace) arrival stream.

A queue whose service rate is below its arrival rate has no steady state: its backlog, and with
it every request's queueing delay, grows with the length of the run, so the percentiles of a
finite run say more about the run's length than about the deployment (Kleinrock, *Queueing
Systems* Vol. 1, 1975, §1.4 / §2.4: a stable queue needs an offered load below 1). A closed
loop cannot be overloaded (each client waits for its answer), so only arrivals that do not wait
are judged.

The judgement reads the requests in the system (arrived, not finished) at the middle and at the
end of the arrival window, ``t0 = T / 2`` and ``T`` (``T`` the last arrival, measured from the
first): a stable deployment holds about the same number at both (Little's law, N = lambda x
E2E, once past its fill-up), an overloaded one holds ``(lambda - mu) x T / 2`` more. The backlog
is taken to grow when it rose by more than twice the Poisson noise of the second half's
arrivals, ``NOISE_SIGMAS x sqrt(A)`` for ``A`` arrivals (a Poisson count's standard deviation is
its mean's square root), so a shortfall of the service rate is told apart from chance once it
exceeds about ``2 / sqrt(A)`` of the arrival rate: ~9% over 500 arrivals, ~4% over 3,000. A
smaller shortfall is not seen (`Backlog.falls_behind`), though its latencies still grow with the
run. The window's first half must outlast the 90th-percentile time in service (first scheduled
to finished: the E2E latency without the queueing delay, which an overload lengthens), or the
rise is the deployment filling up, not falling behind: a shorter run is not judged
(`Backlog.judged` False) and says about how many requests would be.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

NOISE_SIGMAS = 2.0
"""How many standard deviations of the second half's Poisson arrival count the backlog must
rise by for the deployment to be taken to fall behind (module docstring)."""


@dataclass(frozen=True)
class Backlog:
    """Requests in the system at the middle and the end of the arrival window."""

    judged: bool
    """False for a closed loop, for fewer than 20 requests, or for a run whose first half is
    shorter than the 90th-percentile time in service (the deployment still filling)."""
    falls_behind: bool
    """Judged, and the backlog grew by more than `NOISE_SIGMAS` x sqrt(the second half's
    arrivals). False says only that no such growth was seen: a service rate a few percent
    short of the arrival rate hides in the arrivals' own noise over a short run."""
    offered_requests_per_s: float | None
    """Arrivals per second over the window's second half (None for a closed loop or a tiny
    run)."""
    served_requests_per_s: float | None
    """Completions per second over the same half."""
    in_system_mid: int
    in_system_end: int
    requests_to_judge: int = 0
    """When not judged for a short run: about how many requests (at the same arrival rate)
    would make the first half outlast the 90th-percentile time in service."""

    def to_dict(self) -> dict[str, object]:
        """The ``backlog`` of `hwtune serve --json` (`Backlog(**d)` reads it back)."""
        return asdict(self)

    def note(self) -> str | None:
        """One line for a user, or None when there is nothing to say."""
        if self.falls_behind:
            return (
                f"the deployment falls behind the arrivals: {self.offered_requests_per_s:.3g} requests/s arrived "
                f"over the second half of the arrivals and {self.served_requests_per_s:.3g}/s finished "
                f"(requests in the system {self.in_system_mid} -> {self.in_system_end}), so the "
                "queueing delay, and every latency with it, grows with the run's length"
            )
        if self.requests_to_judge:
            return (
                "the run is too short to tell whether the deployment falls behind the arrivals "
                f"(its 90th-percentile time in service outlasts half the arrival window); about "
                f"{self.requests_to_judge} requests would tell"
            )
        return None


def backlog(
    arrival: np.ndarray, first_scheduled: np.ndarray, finish: np.ndarray, closed: bool
) -> Backlog:
    """The judgement of the module docstring for requests with these times (one entry each)."""
    n = len(arrival)
    if closed or n < 20:
        return Backlog(False, False, None, None, 0, 0)
    start = float(arrival.min())
    a = np.sort(arrival - start)
    f = np.sort(finish - start)
    t_end = float(a[-1])
    t_mid = t_end / 2

    def in_system(t: float) -> int:
        return int(np.searchsorted(a, t, "right") - np.searchsorted(f, t, "right"))

    mid, end = in_system(t_mid), in_system(t_end)
    arrived = int(np.searchsorted(a, t_end, "right") - np.searchsorted(a, t_mid, "right"))
    done = int(np.searchsorted(f, t_end, "right") - np.searchsorted(f, t_mid, "right"))
    half = max(t_end - t_mid, 1e-12)
    offered, served = arrived / half, done / half
    service_p90 = float(np.percentile(finish - first_scheduled, 90))
    if t_mid < service_p90:
        rate = n / max(t_end, 1e-12)
        need = math.ceil(2 * service_p90 * rate * 1.5)  # the first half 1.5x that time
        return Backlog(False, False, offered, served, mid, end, need)
    grows = end - mid > NOISE_SIGMAS * math.sqrt(max(arrived, 1))
    return Backlog(True, grows, offered, served, mid, end)
