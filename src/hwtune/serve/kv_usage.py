"""KV-cache usage over time: each replica's used blocks as a step function, the deployment's
fraction of all its blocks, and its time-weighted mean.

Each replica logs its used blocks whenever they change (a step's launch allocates, a finished or
handed-off request frees; `hwtune.serve.simulator`). The value holds until the replica's next
entry, so the deployment's used fraction at time t is the sum over replicas of their last
entries at or before t, over the sum of their blocks. Before its first entry a replica holds
none. The mean over a run is that step function's integral over the run divided by its span (a
time average, not an average over entries, which would weigh busy stretches of short steps more
and depend on how many decode steps the simulator fast-forwarded in one event).
"""

from __future__ import annotations

import numpy as np


def stretch_blocks(
    computed: np.ndarray, held: np.ndarray, block_size: int, steps: int
) -> np.ndarray:
    """Blocks that running requests hold in each of ``steps`` decode steps, all growing by one
    token a step: step i computes token ``computed + 1 + i`` of each request, which then needs
    ceil((computed + 1 + i) / block_size) blocks, at least the ``held`` it has.

    Request r first needs a block more at step ``held * block_size - computed`` and one more
    every ``block_size`` steps after, so the total is a cumulative count of those impulses,
    summed residue by residue (O(requests + steps), not their product)."""
    first = held * block_size - computed
    if np.any(first < 0):
        raise ValueError("a request holds fewer blocks than its computed tokens need")
    lanes = -(-steps // block_size) * block_size
    starts = np.bincount(first[first < steps], minlength=lanes)[:lanes]
    impulses = starts.reshape(-1, block_size).cumsum(axis=0).reshape(-1)[:steps]
    return int(held.sum()) + np.cumsum(impulses)


def merge_usage(
    logs: list[tuple[list[float], list[int], int]],
) -> tuple[np.ndarray, np.ndarray, float]:
    """The deployment's used fraction of KV blocks over time from each replica's log (entry
    times in order, used blocks, the replica's blocks). Returns the times, the fraction at each
    (after every entry at that time), and the largest fraction any one replica reached."""
    cap = sum(n for _t, _u, n in logs)
    if not cap:
        return np.zeros(0), np.zeros(0), 0.0
    ts, ds, peak = [], [], 0.0
    for times, used, n in logs:
        if not times:
            continue
        u = np.asarray(used, dtype=float)
        ts.append(np.asarray(times, dtype=float))
        ds.append(np.diff(u, prepend=0.0))
        peak = max(peak, float(u.max()) / max(n, 1))
    if not ts:
        return np.zeros(0), np.zeros(0), 0.0
    t = np.concatenate(ts)
    order = np.argsort(t, kind="stable")  # a replica's entries at one instant keep their order
    t = t[order]
    frac = np.cumsum(np.concatenate(ds)[order]) / cap
    last = np.append(t[1:] != t[:-1], True)  # the state after every entry at an instant
    return t[last], frac[last], peak


def time_weighted_mean(times: np.ndarray, values: np.ndarray, start: float, end: float) -> float:
    """Mean over [start, end] of the step function that is 0 before ``times[0]`` and
    ``values[i]`` from ``times[i]`` until the next time."""
    if end <= start or not times.size:
        return 0.0
    edges = np.clip(np.append(times, end), start, end)
    return float(np.dot(values, np.diff(edges)) / (end - start))
