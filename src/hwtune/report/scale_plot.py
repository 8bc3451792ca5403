"""PNG plots of scaling sweeps: throughput and efficiency against accelerators (log scale),
knees marked, strategy regimes annotated."""

from __future__ import annotations

from pathlib import Path

from hwtune.train.scaling import ScaleResult


def plot_scaling(res: ScaleResult, path: str | Path, title: str) -> Path:
    """Write the sweep's plot to ``path`` (PNG) and return it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = [p for p in res.points if p.best]
    fig, ax1 = plt.subplots(figsize=(9, 5.2), dpi=120)
    if pts:
        ns = [p.n_gpus for p in pts]
        thr = [p.throughput for p in pts]
        ideal = [thr[0] / ns[0] * n for n in ns]
        ax1.plot(ns, ideal, ls=":", color="grey", label="linear")
        ax1.plot(ns, thr, marker="o", color="tab:blue", label="throughput (tokens/s)")
        ax1.set_xscale("log", base=2)
        ax1.set_yscale("log")
        ax2 = ax1.twinx()
        ax2.plot(
            ns,
            [p.efficiency for p in pts],
            marker="s",
            color="tab:orange",
            label="scaling efficiency",
        )
        ax2.set_ylim(0, 1.1)
        ax2.set_ylabel("scaling efficiency (per-GPU throughput / first point)")
        # shade strategy regimes
        colors = ["#e8f0fe", "#fdeee6", "#e9f7ef", "#f5eefc", "#fff8e1"]
        start = 0
        regime_of = {p.n_gpus: p.label for p in pts}
        for i in range(1, len(pts) + 1):
            if i == len(pts) or _shape(pts[i].label) != _shape(pts[start].label):
                lo = ns[start] / 1.3 if start == 0 else (ns[start - 1] * ns[start]) ** 0.5
                hi = ns[-1] * 1.3 if i == len(pts) else (ns[i - 1] * ns[i]) ** 0.5
                ax1.axvspan(lo, hi, color=colors[(start // 1) % len(colors)], alpha=0.6, lw=0)
                ax1.text((lo * hi) ** 0.5, min(thr) * 0.8, _shape(regime_of[ns[start]]),
                         ha="center", va="top", fontsize=7, rotation=90)  # fmt: skip
                start = i
        for k in res.knees:
            if k.kind == "efficiency":
                ax1.axvline(k.n_gpus, color="tab:red", ls="--", lw=1)
                ax1.text(k.n_gpus, max(thr), f" {k.fraction:.0%} knee\n {k.resource}",
                         color="tab:red", fontsize=7, va="top")  # fmt: skip
        h1, l1 = ax1.get_legend_handles_labels()
        h2, l2 = ax2.get_legend_handles_labels()
        ax1.legend(h1 + h2, l1 + l2, loc="lower right", fontsize=8)
    ax1.set_xlabel("accelerators")
    ax1.set_ylabel("tokens/s")
    ax1.set_title(title, fontsize=10)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out)
    plt.close(fig)
    return out


def _shape(label: str) -> str:
    """The parallel shape of a strategy label, without batch and memory details."""
    keep = [t for t in label.split() if t[:2] in ("tp", "pp", "cp", "ep") and not t.endswith("1")]
    return " ".join(keep) or "dp only"
