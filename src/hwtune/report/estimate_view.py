"""Render an `Estimate` for people: a summary, the step-time breakdown and memory by category."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from hwtune.train.accuracy import accuracy_line
from hwtune.train.estimator import Estimate

GIB = 2**30


def _tflops(x: float, decimals: int) -> str:
    """TFLOP/s with ``decimals`` from 10 up, 3 significant digits below: a measured CPU profile
    (0.32 TFLOP/s) printed as "0" TFLOP/s with the GPU formats."""
    return f"{x:,.{decimals}f}" if x >= 10 else f"{x:.3g}"


def _fmt_time(s: float) -> str:
    if s >= 1:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} µs"


def out_of_memory(est: Estimate, what: str) -> str:
    """What an estimate that does not fit says after OUT OF MEMORY, before its ``what``
    (times, energy figures)."""
    return (
        f"needs {est.memory.total / GIB:,.1f} GiB per GPU, "
        f"{est.memory_capacity_bytes / GIB:,.0f} GiB there; the {what} below are for a step "
        "that cannot run (try hwtune plan)"
    )


def render_estimate(est: Estimate, title: str, console: Console | None = None) -> None:
    """Print the human-readable view of one estimate."""
    con = console or Console()
    st = est.strategy
    con.print(f"[bold]{title}[/bold]")
    if not est.fits:
        con.print("[bold red]OUT OF MEMORY[/bold red]: " + out_of_memory(est, "times"))
    con.print(
        f"strategy: dp={st.dp} tp={st.tp} pp={st.pp} cp={st.cp} ep={st.ep}"
        f"{' +sp' if st.sequence_parallel else ''} zero={st.zero} mb={st.micro_batch} "
        f"gb={st.global_batch_seqs} seq={st.seq} schedule={st.schedule}"
        f"{f' vpp={st.vpp}' if st.vpp > 1 else ''} recompute={st.recompute} precision={st.precision}"
    )
    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_column(style="cyan")
    t.add_column(justify="right")
    t.add_row("step time", _fmt_time(est.step_time_s))
    t.add_row("tokens/s (all GPUs)", f"{est.tokens_per_s:,.0f}")
    t.add_row("tokens/s per GPU", f"{est.tokens_per_s_per_gpu:,.1f}")
    t.add_row("model TFLOP/s per GPU", _tflops(est.model_tflops_per_gpu, 1))
    t.add_row("hardware TFLOP/s per GPU", _tflops(est.tflops_per_gpu, 1))
    t.add_row(
        "MFU / HFU",
        f"{est.mfu:.1%} / {est.hfu:.1%}  "
        f"(of {_tflops(est.peak_flops_used / 1e12, 0)} TFLOP/s dense)",
    )
    con.print(t)

    bt = Table(title="step time breakdown (busiest pipeline rank)", title_justify="left")
    bt.add_column("part")
    bt.add_column("time", justify="right")
    bt.add_column("share", justify="right")
    total = est.step_time_s
    for k, v in est.breakdown.items():
        if v > 0:
            bt.add_row(k.replace("_", " "), _fmt_time(v), f"{v / total:.1%}")
    con.print(bt)

    mt = Table(title="memory per GPU (most loaded stage)", title_justify="left")
    mt.add_column("category")
    mt.add_column("GiB", justify="right")
    mem = est.memory
    for k in ("weights", "gradients", "optimizer", "activations", "transient", "reserve"):
        mt.add_row(k, f"{getattr(mem, k) / GIB:,.2f}")
    cap = est.memory_capacity_bytes / GIB
    verdict = "[green]fits[/green]" if est.fits else "[red]does NOT fit[/red]"
    mt.add_row(
        "[bold]total[/bold]", f"[bold]{mem.total / GIB:,.2f}[/bold] of {cap:,.0f}  {verdict}"
    )
    con.print(mt)
    for n in est.notes:
        con.print(f"note: {n}")
    acc = est.accuracy
    if acc is not None:
        con.print(f"note: {accuracy_line(acc)}")
