"""PNG figures of a serving simulation: latency CDFs and a timeline (matplotlib, Agg backend)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

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
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    p = Path(path)
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p
