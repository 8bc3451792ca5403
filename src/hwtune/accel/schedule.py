"""Scheduling one training step on a multi-core accelerator: layers on cores, layer fusion,
memory over time; latency, energy by component and peak memory per level.

After Stream (Symons et al., arXiv 2212.10612, Sec. IV): ops are list-scheduled in program
order, each on the core (of those whose local buffer holds its tiles) that finishes it first.
Cores run in parallel; the DRAM channel is one shared resource (an op's DRAM transfers queue
behind earlier ones).

Layer fusion (Stream Sec. IV-B; Alwani et al., "Fused-layer CNN accelerators", MICRO 2016): two
consecutive ops of the same pass where the second is the only reader of the first's output in
that pass are fused: the intermediate flows tile by tile, core to core over the interconnect (or
stays in the local buffer on one core) and never makes the round trip through shared memory or
DRAM. The consumer starts after the producer's first of ``fusion_tiles`` tiles. In training an
intermediate that the backward pass needs (a kept activation) must still be written once.

Memory: a tensor lives from the start of its first writer to the end of its last reader;
weights, optimizer states and inputs live for the whole step. A new tensor goes to the shared
on-chip memory if it fits next to what is live there (program order), else to DRAM.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hwtune.accel.architecture import Accelerator, CoreType
from hwtune.accel.mapper import Mapping, _NoFit, map_mac_op, no_fit_error, vector_cycles
from hwtune.accel.training import Op, TrainingGraph

MAX_FUSION_DEPTH = 6
"""The deepest fused group a schedule takes (the architecture search's fusion gene, 1..6)."""
STAGE = {"fwd": 0, "recompute": 1, "bwd": 1, "bwd_x": 1, "bwd_w": 1, "opt": 2}
ENERGY_PARTS = ("mac", "vector", "local", "shared", "dram", "interconnect")


@dataclass(frozen=True)
class ScheduledOp:
    name: str
    phase: str
    core: int
    start: float
    end: float
    macs: int
    dram_bytes: float
    shared_bytes: float
    link_bytes: float
    fused_in: bool


@dataclass
class ScheduleResult:
    latency_s: float
    energy_j: dict[str, float]
    peak_bytes: dict[str, float]  # local (largest tile footprint), shared, dram
    dram_traffic_bytes: float
    shared_traffic_bytes: float
    link_traffic_bytes: float
    macs: int
    recompute_macs: int
    ops: list[ScheduledOp] = field(default_factory=list)
    timeline: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    fused_edges: int = 0
    fits_dram: bool = True

    @property
    def total_energy_j(self) -> float:
        return sum(self.energy_j.values())

    def to_dict(self, ops: bool = False) -> dict:
        d = {
            "latency_s": self.latency_s,
            "energy_j": self.total_energy_j,
            "energy_by_component_j": self.energy_j,
            "peak_bytes": self.peak_bytes,
            "dram_traffic_bytes": self.dram_traffic_bytes,
            "shared_traffic_bytes": self.shared_traffic_bytes,
            "link_traffic_bytes": self.link_traffic_bytes,
            "macs": self.macs,
            "recompute_macs": self.recompute_macs,
            "fused_edges": self.fused_edges,
            "fits_dram": self.fits_dram,
        }
        if ops:
            d["ops"] = [o.__dict__ for o in self.ops]
        return d


def fusion_edges(tg: TrainingGraph, depth: int) -> set[int]:
    """Indices i such that op i+1 fuses with op i (groups of at most ``depth`` ops).

    Within each run of consecutive fusible edges, the edges left unfused (one at least every
    ``depth`` ops) are chosen to keep the largest intermediates on chip: a dynamic program
    maximizes the bytes fusion keeps off shared memory and DRAM (an intermediate's read, and its
    write unless a later op, such as the backward pass, reads it; Alwani et al. MICRO 2016,
    Sec. 3). Any grouping allowed at one depth
    is allowed at a deeper one, so a deeper limit never fuses fewer bytes (a greedy grouping
    from the start of each run did: depth 6 broke a larger intermediate than depth 5)."""
    if depth <= 1:
        return set()
    root = tg.root
    readers: dict[str, list[int]] = {}
    writers: dict[str, int] = {}
    for i, op in enumerate(tg.ops):
        for t in op.reads:
            readers.setdefault(root(t), []).append(i)
        if op.write is not None:
            writers[root(op.write)] = writers.get(root(op.write), 0) + 1
    fusible: list[int] = []
    for i in range(len(tg.ops) - 1):
        a, b = tg.ops[i], tg.ops[i + 1]
        ok = (
            a.write is not None
            and not a.accumulate
            and a.phase != "opt"
            and STAGE[a.phase] == STAGE[b.phase]
            and writers.get(root(a.write), 0) == 1
            and tg.tensors[root(a.write)].kind == "activation"
        )
        if ok:
            t = root(a.write)
            rs = readers.get(t, [])
            ok = (i + 1) in rs and all(
                STAGE[tg.ops[j].phase] != STAGE[b.phase] for j in rs if j != i + 1
            )
        if ok:
            fusible.append(i)
    out: set[int] = set()
    k = 0
    while k < len(fusible):  # maximal runs of consecutive fusible edges
        e = k
        while e + 1 < len(fusible) and fusible[e + 1] == fusible[e] + 1:
            e += 1
        run = fusible[k : e + 1]
        w = []
        for i in run:  # bytes a fused edge keeps off the memories: the read, and the write
            t = root(tg.ops[i].write)  # type: ignore[arg-type]
            kept = any(j > i + 1 for j in readers.get(t, ()))  # a later reader: still written
            w.append(float(tg.tensors[t].nbytes) * (1 if kept else 2))
        out.update(_best_fused(run, w, depth - 1))
        k = e + 1
    return out


def _best_fused(edges: list[int], w: list[float], most: int) -> list[int]:
    """The subset of a run of consecutive ``edges`` with the largest total weight ``w`` in which
    no more than ``most`` consecutive edges are taken (dynamic program over the last edge left
    out; ties keep the earlier edges, as a greedy grouping from the start would)."""
    n = len(edges)
    pre = [0.0]
    for x in w:
        pre.append(pre[-1] + x)
    # best[j]: most weight of edges 0..j-1 given edge j is left out (j = n: a sentinel)
    best = [0.0] * (n + 1)
    prev = [-1] * (n + 1)
    for j in range(n + 1):
        cand = None
        for k in range(max(-1, j - most - 1), j):  # k: the previous edge left out (-1: none)
            v = (best[k] if k >= 0 else 0.0) + pre[j] - pre[k + 1]
            if cand is None or v > cand[0] + 1e-9 * max(1.0, abs(v)):
                cand = (v, k)
        assert cand is not None
        best[j], prev[j] = cand
    left_out = set()
    j = prev[n]
    while j >= 0:
        left_out.add(j)
        j = prev[j]
    return [edges[i] for i in range(n) if i not in left_out]


def schedule(
    tg: TrainingGraph,
    accel: Accelerator,
    fusion_depth: int = 1,
    fusion_tiles: int = 8,
) -> ScheduleResult:
    """Schedule one training step; ``fusion_depth`` = most ops per fused group (1 = none)."""
    f = accel.frequency_hz
    cores = accel.core_list
    types = accel.cores
    type_of = [types.index(c) for c in cores]
    ops = tg.ops
    root = tg.root
    tensors = tg.tensors
    fused = fusion_edges(tg, fusion_depth)

    # storage roots each op reads and writes; program-order readers of each root
    read_roots = [tuple(root(t) for t in op.reads) for op in ops]
    write_root = [root(op.write) if op.write is not None else None for op in ops]
    readers: dict[str, list[int]] = {}
    for i, rr in enumerate(read_roots):
        for r in rr:
            readers.setdefault(r, []).append(i)
    last_reader = {r: v[-1] for r, v in readers.items()}

    static = {
        n
        for n, t in tensors.items()
        if t.alias_of is None and t.kind in ("weight", "input") and not n.startswith("d:")
    }
    shared_cap = accel.shared_bytes
    home: dict[str, str] = {}
    shared_live = 0.0
    for n in sorted(static, key=lambda n: (tensors[n].kind != "input", n)):
        nb = tensors[n].nbytes
        if shared_live + nb <= shared_cap:
            home[n] = "shared"
            shared_live += nb
        else:
            home[n] = "dram"
    static_bytes = {
        "shared": shared_live,
        "dram": sum(tensors[n].nbytes for n in static if home[n] == "dram"),
    }

    core_free = [0.0] * len(cores)
    dram_free = 0.0
    avail: dict[str, float] = {}
    start_of: dict[int, float] = {}
    end_of: dict[int, float] = {}
    alloc_t: dict[str, float] = {}
    free_t: dict[str, float] = {}
    not_stored: set[str] = set()
    energy = dict.fromkeys(ENERGY_PARTS, 0.0)
    traffic = {"shared": 0.0, "dram": 0.0, "link": 0.0}
    peak_local = 0.0
    records: list[ScheduledOp] = []
    op_core: dict[int, int] = {}
    shared_bw = accel.shared_memory.bandwidth_bytes_per_cycle * f
    link_bw = accel.interconnect.link_bandwidth_bytes_per_cycle * f
    dram_bw = accel.dram_bandwidth_si

    live_shared: dict[str, int] = {}  # dynamic tensors placed in shared memory, not yet freed
    for i, op in enumerate(ops):
        fused_in = (i - 1) in fused
        fused_out = i in fused
        out_root = write_root[i]
        # where the output lives (decided at its first write). A shared-memory tensor counts as
        # live until every reader is scheduled and the earliest a core can start has passed its
        # end, so the time-resolved use never exceeds the capacity.
        if out_root is not None and out_root not in home and out_root not in not_stored:
            stored = not fused_out or any(j > i + 1 for j in readers.get(out_root, ()))
            if not stored:
                not_stored.add(out_root)
            else:
                nb = tensors[out_root].nbytes
                if live_shared and shared_cap > 0:
                    t_min = min(core_free)
                    for r in [
                        r
                        for r in live_shared
                        if last_reader.get(r, -1) < i
                        and free_t.get(r, alloc_t.get(r, 0.0)) <= t_min
                    ]:
                        del live_shared[r]
                if static_bytes["shared"] + sum(live_shared.values()) + nb <= shared_cap:
                    home[out_root] = "shared"
                    live_shared[out_root] = nb
                else:
                    home[out_root] = "dram"
        # per-operand bytes (views read their own shape)
        costs = [
            _op_cost(op, types[k], tensors, read_roots[i], write_root[i]) for k in range(len(types))
        ]
        if all(c is None or isinstance(c, float) for c in costs):
            mins = [c for c in costs if isinstance(c, float)]
            raise no_fit_error(op.name, min(mins), types)
        in_fused = root(ops[i - 1].write) if fused_in and ops[i - 1].write else None

        best = None
        for k, cost in enumerate(costs):
            if cost is None or isinstance(cost, float):
                continue
            cyc, local_b, operands, footprint, mp = cost
            for ci, tk in enumerate(type_of):
                if tk != k:
                    continue
                lv = {"shared": 0.0, "dram": 0.0, "link": 0.0}
                for r, tr, comp, is_out in operands:
                    if r == in_fused and not is_out:
                        if op_core.get(i - 1) != ci:
                            lv["link"] += comp
                        continue
                    if is_out and r in not_stored:
                        spill = tr - comp
                        if spill > 0:
                            lv["shared" if shared_cap > 0 else "dram"] += spill
                        continue
                    lv[home.get(r, "dram")] += tr
                ready = 0.0
                for r in read_roots[i]:
                    ready = max(ready, avail.get(r, 0.0))
                if op.accumulate and out_root is not None:
                    ready = max(ready, avail.get(out_root, 0.0))
                if fused_in:
                    p = i - 1
                    ready = max(ready, start_of[p] + (end_of[p] - start_of[p]) / fusion_tiles)
                start = max(ready, core_free[ci])
                dur_nodram = max(
                    cyc / f,
                    local_b / (types[k].local_bandwidth_bytes_per_cycle * f),
                    lv["shared"] / shared_bw,
                    lv["link"] / link_bw,
                )
                dram_s = lv["dram"] / dram_bw
                end = max(start + dur_nodram, max(dram_free, start) + dram_s)
                if fused_in:
                    end = max(end, end_of[i - 1] + max(dur_nodram, dram_s) / fusion_tiles)
                if best is None or end < best[0] - 1e-15:
                    best = (end, start, ci, k, lv, dram_s, cyc, local_b, footprint)
        assert best is not None
        end, start, ci, k, lv, dram_s, cyc, local_b, footprint = best
        core = types[k]
        if dram_s > 0:
            dram_free = max(dram_free, start) + dram_s
        core_free[ci] = end
        start_of[i], end_of[i] = start, end
        op_core[i] = ci
        if out_root is not None:
            avail[out_root] = end
            if out_root not in alloc_t and out_root not in static:
                alloc_t[out_root] = start
        for r in read_roots[i]:
            free_t[r] = max(free_t.get(r, 0.0), end)
        peak_local = max(peak_local, footprint)
        energy["mac"] += op.macs * core.mac_energy_pj * 1e-12
        energy["vector"] += op.vector_ops * core.vector_op_energy_pj * 1e-12
        energy["local"] += local_b * core.local_access_pj_per_byte * 1e-12
        energy["shared"] += lv["shared"] * accel.shared_memory.access_pj_per_byte * 1e-12
        energy["dram"] += lv["dram"] * accel.dram.access_pj_per_byte * 1e-12
        energy["interconnect"] += lv["link"] * accel.interconnect.access_pj_per_byte * 1e-12
        for key in traffic:
            traffic[key] += lv[key]
        records.append(
            ScheduledOp(
                op.name,
                op.phase,
                ci,
                start,
                end,
                op.macs,
                lv["dram"],
                lv["shared"],
                lv["link"],
                fused_in,
            )
        )

    latency = max(end_of.values()) if end_of else 0.0
    timeline, peaks = _memory_timeline(alloc_t, free_t, home, tensors, static_bytes, latency)
    peaks["local"] = peak_local
    return ScheduleResult(
        latency_s=latency,
        energy_j=energy,
        peak_bytes=peaks,
        dram_traffic_bytes=traffic["dram"],
        shared_traffic_bytes=traffic["shared"],
        link_traffic_bytes=traffic["link"],
        macs=tg.macs,
        recompute_macs=tg.phase_macs("recompute"),
        ops=records,
        timeline=timeline,
        fused_edges=len(fused),
        fits_dram=peaks["dram"] <= accel.dram_bytes,
    )


def _op_cost(
    op: Op, core: CoreType, tensors: dict, rroots: tuple[str, ...], wroot: str | None
) -> tuple | float | None:
    """(cycles, local bytes, [(storage root, traffic, compulsory, is_output)], footprint, mapping)
    for ``op`` on ``core``; the smallest buffer (float) if it fits no tiling."""
    if op.loops is not None:
        a, b = op.reads[0], op.reads[1]
        w = op.write
        ta, tb, to = tensors[a], tensors[b], tensors[w]
        lp = op.loops
        phase = op.phase if op.phase in ("fwd", "bwd_x", "bwd_w", "recompute") else "fwd"
        try:
            m: Mapping = map_mac_op(
                phase, lp.G, lp.N, lp.K, lp.C, lp.R, float(ta.nbytes), float(tb.nbytes),
                float(to.nbytes), to.elem_bytes, op.accumulate, core,
            )  # fmt: skip
        except _NoFit as e:
            return e.min_buffer
        operands = [
            (rroots[0], m.traffic[0], m.compulsory[0], False),
            (rroots[1], m.traffic[1], m.compulsory[1], False),
            (wroot, m.traffic[2], m.compulsory[2], True),
        ]
        return (m.cycles, m.local_bytes, operands, m.footprint, m)
    operands = [
        (r, float(tensors[t].nbytes), float(tensors[t].nbytes), False)
        for t, r in zip(op.reads, rroots, strict=True)
    ]
    if op.write is not None:
        nb = float(tensors[op.write].nbytes)
        if op.kind == "optimizer":  # writes W and the states it read
            nb = sum(float(tensors[t].nbytes) for t in op.reads if not t.startswith("d:"))
        elif op.accumulate and op.write not in op.reads:
            nb *= 2
        operands.append((wroot, nb, nb, True))
    local_b = sum(x[1] for x in operands)
    return (vector_cycles(op.vector_ops, core), local_b, operands, 0.0, None)


def _memory_timeline(
    alloc_t: dict[str, float],
    free_t: dict[str, float],
    home: dict[str, str],
    tensors: dict,
    static_bytes: dict[str, float],
    latency: float,
) -> tuple[dict[str, list[tuple[float, float]]], dict[str, float]]:
    """Bytes in use over time per level: (time, bytes) steps, and the peaks."""
    events: dict[str, list[tuple[float, float]]] = {"shared": [], "dram": []}
    for r, t0 in alloc_t.items():
        lvl = home.get(r)
        if lvl is None:
            continue
        t1 = free_t.get(r, latency)
        nb = tensors[r].nbytes
        events[lvl].append((t0, nb))
        events[lvl].append((max(t1, t0), -nb))
    timeline: dict[str, list[tuple[float, float]]] = {}
    peaks: dict[str, float] = {}
    for lvl, ev in events.items():
        ev.sort(key=lambda e: (e[0], e[1]))  # frees before allocations at the same instant
        cur = static_bytes[lvl]
        peak = cur
        steps = [(0.0, cur)]
        for t, d in ev:
            cur += d
            steps.append((t, cur))
            peak = max(peak, cur)
        timeline[lvl] = steps
        peaks[lvl] = peak
    return timeline, peaks
