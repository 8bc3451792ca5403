"""The DAG simulator: a plan's ops on per-rank compute, collective and point-to-point streams.

List scheduling in start-time order (Graham 1969, as in Vidur's and ASTRA-sim's event loops):
each rank runs its compute stream and its collective stream in program order, one op at a time;
an op starts when its stream is free and its dependencies are met (a dependency may be a
fraction of another op, see `hwtune.parallel.ir`). Point-to-point transfers are asynchronous
(isend/irecv): a send starts when its data is ready and both the sender's outbound and the
receiver's inbound link are free, so transfers that share a link queue behind each other (link
contention). Durations come from the cost models through the compiler. Memory per rank: the
static states, plus each op's activation change at its end and its transient while it runs.
Deterministic: ties break by op id.

Communication slows the compute it overlaps (`hwtune.train.estimator.OVERLAP_SLOWDOWN`, the
estimator's figure): while a rank's collective or outgoing point-to-point transfer runs, the
compute op beside it lasts that share of the overlap longer (a send and its paired receive
count once, as in the estimator). A compute op that starts during a transfer
is lengthened when it starts; one already running when a transfer starts, at that moment (ops
scheduled earlier on a fraction of it keep their start).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hwtune.errors import HwtuneInputError
from hwtune.parallel.ir import Op, Plan
from hwtune.train import estimator


@dataclass(slots=True)
class Span:
    op: Op
    start: float
    end: float


@dataclass
class SimResult:
    step_time_s: float
    spans: list[Span]
    busy_s: list[float]  # compute-stream busy seconds per rank
    peak_bytes: list[float]
    memory: list[list[tuple[float, float]]]  # per rank: (time, bytes) after each change
    notes: list[str] = field(default_factory=list)

    @property
    def bubble_fraction(self) -> list[float]:
        return [1.0 - b / self.step_time_s if self.step_time_s else 0.0 for b in self.busy_s]

    def to_dict(self) -> dict:
        return {
            "step_time_s": self.step_time_s,
            "busy_s": self.busy_s,
            "bubble_fraction": self.bubble_fraction,
            "peak_bytes": self.peak_bytes,
        }


def simulate(plan: Plan) -> SimResult:
    """Run the plan's DAG; step time is the end of its last op."""
    ops = plan.ops
    start: dict[int, float] = {}
    end: dict[int, float] = {}
    queues: dict[tuple[int, str], list[Op]] = {}
    p2p: list[Op] = []
    for o in ops:
        if o.stream == "p2p":
            p2p.append(o)
        else:
            queues.setdefault((o.rank, o.stream), []).append(o)
    head = {k: 0 for k in queues}
    free = {k: 0.0 for k in queues}
    tx: dict[int, float] = {}
    rx: dict[int, float] = {}
    # transfers whose inputs have all started (ready_at would not return None): only these are
    # candidates, instead of scanning every pending transfer at each op (quadratic: 5 minutes
    # for the ~80k ops of a 70B zbv plan)
    waiting: dict[int, int] = {}  # transfer -> inputs not started yet
    feeds: dict[int, list[int]] = {}  # op -> the transfers it is an input of
    for o in p2p:
        ins = {d for d, _ in o.deps} | {d for d, _ in o.finish_after}
        waiting[o.id] = len(ins)
        for d in ins:
            feeds.setdefault(d, []).append(o.id)
    pending = {o.id for o in p2p if waiting[o.id] == 0}
    p2p_by_id = {o.id: o for o in p2p}
    spans: list[Span] = []
    span_of: dict[int, Span] = {}
    computing: dict[int, Op] = {}  # rank -> its latest compute op
    transfers: dict[int, list[float]] = {}  # rank -> ends of its transfers so far

    def slow_running(rank: int, t: float, seconds: float) -> None:
        """A transfer of ``seconds`` from ``t`` lengthens the compute op running on ``rank``."""
        c = computing.get(rank)
        if c is None or end[c.id] <= t:
            return
        extra = estimator.OVERLAP_SLOWDOWN * (min(end[c.id], t + seconds) - t)
        end[c.id] += extra
        span_of[c.id].end = end[c.id]
        free[(rank, "compute")] = end[c.id]

    def ready_at(o: Op) -> float | None:
        t = 0.0
        for d, frac in o.deps:
            if d not in start:
                return None
            t = max(t, start[d] + frac * (end[d] - start[d]))
        for d, _ in o.finish_after:
            if d not in start:
                return None
        return t

    n_left = len(ops)
    while n_left:
        best: tuple[float, int, Op, tuple | None] | None = None
        for k, q in queues.items():
            i = head[k]
            if i >= len(q):
                continue
            o = q[i]
            t = ready_at(o)
            if t is None:
                continue
            t = max(t, free[k])
            if best is None or (t, o.id) < best[:2]:
                best = (t, o.id, o, k)
        for oid in sorted(pending):
            o = p2p_by_id[oid]
            t = ready_at(o)
            if t is None:
                continue
            t = max(t, tx.get(o.rank, 0.0), rx.get(o.peer, 0.0))
            if best is None or (t, o.id) < best[:2]:
                best = (t, o.id, o, None)
        if best is None:  # a stream's next op, else a transfer, that waits forever
            left = [q[head[k]] for k, q in queues.items() if head[k] < len(q)]
            stuck = min(
                left or [p2p_by_id[i] for i in waiting if i not in start], key=lambda o: o.id
            )
            raise HwtuneInputError(
                "plan", f"rank {stuck.rank} {stuck.label}", "a plan without deadlock"
            )
        t, _, o, k = best
        e = t + o.seconds
        if o.stream == "compute":  # transfers still running on the rank (start order: t grows)
            live = transfers[o.rank] = [x for x in transfers.get(o.rank, ()) if x > t]
            e += estimator.OVERLAP_SLOWDOWN * sum(min(x, e) - t for x in live)
        else:  # a transfer slows its sender (a send and its paired receive count once, as
            slow_running(o.rank, t, o.seconds)  # in the estimator's pipeline_p2p)
        for d, tail in o.finish_after:
            e = max(e, end[d] + tail)
        start[o.id], end[o.id] = t, e
        if o.stream == "compute":
            computing[o.rank] = o
        else:
            transfers.setdefault(o.rank, []).append(e)
        for x in feeds.get(o.id, ()):
            waiting[x] -= 1
            if waiting[x] == 0:
                pending.add(x)
        span_of[o.id] = Span(o, t, e)
        spans.append(span_of[o.id])
        if k is not None:
            head[k] += 1
            free[k] = e
        else:
            pending.discard(o.id)
            tx[o.rank] = e
            rx[o.peer] = e
        n_left -= 1

    step = max(end.values(), default=0.0)
    busy = [0.0] * plan.pp
    events: list[list[tuple[float, float]]] = [[] for _ in range(plan.pp)]
    for sp in spans:
        o = sp.op
        if o.stream == "compute":
            busy[o.rank] += sp.end - sp.start
        if o.transient:
            events[o.rank] += [(sp.start, o.transient), (sp.end, -o.transient)]
        if o.mem_delta:
            events[o.rank].append((sp.end, o.mem_delta))
    memory, peaks = [], []
    for r in range(plan.pp):
        cur = plan.static_bytes[r]
        line = [(0.0, cur)]
        peak = cur
        for t, dlt in sorted(events[r], key=lambda x: (x[0], x[1])):
            cur += dlt
            line.append((t, cur))
            peak = max(peak, cur)
        memory.append(line)
        peaks.append(peak)
    spans.sort(key=lambda s: (s.start, s.op.id))
    return SimResult(step_time_s=step, spans=spans, busy_s=busy, peak_bytes=peaks, memory=memory)
