"""Tier-1 serving all-reduce against NVIDIA's published timings of each engine's own all-reduce.

NVIDIA's aiconfigurator (ai-dynamo/aiconfigurator, Apache-2.0) ships per-op timings measured on
the GPU with each serving engine's all-reduce, captured in a CUDA graph (five calls per graph,
20 replays): ``aic-core/src/aiconfigurator_core/systems/data/<gpu>/comm/<engine>/<version>/
custom_allreduce_perf.parquet`` (bf16; ``message_size`` in elements, ``latency`` in ms per call;
TensorRT-LLM's rows run its AUTO strategy, so NCCL where the engine picks NCCL).
``--aiconfigurator-src`` extracts the series kept here into
``benchmarks/data/aiconfigurator_allreduce.csv`` (needs pandas and pyarrow; the file is kept in
the repository, so the comparison runs without them). Without it the script prints, per series
and group size, the median and 90th-percentile error of `serving_all_reduce_time` over
1 KB-256 MB (the messages of serving: a decode step's few KB to a long prefill chunk), now and
with the model before 2026-12-04 (NCCL's ring figures for the custom kernels: 0.80 of NVLink,
3 us).

    .venv/bin/python benchmarks/allreduce_vs_published.py [--aiconfigurator-src DIR] [--rows]
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

DATA = Path(__file__).resolve().parent / "data" / "aiconfigurator_allreduce.csv"
HEADER = (
    "# NVIDIA aiconfigurator (ai-dynamo/aiconfigurator, commit 095f58a51, Apache-2.0),\n"
    "# aic-core/src/aiconfigurator_core/systems/data/<gpu>/comm/<engine>/<version>/\n"
    "# custom_allreduce_perf.parquet: one all-reduce of a bf16 buffer by the engine's own\n"
    "# all-reduce inside a CUDA graph (the collector's five calls per graph, 20 replays), in\n"
    "# microseconds (latency, milliseconds there); bytes = 2 x message_size (elements). CUDA-graph\n"
    "# rows only (vLLM's and SGLang's eager rows dropped); TensorRT-LLM's run its AUTO strategy.\n"
)
SERIES = (  # (gpu dir, engine, version)
    ("h200_sxm", "vllm", "0.14.0"),
    ("h200_sxm", "sglang", "0.5.9"),
    ("h200_sxm", "trtllm", "1.2.0rc5"),
    ("h100_sxm", "vllm", "0.14.0"),
    ("h100_sxm", "trtllm", "1.2.0rc5"),
)
KERNEL = {"vllm": "vllm", "sglang": "vllm", "trtllm": "trtllm"}  # engine: all_reduce_kernel
FIELDS = ("gpu", "engine", "version", "gpus", "bytes", "us")
SERVING_RANGE = (1 << 10, 1 << 28)  # bytes compared: 1 KB-256 MB
OLD_LINK = (0.80, 3e-6)  # the model before 2026-12-04: NCCL's NVLink efficiency and alpha


def extract(src: Path) -> int:
    """Write the kept CSV from a clone of aiconfigurator; the number of rows."""
    import pandas as pd  # only for the extraction

    base = aiconfigurator_data(src)
    rows = []
    for gpu, engine, version in SERIES:
        d = pd.read_parquet(
            base / gpu / "comm" / engine / version / "custom_allreduce_perf.parquet"
        )
        if "backend" in d:
            d = d[d.backend.str.endswith("_graph")]
        for r in d.itertuples():
            rows.append({
                "gpu": gpu, "engine": engine, "version": version, "gpus": int(r.num_gpus),
                "bytes": 2 * int(r.message_size), "us": round(float(r.latency) * 1e3, 4),
            })  # fmt: skip
    write_commented_csv(DATA, HEADER, FIELDS, rows)
    return len(rows)


def load() -> list[dict]:
    return read_commented_csv(DATA)


def predict(row: dict, old: bool = False) -> float:
    """Predicted microseconds of one row: `serving_all_reduce_time` with the engine's kernel
    family, or (``old``) the custom kernels at NCCL's NVLink figures."""
    from hwtune.cost.collectives import all_reduce_time
    from hwtune.cost.inference_collectives import serving_all_reduce_time
    from hwtune.hardware.cluster import make_cluster

    cl = make_cluster(AICONFIGURATOR_GPUS[row["gpu"]], 8)
    n, s = int(row["gpus"]), float(row["bytes"])
    span = cl.span(n, 1)
    if not old:
        return serving_all_reduce_time(s, span, cl, KERNEL[row["engine"]]) * 1e6
    bw = cl.device.scaleup_bandwidth_si * OLD_LINK[0]
    one = OLD_LINK[1] + (n - 1) * s / bw
    two = 2 * OLD_LINK[1] + 2 * (n - 1) * s / (n * bw)
    return min(one, two, all_reduce_time(s, span, cl, nvls=False)) * 1e6


def in_range(row: dict) -> bool:
    lo, hi = SERVING_RANGE
    return int(row["gpus"]) > 1 and lo <= int(row["bytes"]) <= hi


def compare(rows: list[dict]) -> list[dict]:
    """One line per series and group size: points, median and p90 error now and before."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        if in_range(r):
            groups[(r["engine"], r["version"], r["gpu"], int(r["gpus"]))].append(r)
    out = []
    for key, rs in sorted(groups.items()):
        now = [abs(predict(r) / float(r["us"]) - 1) for r in rs]
        old = [abs(predict(r, old=True) / float(r["us"]) - 1) for r in rs]
        out.append({
            "series": key, "points": len(rs), "median": statistics.median(now),
            "p90": _p90(now), "old_median": statistics.median(old), "old_p90": _p90(old),
        })  # fmt: skip
    return out


def _p90(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=10, method="inclusive")[-1]


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
            p, o = predict(r), predict(r, old=True)
            print(f"{r['engine']:7s} {r['gpu']} n={r['gpus']} {int(r['bytes']) / 1024:>9.0f} KB "
                  f"measured {float(r['us']):8.1f} us, now {p:8.1f} ({p / float(r['us']):.2f}x), "
                  f"before {o:8.1f} ({o / float(r['us']):.2f}x)")  # fmt: skip
    print("| engine, version | GPU | GPUs | points | median error | p90 | before: median | p90 |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    res = compare(rows)
    for r in res:
        eng, ver, gpu, n = r["series"]
        print(f"| {eng} {ver} | {gpu} | {n} | {r['points']} | {r['median']:.0%} | {r['p90']:.0%} "
              f"| {r['old_median']:.0%} | {r['old_p90']:.0%} |")  # fmt: skip
    now = [abs(predict(r) / float(r["us"]) - 1) for r in rows if in_range(r)]
    old = [abs(predict(r, old=True) / float(r["us"]) - 1) for r in rows if in_range(r)]
    print(f"\nall {len(now)} points: median {statistics.median(now):.1%}, p90 {_p90(now):.1%}; "
          f"before: {statistics.median(old):.1%}, {_p90(old):.1%}")  # fmt: skip


if __name__ == "__main__":
    main()
