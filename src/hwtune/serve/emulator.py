"""A simulated deployment served in real time: requests arrive over HTTP
(`hwtune.serve.mock_server`), tokens leave when the simulator says they would.

On every arrival the history since the deployment was last idle (every request since then, at
the wall-clock times they arrived) is simulated again as a trace
(`hwtune.serve.simulator.simulate` with ``record_tokens``), and every open stream continues on
the new token times. That is exact because the simulator is causal: a request arriving at t
changes only what happens after t, so the tokens already sent keep their times. A request that
arrives after every earlier one has sent its last token finds the deployment as a fresh one
(its requests carry no shared prefixes), so the history before it is dropped and the
simulation starts again at its arrival. The cost is one simulation per arrival over the
requests since the last idle moment (BENCHMARKS.md, "serve emulate"): a deployment that idles
now and then can be served for as long as one likes; one that is never idle grows its history
as before, which suits hundreds to a few thousand requests.

A request's arrival is stamped when it is received, and it is in flight until its thread adds
it to the history (threads stamp and add in either order; a real run of 8 clients had the first
of a wave added second). Simulations run one at a time, each over everything added when it
starts, while the open streams keep sending the tokens due before the earliest arrival not yet
simulated, in flight or added (final, by causality); a token due after it waits for the
schedule that has it, and the history is never cut after it. So tokens are never early, and
late only when the simulations fall behind the wall clock (one costs 8-10 ms at 100 requests and
30-40 ms at 400 on a 2-core machine; `time_scale` gives them room).

``time_scale`` > 1 stretches the simulated clock (every latency lasts that many times longer on
the wall), which makes the host's own overheads (HTTP, Python, the re-simulation) relatively
small; measured latencies are then divided by it.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from hwtune.errors import HwtuneInputError
from hwtune.serve.config import Deployment, ReplicaConfig
from hwtune.serve.request import Workload
from hwtune.serve.simulator import simulate

EMULATOR_SWITCH_INTERVAL_S = 2e-4
"""``sys.setswitchinterval`` of a process serving an emulated engine (`hwtune serve emulate`):
with Python's default 5 ms, the request threads wait behind a simulation for the interpreter,
and a burst of 8 clients reaches the engine spread over ~5 ms each (measured: TTFT 56 ms against
the simulation's 88 for Llama-3.1-8B on an H100, 8 clients, 512/64 tokens, real time); at
0.2 ms, 77 ms, and at four times slower than real time, 87.7 ms (BENCHMARKS.md, "serve
emulate")."""


class EmulatedEngine:
    """One aggregated deployment in wall-clock time (see the module docstring)."""

    def __init__(
        self,
        deployment: Deployment | ReplicaConfig,
        time_scale: float = 1.0,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        dep = deployment if isinstance(deployment, Deployment) else Deployment(deployment)
        if dep.prefill is not None:
            raise HwtuneInputError("deployment", "disaggregated", "an aggregated deployment")
        if not 0 < time_scale < math.inf:  # inf would hold every token forever
            raise HwtuneInputError("time_scale", time_scale, "a positive finite factor")
        self.deployment = dep
        self.time_scale = time_scale
        self._clock = clock
        self._t0: float | None = None
        self._arrivals: list[float] = []
        self._prompts: list[int] = []
        self._outputs: list[int] = []
        self._times: list[list[float]] = []
        self._cond = threading.Condition()
        self._t0_lock = threading.Lock()
        self._sim_lock = threading.Lock()
        self._published = 0
        self._base = 0  # first request since the deployment was last idle
        self._offset = 0.0  # its arrival: the simulated clock's zero for the current history
        self._pending: float | None = None  # earliest arrival no published schedule has
        self._inflight: list[float] = []  # stamped on receipt, not yet in the history
        self.simulations = 0
        self.simulation_s = 0.0

    @property
    def requests(self) -> int:
        """Requests admitted so far."""
        return len(self._prompts)

    def now(self) -> float:
        """Simulated seconds since the first request (0 before it)."""
        if self._t0 is None:
            return 0.0
        return (self._clock() - self._t0) / self.time_scale

    def submit(self, prompt: int, output: int) -> int:
        """Admit a request arriving now; its id once its token times are known. Raises
        `HwtuneInputError` (and forgets it) when the deployment cannot run it (too long for the
        KV cache or the model)."""
        if prompt < 1 or output < 1:
            raise HwtuneInputError(
                "request", (prompt, output), "positive prompt and output lengths"
            )
        return self._admit(self._receive(), prompt, output)

    def _receive(self) -> float:
        """Stamp an arrival on receipt (not after the simulations queued before it) and hold it
        as in flight until `_admit` adds it to the history: until then no token due after it is
        sent, and the history is not cut at a later moment (threads stamp and admit in either
        order)."""
        with self._t0_lock:
            if self._t0 is None:
                self._t0 = self._clock()
        with self._cond:
            arrival = self.now()
            self._inflight.append(arrival)
            self._pending = arrival if self._pending is None else min(self._pending, arrival)
        return arrival

    def _unpublished(self) -> list[float]:
        """Arrivals no published schedule has: in flight, or admitted after the last simulation
        began (call under the condition)."""
        return self._arrivals[self._published :] + self._inflight

    def _admit(self, arrival: float, prompt: int, output: int) -> int:
        """Add a received request to the history and simulate (see `submit`)."""
        try:  # a request the deployment cannot hold fails alone, before it joins the history
            simulate(self.deployment, Workload((prompt,), (output,), mode="trace", arrivals=(0.0,)))
        except Exception:
            with self._cond:
                self._inflight.remove(arrival)
                self._pending = min(self._unpublished(), default=None)
                self._cond.notify_all()
            raise
        with self._cond:
            self._inflight.remove(arrival)
            self._arrivals.append(arrival)
            self._prompts.append(prompt)
            self._outputs.append(output)
            rid = len(self._prompts) - 1
        with self._sim_lock:  # one simulation at a time, of everything that has arrived
            with self._cond:
                if self._published > rid:
                    return rid  # a simulation started after this arrival has published it
                n, done = len(self._prompts), self._published
                first_new = min(self._unpublished())
                if all(self._times[i][-1] < first_new for i in range(self._base, done)):
                    self._base, self._offset = done, first_new  # idle: the past is settled
                base, offset = self._base, self._offset
                wl = Workload(tuple(self._prompts[base:n]), tuple(self._outputs[base:n]),
                              mode="trace",
                              arrivals=tuple(a - offset for a in self._arrivals[base:n]))  # fmt: skip
            t = time.perf_counter()
            # outside the condition: the open streams keep their tokens on the last schedule
            try:
                res = simulate(self.deployment, wl, record_tokens=True)
            except Exception:
                with self._cond:  # no stream may wait for a schedule that will not come
                    self._pending = None
                    self._cond.notify_all()
                raise
            with self._cond:
                self.simulations += 1
                self.simulation_s += time.perf_counter() - t
                times = {r.rid: [t + offset for t in r.token_times or []] for r in res.requests}
                self._times = self._times[:base] + [times[i] for i in range(len(wl))]
                self._published = n
                self._pending = min(self._unpublished(), default=None)
                self._cond.notify_all()
        return rid

    def due(self, rid: int, k: int) -> float:
        """Wall-clock time (of ``clock``) of request ``rid``'s token ``k`` (0-based), as the
        latest simulation has it."""
        assert self._t0 is not None
        return self._t0 + self._times[rid][k] * self.time_scale

    def wait_token(self, rid: int, k: int) -> None:
        """Block until token ``k`` of request ``rid`` is due, following re-simulations. A token
        due after an arrival that no published schedule has yet waits for that schedule: before
        the arrival the times are final (causality), after it they may move."""
        with self._cond:
            while True:
                if self._pending is not None and self._times[rid][k] >= self._pending:
                    self._cond.wait()
                    continue
                left = self.due(rid, k) - self._clock()
                if left <= 0:
                    return
                self._cond.wait(timeout=left)


class _EmulatedStream:
    def __init__(self, engine: EmulatedEngine, rid: int) -> None:
        self.engine, self.rid = engine, rid

    def wait(self, k: int) -> None:
        self.engine.wait_token(self.rid, k)

    def close(self) -> None:
        pass


class EmulatedTiming:
    """`hwtune.serve.mock_server.MockServer`'s timing source backed by an `EmulatedEngine`."""

    def __init__(self, engine: EmulatedEngine) -> None:
        self.engine = engine

    def start(self, prompt: int, output: int) -> _EmulatedStream:
        """Admit a request (`EmulatedEngine.submit`); its token clock."""
        return _EmulatedStream(self.engine, self.engine.submit(prompt, output))


__all__ = ["EMULATOR_SWITCH_INTERVAL_S", "EmulatedEngine", "EmulatedTiming"]
