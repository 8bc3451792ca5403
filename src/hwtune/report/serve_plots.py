"""PNG figures of a serving simulation: latency CDFs and a timeline (matplotlib, Agg backend)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hwtune.errors import HwtuneInputError
from hwtune.serve.accuracy import VALIDATION_TARGETS, relative_errors
from hwtune.serve.metrics import over_time, per_request
from hwtune.serve.simulator import SimResult


def plot_serving(res: SimResult, path: str | Path, title: str = "") -> Path:
    """Three panels: CDFs of TTFT, TPOT and E2E; KV-cache utilization (and, with prefix caching
    queried, the hit rate in 50 windows: `hwtune.serve.metrics.over_time`) over time; finished
    requests over time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pr = per_request(res)
    fig, ax = plt.subplots(1, 3, figsize=(15, 4.2))
    for key, label in (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2e", "E2E")):
        v = np.sort(pr[key][np.isfinite(pr[key])])
        if v.size:
            ax[0].plot(v, np.arange(1, v.size + 1) / v.size, label=label)
    ax[0].set_xscale("log")
    ax[0].set_xlabel("seconds")
    ax[0].set_ylabel("fraction of requests")
    ax[0].set_title("latency CDF")
    ax[0].legend()
    ax[0].grid(alpha=0.3)
    if res.kv_time.size:
        ax[1].step(res.kv_time, 100 * res.kv_util, where="post", lw=0.8)
    ax[1].set_xlabel("simulated time (s)")
    ax[1].set_ylabel("KV cache used (%)")
    ax[1].set_title("KV utilization (all replicas)")
    ax[1].grid(alpha=0.3)
    if res.prefix_query_tokens:
        ot = over_time(res, 50)
        hit = np.array([np.nan if h is None else 100 * h for h in ot["prefix_hit_rate"]])
        twin = ax[1].twinx()
        twin.plot(ot["t_s"], hit, "o-", color="tab:orange", ms=2.5, lw=0.8)
        twin.set_ylabel("prefix-cache hits (% of prompt tokens)", color="tab:orange")
        twin.set_ylim(0, 100)
        ax[1].set_title("KV utilization and prefix hits (all replicas)")
    fin = np.sort(np.array([r.finish for r in res.requests]))
    ax[2].plot(fin, np.arange(1, fin.size + 1), lw=1)
    ax[2].set_xlabel("simulated time (s)")
    ax[2].set_ylabel("requests finished")
    ax[2].set_title("timeline")
    ax[2].grid(alpha=0.3)
    return _finish(fig, path, title, dpi=110)


def plot_validation(rows: list[dict], path: str | Path, title: str = "") -> Path:
    """Predicted against measured TTFT and TPOT of published runs (`benchmarks/serve_validation.py`
    rows: ``ttft_s``, ``tpot_s``, ``pred_ttft_s``, ``pred_tpot_s``, ``backend``), one colour per
    engine, on log axes with the identity and the target band (`VALIDATION_TARGETS`); a third
    panel holds the cumulative share of runs within each relative error, with the targets."""
    if not rows:
        raise HwtuneInputError("rows", rows, "at least one predicted run")
    need = ("ttft_s", "tpot_s", "pred_ttft_s", "pred_tpot_s", "backend")
    for o in rows:
        gone = [k for k in need if k not in o]
        if gone:
            raise HwtuneInputError(f"rows[{o.get('id', '?')}].{gone[0]}", None,
                                   "a serve_validation row with " + ", ".join(need))  # fmt: skip
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 3, figsize=(16, 5))
    backends = sorted({o["backend"] for o in rows})
    colours = {b: f"C{i}" for i, b in enumerate(backends)}  # matplotlib's colour cycle
    lines = []
    for i, (key, label) in enumerate((("ttft", "TTFT"), ("tpot", "TPOT"))):
        meas = np.array([o[f"{key}_s"] for o in rows], float)
        pred = np.array([o[f"pred_{key}_s"] for o in rows], float)
        ok = np.isfinite(meas) & np.isfinite(pred) & (meas > 0) & (pred > 0)
        if not ok.all():
            bad = rows[int(np.flatnonzero(~ok)[0])]
            raise HwtuneInputError(
                f"rows[{bad.get('id', '?')}].{key}",
                (bad[f"{key}_s"], bad[f"pred_{key}_s"]),
                "a positive measured and predicted latency (s)",
            )
        err = relative_errors(pred, meas)
        tgt = VALIDATION_TARGETS[key]
        for b in backends:
            sel = np.array([o["backend"] == b for o in rows])
            ax[i].scatter(meas[sel], pred[sel], s=9, alpha=0.6, color=colours[b],
                          label=f"{b} ({int(sel.sum())})")  # fmt: skip
        lo = min(meas.min(), pred.min()) / 1.5
        hi = max(meas.max(), pred.max()) * 1.5
        xs = np.array([lo, hi])
        ax[i].plot(xs, xs, color="black", lw=0.8)
        for f in (1 - tgt, 1 + tgt):
            ax[i].plot(xs, xs * f, color="grey", lw=0.8, ls="--")
        ax[i].set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi),
                  xlabel=f"measured {label} (s)", ylabel=f"predicted {label} (s)")  # fmt: skip
        within = int((err <= tgt).sum())
        med = float(np.median(err))
        ax[i].set_title(f"{label}: median error {med:.1%}, {within} of {err.size} within "
                        f"{tgt:.0%} (dashed)")  # fmt: skip
        ax[i].legend(loc="upper left", fontsize=8)
        ax[i].grid(alpha=0.3, which="both")
        e = np.sort(np.maximum(err, 1e-4))  # a log axis: exact predictions at 0.01%
        lines.append(ax[2].plot(100 * e, np.arange(1, e.size + 1) / e.size, label=label)[0])
        ax[2].axvline(100 * tgt, color=lines[-1].get_color(), ls="--", lw=0.8)
    ax[2].axhline(0.5, color="grey", lw=0.6)
    ax[2].set(
        xscale="log",
        xlabel="relative error (%)",
        ylabel="share of runs",
        title="share of runs within each error (targets dashed)",
    )
    ax[2].legend(loc="lower right")
    ax[2].grid(alpha=0.3, which="both")
    return _finish(fig, path, title, dpi=100)


def _finish(fig: object, path: str | Path, title: str, dpi: int) -> Path:
    """Title, lay out, write and close a figure; the path written."""
    import matplotlib.pyplot as plt

    if title:
        fig.suptitle(title)  # type: ignore[attr-defined]
    fig.tight_layout()  # type: ignore[attr-defined]
    p = Path(path)
    fig.savefig(p, dpi=dpi)  # type: ignore[attr-defined]
    plt.close(fig)  # type: ignore[arg-type]
    return p
