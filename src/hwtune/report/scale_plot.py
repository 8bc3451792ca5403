"""PNG plots of scaling sweeps: throughput and efficiency against accelerators (log scale),
knees marked, strategy regimes shaded and named."""

from __future__ import annotations

import textwrap
from pathlib import Path

from hwtune.train.scaling import ScaleResult

REGIME_COLORS = ["#e8f0fe", "#fdeee6", "#e9f7ef", "#f5eefc", "#fff8e1"]
BOX = {"facecolor": "white", "alpha": 0.75, "edgecolor": "none", "pad": 1.5}


def plot_scaling(res: ScaleResult, path: str | Path, title: str) -> Path:
    """Write the sweep's plot to ``path`` (PNG, or another format matplotlib writes by suffix)
    and return it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = [p for p in res.points if p.best]
    fig, ax1 = plt.subplots(figsize=(9, 5.2), dpi=120)
    ax1.set_xscale("log", base=2)
    handles, labels = [], []
    if pts:
        ns = [p.n_gpus for p in pts]
        thr = [p.throughput for p in pts]
        ideal = [thr[0] / ns[0] * n for n in ns]
        ax1.plot(ns, ideal, ls=":", color="grey", label="linear")
        ax1.plot(ns, thr, marker="o", color="tab:blue", label="throughput (tokens/s)")
        ax1.set_yscale("log")
        ax2 = ax1.twinx()
        eff = [p.efficiency for p in pts]
        ax2.plot(ns, eff, marker="s", color="tab:orange", label="scaling efficiency")
        # superlinear points (e.g. the first count needed offload) stay in view
        ax2.set_ylim(0, max(1.1, max(eff) * 1.08))
        ax2.set_ylabel("scaling efficiency (per-GPU throughput / first fitting count)")
        unfit = [p.n_gpus for p in res.points if not p.best]
        if unfit:
            ax2.plot(unfit, [0.0] * len(unfit), ls="none", marker="x", ms=9, color="tab:red",
                     clip_on=False, label="no strategy fits")  # fmt: skip
        xt = ax1.get_xaxis_transform()  # x in data, y as a fraction of the axes
        # one shaded band per run of counts with the regime the sweep lists (ScalePoint.regime)
        runs, start = [], 0
        for i in range(1, len(pts) + 1):
            if i == len(pts) or pts[i].regime != pts[start].regime:
                runs.append((start, i - 1))
                start = i
        for r, (a, b) in enumerate(runs):
            lo = ns[a] / 1.3 if a == 0 else (ns[a - 1] * ns[a]) ** 0.5
            hi = ns[-1] * 1.3 if b == len(pts) - 1 else (ns[b] * ns[b + 1]) ** 0.5
            ax1.axvspan(lo, hi, color=REGIME_COLORS[r % len(REGIME_COLORS)], alpha=0.6, lw=0)
            ax1.text((lo * hi) ** 0.5, 0.03, pts[a].regime, transform=xt, ha="center",
                     va="bottom", fontsize=7, rotation=90, color="dimgrey", bbox=BOX)  # fmt: skip
        middle = (ns[0] * ns[-1]) ** 0.5  # knees right of it are labelled on their left
        for j, k in enumerate(k for k in res.knees if k.kind == "efficiency"):
            ax1.axvline(k.n_gpus, color="tab:red", ls="--", lw=1)
            text = f"{k.fraction:.0%} knee\n" + textwrap.fill(k.resource, 34)
            ax1.text(k.n_gpus * (0.93 if k.n_gpus > middle else 1.07), 0.98 - 0.16 * j, text,
                     transform=xt, color="tab:red", fontsize=7, va="top",
                     ha="right" if k.n_gpus > middle else "left", bbox=BOX)  # fmt: skip
        for ax in (ax1, ax2):
            h, lab = ax.get_legend_handles_labels()
            handles += h
            labels += lab
    else:
        ax1.text(0.5, 0.5, "no strategy fits at any count", transform=ax1.transAxes,
                 ha="center", va="center")  # fmt: skip
    ax1.set_xlabel("accelerators")
    ax1.set_ylabel("tokens/s")
    ax1.set_title(title, fontsize=10)
    if handles:
        ax1.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=4,
                   fontsize=8, frameon=False)  # fmt: skip
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, bbox_inches="tight")
    plt.close(fig)
    return out
