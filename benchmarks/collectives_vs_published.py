"""Tier-1 all-reduce times (`hwtune.cost.collectives.all_reduce_time`) against published
nccl-tests runs.

``benchmarks/data/nccl_published.csv`` holds 210 rows of ``all_reduce_perf`` output (float, sum,
out-of-place) copied as printed from public sources, each row with its URL: NVIDIA/nccl-tests
issues #290 and #309 (runs NVIDIA's engineers called normal), CoreWeave's and Oracle's published
example outputs, a Nebius cookbook and one personal result file (GCP A3 Mega, low weight). Each
system is rebuilt from the catalog (`hwtune.hardware.cluster.make_cluster`: the device's preset
with the row's GPUs per node, nodes and NIC speed per GPU) and the predicted bus bandwidth
(nccl-tests ``busbw`` = algbw x 2(n-1)/n) is set beside the measured one.

    .venv/bin/python benchmarks/collectives_vs_published.py [--markdown]
"""

from __future__ import annotations

import argparse
import csv
import statistics
from collections import defaultdict
from pathlib import Path

from hwtune.cost.collectives import all_reduce_time, bus_bandwidth
from hwtune.hardware.cluster import Cluster, make_cluster

DATA = Path(__file__).resolve().parent / "data" / "nccl_published.csv"
LARGE = 1 << 30  # bytes: the bandwidth-bound end of a sweep, where the tables peak


def system(row: dict[str, str]) -> tuple[str, float, int | None]:
    """(catalog device, scale-out Gb/s per GPU, NVLink domain) of a published row. The NIC
    speeds are the rows' own (``nic``): 400 Gb/s per H100/H200 and GB200 GPU (8x ConnectX-7
    NDR per HGX node; OCI's 16x 200G RoCE per 8 GPUs is the same), 200 Gb/s per A100 (HDR;
    OCI's 16x 100G per 8 GPUs)."""
    g = row["gpu"]
    if "GB200" in g:
        return "gb200", 400.0, 72
    if "H200" in g:
        return "h200-sxm-141gb", 400.0, None
    if "A100-SXM4-40GB" in g:
        return "a100-sxm4-40gb", 200.0, None
    if "A100" in g:
        return "a100-sxm4-80gb", 200.0, None
    return "h100-sxm-80gb", 400.0, None


def cluster_of(row: dict[str, str]) -> Cluster:
    dev, nic, dom = system(row)
    gpn, nodes = int(row["gpus_per_node"]), int(row["nodes"])
    return make_cluster(dev, gpn * nodes, gpus_per_node=gpn, nic_gbps=nic, scaleup_domain=dom)


def predicted_busbw(row: dict[str, str]) -> float:
    """Predicted nccl-tests busbw (GB/s) of one published row."""
    cl = cluster_of(row)
    n = cl.n_gpus
    size = float(row["size_bytes"])
    return bus_bandwidth("all_reduce", size, n, all_reduce_time(size, cl.span(n, 1), cl)) / 1e9


def runs() -> dict[tuple[str, ...], list[dict[str, str]]]:
    """The rows grouped by run (source, system, nodes, NCCL settings)."""
    out: dict[tuple[str, ...], list[dict[str, str]]] = defaultdict(list)
    with DATA.open(newline="") as f:
        for r in csv.DictReader(f):
            out[(r["source_url"], r["gpu"], r["nodes"], r["nic"], r["nccl_env"])].append(r)
    return out


def summary() -> list[dict[str, object]]:
    """One line per run: GPUs, the measured peak busbw and the median error at >= 1 GiB."""
    lines = []
    for (url, gpu, nodes, _nic, env), rows in runs().items():
        big = [r for r in rows if float(r["size_bytes"]) >= LARGE] or rows[-2:]
        errs = [predicted_busbw(r) / float(r["busbw_gbs"]) - 1 for r in big]
        n = int(rows[0]["gpus_per_node"]) * int(nodes)
        lines.append({
            "source": url, "gpu": gpu, "nodes": int(nodes), "gpus": n, "nccl": env,
            "measured_peak": max(float(r["busbw_gbs"]) for r in big),
            "predicted": predicted_busbw(big[-1]),
            "error": statistics.median(errs),
        })  # fmt: skip
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = ap.parse_args()
    lines = summary()
    if args.markdown:
        print("| run | GPUs | NCCL settings | measured busbw (GB/s) | predicted | error |")
        print("|---|---:|---|---:|---:|---:|")
    for s in lines:
        src = str(s["source"]).removeprefix("https://github.com/")
        if args.markdown:
            print(f"| {s['gpu']}, {s['nodes']} node(s) ({src}) | {s['gpus']} | {s['nccl']} | "
                  f"{s['measured_peak']:.0f} | {s['predicted']:.0f} | {s['error']:+.1%} |")  # fmt: skip
        else:
            print(f"{s['gpus']:5d} GPUs  {s['measured_peak']:6.0f} measured  "
                  f"{s['predicted']:6.0f} predicted  {s['error']:+6.1%}  {s['gpu']} x{s['nodes']}"
                  f"  {s['nccl'][:40]}  {src[:60]}")  # fmt: skip


if __name__ == "__main__":
    main()
