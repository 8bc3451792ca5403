"""`hwtune plan` and `hwtune scale`: parse, call the library, render. No formulas here."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from hwtune.cli.parsing import (
    CLUSTER_FLAGS,
    ESTIMATE_FLAGS,
    SOFTWARE_FLAGS,
    cluster_only,
    fail,
    flag_error,
    listed,
    output_path,
    plot_suffixes,
    positive_ints,
)
from hwtune.cli.software import (
    AttentionKernel,
    Eager,
    Fp8ParamGather,
    Fp8Recipe,
    Framework,
    GradAccumulation,
    LaunchOpt,
    Loss,
    MoeDispatch,
    MtpLayers,
    PipelineSplit,
    RecomputeModules,
    Zero3Gather,
    check_launch_framework,
    check_torchtitan_precision,
    launch_constraints,
    launch_document,
    launch_fields,
    print_launch,
    software_fields,
)
from hwtune.errors import HwtuneInputError

GIB = 2**30
out = Console()
err_console = Console(stderr=True)


@contextlib.contextmanager
def progress_bar(label: str, enabled: bool = True) -> Iterator:
    """A progress callback (done, total) drawn on stderr."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    with Progress(
        TextColumn(label), BarColumn(), TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(), console=err_console, transient=True,
    ) as prog:  # fmt: skip
        task = prog.add_task(label, total=1)

        def cb(done: int, total: int) -> None:
            prog.update(task, completed=done, total=total)

        yield cb


def parse_pairs(items: list[str] | None, what: str) -> dict[str, object]:
    """``k=v`` pairs (``--fix tp=8``); integers where they parse, else strings."""
    out_d: dict[str, object] = {}
    for it in items or []:
        if "=" not in it:
            raise HwtuneInputError(what, it, "name=value, e.g. tp=8")
        k, v = it.split("=", 1)
        k = k.strip().replace("-", "_")
        if k == "mb":
            k = "micro_batch"
        try:
            value: object = int(v)
        except ValueError:
            value = v.strip()
        if k in out_d and out_d[k] != value:  # the last would silently win
            raise HwtuneInputError(what, it, f"one value per name ({k}={out_d[k]} given too)")
        out_d[k] = value
    return out_d


def make_clusters(
    gpu: str, gpus: int, gpus_per_node: int | None, nic_gbps: float | None,
    scaleup_domain: int | None, cluster: Path | None,
) -> list:  # fmt: skip
    from hwtune.hardware.cluster import load_cluster_file, make_cluster

    if cluster is not None:
        return [load_cluster_file(cluster)]
    names = listed(gpu, "--gpu", "catalog GPU names")
    clusters = [
        make_cluster(
            n, gpus, gpus_per_node=gpus_per_node, nic_gbps=nic_gbps,
            scaleup_domain=scaleup_domain,
        )
        for n in names
    ]  # fmt: skip
    devices = [cl.device.name for cl in clusters]  # an alias and its name are the same GPU
    if len(set(devices)) != len(devices):
        raise HwtuneInputError("--gpu", gpu, "each GPU once")
    return clusters


def _used_only_with(
    gpu: str | None, what_if: str | None, compare: bool, objective: str, target_efficiency: float | None,
    price: float | None, tokens: float | None,
) -> None:  # fmt: skip
    """Options that the chosen mode would ignore are errors."""
    if what_if and compare:
        raise HwtuneInputError("--gpu", gpu, "one GPU with --what-if")
    if target_efficiency is not None and not what_if:
        raise HwtuneInputError("--target-efficiency", target_efficiency, "--what-if with it")
    if price is not None and objective != "cost" and not compare:
        raise HwtuneInputError(
            "--price-per-gpu-hour", price, "--objective cost or several --gpu to compare"
        )
    if tokens is not None and objective != "time-to-train" and not compare:
        raise HwtuneInputError(
            "--tokens", tokens, "--objective time-to-train or several --gpu to compare"
        )


def _batch(global_batch: int | None, global_batch_tokens: int | None, seq: int) -> int:
    for name, v in (
        ("--global-batch", global_batch),
        ("--global-batch-tokens", global_batch_tokens),
    ):
        if v is not None and v < 1:
            raise HwtuneInputError(name, v, "a positive integer")
    if global_batch is not None and global_batch_tokens is not None:
        raise HwtuneInputError(
            "--global-batch-tokens", global_batch_tokens, "no value with --global-batch (one or "
            "the other)",
        )  # fmt: skip
    if global_batch_tokens is not None:
        if global_batch_tokens % seq:
            raise HwtuneInputError(
                "--global-batch-tokens", global_batch_tokens, f"a multiple of --seq {seq}"
            )
        return global_batch_tokens // seq
    return 512 if global_batch is None else global_batch


def _est_row(e: object) -> dict:
    from hwtune.train.search import strategy_label

    d = e.to_dict()  # type: ignore[attr-defined]
    d["label"] = strategy_label(e.strategy)  # type: ignore[attr-defined]
    return d


def plan_cmd(
    model: Annotated[
        str, typer.Option("--model", "-m", help="catalog name or config.json")
    ] = "llama3.1-70b",
    gpu: Annotated[
        str | None,
        typer.Option(
            help="GPU(s): one catalog name, or a comma-separated list to compare "
            "(default h100-sxm-80gb)"
        ),
    ] = None,
    gpus: Annotated[int | None, typer.Option(help="number of GPUs (default 64)")] = None,
    gpus_per_node: Annotated[int | None, typer.Option()] = None,
    nic_gbps: Annotated[float | None, typer.Option(help="scale-out Gb/s per GPU")] = None,
    scaleup_domain: Annotated[int | None, typer.Option(help="GPUs per NVLink domain")] = None,
    cluster: Annotated[Path | None, typer.Option(help="cluster YAML")] = None,
    global_batch: Annotated[
        int | None, typer.Option(help="sequences per step (default 512)")
    ] = None,
    global_batch_tokens: Annotated[int | None, typer.Option(help="tokens per step")] = None,
    seq: Annotated[int, typer.Option(help="sequence length")] = 8192,
    precision: Annotated[
        str | None,
        typer.Option(
            help="fp32|fp16|bf16|fp8 (default: bf16, or fp16 on a GPU without bf16: V100)"
        ),
    ] = None,
    objective: Annotated[
        str, typer.Option(help="throughput|cost|energy|time-to-train")
    ] = "throughput",
    top: Annotated[int, typer.Option(help="strategies to show")] = 5,
    fix: Annotated[list[str] | None, typer.Option(help="fix a knob: tp=8 (repeatable)")] = None,
    max_: Annotated[
        list[str] | None, typer.Option("--max", help="upper bound: pp=16 (repeatable)")
    ] = None,
    schedule: Annotated[
        list[str] | None, typer.Option(help="allowed pipeline schedules (repeatable)")
    ] = None,
    no_offload: Annotated[
        bool, typer.Option("--no-offload", help="never offload optimizer states")
    ] = False,
    price_per_gpu_hour: Annotated[
        float | None, typer.Option(help="USD per GPU-hour (overrides the catalog)")
    ] = None,
    tokens: Annotated[
        float | None,
        typer.Option(
            help="tokens to train (default 1e12), for --objective time-to-train and the "
            "time/cost/energy columns of a comparison of GPUs"
        ),
    ] = None,
    what_if: Annotated[
        str | None,
        typer.Option(
            help="vary the network: nic=100,200,400 | domain=8,72 | oversubscription=1,2,4"
        ),
    ] = None,
    target_efficiency: Annotated[
        float | None,
        typer.Option(help="with --what-if: fraction of the best throughput to keep (default 0.9)"),
    ] = None,
    attention_kernel: AttentionKernel = "best",
    eager: Eager = False,
    loss: Loss = "fused",
    moe_dispatch: MoeDispatch = "alltoall",
    fp8_recipe: Fp8Recipe = "delayed",
    framework: Framework = None,
    zero3_gather: Zero3Gather = "layer",
    grad_accumulation: GradAccumulation = "fused",
    pipeline_split: PipelineSplit = "layers",
    recompute_modules: RecomputeModules = "core_attn",
    mtp_layers: MtpLayers = 0,
    fp8_param_gather: Fp8ParamGather = False,
    launch: LaunchOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON document")] = False,
) -> None:
    """Search composite strategies (dp x tp x pp x ep x cp, ZeRO, micro-batch, schedule,
    recomputation, offload) for the best one under an objective."""
    from hwtune.model.catalog import get_model
    from hwtune.train.objectives import objective_value
    from hwtune.train.search import SCHEDULES, Constraints, plan
    from hwtune.train.selection import compare_hardware, network_whatif
    from hwtune.train.strategy import make_strategy

    try:
        spec = get_model(model)
        gb = _batch(global_batch, global_batch_tokens, seq)
        fixed = parse_pairs(fix, "--fix")
        maxima = parse_pairs(max_, "--max")  # values checked by the search (positive integers)
        for s in schedule or []:
            if s not in SCHEDULES:
                raise HwtuneInputError("--schedule", s, f"one of {', '.join(SCHEDULES)}")
        c = Constraints(fixed=fixed, maxima=maxima, schedules=tuple(schedule) if schedule else None,
                        allow_offload=not no_offload)  # type: ignore[arg-type]  # fmt: skip
        framework = check_launch_framework(launch, framework)
        if launch is not None:
            c = launch_constraints(launch, c, spec)
        if cluster is not None:
            cluster_only(gpu=gpu, gpus=gpus, gpus_per_node=gpus_per_node, nic_gbps=nic_gbps,
                         scaleup_domain=scaleup_domain)  # fmt: skip
        clusters = make_clusters(gpu or "h100-sxm-80gb", 64 if gpus is None else gpus, gpus_per_node, nic_gbps,
                                 scaleup_domain, cluster)  # fmt: skip
        compare = len(clusters) > 1
        if launch is not None and (compare or what_if):
            raise HwtuneInputError("--launch", launch, "one GPU type and no --what-if (it "
                                   "launches the one best strategy of a plan)")  # fmt: skip
        from hwtune.train.estimator import default_precision

        for cl_ in clusters:  # a precision torchtitan refuses: no strategy would run
            check_torchtitan_precision(
                framework, launch, precision or default_precision(cl_.device)
            )
        _used_only_with(gpu, what_if, compare, objective, target_efficiency, price_per_gpu_hour,
                        tokens)  # fmt: skip
        tokens = 1e12 if tokens is None else tokens
        software = software_fields(
            attention_kernel,
            eager,
            loss,
            moe_dispatch,
            fp8_recipe,
            framework,
            zero3_gather,
            grad_accumulation,
            pipeline_split,
            recompute_modules,
            mtp_layers,
            fp8_param_gather,
        )
        software |= launch_fields(launch)
        # one-line errors for bad values, and for switches that would change nothing (an fp8
        # recipe without fp8, MoE dispatch on a dense model), before the search starts: the
        # checks and wording of `hwtune estimate`
        # recompute modules apply to the selective settings the search tries
        selective = {"recompute": "selective"} if "recompute_modules" in software else {}
        prec = {"precision": precision} if precision else {}  # else each GPU's 16-bit format
        # fp8 parameters need the distributed optimizer, which the search then keeps to
        sharded = {"zero": 1, "dp": 2} if software.get("fp8_param_gather") else {}
        make_strategy(**software, **selective, **prec, **sharded).validate_for(spec)
        kw = dict(precision=precision, objective=objective, constraints=c, top_k=top,
                  price_per_gpu_hour=price_per_gpu_hour, tokens_to_train=tokens,
                  base=software)  # fmt: skip
        if what_if:
            field, _, vals = what_if.partition("=")
            for flag, value, swept in (("--nic-gbps", nic_gbps, "nic"),
                                       ("--scaleup-domain", scaleup_domain, "domain")):  # fmt: skip
                if value is not None and field.strip() == swept:  # the sweep would replace it
                    raise HwtuneInputError(flag, value, f"no value with --what-if {swept}")
            try:
                values = [float(x) for x in vals.split(",")]
            except ValueError:
                values = []
            if not values:
                raise HwtuneInputError("--what-if", what_if, "field=v1,v2,... e.g. nic=100,200,400")
            target = 0.9 if target_efficiency is None else target_efficiency
            with progress_bar(f"what-if {field}", not as_json) as cb:
                pts, least = network_whatif(spec, clusters[0], field.strip(), values, gb, seq,
                                            target, progress=cb, **kw)  # fmt: skip
            _render_whatif(spec.name, clusters[0], gb, seq, field, pts, least, target, as_json)
            if not any(p.result.top for p in pts):  # an impossible job at every value: exit 1
                raise typer.Exit(1)
            return
        if compare:
            with progress_bar("hardware", not as_json) as cb:
                choices = compare_hardware(spec, clusters, gb, seq, progress=cb, **kw)  # type: ignore[arg-type]
            _render_hardware(spec.name, gb, seq, tokens, choices, as_json, objective)
            if not any(h.result.top for h in choices):  # an impossible job on every GPU: exit 1
                raise typer.Exit(1)
            return
        cl = clusters[0]
        with progress_bar("layouts", not as_json) as cb:
            r = plan(spec, cl, gb, seq, progress=cb, **kw)  # type: ignore[arg-type]
        if objective == "cost" and r.top:
            objective_value("cost", r.top[0], cl, price_per_gpu_hour)  # names a missing price
        launch_doc = launch_document(launch, r.top[0], spec, cl) if r.top else {}
    except HwtuneInputError as e:
        # the search names its job's fields; the batch in sequences is --global-batch's value
        # only when --global-batch-tokens did not give it
        flags = {k: ESTIMATE_FLAGS[k] for k in ("model", "gpu", "cluster", "framework", "seq",
                                                 "precision")} | SOFTWARE_FLAGS  # fmt: skip
        flags |= {"price_per_gpu_hour": "--price-per-gpu-hour", "objective": "--objective",
                  "top": "--top", "tokens": "--tokens", "target_efficiency": "--target-efficiency",
                  "what-if": "--what-if", "constraints": "--fix/--max"}  # fmt: skip
        if cluster is None:
            flags |= CLUSTER_FLAGS
        if global_batch_tokens is None:
            flags["global_batch"] = "--global-batch"
        fail(flag_error(e, flags))
    _render_plan(spec.name, cl, gb, seq, r, as_json, objective, price_per_gpu_hour, tokens,
                 launch_doc)  # fmt: skip


def _render_plan(name, cl, gb, seq, r, as_json, objective, price, tokens, launch=None) -> None:  # noqa: ANN001
    from hwtune.train.objectives import objective_value

    doc = {
        "model": name,
        "gpu": cl.device.name,
        "n_gpus": cl.n_gpus,
        "global_batch": gb,
        "seq": seq,
        "objective": objective,
        "candidates": r.candidates,
        "evaluated": r.evaluated,
        "pruned": dict(r.pruned),
        "search_seconds": r.seconds,
        "candidates_per_s": r.candidates / r.seconds if r.seconds else None,
        "why_best": r.why_best,
        "top": [
            {**_est_row(e), "objective_value": objective_value(objective, e, cl, price, tokens)}
            for e in r.top
        ],
    }
    if not r.top and r.shortfall:
        over, st = r.shortfall
        doc["infeasible"] = {
            "reason": "memory",
            "smallest_shortfall_bytes": over,
            "closest_strategy": st.model_dump(),
        }
    elif not r.top:  # every candidate pruned before estimation (see "pruned")
        doc["infeasible"] = {"reason": "no candidate left", "pruned": dict(r.pruned)}
    if launch:
        doc["launch"] = launch
    if as_json:
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        if not r.top:
            raise typer.Exit(1)
        return
    if not r.top:
        over, st = r.shortfall if r.shortfall else (0.0, None)
        from hwtune.train.search import strategy_label

        if st is None:  # nothing was estimated: no memory shortfall to report
            pr = ", ".join(f"{v:,} {k}" for k, v in r.pruned.most_common() if v) or "none"
            out.print(f"[red]no strategy runs[/red] {name} on {cl.n_gpus} x {cl.device.name}: "
                      f"none of the {r.candidates:,} candidates is left (pruned: {pr}).")  # fmt: skip
            raise typer.Exit(1)
        out.print(f"[red]no strategy fits[/red] {name} on {cl.n_gpus} x {cl.device.name}: the closest "
                  f"({strategy_label(st)}) needs {over / GIB:.1f} GiB more per GPU "
                  f"than the {cl.device.memory_gib:.0f} GiB there is.")  # fmt: skip
        raise typer.Exit(1)
    t = Table(
        title=f"{name} on {cl.n_gpus} x {cl.device.name}, batch {gb} x {seq} tokens, by {objective}"
    )
    for col in ("#", "strategy", "step", "tokens/s/GPU", "MFU", "mem GiB", objective):
        t.add_column(col, justify="right" if col not in ("strategy",) else "left")
    for i, e in enumerate(r.top, 1):
        t.add_row(
            str(i), _est_row(e)["label"], f"{e.step_time_s:.3f} s", f"{e.tokens_per_s_per_gpu:,.0f}",
            f"{e.mfu:.1%}", f"{e.memory.total / GIB:.1f}",
            f"{objective_value(objective, e, cl, price, tokens):.4g}",
        )  # fmt: skip
    out.print(t)
    out.print(f"why #1: {r.why_best}" if r.why_best else "")
    pr = ", ".join(f"{v:,} {k}" for k, v in r.pruned.most_common())
    out.print(
        f"searched {r.candidates:,} candidates in {r.seconds:.2f} s "
        f"({r.candidates / max(r.seconds, 1e-9):,.0f}/s); estimated {r.evaluated:,}; pruned: {pr}"
    )
    if cl.device.profile is not None:  # --gpu is a `hwtune bench` profile: say so (as estimate)
        out.print(f"note: {next(n for n in r.top[0].notes if n.startswith('tier 2'))}")
    print_launch(launch or {})


def _render_hardware(name, gb, seq, tokens, choices, as_json, objective) -> None:  # noqa: ANN001
    rows = []
    for h in choices:
        best = h.result.top[0] if h.result.top else None
        rows.append(
            {
                "gpu": h.cluster.device.name,
                "n_gpus": h.cluster.n_gpus,
                "fits": best is not None,
                "strategy": _est_row(best)["label"] if best else None,
                "precision": best.strategy.precision if best else None,  # fp16 on V100
                "tokens_per_s": best.tokens_per_s if best else None,
                "mfu": best.mfu if best else None,
                "time_to_train_s": h.time_to_train_s,
                "cost_usd": h.cost_usd,
                "energy_j": h.energy_j,
            }
        )
    if as_json:
        sys.stdout.write(json.dumps({"model": name, "global_batch": gb, "seq": seq, "tokens": tokens,
                                     "objective": objective, "hardware": rows}, indent=2) + "\n")  # fmt: skip
        return
    t = Table(title=f"{name}: {tokens:.3g} tokens, batch {gb} x {seq}, best by {objective} first")
    for col in (
        "GPU",
        "GPUs",
        "best strategy",
        "precision",
        "tokens/s",
        "MFU",
        "days",
        "cost (USD)",
        "energy (MWh)",
    ):
        t.add_column(col, justify="left" if col in ("GPU", "best strategy") else "right")
    for r in rows:
        if not r["fits"]:
            t.add_row(r["gpu"], str(r["n_gpus"]), "[red]no strategy fits[/red]", *[""] * 6)
            continue
        t.add_row(
            r["gpu"], str(r["n_gpus"]), r["strategy"], r["precision"],
            f"{r['tokens_per_s']:,.0f}", f"{r['mfu']:.1%}",
            f"{r['time_to_train_s'] / 86400:.1f}",
            f"{r['cost_usd']:,.0f}" if r["cost_usd"] is not None else "no price",
            f"{r['energy_j'] / 3.6e9:,.1f}",
        )  # fmt: skip
    out.print(t)


def _render_whatif(name, cl, gb, seq, field, pts, least, target, as_json) -> None:  # noqa: ANN001
    rows = [
        {
            "value": p.value,
            "tokens_per_s": p.throughput,
            "efficiency": p.efficiency,
            "strategy": _est_row(p.result.top[0])["label"] if p.result.top else None,
        }
        for p in pts
    ]
    if as_json:
        sys.stdout.write(json.dumps({"model": name, "gpu": cl.device.name, "n_gpus": cl.n_gpus,
                                     "global_batch": gb, "seq": seq, "field": field,
                                     "target_efficiency": target, "least_value": least,
                                     "points": rows}, indent=2) + "\n")  # fmt: skip
        return
    t = Table(
        title=f"{name} on {cl.n_gpus} x {cl.device.name}, batch {gb} x {seq}: what-if {field}"
    )
    for col in (field, "tokens/s", "vs best", "best strategy"):
        t.add_column(col, justify="right" if col != "best strategy" else "left")
    for r in rows:
        fits = r["strategy"] is not None  # no fit: dashes, not 0 tokens/s and 0.0%
        t.add_row(
            f"{r['value']:g}",
            f"{r['tokens_per_s']:,.0f}" if fits else "-",
            f"{r['efficiency']:.1%}" if fits else "-",
            r["strategy"] or "no fit",
        )
    out.print(t)
    if not any(r["strategy"] for r in rows):
        out.print(f"no strategy fits at any {field} in the sweep")
        return
    out.print(
        f"least {field} keeping {target:.0%} of the best throughput: {least:g}"
        if least is not None
        else f"no {field} in the sweep keeps {target:.0%} of the best throughput"
    )


def _fractions(text: str) -> list[float]:
    """``--knees``: distinct fractions of linear scaling in (0, 1), comma-separated (1 would
    make any step short of exactly linear a knee)."""
    try:
        fr = [float(x) for x in text.split(",")]
    except ValueError:
        fr = []
    if not fr or not all(0 < f < 1 for f in fr):
        raise HwtuneInputError(
            "--knees", text, "fractions in (0, 1) separated by commas, e.g. 0.9,0.5"
        )
    if len(set(fr)) != len(fr):
        raise HwtuneInputError("--knees", text, "each fraction once")
    return fr


def _distinct(items: list, text: str, field: str, increasing: bool = False) -> list:
    """A swept list: each value once (a repeat would be a duplicate row or silently dropped)
    and, for accelerator counts, in increasing order (the order of the table and the knees)."""
    if len(set(items)) != len(items):
        raise HwtuneInputError(field, text, "each value once")
    if increasing and items != sorted(items):
        raise HwtuneInputError(field, text, "increasing values, e.g. 8,16,32")
    return items


def _sweep_options(
    names: list[str], global_batch: int | None, global_batches: str | None, **ignored: object
) -> None:
    """Options of an accelerator sweep that a model-size or global-batch sweep would ignore."""
    if len(names) > 1 and global_batches is not None:
        raise HwtuneInputError("--global-batches", global_batches, "one --model to sweep its batch")
    if global_batches is not None and global_batch is not None:
        raise HwtuneInputError("--global-batch", global_batch, "no value with --global-batches")
    for name, value in ignored.items():
        if value is not None:
            raise HwtuneInputError(
                "--" + name.replace("_", "-"),
                str(value) if isinstance(value, Path) else value,
                "an accelerator sweep (one --model, no --global-batches)",
            )


def scale_cmd(
    model: Annotated[
        str,
        typer.Option(
            "--model", "-m", help="catalog name(s), comma-separated for a model-size sweep"
        ),
    ] = "llama3.1-70b",
    gpu: Annotated[str, typer.Option(help="catalog GPU name")] = "h100-sxm-80gb",
    gpus: Annotated[
        str | None,
        typer.Option(
            help="increasing accelerator counts, comma-separated (default 8..8192, powers of 2)"
        ),
    ] = None,
    fixed_gpus: Annotated[
        int | None, typer.Option(help="accelerators for model-size or batch sweeps (default 1024)")
    ] = None,
    gpus_per_node: Annotated[int | None, typer.Option()] = None,
    nic_gbps: Annotated[float | None, typer.Option()] = None,
    scaleup_domain: Annotated[int | None, typer.Option()] = None,
    policy: Annotated[
        str | None,
        typer.Option(help="strong (fixed global batch; the default) | weak (fixed per-GPU batch)"),
    ] = None,
    global_batch: Annotated[
        int | None,
        typer.Option(help="sequences per step (strong scaling, model-size sweep; default 1024)"),
    ] = None,
    global_batches: Annotated[
        str | None, typer.Option(help="sweep the global batch instead: 128,256,...")
    ] = None,
    seqs_per_gpu: Annotated[
        float | None, typer.Option(help="sequences per GPU (weak scaling; default 1)")
    ] = None,
    seq: Annotated[int, typer.Option()] = 8192,
    precision: Annotated[
        str | None,
        typer.Option(
            help="fp32|fp16|bf16|fp8 (default: bf16, or fp16 on a GPU without bf16: V100)"
        ),
    ] = None,
    knees: Annotated[
        str | None,
        typer.Option(help="fractions of linear scaling in (0, 1) that mark a knee (0.9,0.5)"),
    ] = None,
    plot: Annotated[
        Path | None, typer.Option(help="write a plot here (PNG, or .pdf, .svg, ...)")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Sweep accelerators (or model size, or global batch): best strategy at each point, scaling
    efficiency, knees where adding accelerators stops paying, and regime changes."""
    from hwtune.hardware.catalog import get_device
    from hwtune.hardware.cluster import make_cluster
    from hwtune.model.catalog import get_model
    from hwtune.train.estimator import default_precision
    from hwtune.train.scaling import scale_sweep
    from hwtune.train.search import NoLayoutError, plan, strategy_label

    # the count of an accelerator sweep is one of --gpus, that of a model or batch sweep --fixed-gpus
    count_flag = "--gpus" if "," not in model and global_batches is None else "--fixed-gpus"
    try:
        names = listed(model, "--model", "catalog names")

        def mk(n: int):  # noqa: ANN202
            return make_cluster(gpu, n, gpus_per_node=gpus_per_node, nic_gbps=nic_gbps,
                                scaleup_domain=scaleup_domain)  # fmt: skip

        precision = precision or default_precision(get_device(gpu))

        if len(names) > 1 or global_batches is not None:
            _distinct([get_model(n).name for n in names], model, "--model")  # aliases too
            # model-size or global-batch sweep at a fixed accelerator count
            _sweep_options(names, global_batch, global_batches, gpus=gpus, policy=policy,
                           seqs_per_gpu=seqs_per_gpu, knees=knees, plot=plot)  # fmt: skip
            cl = mk(1024 if fixed_gpus is None else fixed_gpus)
            rows = []
            items = [(n, 1024 if global_batch is None else global_batch) for n in names] if (
                len(names) > 1
            ) else [(names[0], b) for b in _distinct(positive_ints(global_batches or "", "--global-batches"),
                                                      global_batches or "", "--global-batches")]  # fmt: skip
            with progress_bar("sweep", not as_json) as cb:
                for i, (n, gb) in enumerate(items):
                    if cb:
                        cb(i, len(items))
                    spec = get_model(n)
                    try:
                        r = plan(spec, cl, gb, seq, precision=precision, top_k=1)
                        b = r.top[0] if r.top else None
                    except NoLayoutError:  # as in an accelerator sweep: a point with no fit
                        b = None
                    rows.append({"model": spec.name, "global_batch": gb,
                                 "tokens_per_s": b.tokens_per_s if b else 0.0, "mfu": b.mfu if b else None,
                                 "model_tflops_per_gpu": b.model_tflops_per_gpu if b else None,
                                 "strategy": strategy_label(b.strategy) if b else None})  # fmt: skip
            if as_json:
                sys.stdout.write(
                    json.dumps(
                        {
                            "gpu": cl.device.name,
                            "n_gpus": cl.n_gpus,
                            "seq": seq,
                            "precision": precision,
                            "points": rows,
                        },
                        indent=2,
                    )
                    + "\n"
                )
                if not any(r_["strategy"] for r_ in rows):  # as `hwtune plan`: exit 1
                    raise typer.Exit(1)
                return
            t = Table(title=f"sweep on {cl.n_gpus} x {cl.device.name}, seq {seq}")
            for col in ("model", "global batch", "tokens/s", "MFU", "best strategy"):
                t.add_column(col)
            for r_ in rows:
                fits = r_["strategy"] is not None  # no fit: dashes, not 0 tokens/s
                t.add_row(r_["model"], str(r_["global_batch"]),
                          f"{r_['tokens_per_s']:,.0f}" if fits else "-",
                          f"{r_['mfu']:.1%}" if fits else "-", r_["strategy"] or "no fit")  # fmt: skip
            out.print(t)
            if not any(r_["strategy"] for r_ in rows):  # as `hwtune plan`: an impossible job
                out.print("no strategy fits at any point of the sweep")
                raise typer.Exit(1)
            return
        if fixed_gpus is not None:
            raise HwtuneInputError(
                "--fixed-gpus", fixed_gpus, "a model-size or --global-batches sweep (else --gpus)"
            )
        policy = policy or "strong"
        if policy == "weak" and global_batch is not None:
            raise HwtuneInputError(
                "--global-batch", global_batch, "strong scaling (weak: --seqs-per-gpu)"
            )
        if policy == "strong" and seqs_per_gpu is not None:
            raise HwtuneInputError("--seqs-per-gpu", seqs_per_gpu, "--policy weak with it")
        fr = _fractions(knees or "0.9,0.5")
        if plot is not None:
            output_path(plot, "--plot", plot_suffixes())
        spec = get_model(names[0])
        ns = (
            _distinct(positive_ints(gpus, "--gpus"), gpus, "--gpus", increasing=True)
            if gpus is not None
            else [2**k for k in range(3, 14)]
        )
        with progress_bar("accelerators", not as_json) as cb:
            res = scale_sweep(spec, mk, ns, seq, policy=policy,
                              global_batch=1024 if global_batch is None else global_batch,
                              seqs_per_gpu=1.0 if seqs_per_gpu is None else seqs_per_gpu,
                              fractions=fr, progress=cb, precision=precision, top_k=1)  # fmt: skip
    except HwtuneInputError as e:  # the sweep's and the search's checks name their fields
        batch_flag = "--global-batches" if global_batches is not None else "--global-batch"
        flags = {k: ESTIMATE_FLAGS[k] for k in ("model", "gpu", "seq", "precision")}
        flags |= CLUSTER_FLAGS | {"cluster.n_gpus": count_flag, "global_batch": batch_flag,
                                  "seqs_per_gpu": "--seqs-per-gpu", "policy": "--policy",
                                  "knees": "--knees"}  # fmt: skip
        fail(flag_error(e, flags))
    device = mk(res.points[0].n_gpus).device.name  # the catalog name, not an alias
    doc = {
        "model": spec.name,
        "gpu": device,
        "policy": res.policy,
        "seq": seq,
        "precision": precision,
        "knee_fractions": sorted(fr, reverse=True),
        "points": [
            {
                "n_gpus": p.n_gpus,
                "global_batch": p.global_batch,
                "fits": p.best is not None,
                # a count where nothing fits has no throughput or shares: null, not zeros
                "tokens_per_s": p.throughput if p.best else None,
                "tokens_per_s_per_gpu": p.throughput / p.n_gpus if p.best else None,
                "scaling_efficiency": p.efficiency if p.best else None,
                "mfu": p.best.mfu if p.best else None,
                "exposed_comm_share": p.exposed_comm if p.best else None,
                "exposed_share": p.shares if p.best else None,
                "strategy": p.label,
                "regime": p.regime,
                "shortfall_bytes": p.shortfall_bytes,
            }
            for p in res.points
        ],
        "knees": [k.__dict__ for k in res.knees],
    }
    if plot:
        from hwtune.report.scale_plot import plot_scaling

        plot_scaling(res, plot, f"{spec.name} on {device}: {res.policy} scaling, seq {seq}")
        doc["plot"] = str(plot)
    fitting = sum(1 for p in res.points if p.best)
    if as_json:
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        if not fitting:  # as `hwtune plan`: an impossible job exits 1
            raise typer.Exit(1)
        return
    t = Table(title=f"{spec.name} on {device}: {res.policy} scaling, seq {seq}")
    for col in (
        "GPUs",
        "batch",
        "tokens/s",
        "per GPU",
        "efficiency",
        "MFU",
        "exposed comm",
        "best strategy",
    ):
        t.add_column(col, justify="left" if col == "best strategy" else "right")
    for p in res.points:
        if not p.best:  # no throughput, efficiency or share to show: dashes, not zeros
            short = p.shortfall_bytes
            label = p.label + (f" (the closest needs {short / GIB:.1f} GiB more per GPU)"
                               if short is not None else "")  # fmt: skip
            t.add_row(str(p.n_gpus), str(p.global_batch), "-", "-", "-", "-", "-", label)
            continue
        t.add_row(
            str(p.n_gpus), str(p.global_batch), f"{p.throughput:,.0f}", f"{p.throughput / p.n_gpus:,.0f}",
            f"{p.efficiency:.1%}", f"{p.best.mfu:.1%}", f"{p.exposed_comm:.1%}", p.label,
        )  # fmt: skip
    out.print(t)
    for k in res.knees:
        out.print(
            f"[bold]{k.n_gpus} GPUs[/bold]: {k.detail}"
            + (f" — saturating: {k.resource}" if k.resource else "")
        )
    if fitting < 2:
        out.print(
            "no strategy fits at any count: no scaling to measure"
            if not fitting
            else "one count fits: no scaling to measure (give two or more --gpus that fit)"
        )
    elif not any(k.kind == "efficiency" for k in res.knees):  # regime changes are no knee
        out.print("no knee in the sweep: scaling stays above the thresholds")
    if plot:
        out.print(f"plot: {plot}")
    if not fitting:
        raise typer.Exit(1)
