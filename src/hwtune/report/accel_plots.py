"""Figures for `hwtune accel` (matplotlib, Agg backend): the Pareto front of a search, fusion
vs DRAM traffic, checkpointing memory vs recomputation, fronts under growing area budgets."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _plt():  # noqa: ANN202
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def pareto_plot(
    F: np.ndarray,
    path: str | Path,
    third: str = "area",
    all_F: np.ndarray | None = None,
    title: str = "",
) -> Path:
    """Latency vs energy of the Pareto set, colored by the third objective."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4.5))
    if all_F is not None and len(all_F):
        ax.scatter(all_F[:, 0] * 1e3, all_F[:, 1] * 1e3, s=4, c="0.85", label="evaluated")
    sc = ax.scatter(
        F[:, 0] * 1e3,
        F[:, 1] * 1e3,
        c=F[:, 2] / (1 if third == "area" else 2**20),
        s=22,
        cmap="viridis",
        label="Pareto set",
    )
    fig.colorbar(sc, ax=ax, label="area (mm$^2$)" if third == "area" else "peak DRAM (MiB)")
    ax.set_xlabel("training-step latency (ms)")
    ax.set_ylabel("training-step energy (mJ)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_title(title or "NSGA-II architecture search")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)


def front_2d(F: np.ndarray) -> np.ndarray:
    """The latency-energy non-dominated points of ``F`` (first two columns), by latency."""
    F = F[np.lexsort((F[:, 1], F[:, 0]))]
    out, best = [], np.inf
    for row in F:
        if row[1] < best:
            out.append(row)
            best = row[1]
    return np.array(out)


def fronts_plot(fronts: list[tuple[float, np.ndarray]], path: str | Path, title: str = "") -> Path:
    """Latency-energy Pareto fronts, one per area budget (mm^2)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for budget, F in fronts:
        if len(F):
            P = front_2d(F[:, :2])
            ax.step(
                P[:, 0] * 1e3,
                P[:, 1] * 1e3,
                where="post",
                marker="o",
                ms=3,
                label=f"area <= {budget:g} mm$^2$",
            )
    ax.set_xlabel("training-step latency (ms)")
    ax.set_ylabel("training-step energy (mJ)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_title(title or "Pareto front vs area budget")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)


def fusion_plot(rows: list[dict], path: str | Path, title: str = "") -> Path:
    """DRAM traffic and latency per fusion depth; rows: {label, depth, dram_bytes, latency_s}."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    for label in dict.fromkeys(r["label"] for r in rows):
        rr = [r for r in rows if r["label"] == label]
        ax.plot(
            [r["depth"] for r in rr], [r["dram_bytes"] / 2**20 for r in rr], marker="o", label=label
        )
    ax.set_xlabel("fusion depth (ops per fused group; 1 = layer by layer)")
    ax.set_ylabel("DRAM traffic per training step (MiB)")
    ax.set_title(title or "Layer fusion lowers DRAM traffic")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)


def checkpoint_plot(rows: list[dict], path: str | Path, title: str = "") -> Path:
    """Activation memory vs recomputation; rows: {label, peak_bytes, recompute_s, latency_s}."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    for label in dict.fromkeys(r["label"] for r in rows):
        rr = sorted((r for r in rows if r["label"] == label), key=lambda r: r["peak_bytes"])
        ax.plot(
            [r["peak_bytes"] / 2**20 for r in rr],
            [r["latency_s"] * 1e3 for r in rr],
            marker="o",
            label=label,
        )
    ax.set_xlabel("peak activation memory (MiB)")
    ax.set_ylabel("training-step latency with recomputation (ms)")
    ax.set_title(title or "Checkpointing trades memory for recomputation")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)
