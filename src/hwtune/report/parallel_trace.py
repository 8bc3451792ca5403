"""Perfetto / Chrome trace JSON and a PNG Gantt chart of a simulated plan.

Trace Event Format ("X" complete events and "C" counters, microsecond timestamps;
https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU): one process per
pipeline rank, a thread per stream (compute, collectives, sends), a memory counter per rank.
The Gantt chart draws the compute stream of each rank (forward, backward, input/weight gradient,
overlapped pairs, recomputation, optimizer) with the micro-batch number in each box, and the
collectives as a thin band under it. matplotlib is imported only when a PNG is asked for.
"""

from __future__ import annotations

import json
from pathlib import Path

from hwtune.parallel.simulator import SimResult

US = 1e6
TID = {"compute": 0, "comm": 1, "p2p": 2}
COLORS = {
    "F": "#4c72b0", "B": "#55a868", "I": "#8fd19e", "W": "#c7e9c0", "FB": "#8172b2",
    "R": "#dd8452", "OPT": "#7f7f7f", "AR": "#c44e52", "RS": "#c44e52", "AG": "#da8bc3",
    "SEND_F": "#937860", "SEND_B": "#937860",
}  # fmt: skip


def chrome_trace(res: SimResult, title: str = "hwtune plan") -> dict:
    """The trace document of a simulated step."""
    ev: list[dict] = []
    ranks = sorted({s.op.rank for s in res.spans})
    for r in ranks:
        ev.append({"ph": "M", "name": "process_name", "pid": r, "args": {"name": f"pp rank {r}"}})
        for name, tid in TID.items():
            ev.append(
                {"ph": "M", "name": "thread_name", "pid": r, "tid": tid, "args": {"name": name}}
            )
    for s in res.spans:
        o = s.op
        ev.append({
            "ph": "X", "pid": o.rank, "tid": TID[o.stream], "ts": s.start * US,
            "dur": max(0.0, s.end - s.start) * US, "name": o.label, "cat": o.kind,
            "args": {"stage": o.stage, "mb": o.mb, "peer": o.peer, "bytes": o.nbytes, "group": o.group},
        })  # fmt: skip
    for r, line in enumerate(res.memory):
        for t, b in line:
            ev.append(
                {
                    "ph": "C",
                    "pid": r,
                    "ts": t * US,
                    "name": "memory GiB",
                    "args": {"GiB": b / 2**30},
                }
            )
    return {
        "traceEvents": ev,
        "displayTimeUnit": "ms",
        "otherData": {"title": title, "step_time_s": res.step_time_s},
    }


def write_trace(res: SimResult, path: str | Path, title: str = "hwtune plan") -> Path:
    p = Path(path)
    p.write_text(json.dumps(chrome_trace(res, title)))
    return p


def write_gantt(res: SimResult, path: str | Path, title: str = "") -> Path:
    """A PNG Gantt chart of the pipeline schedule (one row per rank)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    ranks = sorted({s.op.rank for s in res.spans})
    scale, unit = (1e3, "ms") if res.step_time_s < 10 else (1.0, "s")
    fig, ax = plt.subplots(figsize=(14, 0.7 * len(ranks) + 1.6))
    # one bar collection per rank, stream and kind (one per op made a 32k-op plan take minutes)
    bars: dict[tuple[int, str, str], list[tuple[float, float]]] = {}
    for s in res.spans:
        o = s.op
        if o.stream != "p2p":
            bars.setdefault((o.rank, o.stream, o.kind), []).append(
                (s.start * scale, (s.end - s.start) * scale)
            )
    for (rank, stream, kind), xs in bars.items():
        y = -rank
        h, y0 = (0.7, y - 0.35) if stream == "compute" else (0.18, y - 0.58)
        ax.broken_barh(xs, (y0, h), facecolors=COLORS.get(kind, "#aaaaaa"), edgecolor="white",
                       linewidth=0.3)  # fmt: skip
    for s in res.spans:  # the micro-batch in each box wide enough to read it
        o = s.op
        y, w = -o.rank, (s.end - s.start) * scale
        if o.stream == "compute" and o.mb >= 0 and w > res.step_time_s * scale / 120:
            ax.text(
                s.start * scale + w / 2,
                y,
                str(o.mb),
                ha="center",
                va="center",
                fontsize=6,
                color="white",
            )
    ax.set_yticks([-r for r in ranks], [f"rank {r}" for r in ranks])
    ax.set_xlabel(f"time ({unit})")
    ax.set_xlim(0, res.step_time_s * scale)
    drawn = {kind for _, _, kind in bars}
    kinds = [k for k in COLORS if k in drawn]
    ax.legend(handles=[Patch(color=COLORS[k], label=k) for k in kinds], ncol=len(kinds),
              loc="upper center", bbox_to_anchor=(0.5, -0.25 if len(ranks) < 4 else -0.12), fontsize=7)  # fmt: skip
    ax.set_title(title or f"step {res.step_time_s * scale:.1f} {unit}")
    fig.tight_layout()
    p = Path(path)
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p
