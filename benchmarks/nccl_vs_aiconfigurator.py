"""Tier-1 NCCL collectives against NVIDIA's published nccl-tests timings on one H100/H200 node.

NVIDIA's aiconfigurator (ai-dynamo/aiconfigurator, Apache-2.0) ships NCCL timings it measured
with the nccl-tests binaries (``collector/network/collect_nccl.py``: ``all_reduce_perf``,
``all_gather_perf``, ``reduce_scatter_perf``, ``alltoall_perf`` at one size per call, the
out-of-place time) on 2, 4 and 8 GPUs of one node: ``aic-core/src/aiconfigurator_core/systems/
data/<gpu>/comm/nccl/<dir>/nccl_perf.parquet`` (``message_size`` in elements of ``nccl_dtype``,
``latency`` in ms; NCCL 2.29.2 in both directories kept). ``--aiconfigurator-src`` extracts the
fp16 rows into ``benchmarks/data/aiconfigurator_nccl.csv`` (needs pandas and pyarrow; the file
is kept in the repository). Without it the script prints, per GPU, collective and group size,
the median error of `hwtune.cost.collectives` over 1 KB-1 GB, now and with the model before
2026-12-04: all-gather and reduce-scatter on the Simple protocol alone (NCCL's LL protocol was
priced for all-reduce only), all-to-all as n-1 Simple steps one after another, and NVLS
all-reduce at the 8-GPU rate on fewer GPUs too. The
all-to-all's p2p figures are fitted to the H200 rows (`hwtune.cost.collectives`); its H100 rows
are the check.

    .venv/bin/python benchmarks/nccl_vs_aiconfigurator.py [--aiconfigurator-src DIR] [--rows]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from published_csv import (  # noqa: E402
    AICONFIGURATOR_GPUS,
    aiconfigurator_data,
    read_commented_csv,
    write_commented_csv,
)

DATA = Path(__file__).resolve().parent / "data" / "aiconfigurator_nccl.csv"
HEADER = (
    "# NVIDIA aiconfigurator (ai-dynamo/aiconfigurator, commit 095f58a51, Apache-2.0),\n"
    "# aic-core/src/aiconfigurator_core/systems/data/<gpu>/comm/nccl/<dir>/nccl_perf.parquet:\n"
    "# nccl-tests out-of-place time of one collective on 2, 4 or 8 GPUs of one node, fp16, in\n"
    "# microseconds (latency, ms there); bytes = 2 x message_size (elements); nccl-tests' size:\n"
    "# the all-reduce buffer, the gathered output, the scattered input, the all-to-all buffer.\n"
)
SERIES = (("h200_sxm", "2.26.2"), ("h100_sxm", "2.29.2"))  # (gpu dir, directory); NCCL 2.29.2
OPS = ("all_reduce", "all_gather", "reduce_scatter", "alltoall")
FIELDS = ("gpu", "nccl", "op", "gpus", "bytes", "us")
RANGE = (1 << 10, 1 << 30)


def extract(src: Path) -> int:
    """Write the kept CSV from a clone of aiconfigurator; the number of rows."""
    import pandas as pd  # only for the extraction

    base = aiconfigurator_data(src)
    rows = []
    for gpu, directory in SERIES:
        d = pd.read_parquet(base / gpu / "comm" / "nccl" / directory / "nccl_perf.parquet")
        d = d[d.nccl_dtype == "half"]
        for r in d.itertuples():
            rows.append({
                "gpu": gpu, "nccl": r.version, "op": r.op_name, "gpus": int(r.num_gpus),
                "bytes": 2 * int(r.message_size), "us": round(float(r.latency) * 1e3, 4),
            })  # fmt: skip
    write_commented_csv(DATA, HEADER, FIELDS, rows)
    return len(rows)


def load() -> list[dict]:
    return read_commented_csv(DATA)


def predict(row: dict, before: bool = False) -> float:
    """Predicted microseconds of one row; ``before``: the model before 2026-12-04, the Simple
    protocol without NCCL's fixed 8.4 us per call, all-gather and reduce-scatter on it alone,
    all-to-all as n-1 pairwise Simple steps of the ring's link, and NVLS all-reduce at the
    8-GPU rate on 2 and 4 GPUs as well (written out from the link-level primitives)."""
    from hwtune.cost import collectives as c
    from hwtune.hardware.cluster import make_cluster

    cl = make_cluster(AICONFIGURATOR_GPUS[row["gpu"]], 8)
    n = int(row["gpus"])
    span = cl.span(n, 1)
    link = cl.intra_link()
    s, op = float(row["bytes"]), row["op"]
    if not before:
        if op == "all_reduce":
            t = c.all_reduce_time(s, span, cl)
        elif op == "alltoall":
            t = c.all_to_all_time(s, span, cl)
        else:
            t = (c.all_gather_time if op == "all_gather" else c.reduce_scatter_time)(s, span, cl)
    elif op == "all_reduce":
        nvls = 2 * (n - 1) * link.latency + s / (cl.nvls_allreduce_algbw_gbps * 1e9)
        t = min(c.ring_all_reduce(s, n, link), nvls, c._ll_all_reduce(s, span, cl, link.bandwidth))
    elif op == "alltoall":
        t = c.pairwise_all_to_all(s, n, link)
    else:
        t = c.ring_all_gather(s, n, link)
    return t * 1e6


def in_range(row: dict) -> bool:
    return RANGE[0] <= int(row["bytes"]) <= RANGE[1]


def compare(rows: list[dict]) -> list[dict]:
    """One line per GPU, collective and group size: points, median errors now and before."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in filter(in_range, rows):
        groups[(r["gpu"], r["op"], int(r["gpus"]))].append(r)
    out = []
    for key, rs in sorted(groups.items()):
        now = [predict(r) / float(r["us"]) for r in rs]
        before = [predict(r, before=True) / float(r["us"]) for r in rs]
        out.append({
            "series": key, "points": len(rs),
            "median": statistics.median(abs(x - 1) for x in now),
            "before": statistics.median(abs(x - 1) for x in before),
            "ratio": statistics.median(now),
        })  # fmt: skip
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--aiconfigurator-src", type=Path, help="a clone of ai-dynamo/aiconfigurator")
    ap.add_argument("--rows", action="store_true", help="print every row compared")
    args = ap.parse_args()
    if args.aiconfigurator_src:
        print(f"wrote {extract(args.aiconfigurator_src)} rows to {DATA}")
    rows = load()
    if args.rows:
        for r in filter(in_range, rows):
            p = predict(r)
            print(f"{r['gpu']} {r['op']:14s} n={r['gpus']} {int(r['bytes']) / 1024:>9.0f} KB "
                  f"measured {float(r['us']):8.1f} us, predicted {p:8.1f} "
                  f"({p / float(r['us']):.2f}x)")  # fmt: skip
    print("| GPU | collective | GPUs | points | median error | predicted/measured | "
          "before 2026-12-04 |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in compare(rows):
        gpu, op, n = r["series"]
        print(f"| {gpu} | {op} | {n} | {r['points']} | {r['median']:.0%} | {r['ratio']:.2f} | "
              f"{r['before']:.0%} |")  # fmt: skip


if __name__ == "__main__":
    main()
