"""The IR: a device-level plan as a global compute-communication DAG.

Each pipeline rank has an ordered list of ops on its streams: ``compute`` (forward ``F``, full
backward ``B``, input gradient ``I``, weight gradient ``W``, recomputation ``R``, an overlapped
forward-backward pair ``FB``, optimizer ``OPT``), ``comm`` (collectives over a named group:
``AR`` all-reduce, ``RS`` reduce-scatter, ``AG`` all-gather, with their bytes and group size)
and ``p2p`` (``SEND_F`` / ``SEND_B`` from a rank to its ``peer``, which the receiver's compute
op depends on). Dependencies are ``(op, fraction)``: the op may start once that fraction of the
other op is done (1.0: its end; a fraction lets a bucketed collective start during the compute
that produces it). ``finish_after`` holds ``(op, tail)``: this op cannot end before that op's end
plus ``tail`` seconds (the last bucket of a pipelined gather or reduce).

The plan covers the pipeline ranks of one data/tensor/context-parallel coordinate: the other
coordinates run the same ops at the same times (collectives over their groups are symmetric).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hwtune.errors import HwtuneInputError

COMPUTE = ("F", "B", "I", "W", "R", "FB", "OPT")
COLLECTIVES = ("AR", "RS", "AG", "A2A")
P2P = ("SEND_F", "SEND_B")


@dataclass(slots=True)
class Op:
    id: int
    rank: int
    kind: str
    stream: str  # "compute" | "comm" | "p2p"
    seconds: float
    label: str
    stage: int = -1
    mb: int = -1
    peer: int = -1
    group: str = ""
    group_size: int = 1
    nbytes: float = 0.0
    deps: list[tuple[int, float]] = field(default_factory=list)
    finish_after: list[tuple[int, float]] = field(default_factory=list)
    mem_delta: float = 0.0  # bytes added at the end of the op (negative: freed)
    transient: float = 0.0  # bytes held while the op runs

    def to_dict(self) -> dict:
        return {
            "id": self.id, "rank": self.rank, "kind": self.kind, "stream": self.stream,
            "label": self.label, "seconds": self.seconds, "stage": self.stage, "mb": self.mb,
            "peer": self.peer, "group": self.group, "group_size": self.group_size,
            "bytes": self.nbytes, "deps": [list(d) for d in self.deps],
            "finish_after": [list(d) for d in self.finish_after],
        }  # fmt: skip


@dataclass
class Plan:
    """Per-rank ordered ops with dependencies, and what the simulator needs besides."""

    pp: int
    n_micro: int
    ops: list[Op]
    orders: dict[int, list]  # rank -> pipeline actions (hwtune.parallel.actions.Action)
    static_bytes: list[float]  # per rank: weights + gradients + optimizer states
    stage_rank: list[int]
    schedule: str
    stages: tuple = ()  # hwtune.parallel.costs.StageCost per model chunk
    chunk_of: list[int] = field(default_factory=list)  # stage -> model chunk
    notes: list[str] = field(default_factory=list)

    def rank_ops(self, rank: int, stream: str | None = None) -> list[Op]:
        return [o for o in self.ops if o.rank == rank and (stream is None or o.stream == stream)]

    def summary(self) -> dict:
        per = {}
        for r in range(self.pp):
            ops = self.rank_ops(r)
            per[r] = {
                "compute_ops": sum(o.stream == "compute" for o in ops),
                "collectives": sum(o.kind in COLLECTIVES for o in ops),
                "sends": sum(o.kind in P2P for o in ops),
                "stages": sorted({s for s, rr in enumerate(self.stage_rank) if rr == r}),
                "static_bytes": self.static_bytes[r],
            }
        return {"pp": self.pp, "micro_batches": self.n_micro, "schedule": self.schedule,
                "ops": len(self.ops), "ranks": per}  # fmt: skip

    def to_dict(self) -> dict:
        return {
            **self.summary(),
            "orders": {r: [str(a) for a in v] for r, v in self.orders.items()},
            "ops_list": [o.to_dict() for o in self.ops],
        }


def check(plan: Plan) -> None:
    """The compiler's checker: every dependency names an op of the plan, and the per-stream
    program orders plus the dependencies leave no cycle (a plan with one would deadlock: each
    rank waits on a message another rank sends only after it). One line names the op."""
    by_id = {o.id: o for o in plan.ops}
    for o in plan.ops:
        for d, _ in o.deps + o.finish_after:
            if d not in by_id:
                raise HwtuneInputError(
                    "plan", o.label, f"dependencies on ops of the plan (op {d} missing)"
                )
    # Kahn's algorithm over dependencies plus stream program order
    succ: dict[int, list[int]] = {o.id: [] for o in plan.ops}
    indeg = {o.id: 0 for o in plan.ops}
    last: dict[tuple[int, str], int] = {}
    for o in plan.ops:
        preds = {d for d, _ in o.deps} | {d for d, _ in o.finish_after}
        key = (o.rank, o.stream)
        if o.stream != "p2p" and key in last:
            preds.add(last[key])
        if o.stream != "p2p":
            last[key] = o.id
        for p in preds:
            succ[p].append(o.id)
            indeg[o.id] += 1
    ready = [i for i, k in indeg.items() if k == 0]
    seen = 0
    while ready:
        i = ready.pop()
        seen += 1
        for j in succ[i]:
            indeg[j] -= 1
            if indeg[j] == 0:
                ready.append(j)
    if seen != len(plan.ops):
        heads: dict[int, Op] = {}
        for o in plan.ops:
            if indeg[o.id] > 0 and o.stream == "compute" and o.rank not in heads:
                heads[o.rank] = o
        where = ", ".join(f"rank {r} at {heads[r].label}" for r in sorted(heads))
        raise HwtuneInputError(
            "schedule", where,
            "an order without deadlock (each rank waits on a message sent only after its own wait)",
        )  # fmt: skip
