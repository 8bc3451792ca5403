"""Tier-1 GEMM times against Vidur's measured H100 profiles of Llama-2-7B and -70B linear layers.

Vidur's authors timed each linear layer of these models on an H100 at 1-4,096 tokens and tensor
parallelism 1-8 (``data/profiling/compute/h100/meta-llama/*/mlp.csv`` in microsoft/vidur, MIT
licence). ``--vidur-src`` extracts their medians into ``benchmarks/data/vidur_h100_linear_ops.csv``
(kept in the repository, so the comparison and its test run without Vidur); without it the
script compares `hwtune.cost.compute.gemm_time` (bf16, H100 SXM catalog entry) to the kept file.

    .venv/bin/python benchmarks/gemm_vs_vidur.py [--vidur-src /tmp/vidur/src]
"""

from __future__ import annotations

import argparse
import csv
import statistics
from pathlib import Path

from hwtune.cost.compute import gemm_time
from hwtune.hardware.catalog import get_device
from hwtune.model.catalog import get_model

DATA = Path(__file__).resolve().parent / "data" / "vidur_h100_linear_ops.csv"
HEADER = (
    "# Vidur (microsoft/vidur, commit 7d47513, MIT licence) measured H100 profiles,\n"
    "# data/profiling/compute/h100/meta-llama/{Llama-2-7b-hf,Llama-2-70b-hf}/mlp.csv:\n"
    "# median time of each linear layer per tensor-parallel rank, bf16 (time_stats.<op>.median,\n"
    "# milliseconds there, microseconds here); n and k are the rank's GEMM output and inner sizes.\n"
)
MODELS = {"Llama-2-7b-hf": "llama2-7b", "Llama-2-70b-hf": "llama2-70b"}  # Vidur's: hwtune's
OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")


def shapes(model: str, tp: int) -> dict[str, tuple[int, int]]:
    """(n, k) of each linear layer on one of ``tp`` ranks (QKV, output, gate+up, down)."""
    spec = get_model(MODELS[model])
    d, f = spec.d_model, spec.ffn_hidden
    head = d // spec.n_heads
    kv = spec.n_kv_heads or spec.n_heads
    return {
        "attn_pre_proj": ((d + 2 * kv * head) // tp, d),
        "attn_post_proj": (d, d // tp),
        "mlp_up_proj": (2 * f // tp, d),
        "mlp_down_proj": (d, f // tp),
    }


def _kept_tokens(m: int) -> bool:
    return m <= 64 or (m <= 1024 and m % 32 == 0) or m % 256 == 0


def extract(src: Path) -> int:
    """Write the kept CSV from a Vidur checkout; returns the number of rows."""
    out: dict[tuple[str, int, int, str], list[float]] = {}
    for model in MODELS:
        path = src / "data/profiling/compute/h100/meta-llama" / model / "mlp.csv"
        for r in csv.DictReader(path.open()):
            tp, m = int(r["num_tensor_parallel_workers"]), int(r["num_tokens"])
            if not _kept_tokens(m):
                continue
            for op in OPS:
                out.setdefault((model, tp, m, op), []).append(float(r[f"time_stats.{op}.median"]))
    with DATA.open("w") as f:
        f.write(HEADER + "model,tp,tokens,op,n,k,measured_us\n")
        for (model, tp, m, op), ts in sorted(out.items()):
            n, k = shapes(model, tp)[op]
            f.write(f"{model},{tp},{m},{op},{n},{k},{1e3 * statistics.median(ts):.2f}\n")
    return len(out)


def load() -> list[dict]:
    """The kept measurements, with hwtune's tier-1 prediction (``pred_us``) added."""
    dev = get_device("h100-sxm-80gb")
    rows = list(csv.DictReader(line for line in DATA.open() if not line.startswith("#")))
    for r in rows:
        m, n, k = int(r["tokens"]), int(r["n"]), int(r["k"])
        r["pred_us"] = 1e6 * gemm_time(m, n, k, dev, "bf16")
    return rows


def summary(rows: list[dict]) -> dict[str, tuple[int, float, float, float]]:
    """(rows, median |error|, p90 |error|, median pred/measured) by token range."""
    bands = {"1-16 tokens": (1, 16), "17-512 tokens": (17, 512), "513-4096 tokens": (513, 4096),
             "all": (1, 4096)}  # fmt: skip
    out = {}
    for name, (lo, hi) in bands.items():
        ratios = [
            r["pred_us"] / float(r["measured_us"]) for r in rows if lo <= int(r["tokens"]) <= hi
        ]
        errs = sorted(abs(x - 1) for x in ratios)
        out[name] = (len(errs), statistics.median(errs), errs[int(0.9 * len(errs))],
                     statistics.median(ratios))  # fmt: skip
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vidur-src", type=Path, default=None, help="re-extract from this checkout")
    a = ap.parse_args()
    if a.vidur_src is not None:
        print(f"{extract(a.vidur_src)} measurements written to {DATA}")
    print("| tokens | GEMMs | median error | p90 error | pred/meas (median) |")
    print("|---|---:|---:|---:|---:|")
    for name, (n, med, p90, ratio) in summary(load()).items():
        print(f"| {name} | {n} | {100 * med:.1f}% | {100 * p90:.1f}% | {ratio:.2f} |")


if __name__ == "__main__":
    main()
