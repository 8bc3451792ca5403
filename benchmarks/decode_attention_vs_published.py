"""Tier-1 decode attention against NVIDIA's published timings of each engine's own kernels.

NVIDIA's aiconfigurator (ai-dynamo/aiconfigurator, Apache-2.0) ships per-op timings measured on
the GPU with each serving engine's kernels: ``aic-core/src/aiconfigurator_core/systems/data/
<gpu>/attention/<engine>/<version>/generation_attention_perf.parquet`` (GQA decode) and
``.../mla/<engine>/<version>/generation_mla_perf.parquet`` (MLA decode). ``--aiconfigurator-src``
extracts the series of VALIDATION.md ("Decode attention: three kernels") from a clone into
``benchmarks/data/aiconfigurator_decode_attention.csv`` (needs pandas and pyarrow; the file is kept
in the repository, so the comparison runs without them). Without it the script fits
measured = c + k x roofline per series (least squares on relative errors; the roofline is
`hwtune.cost.kv_cache.decode_attention_time` without its launches) and prints the median error of
one launch (tier 1 before 2026-12-01), of `DECODE_ATTENTION_KERNELS` launches (tier 1 now) and of
the fit.

    .venv/bin/python benchmarks/decode_attention_vs_published.py [--aiconfigurator-src DIR]
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

DATA = Path(__file__).resolve().parent / "data" / "aiconfigurator_decode_attention.csv"
HEADER = (
    "# NVIDIA aiconfigurator (ai-dynamo/aiconfigurator, commit 095f58a51, 2026-08-21, Apache-2.0),\n"
    "# aic-core/src/aiconfigurator_core/systems/data/<gpu>/{attention,mla}/<engine>/<version>/\n"
    "# generation_{attention,mla}_perf.parquet: one layer's decode attention measured with the\n"
    "# engine's own kernels, microseconds (latency, milliseconds there); context = step + 1 cached\n"
    "# tokens per sequence, 256 / 1k / 4k / 16k kept. GQA rows: head_dim 128, no window, beam 1;\n"
    "# batch <= 256.\n"
)
SERIES = (  # (gpu dir, kind, engine, version)
    ("h200_sxm", "gqa", "sglang", "0.5.9"),
    ("h200_sxm", "gqa", "vllm", "0.14.0"),
    ("h200_sxm", "gqa", "trtllm", "1.2.0rc5"),
    ("h200_sxm", "mla", "sglang", "0.5.9"),
    ("h100_sxm", "mla", "sglang", "0.5.9"),
    ("h200_sxm", "mla", "trtllm", "1.3.0rc20"),
    ("h200_sxm", "mla", "trtllm", "1.2.0rc5"),
    ("h100_sxm", "mla", "trtllm", "1.2.0rc5"),
)
CONTEXTS = (256, 1024, 4096, 16384)  # cached tokens per sequence kept (the tables have 1-128k)
FIELDS = ("gpu", "kind", "engine", "version", "kv", "heads", "kv_heads", "batch", "context", "us")


def extract(src: Path) -> int:
    """Write the kept CSV from a clone of aiconfigurator; the number of rows."""
    import pandas as pd  # only for the extraction

    base = aiconfigurator_data(src)
    rows = []
    for gpu, kind, engine, version in SERIES:
        sub = (
            ("attention", "generation_attention_perf")
            if kind == "gqa"
            else ("mla", "generation_mla_perf")
        )
        d = pd.read_parquet(base / gpu / sub[0] / engine / version / f"{sub[1]}.parquet")
        d = d[(d.batch_size <= 256) & (d.step + 1).isin(CONTEXTS)]
        if kind == "gqa":
            window = d.window_size if "window_size" in d else 0
            d = d[(d.head_dim == 128) & (d.beam_width == 1) & (window == 0)]
            d = d[(d.num_key_value_heads <= 8) & (d.num_key_value_heads < d.num_heads)]
        for r in d.itertuples():
            rows.append({
                "gpu": gpu, "kind": kind, "engine": engine, "version": version,
                "kv": "fp8" if r.kv_cache_dtype == "fp8" else "bf16", "heads": int(r.num_heads),
                "kv_heads": int(r.num_key_value_heads) if kind == "gqa" else 1,
                "batch": int(r.batch_size), "context": int(r.step) + 1,
                "us": round(float(r.latency) * 1e3, 3),
            })  # fmt: skip
    write_commented_csv(DATA, HEADER, FIELDS, rows)
    return len(rows)


def load() -> list[dict]:
    return read_commented_csv(DATA)


def _shape(row: dict):  # noqa: ANN202
    """The attention shape on one rank of the row: DeepSeek-V3's MLA over 128 / heads ranks, or
    a GQA layer with the row's heads per rank at head size 128 (Llama-3.1-70B's layer resized)."""
    from hwtune.cost.kv_cache import attention_shape
    from hwtune.model.catalog import get_model

    h, kvh = int(row["heads"]), int(row["kv_heads"])
    if row["kind"] == "mla":
        return attention_shape(get_model("deepseek-v3"), "full", 128 // h)
    gqa = get_model("llama3.1-70b").model_copy(
        update={"n_heads": h, "n_kv_heads": kvh, "head_dim": 128}
    )
    return attention_shape(gqa, "full", 1)


def _median_error(pred, meas) -> float:  # noqa: ANN001 (numpy arrays)
    return float(statistics.median(abs(p / m - 1.0) for p, m in zip(pred, meas, strict=True)))


def compare(rows: list[dict]) -> list[dict]:
    """One line per series and KV format: points, the three median errors, c and k."""
    import numpy as np

    from hwtune.cost.compute import KERNEL_OVERHEAD_S
    from hwtune.cost.kv_cache import DECODE_ATTENTION_KERNELS, decode_attention_time
    from hwtune.hardware.catalog import get_device

    groups: dict[tuple, list[tuple[float, float]]] = defaultdict(list)
    for r in rows:
        dev = get_device(AICONFIGURATOR_GPUS[r["gpu"]])
        b, ctx = int(r["batch"]), int(r["context"])
        now = decode_attention_time(_shape(r), b, b * ctx, dev, r["kv"])
        roof = now - DECODE_ATTENTION_KERNELS * KERNEL_OVERHEAD_S
        key = (r["engine"], r["version"], r["gpu"], r["kind"], r["kv"])
        groups[key].append((roof * 1e6, float(r["us"])))
    out = []
    for key, pts in sorted(groups.items()):
        roof, meas = np.array(pts).T
        a = np.stack([np.ones_like(roof), roof], 1) / meas[:, None]
        c, k = np.linalg.lstsq(a, np.ones_like(meas), rcond=None)[0]
        launch = KERNEL_OVERHEAD_S * 1e6
        out.append({
            "series": key, "points": len(pts), "one_launch": _median_error(roof + launch, meas),
            "now": _median_error(roof + DECODE_ATTENTION_KERNELS * launch, meas),
            "c_us": float(c), "k": float(k), "fit": _median_error(c + k * roof, meas),
        })  # fmt: skip
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--aiconfigurator-src", type=Path, help="a clone of ai-dynamo/aiconfigurator")
    args = ap.parse_args()
    if args.aiconfigurator_src:
        print(f"wrote {extract(args.aiconfigurator_src)} rows to {DATA}")
    print("| engine, version | GPU | attention | KV | points | one launch | three launches (tier 1) "
          "| c (us) | k | fit |")  # fmt: skip
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|")
    for r in compare(load()):
        eng, ver, gpu, kind, kv = r["series"]
        print(f"| {eng} {ver} | {gpu} | {kind.upper()} | {kv} | {r['points']} | "
              f"{r['one_launch']:.0%} | {r['now']:.0%} | {r['c_us']:.1f} | {r['k']:.2f} | "
              f"{r['fit']:.1%} |")  # fmt: skip


if __name__ == "__main__":
    main()
