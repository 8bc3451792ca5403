"""Fast analytical mapping of one op onto one core: spatial unrolling, loop tiling for the local
buffer, compute cycles, traffic per memory level, energy.

Model (after ZigZag, Mei et al. IEEE TC 2021, Sec. IV, and Timeloop, Parashar et al. ISPASS
2019, Sec. IV-B):

- Spatial: the PE array unrolls two loop dimensions (rows x cols), one of the core's
  ``spatial`` options, the one with the fewest cycles:
  ``cycles = G * ceil(D_rows / rows) * ceil(D_cols / cols) * prod(other dims)``.
- Temporal: the N, K, C loops are tiled (tiles t_N, t_K, t_C; R stays whole) so that the three
  operand tiles fit the local buffer; tile footprints are proportional to the tile's share of
  each operand's relevant dimensions (conv halos neglected). For each of the 6 loop orders an
  operand is re-fetched from the level above once per iteration of each irrelevant loop that
  sits outside its innermost relevant loop with more than one iteration; an output whose
  reduction loop sits outside is spilled as partial sums (2x - 1 transfers). The mapper picks
  the (tiles, order) with the least traffic.
- Local traffic (array <-> local buffer): each operand is read MACs / (its spatial reuse) times,
  the spatial reuse being the unrolled size of the dimensions it does not depend on.
- Latency of the op = max(compute, local traffic / local bandwidth, traffic to each level /
  that level's bandwidth), which is never below the roofline
  max(MACs / peak, compulsory bytes / bandwidth) (Williams et al., CACM 2009).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from hwtune.accel.architecture import CoreType
from hwtune.errors import HwtuneInputError

DIMS = ("N", "K", "C")
# relevant tiled dims of roles A, B and output O, and the reduction dims of O, per phase
ROLES = {
    "fwd": (("N", "C"), ("K", "C"), ("N", "K")),
    "recompute": (("N", "C"), ("K", "C"), ("N", "K")),
    "bwd_x": (("N", "K"), ("K", "C"), ("N", "C")),
    "bwd_w": (("N", "C"), ("N", "K"), ("K", "C")),
}
ORDERS = tuple(itertools.permutations(range(3)))  # outer -> inner indices into DIMS


@dataclass(frozen=True)
class Mapping:
    """Cost of one op on one core, before the scheduler decides where its tensors live."""

    cycles: int
    spatial: tuple[str, str]
    utilization: float
    tiles: tuple[int, int, int]  # t_N, t_K, t_C
    order: tuple[str, str, str]
    traffic: tuple[
        float, float, float
    ]  # bytes between the local buffer and the level above: A, B, O
    compulsory: tuple[
        float, float, float
    ]  # each operand once (O: written once, +read if accumulating)
    local_bytes: float
    footprint: float  # bytes of the chosen tiles in the local buffer
    min_buffer: float  # smallest local buffer any tiling needs


def _candidates(d: int, u: int) -> np.ndarray:
    """Tile sizes for a loop of ``d`` iterations unrolled ``u`` wide: u * 2^j below d, and d."""
    first = min(d, u)
    c = [first]
    while c[-1] * 2 < d:
        c.append(c[-1] * 2)
    if c[-1] != d:
        c.append(d)
    return np.asarray(c, dtype=np.float64)


def map_mac_op(
    phase: str,
    g: int,
    n: int,
    k: int,
    c: int,
    r: int,
    bytes_a: float,
    bytes_b: float,
    bytes_o: float,
    elem_bytes: int,
    accumulate: bool,
    core: CoreType,
) -> Mapping:
    """Map a MAC op (loop nest G, N, K, C, R; operand bytes of roles A, B, O) onto ``core``.
    Raises ``_NoFit`` (with the smallest buffer any tiling needs) if no tiling fits."""
    shape = (core.pe_rows, core.pe_cols, core.spatial, core.local_buffer_bytes)
    return _map(phase, g, n, k, c, r, bytes_a, bytes_b, bytes_o, elem_bytes, accumulate, shape)


map_mac_op.cache_clear = lambda: _map.cache_clear()  # type: ignore[attr-defined]


@lru_cache(maxsize=65536)
def _map(
    phase: str,
    g: int,
    n: int,
    k: int,
    c: int,
    r: int,
    bytes_a: float,
    bytes_b: float,
    bytes_o: float,
    elem_bytes: int,
    accumulate: bool,
    core_shape: tuple,
) -> Mapping:
    pe_rows, pe_cols, spatial, buffer_bytes = core_shape
    dims = {"N": n, "K": k, "C": c, "R": r}
    macs = g * n * k * c * r
    # spatial unrolling: fewest cycles
    best = None
    for rows_d, cols_d in spatial:
        cyc = g * math.ceil(dims[rows_d] / pe_rows) * math.ceil(dims[cols_d] / pe_cols)
        for d in ("N", "K", "C", "R"):
            if d not in (rows_d, cols_d):
                cyc *= dims[d]
        if best is None or cyc < best[0]:
            best = (cyc, rows_d, cols_d)
    assert best is not None
    cycles, rows_d, cols_d = best
    unroll = {"N": 1, "K": 1, "C": 1, "R": 1}
    unroll[rows_d] = min(dims[rows_d], pe_rows)
    unroll[cols_d] = min(dims[cols_d], pe_cols)

    rel = ROLES[phase]
    op_bytes = (bytes_a, bytes_b, bytes_o)
    # temporal tiling, vectorized over candidate tiles (broadcast over an (nN, nK, nC) grid)
    cn = _candidates(n, unroll["N"]).reshape(-1, 1, 1)
    ck = _candidates(k, unroll["K"]).reshape(1, -1, 1)
    cc = _candidates(c, unroll["C"]).reshape(1, 1, -1)
    frac = {"N": cn / n, "K": ck / k, "C": cc / c}
    nt = {"N": np.ceil(n / cn), "K": np.ceil(k / ck), "C": np.ceil(c / cc)}
    many = {d: nt[d] > 1 for d in DIMS}
    foot = sum(op_bytes[i] / g * frac[rel[i][0]] * frac[rel[i][1]] for i in range(3))
    fits = foot <= buffer_bytes
    min_buffer = float(foot.min())
    if not fits.any():
        raise _NoFit(min_buffer)
    penalty = np.where(fits, 0.0, np.inf)

    # Each operand depends on two of the three tiled loops and is re-fetched by the third
    # (``d``): never if d is innermost; if d is in the middle, when the innermost loop (then a
    # relevant one) iterates; if d is outermost, when either relevant loop iterates. An output
    # re-fetched by a reduction loop spills partial sums (2x - 1 transfers).
    def traffic(i: int, refetch: np.ndarray | float) -> np.ndarray | float:
        if i == 2:
            return op_bytes[2] * (2 * refetch - 1) + (op_bytes[2] if accumulate else 0.0)
        return op_bytes[i] * refetch

    per_op = []
    for i in range(3):
        d = next(x for x in DIMS if x not in rel[i])
        r1, r2 = rel[i]
        outer = traffic(i, np.where(many[r1] | many[r2], nt[d], 1.0))
        middle = {r: traffic(i, np.where(many[r], nt[d], 1.0)) for r in (r1, r2)}
        per_op.append((d, outer, middle, traffic(i, 1.0)))

    totals = []
    choices = []
    for order in ORDERS:
        names = [DIMS[j] for j in order]
        parts = []
        for d, outer, middle, inner in per_op:
            p = names.index(d)
            parts.append(inner if p == 2 else (outer if p == 0 else middle[names[2]]))
        totals.append(parts[0] + parts[1] + parts[2] + penalty)
        choices.append(parts)
    shape = foot.shape
    stacked = np.stack([np.broadcast_to(x, shape) for x in totals])
    flat = int(np.argmin(stacked))
    oi, idx = divmod(flat, foot.size)
    ii = np.unravel_index(idx, shape)
    order = ORDERS[oi]
    parts = tuple(
        float(np.broadcast_to(p, shape)[ii]) if isinstance(p, np.ndarray) else float(p)
        for p in choices[oi]
    )
    # local traffic (array <-> local buffer): an operand is multicast along unrolled loops it
    # does not depend on; one that depends on both unrolled loops is stationary in the PEs and
    # reused over the tile's remaining loop (weights over N for weight-stationary, partial sums
    # over C for output-stationary).
    tile = {"N": float(cn.flat[ii[0]]), "K": float(ck.flat[ii[1]]), "C": float(cc.flat[ii[2]])}
    r_rel = (True, phase != "bwd_w", phase == "bwd_w")  # which of A, B, O depend on R
    local = 0.0
    for i, rs in enumerate(rel):
        relevant = set(rs) | ({"R"} if r_rel[i] else set())
        reuse = 1.0
        for d in (rows_d, cols_d):
            if d not in relevant:
                reuse *= unroll[d]
        if rows_d in relevant and cols_d in relevant:
            other = next(x for x in DIMS if x not in rs)
            reuse *= tile[other]
        local += macs / reuse * elem_bytes
    compulsory = (bytes_a, bytes_b, bytes_o * (2.0 if accumulate else 1.0))
    return Mapping(
        cycles=int(cycles),
        spatial=(rows_d, cols_d),
        utilization=macs / (cycles * pe_rows * pe_cols),
        tiles=(int(cn.flat[ii[0]]), int(ck.flat[ii[1]]), int(cc.flat[ii[2]])),
        order=tuple(DIMS[j] for j in order),  # type: ignore[arg-type]
        traffic=parts,  # type: ignore[arg-type]
        compulsory=compulsory,
        local_bytes=local,
        footprint=float(foot[ii]),
        min_buffer=min_buffer,
    )


class _NoFit(Exception):
    def __init__(self, min_buffer: float) -> None:
        self.min_buffer = min_buffer


def no_fit_error(op_name: str, min_buffer: float, cores: tuple[CoreType, ...]) -> HwtuneInputError:
    biggest = max(cores, key=lambda c: c.local_buffer_bytes)
    return HwtuneInputError(
        f"layer {op_name}",
        f"smallest tile {min_buffer / 1024:.1f} KiB",
        f"a core whose local buffer holds it: needs local_buffer_kib >= {math.ceil(min_buffer / 1024)}"
        f" (largest here: {biggest.name} with {biggest.local_buffer_kib:g} KiB)",
    )


def vector_cycles(vector_ops: int, core: CoreType) -> int:
    """Elementwise ops on the core's vector unit: ``ceil(ops / simd_lanes)`` cycles."""
    return math.ceil(vector_ops / core.simd_lanes)
