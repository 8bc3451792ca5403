"""Render `hwtune serve` and `hwtune serve plan` results for people (rich tables)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from hwtune.serve.accuracy import LIKELY_COVERAGE, accuracy_line, likely_line
from hwtune.serve.backlog import Backlog


def _rate(x: float) -> str:
    """A throughput with at least three significant digits: 12,345 / 12.3 / 0.00123 (a small
    nonzero rate never shows as 0)."""
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def _ms(s: float) -> str:
    return "-" if s != s else (f"{s:.2f} s" if s >= 10 else f"{s * 1e3:.1f} ms")


def render_summary(doc: dict, title: str, console: Console | None = None) -> None:
    """Latency percentiles, throughput, KV utilization and prefix hits of one simulation."""
    con = console or Console()
    con.print(f"[bold]{title}[/bold]")
    t = Table(title="latency", title_justify="left")
    for c in ("metric", "mean", "p50", "p90", "p99"):
        t.add_column(c, justify="right" if c != "metric" else "left")
    for key, label in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("itl_s", "ITL"),
                       ("e2e_s", "E2E"), ("queue_s", "queueing")):  # fmt: skip
        st = doc[key]
        t.add_row(label, *(_ms(st[k]) for k in ("mean", "p50", "p90", "p99")))
    con.print(t)
    tp = doc["throughput_tokens_per_s"]
    con.print(
        f"throughput: {_rate(doc['requests_per_s'])} req/s, {_rate(tp['output'])} output tok/s, "
        f"{_rate(tp['total'])} total tok/s on {doc['gpus']} GPU(s)"
    )
    kv = doc["kv_utilization"]
    con.print(
        f"KV cache: {doc['kv_cache_tokens']:,} tokens; utilization mean {kv['mean']:.1%}, "
        f"max {kv['max']:.1%}; prefix hit rate {doc['prefix_hit_rate']:.1%}; "
        f"preemptions {doc['preemptions']}"
    )
    sp = doc.get("speculative")
    if sp:
        con.print(
            f"speculative decoding: {sp['draft_tokens']} draft token(s) per step at acceptance "
            f"{sp['acceptance']:.2f}: {sp['tokens_per_step']:.2f} tokens per decoding step"
        )
    con.print(
        f"simulated {doc['simulated_s']:.1f} s in {doc['wall_s']:.2f} s wall "
        f"({doc['steps']:,} steps)"
    )
    said = Backlog(**doc["backlog"]).note() if doc.get("backlog") else None
    if said:
        con.print(f"note: {said}")
    cal = doc.get("calibrated")
    if cal:
        t = Table(title=f"tier 3: corrected by {cal['correction']['runs']} measured run(s) "
                        f"({cal['correction'].get('source') or 'hwtune serve calibrate'})",
                  title_justify="left")  # fmt: skip
        for c in ("metric", "mean", "p50", "p90", "p99"):
            t.add_column(c, justify="right" if c != "metric" else "left")
        for key, label in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "E2E")):
            t.add_row(label, *(_ms(cal[key][k]) for k in ("mean", "p50", "p90", "p99")))
        con.print(t)
        con.print(f"note: {correction_line(cal['correction'])}")
    if doc.get("tier_note"):
        con.print(f"note: {doc['tier_note']}")
    if doc.get("accuracy"):
        con.print(f"note: {accuracy_line(doc['accuracy'])}")
        if doc["accuracy"].get("likely"):
            con.print(f"note: {likely_line(doc['accuracy']['likely'])}")


def correction_line(corr: dict) -> str:
    """One line on a tier-3 correction: its maps and its leave-one-out error on its runs."""
    t, p = corr["ttft"], corr["tpot"]
    loo = ", ".join(f"{name} {corr[k]:.1%}" for name, k in (("TTFT", "loo_ttft_error"),
                    ("TPOT", "loo_tpot_error")) if corr.get(k) is not None)  # fmt: skip
    return (
        f"TTFT = {t['scale']:.2f} x simulated + {t['offset_s'] * 1e3:.1f} ms, TPOT = "
        f"{p['scale']:.2f} x simulated + {p['offset_s'] * 1e3:.2f} ms (statistical fit, "
        + (f"leave-one-out median error {loo})" if loo else "too few runs to cross-validate)")
    )


def render_plan(
    best: list[dict],
    title: str,
    console: Console | None = None,
    accuracy: list[dict | None] | None = None,
) -> None:
    con = console or Console()
    con.print(f"[bold]{title}[/bold]")
    t = Table(title="layouts that meet the SLOs, best first", title_justify="left")
    for c in ("layout", "GPUs", "$/h", "p90 TTFT", "p90 TPOT", "tok/s"):
        t.add_column(c)
    margins = {(r["margin"]["ttft_factor"], r["margin"]["tpot_factor"], r["margin"]["basis"])
               for r in best if r.get("margin")}  # fmt: skip
    for r in best:
        cost = "-" if r["cost_per_hour"] is None else f"{r['cost_per_hour']:.2f}"
        t.add_row(r["layout"], str(r["gpus"]), cost, _ms(r["ttft_p90_s"]), _ms(r["tpot_p90_s"]),
                  f"{r['throughput_tokens_per_s']:,.0f}")  # fmt: skip
    con.print(t)
    for ft, fp, basis in sorted(margins):
        con.print(f"note: p90s above are simulated x{ft:.2f} (TTFT) and x{fp:.2f} (TPOT), the "
                  f"upper end of the likely band of the published {basis}")  # fmt: skip
    for acc in accuracy or []:
        if acc:
            con.print(f"note: {accuracy_line(acc)}; leave the SLOs a margin for it")
            band = (
                acc["ttft"].get("measured_over_predicted_80"),
                acc["tpot"].get("measured_over_predicted_80"),
            )
            if all(band):
                con.print(
                    f"note: likely measured {band[0][0]:.2f}-{band[0][1]:.2f}x the predicted TTFT "
                    f"and {band[1][0]:.2f}-{band[1][1]:.2f}x the TPOT (a band that held "
                    f"{LIKELY_COVERAGE:.0%} of the runs of engines and models left out of it)"
                )
