"""hwtune beside NVIDIA's aiconfigurator on the published serving rows, row for row.

aiconfigurator (ai-dynamo/aiconfigurator, Apache-2.0) predicts TTFT and TPOT of TensorRT-LLM,
vLLM and SGLang deployments from per-op timings its team measured on each GPU and engine
version; `shared/validation/serving_measured.csv` is its public accuracy-tracking data. This
script asks it for every row that a saved hwtune run expressed, and prints both tools' errors
on the rows both predict.

aiconfigurator pins its own dependencies and ships ~800 MB of per-op data, so it lives in a
venv of its own; the tabulation needs only the standard library and numpy:

    python -m venv .venv-aic && .venv-aic/bin/pip install aiconfigurator==0.12.0
    .venv/bin/python benchmarks/serve_validation.py --out serve_validation.json
    .venv-aic/bin/python benchmarks/serve_peer_aiconfigurator.py \\
        --hwtune-json serve_validation.json --out aic.json
    # re-tabulate later without aiconfigurator:
    .venv/bin/python benchmarks/serve_peer_aiconfigurator.py \\
        --hwtune-json serve_validation.json --from-json aic.json

What aiconfigurator is asked: the row's model, GPU, backend, mode, lengths, quantization,
concurrency (its ``batch_size``) and layout, exactly as in the CSV, with three adaptations:
- the engine version is left to aiconfigurator's default ("current"): its package keeps per-op
  data only for its current engine versions, so it predicts e.g. TensorRT-LLM 1.3.0rc20
  timings for a 1.0.0rc3 row;
- the two Llama ids it caches under another name (`MODEL_ALIASES`) are passed under that name,
  the same architectures;
- gpt-oss on Hopper is passed in the format the engines run there (`quant_modes`).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import csv
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CSV = ROOT.parent / "shared" / "validation" / "serving_measured.csv"
MODEL_ALIASES = {
    "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Meta-Llama-3.1-8B",
    "meta-llama/Llama-3.1-70B": "meta-llama/Meta-Llama-3.1-70B",
}
"""Hugging Face ids that aiconfigurator 0.12 caches under another name (same config.json)."""
HOPPER = ("h100_sxm", "h200_sxm")


def quant_modes(row: dict[str, str]) -> tuple[str | None, str | None]:
    """(gemm, moe) quantization for aiconfigurator. The data records gpt-oss on Hopper as
    "nvfp4", which Hopper cannot run; the engines run the checkpoint's own format there (bf16
    dense layers, mxfp4 experts with bf16 activations), which aiconfigurator calls
    ``w4a16_mxfp4``; given "nvfp4" it stops at a missing GEMM table."""
    gemm, moe = row["gemm_quant_mode"] or None, row["moe_quant_mode"] or None
    gpt_oss = row["model_path"].startswith("openai/gpt-oss")
    if gpt_oss and row["system"] in HOPPER and moe == "nvfp4":
        return "bfloat16", "w4a16_mxfp4"
    return gemm, moe


LAYOUT = ("tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size")


def estimate_args(row: dict[str, str]) -> dict[str, object]:
    """Keyword arguments of ``aiconfigurator.cli.api.cli_estimate`` for one CSV row."""
    if row["mode"] == "agg":
        fields = ("batch_size", *LAYOUT)
    else:
        fields = tuple(
            f"{stage}_{f}"
            for stage in ("prefill", "decode")
            for f in (*LAYOUT, "batch_size", "num_workers")
        )
    return {
        "model_path": MODEL_ALIASES.get(row["model_path"], row["model_path"]),
        "system_name": row["system"],
        "mode": row["mode"],
        "backend_name": row["backend"],
        "backend_version": None,
        "isl": int(row["isl"]),
        "osl": int(row["osl"]),
        "gemm_quant_mode": quant_modes(row)[0],
        "moe_quant_mode": quant_modes(row)[1],
        **{f: int(row[f]) for f in fields if row.get(f)},
    }


def predict(rows: list[dict[str, str]]) -> list[dict[str, object]]:
    """aiconfigurator's TTFT and TPOT (seconds) for each row, or the error it raised."""
    from aiconfigurator.cli.api import cli_estimate  # only in the aiconfigurator venv

    out = []
    t0 = time.time()
    for i, row in enumerate(rows, 1):
        rec: dict[str, object] = {"id": row["id"]}
        t = time.time()
        try:
            with contextlib.redirect_stdout(sys.stderr):
                res = cli_estimate(**estimate_args(row))
            rec |= {"aic_ttft_s": res.ttft / 1e3, "aic_tpot_s": res.tpot / 1e3}
        except Exception as e:  # noqa: BLE001 - a peer's failure is a result to report
            rec["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
        rec["wall_s"] = time.time() - t
        out.append(rec)
        if i % 50 == 0 or i == len(rows):
            print(f"[aiconfigurator] {i}/{len(rows)} rows, {time.time() - t0:.0f} s",
                  file=sys.stderr, flush=True)  # fmt: skip
    return out


def errors(pred: list[float], meas: list[float]) -> tuple[float, float, float]:
    """Median and p90 absolute relative error, and median pred/meas."""
    p, m = np.asarray(pred), np.asarray(meas)
    e = np.abs(p - m) / m
    return float(np.median(e)), float(np.percentile(e, 90)), float(np.median(p / m))


def tables(hw: list[dict], aic: dict[str, dict]) -> str:
    both = [o for o in hw if aic.get(o["id"], {}).get("aic_ttft_s")]
    lines = [
        f"rows hwtune expressed: {len(hw)}; aiconfigurator predicted {len(both)} of them "
        f"({len(hw) - len(both)} raised an error)\n",
        "| backend | rows | tool | TTFT median | TTFT p90 | TPOT median | TPOT p90 | "
        "pred/meas TTFT | pred/meas TPOT |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    groups = collections.defaultdict(list)
    for o in both:
        groups["all"].append(o)
        groups[o["backend"]].append(o)
    for g in ["all", *sorted(k for k in groups if k != "all")]:
        v = groups[g]
        for tool, tk, pk in (("hwtune tier 1", "pred_ttft_s", "pred_tpot_s"),
                             ("aiconfigurator 0.12", "aic_ttft_s", "aic_tpot_s")):  # fmt: skip
            src = [o | aic[o["id"]] for o in v]
            tm, t9, tr = errors([s[tk] for s in src], [s["ttft_s"] for s in src])
            pm, p9, pr = errors([s[pk] for s in src], [s["tpot_s"] for s in src])
            lines.append(f"| {g} | {len(v)} | {tool} | {tm:.1%} | {t9:.1%} | {pm:.1%} | "
                         f"{p9:.1%} | {tr:.2f} | {pr:.2f} |")  # fmt: skip
    lines += ["", "| backend | model | GPU | rows | TTFT hwtune | TTFT aiconfigurator | "
              "TPOT hwtune | TPOT aiconfigurator |", "|---|---|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    by = collections.defaultdict(list)
    for o in both:
        by[(o["backend"], o["model"].split("/")[-1], o["system"].split("_")[0].upper())].append(o)
    for (b, m, gpu), v in sorted(by.items(), key=lambda kv: -len(kv[1])):
        src = [o | aic[o["id"]] for o in v]
        med = [errors([s[k] for s in src], [s[mk] for s in src])[0]
               for k, mk in (("pred_ttft_s", "ttft_s"), ("aic_ttft_s", "ttft_s"),
                             ("pred_tpot_s", "tpot_s"), ("aic_tpot_s", "tpot_s"))]  # fmt: skip
        lines.append(
            f"| {b} | {m} | {gpu} | {len(v)} | " + " | ".join(f"{x:.1%}" for x in med) + " |"
        )
    ok = [r for r in aic.values() if "wall_s" in r]
    if ok:
        hw_wall = [o["wall_s"] for o in hw if "wall_s" in o]
        lines.append(
            f"\nwall per row: aiconfigurator median {np.median([r['wall_s'] for r in ok]):.2f} s"
            + (f", hwtune median {np.median(hw_wall):.2f} s" if hw_wall else "")
        )
    fails = collections.Counter(
        str(r["error"]).split(":")[0] + ": " + str(r["error"]).split(":", 1)[1][:90]
        for r in aic.values()
        if "error" in r
    )
    if fails:
        lines.append("\naiconfigurator errors (first words, count):")
        lines += [f"- {n} x {k}" for k, n in fails.most_common(8)]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hwtune-json", required=True, help="a saved serve_validation.py --out run")
    ap.add_argument("--csv", default=str(CSV))
    ap.add_argument("--out", help="write aiconfigurator's predictions here")
    ap.add_argument("--from-json", help="re-tabulate saved aiconfigurator predictions")
    ap.add_argument("--limit", type=int, default=0, help="first N rows only (a smoke run)")
    ap.add_argument("--retry-errors", action="store_true",
                    help="with --out: predict again only the rows that raised an error there")  # fmt: skip
    a = ap.parse_args()
    hw = json.loads(Path(a.hwtune_json).read_text())["rows"]
    if a.from_json:
        aic = {r["id"]: r for r in json.loads(Path(a.from_json).read_text())["rows"]}
    else:
        want = {o["id"] for o in hw}
        with open(a.csv, newline="") as f:
            rows = [r for r in csv.DictReader(f) if r["id"] in want]
        kept: list[dict] = []
        if a.retry_errors:
            kept = json.loads(Path(a.out).read_text())["rows"]
            redo = {r["id"] for r in kept if "error" in r}
            kept = [r for r in kept if r["id"] not in redo]
            rows = [r for r in rows if r["id"] in redo]
        if a.limit:
            rows = rows[: a.limit]
        import importlib.metadata as md

        version = md.version("aiconfigurator")
        res = kept + predict(rows)
        aic = {r["id"]: r for r in res}
        if a.out:
            doc = {"aiconfigurator": version, "backend_version": "aiconfigurator default",
                   "model_aliases": MODEL_ALIASES,
                   "gpt_oss_on_hopper": "gemm bfloat16, moe w4a16_mxfp4", "rows": res}  # fmt: skip
            Path(a.out).write_text(json.dumps(doc, indent=1))
        hw = [o for o in hw if o["id"] in aic]
    print(tables(hw, aic))


if __name__ == "__main__":
    main()
