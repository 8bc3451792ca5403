"""Predicted vs measured TTFT and TPOT for every row of shared/validation/serving_measured.csv
that the simulator can express; writes a JSON of all rows and prints the Markdown tables of
VALIDATION-serve.md.

    .venv/bin/python benchmarks/serve_validation.py [--out results.json] [--processes N]
        [--requests-per-client 10] [--limit N] [--from-json results.json]
        [--engine aiconfigurator|defaults] [--mode agg|disagg] [--inferencex]
        [--merge-into full.json] [--tier3] [--compare before.json] [--plot out.png]

``--engine`` (default ``aiconfigurator``): aiconfigurator's harness rows run the engine config
its generator wrote (`hwtune.serve.published.aic_engine_limits`, `aic_attention_dp`);
``--engine defaults`` gives them the engines' defaults instead (a what-if). ``--compare
before.json`` prints, by engine, model, client and mode, how this run moved against a saved one
(TTFT median, rows within 15%, TPOT median), the before -> after tables of VALIDATION.md.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import time
from pathlib import Path

import numpy as np

from hwtune.model.catalog import get_model
from hwtune.report.serve_plots import plot_validation
from hwtune.serve.accuracy import (
    ACCURACY_FILE,
    CONCURRENCY_BANDS,
    LIKELY_COVERAGE,
    cell_key,
    concurrency_band,
    relative_errors,
)
from hwtune.serve.published import (
    ENGINES,
    REQUESTS_PER_CLIENT,
    load_rows,
    predict_all,
    with_profile,
)

CLIENTS = {True: "InferenceX (sampled lengths)", False: "aiconfigurator harness (fixed lengths)"}
"""The client that measured a row, by whether it drew sampled lengths (`Row.range_ratio`)."""


def rel(p: float, m: float) -> float:
    return float(relative_errors(p, m))


def _grouped(out: list[dict], key) -> list[tuple[object, int, dict, dict]]:
    """(group, rows, TTFT record, TPOT record) per value of ``key(row)``, sorted."""
    groups = collections.defaultdict(list)
    for o in out:
        groups[key(o)].append(o)
    out_rows = []
    for k, v in sorted(groups.items()):
        r = record(v, digits=None)
        out_rows.append((k, len(v), r["ttft"], r["tpot"]))
    return out_rows


def table(out: list[dict], key: str) -> str:
    lines = [f"| {key} | rows | TTFT median | TTFT p90 | TPOT median | TPOT p90 | "
             "pred/meas TTFT (median) | pred/meas TPOT (median) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for k, n, t, p in _grouped(out, lambda o: o[key] if key != "all" else "all"):
        lines.append(f"| {k} | {n} | {t['median_abs_error']:.1%} | {t['p90_abs_error']:.1%} | "
                     f"{p['median_abs_error']:.1%} | {p['p90_abs_error']:.1%} | "
                     f"{t['pred_over_meas']:.2f} | {p['pred_over_meas']:.2f} |")  # fmt: skip
    return "\n".join(lines)


def backend_model_table(out: list[dict]) -> str:
    lines = ["| backend | model | rows | TTFT median | TPOT median | pred/meas TTFT | pred/meas TPOT |",
             "|---|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for (b, m), n, t, p in _grouped(out, lambda o: (o["backend"], o["model"].split("/")[-1])):
        lines.append(f"| {b} | {m} | {n} | {t['median_abs_error']:.1%} | "
                     f"{p['median_abs_error']:.1%} | {t['pred_over_meas']:.2f} | "
                     f"{p['pred_over_meas']:.2f} |")  # fmt: skip
    return "\n".join(lines)


def record(rows: list[dict], digits: int | None = 4, widen: dict | None = None) -> dict:
    """Error summary of ``rows`` (the tables printed here and what `hwtune.serve.accuracy`
    shows, rounded to ``digits``): per metric the median and 90th-percentile relative error,
    the median predicted/measured ratio and ``measured_over_predicted_80``, the 10th and 90th
    percentiles of measured/predicted (the band that held 80% of these runs), each end moved out
    by the factor ``widen[metric]`` when given (`band_widening`: the band that holds 80% of the
    runs of an engine and model left out of it)."""

    def rd(x: float) -> float:
        return round(float(x), digits) if digits is not None else float(x)

    def one(pred: str, meas: str, f: float) -> dict:
        e = np.array([rel(o[pred], o[meas]) for o in rows])
        r = np.array([o[pred] / o[meas] for o in rows])
        lo, hi = raw_band([o[meas] / o[pred] for o in rows])
        return {"median_abs_error": rd(np.median(e)), "p90_abs_error": rd(np.percentile(e, 90)),
                "pred_over_meas": rd(np.median(r)),
                "measured_over_predicted_80": [rd(lo / f), rd(hi * f)]}  # fmt: skip

    w = widen or {}
    return {"rows": len(rows), "backends": sorted({o["backend"] for o in rows}),
            "ttft": one("pred_ttft_s", "ttft_s", w.get("ttft", 1.0)),
            "tpot": one("pred_tpot_s", "tpot_s", w.get("tpot", 1.0))}  # fmt: skip


def raw_band(ratios: list[float]) -> tuple[float, float]:
    """The percentiles of measured/predicted that hold `LIKELY_COVERAGE` of ``ratios`` (10th
    and 90th for 80%), linearly interpolated."""
    tail = 50.0 * (1.0 - LIKELY_COVERAGE)
    lo, hi = np.percentile(ratios, [tail, 100.0 - tail])
    return float(lo), float(hi)


TIER3_GROUP = ("backend", "model", "system", "mode")
TIER3_KS = (None, 3, 5, 10)


def tier3_tables(out: list[dict], draws: int = 50) -> str:
    """Tier 3 (`hwtune.serve.correction`) cross-validated on the rows: per group of one engine,
    model, GPU and mode, maps fitted to k runs predict the group's other runs (``draws`` seeded
    draws of k; None = leave-one-out). Errors of every held-out prediction, pooled."""
    from hwtune.serve.correction import held_out_errors

    groups = collections.defaultdict(list)
    for o in out:
        groups[tuple(o[k] for k in TIER3_GROUP)].append(o)
    lines = ["| fitting runs per group | groups | held-out predictions | TTFT median | TTFT p90 | "
             "TPOT median | TPOT p90 |", "|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    by_backend: dict[str, list[np.ndarray]] = collections.defaultdict(list)
    for k in TIER3_KS:
        et, ep, used = [], [], 0
        for i, (key, rows) in enumerate(sorted(groups.items())):
            sim_t = [o["pred_ttft_s"] for o in rows]
            sim_p = [o["pred_tpot_s"] for o in rows]
            a = held_out_errors(sim_t, [o["ttft_s"] for o in rows], k, draws, seed=i)
            b = held_out_errors(sim_p, [o["tpot_s"] for o in rows], k, draws, seed=i)
            if a.size:
                used += 1
                et.append(a)
                ep.append(b)
                if k == 5:
                    by_backend[key[0]].append(a)
        t, p = np.concatenate(et), np.concatenate(ep)
        lines.append(f"| {'all others (leave-one-out)' if k is None else k} | {used} | {t.size} | "
                     f"{np.median(t):.1%} | {np.percentile(t, 90):.1%} | {np.median(p):.1%} | "
                     f"{np.percentile(p, 90):.1%} |")  # fmt: skip
    lines += ["", "| backend (5 fitting runs) | TTFT median | TTFT p90 |", "|---|---:|---:|"]
    for b, arrs in sorted(by_backend.items()):
        t = np.concatenate(arrs)
        lines.append(f"| {b} | {np.median(t):.1%} | {np.percentile(t, 90):.1%} |")
    return "\n".join(lines)


def is_moe(model: str) -> bool:
    """Whether a row's model is a mixture of experts (its catalog config)."""
    return get_model(model).moe is not None


def cell_table(out: list[dict]) -> str:
    """Errors by mode, model kind and band of clients: the cells `hwtune serve` shows as the
    nearest track record (`hwtune.serve.accuracy.cell_key`)."""
    lines = ["| mode / model kind / clients | rows | TTFT median | TTFT p90 | TPOT median | "
             "TPOT p90 | pred/meas TTFT (median) | pred/meas TPOT (median) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    order = {concurrency_band(lo): i for i, (lo, _hi) in enumerate(CONCURRENCY_BANDS)}
    groups = _grouped(out, lambda o: cell_key(o["mode"], is_moe(o["model"]), o["concurrency"]))
    for k, n, t, p in sorted(groups, key=lambda g: (g[0].rsplit("/", 1)[0],
                                                    order[g[0].rsplit("/", 1)[1]])):  # fmt: skip
        lines.append(f"| {k} | {n} | {t['median_abs_error']:.1%} | {t['p90_abs_error']:.1%} | "
                     f"{p['median_abs_error']:.1%} | {p['p90_abs_error']:.1%} | "
                     f"{t['pred_over_meas']:.2f} | {p['pred_over_meas']:.2f} |")  # fmt: skip
    return "\n".join(lines)


def mode_engine_table(out: list[dict]) -> str:
    """Errors by mode and engine: the engine's record `hwtune serve --engine` shows."""
    lines = ["| mode / engine | rows | TTFT median | TTFT p90 | TPOT median | TPOT p90 | "
             "pred/meas TTFT (median) | pred/meas TPOT (median) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for k, n, t, p in _grouped(out, lambda o: f"{o['mode']}/{o['backend']}"):
        lines.append(f"| {k} | {n} | {t['median_abs_error']:.1%} | {t['p90_abs_error']:.1%} | "
                     f"{p['median_abs_error']:.1%} | {p['p90_abs_error']:.1%} | "
                     f"{t['pred_over_meas']:.2f} | {p['pred_over_meas']:.2f} |")  # fmt: skip
    return "\n".join(lines)


def _cells(rows: list[dict]) -> dict[str, list[dict]]:
    """Rows by the track record's cell (`hwtune.serve.accuracy.cell_key`)."""
    cells: dict[str, list[dict]] = collections.defaultdict(list)
    for o in rows:
        cells[cell_key(o["mode"], is_moe(o["model"]), o["concurrency"])].append(o)
    return cells


def _deployment(o: dict) -> tuple[str, str]:
    """What a held-out test leaves out: one engine and model."""
    return o["backend"], o["model"]


def _ratio(o: dict, m: str) -> float:
    return o[f"{m}_s"] / o[f"pred_{m}_s"]


def held_out_misses(rows: list[dict], m: str, min_rows: int = 10) -> list[float]:
    """For every run whose cell keeps ``min_rows`` runs without its engine and model: how far its
    measured/predicted ratio of metric ``m`` lies outside the band computed without them, as a
    log factor (0 inside the band)."""
    out = []
    for cell in _cells(rows).values():
        for g in {_deployment(o) for o in cell}:
            rest = [_ratio(o, m) for o in cell if _deployment(o) != g]
            if len(rest) < min_rows:
                continue
            lo, hi = raw_band(rest)
            for o in cell:
                if _deployment(o) == g:
                    r = _ratio(o, m)
                    out.append(max(np.log(lo / r), np.log(r / hi), 0.0))
    return out


def band_widening(rows: list[dict], min_rows: int = 10) -> dict[str, float]:
    """Per metric, the factor by which both ends of every cell's 10th-90th percentile band move
    out so that it holds `LIKELY_COVERAGE` of the runs of an engine and model left out of it:
    exp of that quantile of `held_out_misses` (split-conformal calibration over deployments;
    Vovk, Gammerman and Shafer, "Algorithmic Learning in a Random World", 2005, ch. 2, with
    leave-one-group-out scores). 1 when the held-out runs already fall inside often enough."""
    out = {}
    for m in ("ttft", "tpot"):
        s = held_out_misses(rows, m, min_rows)
        out[m] = float(np.exp(np.quantile(s, LIKELY_COVERAGE, method="higher"))) if s else 1.0
    return out


def band_coverage(rows: list[dict], min_rows: int = 10) -> dict[str, dict[str, float]]:
    """How well the likely band carries to a deployment outside the record, per metric, leaving
    one engine and model out per cell (cells or remainders under ``min_rows`` runs skipped):
    ``in_sample``, the share of runs inside their own cell's 10th-90th percentile band (~0.8 by
    construction); ``shipped_in_sample``, inside that band widened (as shipped); ``held_out``,
    inside the 10th-90th band computed without their engine and model; ``calibrated``, inside
    the band as shipped (widened by `band_widening`) with both the band and its widening
    computed without their engine and model; ``runs``, the held-out count; ``widening``, the
    factor from all runs."""
    groups = {_deployment(o) for o in rows}
    wide_without = {g: band_widening([o for o in rows if _deployment(o) != g], min_rows)
                    for g in groups}  # fmt: skip
    wide = band_widening(rows, min_rows)
    out: dict[str, dict[str, float]] = {}
    for m in ("ttft", "tpot"):
        n_in = hit_in = hit_ship = n_out = hit_out = hit_cal = 0
        for cell in _cells(rows).values():
            if len(cell) < min_rows:
                continue
            lo, hi = raw_band([_ratio(o, m) for o in cell])
            n_in += len(cell)
            hit_in += sum(lo <= _ratio(o, m) <= hi for o in cell)
            hit_ship += sum(lo / wide[m] <= _ratio(o, m) <= hi * wide[m] for o in cell)
            for g in {_deployment(o) for o in cell}:
                rest = [_ratio(o, m) for o in cell if _deployment(o) != g]
                if len(rest) < min_rows:
                    continue
                lo, hi = raw_band(rest)
                f = wide_without[g][m]
                held = [_ratio(o, m) for o in cell if _deployment(o) == g]
                n_out += len(held)
                hit_out += sum(lo <= r <= hi for r in held)
                hit_cal += sum(lo / f <= r <= hi * f for r in held)
        out[m] = {"in_sample": hit_in / max(n_in, 1), "shipped_in_sample": hit_ship / max(n_in, 1),
                  "held_out": hit_out / max(n_out, 1), "calibrated": hit_cal / max(n_out, 1),
                  "runs": n_out, "widening": wide[m]}  # fmt: skip
    return out


def write_accuracy(rows: list[dict]) -> None:
    """The track record of `hwtune serve`, per mode, per (mode, model kind, band of clients)
    cell and per (mode, engine), into the package (`serve/accuracy.json`)."""
    w = band_widening(rows)
    modes = {m: record([o for o in rows if o["mode"] == m], widen=w) for m in ("agg", "disagg")}
    cells = _cells(rows)
    engines: dict[str, dict[str, list[dict]]] = collections.defaultdict(
        lambda: collections.defaultdict(list)
    )
    for o in rows:
        engines[o["mode"]][o["backend"]].append(o)
    doc = {"source": f"benchmarks/serve_validation.py --write-accuracy, tier 1, "
                     f"{datetime.date.today().isoformat()}",
           "likely_widening": {m: round(f, 4) for m, f in w.items()},
           "all": record(rows, widen=w),
           "modes": {m: v for m, v in modes.items() if v["rows"]},
           "cells": {k: record(v, widen=w) for k, v in sorted(cells.items())},
           "engines": {m: {b: record(v, widen=w) for b, v in sorted(by.items())}
                       for m, by in sorted(engines.items())}}  # fmt: skip
    ACCURACY_FILE.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {ACCURACY_FILE}")


def _group_of(o: dict) -> tuple[str, str, str, str]:
    """(engine, model, client, mode): the groups VALIDATION.md's triage table uses."""
    return (o["backend"], o["model"].split("/")[-1], o.get("client", "?").split(" ")[0], o["mode"])


def compare_table(base: list[dict], new: list[dict], within: float = 0.15) -> str:
    """Markdown: per group, TTFT median error, rows within ``within`` and TPOT median error of
    a saved run ``base`` -> this one, over the row ids both expressed (the "before -> after"
    tables of VALIDATION.md)."""
    old = {o["id"]: o for o in base}
    pairs = [(old[o["id"]], o) for o in new if o["id"] in old]
    groups: dict[tuple, list] = collections.defaultdict(list)
    for b, o in pairs:
        groups[_group_of(o)].append((b, o))
    lines = ["| engine | model | client | mode | rows | TTFT median | within "
             f"{within:.0%} | TPOT median |",
             "|---|---|---|---|---:|---|---|---|"]  # fmt: skip

    def cells(v: list) -> str:
        before, after = [b for b, _o in v], [o for _b, o in v]

        def errs(side: list, m: str) -> list[float]:
            return [rel(x[f"pred_{m}"], x[m]) for x in side]

        t0, t1 = errs(before, "ttft_s"), errs(after, "ttft_s")
        p0, p1 = errs(before, "tpot_s"), errs(after, "tpot_s")
        n0, n1 = sum(e <= within for e in t0), sum(e <= within for e in t1)
        return (f"{np.median(t0):.1%} -> {np.median(t1):.1%} | {n0} -> {n1} | "
                f"{np.median(p0):.1%} -> {np.median(p1):.1%} |")  # fmt: skip

    for g, v in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        lines.append(f"| {' | '.join(g)} | {len(v)} | {cells(v)}")
    if pairs:
        lines.append(f"| all | | | | {len(pairs)} | {cells(pairs)}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="serve_validation.json")
    ap.add_argument("--processes", type=int, default=None)
    ap.add_argument("--requests-per-client", type=int, default=REQUESTS_PER_CLIENT)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--from-json", default=None)
    ap.add_argument("--engine", choices=ENGINES, default=ENGINES[0])
    ap.add_argument(
        "--mode",
        choices=("agg", "disagg"),
        default=None,
        help="only the aggregated or disaggregated rows",
    )
    ap.add_argument(
        "--inferencex",
        action="store_true",
        help="only the rows measured by InferenceX (sampled lengths)",
    )
    ap.add_argument(
        "--profile",
        default=None,
        help="a hwtune bench profile: only the rows on its GPU, with its curves (tier 2)",
    )
    ap.add_argument(
        "--merge-into",
        default=None,
        help="a full results JSON whose rows of the same ids these replace",
    )
    ap.add_argument(
        "--tier3",
        action="store_true",
        help="also cross-validate the tier-3 correction (fitted to k runs per engine/model/GPU)",
    )
    ap.add_argument(
        "--band-coverage",
        action="store_true",
        help="also report how often the likely band holds runs of an engine and model it "
        "was not computed from (leave one engine and model out per cell)",
    )
    ap.add_argument(
        "--compare",
        default=None,
        help="a saved results JSON: print this run's change against it, by group",
    )
    ap.add_argument(
        "--write-accuracy",
        action="store_true",
        help="write src/hwtune/serve/accuracy.json (the track record `hwtune serve` prints) from "
        "this run; only for a full tier-1 run with the default engine",
    )
    ap.add_argument(
        "--plot",
        default=None,
        help="write a PNG of predicted against measured TTFT and TPOT (all rows of the run)",
    )
    a = ap.parse_args()
    if a.write_accuracy and (a.limit or a.mode or a.inferencex or a.profile or a.merge_into):
        ap.error("--write-accuracy needs the full tier-1 run (no --limit/--mode/--inferencex/"
                 "--profile/--merge-into)")  # fmt: skip
    if a.from_json:  # re-tabulate a saved run over the rows expressible now
        doc = json.loads(Path(a.from_json).read_text())
        rows = load_rows(engine=doc.get("engine", "defaults"))
        now = {r.id for r in rows if r.deployment is not None}
        doc["rows"] = [o for o in doc["rows"] if o["id"] in now]
        doc["skipped"] = [{"id": r.id, "reason": r.reason} for r in rows if r.deployment is None]
    else:
        rows = load_rows(engine=a.engine)
        ok = [r for r in rows if r.deployment is not None]
        if a.mode:
            ok = [r for r in ok if r.mode == a.mode]
        if a.inferencex:
            ok = [r for r in ok if r.range_ratio < 1]
        if a.profile:
            ok = with_profile(ok, a.profile)
        if a.limit:
            ok = ok[: a.limit]
        t = time.time()
        pred = predict_all(ok, a.requests_per_client, a.processes)
        wall = time.time() - t
        out, failed = [], []
        for r in ok:
            pt, pp, w, err = pred[r.id]
            rec = {"id": r.id, "backend": r.backend, "model": r.model, "system": r.system,
                   "mode": r.mode, "isl": r.isl, "osl": r.osl, "concurrency": r.concurrency,
                   "ttft_s": r.ttft_s, "tpot_s": r.tpot_s, "pred_ttft_s": pt,
                   "pred_tpot_s": pp, "wall_s": w}  # fmt: skip
            (failed if err else out).append(rec | ({"error": err} if err else {}))
        skipped = [{"id": r.id, "reason": r.reason} for r in rows if r.deployment is None]
        doc = {"rows": out, "failed": failed, "skipped": skipped, "wall_s": wall,
               "requests_per_client": a.requests_per_client, "engine": a.engine,
               "profile": a.profile}  # fmt: skip
        if a.merge_into:  # rerun a part of a full run: its other rows are kept as they were
            base = json.loads(Path(a.merge_into).read_text())
            new = {o["id"]: o for o in out}
            out = [new.pop(o["id"], o) for o in base["rows"]] + list(new.values())
            doc = base | {"rows": out, "failed": base["failed"] + failed,
                          "wall_s": base["wall_s"], "merged": len(ok)}  # fmt: skip
        Path(a.out).write_text(json.dumps(doc, indent=1))
    out = doc["rows"]
    clients = {r.id: CLIENTS[r.range_ratio < 1] for r in rows}
    for o in out:
        o.setdefault("client", clients.get(o["id"], "?"))
    if a.write_accuracy:
        if doc.get("engine", "defaults") != ENGINES[0] or doc.get("profile"):
            raise SystemExit("--write-accuracy: the run must use the default engine, tier 1")
        write_accuracy(out)
    print(
        f"expressed {len(out)} rows; failed {len(doc['failed'])}; "
        f"not expressible {len(doc['skipped'])}; wall {doc['wall_s']:.0f} s\n"
    )
    for key in ("all", "backend", "model", "mode", "system", "client"):
        print(table(out, key) + "\n")
    print("By backend and model:\n\n" + backend_model_table(out) + "\n")
    print("By mode, model kind and clients (the track record `hwtune serve` prints):\n\n"
          + cell_table(out) + "\n")  # fmt: skip
    print("By mode and engine (the record `hwtune serve --engine` adds):\n\n"
          + mode_engine_table(out) + "\n")  # fmt: skip
    reasons = collections.Counter(
        "repeat an earlier row's measurement (counted once)"
        if s["reason"].startswith("repeats")
        else s["reason"].split(";")[0][:100]
        for s in doc["skipped"]
    )
    for k, v in reasons.most_common():
        print(f"- {v} rows: {k}")
    for f in doc["failed"]:
        print(f"- failed {f['id']}: {f['error'][:160]}")
    if a.tier3:
        print("\nTier 3: corrected by k measured runs of the same engine, model, GPU and mode\n")
        print(tier3_tables(out))
    if a.band_coverage:
        print("\nLikely band (10th-90th percentile of measured/predicted per cell, widened to "
              "hold 80% of left-out deployments): share of runs inside it\n")  # fmt: skip
        print("| metric | 10th-90th band of its own cell | the same band, widened (shipped) | "
              "10th-90th band without its engine and model | shipped band, all without its "
              "engine and model | held-out runs | widening |")  # fmt: skip
        print("|---|---:|---:|---:|---:|---:|---:|")
        for m, v in band_coverage(out).items():
            print(f"| {m.upper()} | {v['in_sample']:.1%} | {v['shipped_in_sample']:.1%} | "
                  f"{v['held_out']:.1%} | {v['calibrated']:.1%} | {v['runs']} | "
                  f"{v['widening']:.3f}x |")  # fmt: skip
    if a.plot:
        rec = record(out, digits=None)
        ttl = (
            f"hwtune serve, tier 1, against {len(out)} published runs "
            f"({', '.join(rec['backends'])}; {doc.get('engine', 'defaults')} engine configs)"
        )
        print(f"\nplot written to {plot_validation(out, a.plot, ttl)}")
    if a.compare:
        base = json.loads(Path(a.compare).read_text())["rows"]
        for o in base:
            o.setdefault("client", clients.get(o["id"], "?"))
        print(f"\nAgainst {a.compare} (rows both expressed), before -> after:\n")
        print(compare_table(base, out))


if __name__ == "__main__":
    main()
