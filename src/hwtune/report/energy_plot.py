"""PNG of a co-optimization: every (batch, clock) point in time-to-target vs energy-to-target,
the feasible Pareto frontier, the choice and the frequency-only baseline.

(DESIGN.md puts plots in `report/`; this one lives here until `report/` grows a plotting
module, and computes nothing: it draws a `CoOptResult`.)"""

from __future__ import annotations

from pathlib import Path

from hwtune.energy.cooptimizer import CoOptResult
from hwtune.errors import HwtuneInputError


def plot_frontier(result: CoOptResult, path: str | Path, title: str = "") -> Path:
    """Write the figure to ``path`` (PNG) and return the path."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise HwtuneInputError(
            "plot", str(path), "matplotlib installed (pip install 'hwtune[plot]')"
        ) from None
    out = Path(path)
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    feas = [p for p in result.points if p.feasible]
    infeas = [p for p in result.points if not p.feasible]
    if infeas:
        ax.scatter([p.time_to_target_s for p in infeas], [p.energy_to_target_j for p in infeas],
                   s=10, c="#cccccc", label="over the cap")  # fmt: skip
    sc = ax.scatter(
        [p.time_to_target_s for p in feas],
        [p.energy_to_target_j for p in feas],
        s=16,
        c=[p.batch for p in feas],
        cmap="viridis",
        norm=matplotlib.colors.LogNorm(),
        label="feasible (colour = batch)",
    )
    fig.colorbar(sc, ax=ax, label="batch size")
    fr = result.frontier
    ax.plot([p.time_to_target_s for p in fr], [p.energy_to_target_j for p in fr],
            "-", c="#d62728", lw=1.5, label="Pareto frontier")  # fmt: skip
    b = result.best
    ax.scatter([b.time_to_target_s], [b.energy_to_target_j], marker="*", s=180, c="#d62728",
               zorder=5, label=f"choice: B={b.batch}, {b.frequency_hz / 1e6:.0f} MHz")  # fmt: skip
    fo = result.frequency_only
    if fo is not None:
        ax.scatter([fo.time_to_target_s], [fo.energy_to_target_j], marker="s", s=60,
                   c="#1f77b4", zorder=5,
                   label=f"frequency-only: B={fo.batch}, {fo.frequency_hz / 1e6:.0f} MHz")  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("time to target (s)")
    ax.set_ylabel("energy to target (J)")
    ax.set_title(title or f"power cap {result.cap_w:g} W, objective {result.objective}")
    ax.legend(fontsize=7, loc="best")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, format="png")
    plt.close(fig)
    return out
