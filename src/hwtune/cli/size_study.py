"""`hwtune size` and `hwtune study`: parse, call the library, render."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from hwtune.cli.parsing import fail, flag_error, listed, positive_ints
from hwtune.cli.plan import out, progress_bar
from hwtune.errors import HwtuneInputError


def _num(text: str) -> float:
    """7e9, 7B, 13b, 1.5T, 500M."""
    t = text.strip().upper()
    mult = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}
    try:
        n = float(t[:-1]) * mult[t[-1]] if t and t[-1] in mult else float(t)
    except ValueError:
        n = math.nan
    if not (math.isfinite(n) and n > 0):  # named as typed: -7B, not -7000000000.0
        raise HwtuneInputError("target", text, "a positive parameter count such as 7e9, 7B or 500M")
    return n


def size_cmd(
    model: Annotated[
        str, typer.Option("--model", "-m", help="catalog name or config.json to check / start from")
    ] = "llama3.1-8b",
    gpu: Annotated[str, typer.Option(help="catalog GPU or device YAML")] = "h100-sxm-80gb",
    tp: Annotated[
        int | None,
        typer.Option(help="tensor-parallel degree (per-rank shapes; default 1; not with --target)"),
    ] = None,
    micro_batch: Annotated[int, typer.Option()] = 1,
    seq: Annotated[int, typer.Option()] = 4096,
    precision: Annotated[
        str | None,
        typer.Option(
            help="fp32|fp16|bf16|fp8 (default: bf16, or fp16 on a GPU without bf16: V100)"
        ),
    ] = None,
    target: Annotated[
        str | None, typer.Option(help="propose shapes for this many parameters (e.g. 7B)")
    ] = None,
    tolerance: Annotated[
        float | None,
        typer.Option(help="allowed parameter-count deviation with --target (default 0.02)"),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Check a model's dimensions against a device (tile, wave and alignment losses, in seconds),
    or propose hardware-friendly shapes for a target parameter count."""
    from hwtune.hardware.catalog import get_device
    from hwtune.model.catalog import get_model
    from hwtune.model.params import total_params
    from hwtune.train.estimator import default_precision
    from hwtune.train.sizing import check, check_job, propose

    try:
        if target is not None and tp is not None:
            raise HwtuneInputError(
                "--tp", tp, "no value with --target (shapes are sized for 1 GPU)"
            )
        if target is None and tolerance is not None:
            raise HwtuneInputError("--tolerance", tolerance, "--target with it")
        tp = 1 if tp is None else tp
        spec = get_model(model)
        dev = get_device(gpu)
        precision = precision or default_precision(dev)
        check_job(dev, precision, micro_batch=micro_batch, seq=seq)
        if target is None:
            issues = check(spec, dev, tp=tp, micro_batch=micro_batch, seq=seq, dtype=precision)
        else:
            naive, props = propose(
                spec,
                _num(target),
                dev,
                tolerance=0.02 if tolerance is None else tolerance,
                tokens=micro_batch * seq,
                dtype=precision,
            )
    except HwtuneInputError as e:
        fail(flag_error(e, {"model": "--model", "gpu": "--gpu", "seq": "--seq",
                            "micro_batch": "--micro-batch", "tp": "--tp", "precision": "--precision",
                            "target": "--target", "tolerance": "--tolerance"}))  # fmt: skip
        return
    if target is None:
        rows = [{"gemm": i.where, "shape_mnk": list(i.shape), "efficiency": i.efficiency,
                 "lost_s_per_step_per_microbatch": i.lost_s_per_step, "advice": i.advice} for i in issues]  # fmt: skip
        if as_json:
            sys.stdout.write(
                json.dumps(
                    {"model": spec.name, "gpu": dev.name, "tp": tp, "issues": rows}, indent=2
                )
                + "\n"
            )
            return
        if not rows:
            out.print(
                f"{spec.name} on {dev.name} (tp={tp}): every GEMM is within 3% of full tile and wave efficiency"
            )
            return
        t = Table(
            title=f"{spec.name} on {dev.name}, tp={tp}, {micro_batch}x{seq} tokens per micro-batch"
        )
        for col in (
            "GEMM (dimension)",
            "m x n x k",
            "efficiency",
            "lost per micro-batch",
            "advice",
        ):
            t.add_column(col)
        for r in rows:
            t.add_row(r["gemm"], "x".join(map(str, r["shape_mnk"])), f"{r['efficiency']:.0%}",
                      f"{r['lost_s_per_step_per_microbatch'] * 1e3:.2f} ms", r["advice"])  # fmt: skip
        out.print(t)
        return
    doc = {
        "model": spec.name,
        "gpu": dev.name,
        "target_params": _num(target),
        "naive": {"shape": naive.note, "params": naive.params, "tokens_per_s": naive.tokens_per_s},
        "proposals": [
            {
                "shape": p.note,
                "params": p.params,
                "tokens_per_s": p.tokens_per_s,
                "speedup_vs_naive": p.tokens_per_s / naive.tokens_per_s,
                "config": p.spec.model_dump(exclude={"source"}),
            }
            for p in props
        ],  # fmt: skip
    }
    if as_json:
        sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")
        return
    t = Table(
        title=f"shapes for {_num(target) / 1e9:.3g}B parameters on {dev.name} (base: {spec.name})"
    )
    for col in ("", "shape", "params", "tokens/s (1 GPU)", "vs naive"):
        t.add_column(col)
    t.add_row(
        "naive", naive.note, f"{naive.params / 1e9:.3f}B", f"{naive.tokens_per_s:,.0f}", "1.00x"
    )
    for i, p in enumerate(props, 1):
        t.add_row(f"#{i}", p.note, f"{total_params(p.spec) / 1e9:.3f}B", f"{p.tokens_per_s:,.0f}",
                  f"{p.tokens_per_s / naive.tokens_per_s:.2f}x")  # fmt: skip
    out.print(t)


def study_cmd(
    models: Annotated[
        str, typer.Option(help="catalog names, comma-separated")
    ] = "llama3.1-8b,llama3.1-70b",
    gpus: Annotated[str, typer.Option(help="catalog GPUs, comma-separated")] = "h100-sxm-80gb",
    topologies: Annotated[
        str, typer.Option(help="'default', system presets, or nic=..,domain=.. ; ';'-separated")
    ] = "default",
    scales: Annotated[str, typer.Option(help="accelerator counts, comma-separated")] = "8,64,512",
    global_batch: Annotated[int, typer.Option()] = 512,
    seq: Annotated[int, typer.Option()] = 8192,
    precision: Annotated[
        str | None,
        typer.Option(help="fp32|fp16|bf16|fp8 (default: each GPU's 16-bit format, fp16 on V100)"),
    ] = None,
    output: Annotated[
        Path, typer.Option("--output", "-o", help="directory for study.csv / .parquet / plots")
    ] = Path("hwtune-study"),
    workers: Annotated[
        int | None, typer.Option(help="local processes (default: all cores)")
    ] = None,
    ray: Annotated[
        str | None,
        typer.Option("--ray", help="Ray cluster address, or 'local' for a local Ray instance"),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Run a grid of models x hardware x topologies x scales, each point searched; resumable."""
    import csv

    from hwtune.train.study import grid, run_study

    try:
        ns = positive_ints(scales, "--scales")
        pts = grid(
            listed(models, "--models", "catalog names"),
            listed(gpus, "--gpus", "catalog GPU names"),
            listed(topologies, "--topologies", "topologies", sep=";"),
            ns, global_batch, seq, precision,
        )  # fmt: skip
        with progress_bar("study", not as_json) as cb:
            path = run_study(pts, output, workers=workers, ray_address=ray, progress=cb,
                             notice=lambda line: sys.stderr.write(f"note: {line}\n"))  # fmt: skip
    except HwtuneInputError as e:
        # the grid's axes are the plural options; a cluster's nodes are the topology's
        fail(flag_error(e, {"model": "--models", "models": "--models", "gpu": "--gpus",
                            "gpus": "--gpus", "topology": "--topologies",
                            "topologies": "--topologies", "scales": "--scales", "seq": "--seq",
                            "global_batch": "--global-batch", "precision": "--precision",
                            "workers": "--workers", "output": "--output",
                            "gpus_per_node": "GPUs per node"}))  # fmt: skip
    with path.open() as f:
        rows = list(csv.DictReader(f))
    if as_json:
        sys.stdout.write(json.dumps({"csv": str(path), "rows": rows}, indent=2) + "\n")
        return
    t = Table(title=f"study: {len(rows)} points ({path})")
    for col in ("model", "gpu", "topology", "GPUs", "tokens/s/GPU", "MFU", "strategy"):
        t.add_column(col)
    for r in rows:
        strat = (
            f"tp{r['tp']} pp{r['pp']} dp{r['dp']} cp{r['cp']} ep{r['ep']}"
            if r["fits"] == "True"
            else (r.get("error") or "no fit")  # why a point has no strategy
        )
        t.add_row(r["model"], r["gpu"], r["topology"], r["n_gpus"],
                  f"{float(r['tokens_per_s_per_gpu']):,.0f}" if r["fits"] == "True" else "-",
                  f"{float(r['mfu']):.1%}" if r["fits"] == "True" else "-", strat)  # fmt: skip
    out.print(t)
