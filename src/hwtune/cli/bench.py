"""`hwtune bench`: measure the device at hand and write its profile (tier 2 calibration).
Parse, call `hwtune.calibrate`, render; no formulas here."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from hwtune.cli.parsing import fail, listed, output_path
from hwtune.errors import HwtuneInputError


def bench_cmd(
    quick: Annotated[
        bool,
        typer.Option("--quick/--thorough", help="quick (~2 min on a 2-core CPU) or thorough"),
    ] = True,
    output: Annotated[
        Path, typer.Option("--output", "-o", help="profile to write (.yaml or .json)")
    ] = Path("hwtune-profile.yaml"),
    dtypes: Annotated[
        str | None,
        typer.Option(help="GEMM/attention dtypes, e.g. fp32,bf16 (default: what the device has)"),
    ] = None,
    ranks: Annotated[
        int | None,
        typer.Option(help="processes for the collectives (default 2 on a CPU, all GPUs)"),
    ] = None,
    threads: Annotated[
        int | None,
        typer.Option(
            help="torch threads of the compute benchmarks (CPU; default: all usable CPUs)"
        ),
    ] = None,
    device: Annotated[str, typer.Option(help="auto|cpu|cuda|rocm")] = "auto",
    sections: Annotated[
        str | None,
        typer.Option(help="subset of gemm,memory,elementwise,attention,collectives"),
    ] = None,
    collectives_from: Annotated[
        Path | None,
        typer.Option(help="collective points from `torchrun -m hwtune.calibrate.collectives`"),
    ] = None,
    budget: Annotated[
        float | None,
        typer.Option(
            help="wall-clock budget in seconds for the whole command, from its start to the "
            "profile written: importing torch, detecting the device, every section (the "
            "collectives' process start-up included); the smallest shape of each GEMM, "
            "elementwise and attention curve runs even past it, collectives it leaves no time "
            "for are skipped (default: 110 quick, 1800 thorough)"
        ),
    ] = None,
    clock: Annotated[
        str,
        typer.Option(
            help="auto|wall|cpu: auto times a 1-thread CPU run by its CPU time "
            "(robust to other load), everything else by wall time"
        ),
    ] = "auto",
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON document")] = False,
) -> None:
    """Measure this device (GEMM, memory, attention, collectives) and write its profile, which
    every command then accepts as --gpu PROFILE."""
    import time

    started = time.perf_counter()  # --budget counts from here: importing torch is part of it
    try:
        import torch  # noqa: F401
    except ImportError:
        fail(HwtuneInputError("torch", None, "torch installed (hwtune bench measures through it)"))
    from rich.console import Console

    from hwtune.calibrate.bench import (
        SECTIONS,
        BenchConfig,
        check_writable,
        run_bench,
        write_profile,
    )

    err = Console(stderr=True)
    try:
        output_path(output, "output", ("yaml", "yml", "json"))  # checked before the run
        check_writable(output)
        cfg = BenchConfig(
            mode="quick" if quick else "thorough",
            dtypes=None if dtypes is None else tuple(listed(dtypes, "dtypes", "dtypes")),
            ranks=ranks,
            threads=threads,
            device=device,
            sections=SECTIONS
            if sections is None
            else tuple(listed(sections, "sections", "sections")),
            collectives_from=str(collectives_from) if collectives_from else None,
            budget_s=budget,
            clock=clock,
        )
        cfg.validate()
        with err.status("hwtune bench", spinner="dots") as status:
            res = run_bench(
                cfg, progress=lambda s: status.update(f"hwtune bench: {s}"), started=started
            )
        write_profile(res.document, output)
    except HwtuneInputError as e:
        fail(e)
    busy = res.document["software"].get("load_warning")
    if busy:  # after the run too: the spinner's line is gone by now
        sys.stderr.write(busy + "\n")
    for w in res.warnings:  # measured points left out of the profile, by name
        sys.stderr.write(w + "\n")
    if as_json:
        doc = res.summary()
        doc["output"] = str(output)
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return
    _render(res, output)


def _render(res: object, output: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    from hwtune.calibrate.collectives import bandwidths

    doc = res.document  # type: ignore[attr-defined]
    con = Console()
    dev = doc["device"]
    sw = doc["software"]
    con.print(f"[bold]{dev['name']}[/bold] ({sw['backend']}, torch {sw['torch']}, "
              f"{sw['threads']} threads) measured in {res.seconds:.0f} s")  # type: ignore[attr-defined]  # fmt: skip
    t = Table("figure", "measured")
    for d, tf in dev["peak_tflops"].items():
        t.add_row(f"best GEMM {d}", f"{tf * 1e3:.1f} GFLOP/s")
    if "memory" in doc:
        m = doc["memory"]
        t.add_row("STREAM copy", f"{m['copy_bytes_per_s'] / 1e9:.1f} GB/s")
        t.add_row("STREAM triad", f"{m['triad_bytes_per_s'] / 1e9:.1f} GB/s")
        t.add_row("launch overhead", f"{m['launch_s'] * 1e6:.1f} us")
    for key in ("gemm", "elementwise", "attention", "collectives"):
        t.add_row(f"{key} points", str(len(doc.get(key, []))))
    con.print(t)
    if doc.get("collectives"):
        c = Table("collective", "ranks", "size", "time", "algbw", "busbw")
        for p in doc["collectives"]:
            alg, bus = bandwidths(p)
            c.add_row(p["op"], str(p["ranks"]), f"{p['bytes'] / 1024:.0f} KiB",
                      f"{p['seconds'] * 1e6:.0f} us", f"{alg / 1e9:.2f} GB/s",
                      f"{bus / 1e9:.2f} GB/s")  # fmt: skip
        con.print(c)
    skipped = res.skipped  # type: ignore[attr-defined]
    if skipped:
        s = Table("skipped", "what", "why")
        for k in skipped:
            s.add_row(k.section, k.what, k.reason)
        con.print(s)
    con.print(f"profile written to {output} (use it as --gpu {output})")
