"""`hwtune accel`: training on dataflow accelerators: evaluate a (workload, architecture,
schedule), plan activation checkpointing under a memory limit, search architectures with
NSGA-II. Parse, call `hwtune.accel`, render; no formulas here."""

from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from hwtune.cli.parsing import fail, output_path, plot_suffixes
from hwtune.errors import HwtuneInputError

if TYPE_CHECKING:
    from hwtune.accel.checkpointing import CheckpointPlan
    from hwtune.accel.search import SearchResult

app = typer.Typer(
    name="accel",
    help="Training on dataflow accelerators: layer fusion, checkpointing, architecture search.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

JsonOpt = Annotated[bool, typer.Option("--json", help="print one JSON document")]
Workload = Annotated[
    str, typer.Option("--workload", "-w", help="resnet18 | gpt2 | a .yaml/.onnx graph")
]
Arch = Annotated[str, typer.Option("--arch", "-a", help="catalog accelerator or a YAML file")]
Batch = Annotated[int | None, typer.Option(help="samples per step (built-in workloads; default 1)")]
Seq = Annotated[int | None, typer.Option(help="tokens per sample (gpt2; default 1024)")]
Image = Annotated[int | None, typer.Option(help="image size in pixels (resnet18; default 224)")]


def _emit(doc: object) -> None:
    sys.stdout.write(json.dumps(doc, indent=2) + "\n")


def _limit_unmet(
    plan: CheckpointPlan | None, as_json: bool, opt: str, mib: float, method: str = "auto"
) -> None:
    """A limit no plan meets is a result that does not meet the request: exit 1 (bad input is
    2). Text: one line with the limit as given (option ``opt``, ``mib`` MiB) and the smallest
    reachable activation memory (rounded up: a limit of that figure is met); JSON: the document
    (its ``limit_met`` is false) is printed first."""
    if plan is None or plan.feasible:
        return
    if not as_json:
        sys.stderr.write(
            f"error: {opt}: {_given(mib)} MiB cannot be met; "
            f"{_least_reached(method, plan.smallest_peak_bytes)} (recomputing {len(plan.dropped)} of "
            f"{len(plan.dropped) + len(plan.kept)} saved activations; all kept: "
            f"{_mib_up(plan.all_kept_bytes)})\n"
        )
    raise typer.Exit(1)


def _workload(workload: str, batch: int | None, seq: int | None, image: int | None):  # noqa: ANN202
    """The workload graph; a size option the workload does not take would be ignored: an error."""
    from hwtune.accel.graph_yaml import load_workload
    from hwtune.accel.models import WORKLOADS

    kind = {".onnx": "ONNX", ".yaml": "YAML graph", ".yml": "YAML graph"}.get(Path(workload).suffix)
    if workload not in WORKLOADS and kind and not Path(workload).is_file():
        # before anything else about the file (the onnx package, its contents)
        raise HwtuneInputError("--workload", workload, f"an existing {kind} file")
    takes = {"resnet18": ("batch", "image"), "gpt2": ("batch", "seq")}.get(workload, ())
    for name, v in (("batch", batch), ("seq", seq), ("image", image)):
        if v is not None and name not in takes:
            raise HwtuneInputError(name, v, "a workload that takes it (resnet18: --batch, "
                                   "--image; gpt2: --batch, --seq; a graph file has its shapes)")  # fmt: skip
    return load_workload(workload, batch=1 if batch is None else batch,
                         image=224 if image is None else image, seq=1024 if seq is None else seq)  # fmt: skip


def _limit_bytes(mib: float, field: str) -> float:
    if not (mib > 0 and math.isfinite(mib)):
        raise HwtuneInputError(field, mib, "a positive finite size in MiB")
    return mib * 2**20


def _mib(b: float) -> str:
    return f"{b / 2**20:,.2f} MiB"


def _mib_up(b: float) -> str:
    """``b`` bytes in MiB rounded up (a limit of the figure shown is met), to 2 decimals or,
    below 1 MiB, 3 significant digits (0.000123 MiB, not 0.00)."""
    v = b / 2**20
    d = 2 if v >= 1 or v <= 0 else max(2, 2 - math.floor(math.log10(v)))
    return f"{math.ceil(v * 10**d) / 10**d:,.{d}f} MiB"


def _least_reached(method: str, peak_bytes: float) -> str:
    """What an unmet activation limit reports: the least activation memory a checkpoint plan
    (of ``method``; any, for auto) reaches."""
    which = "" if method == "auto" else method + " "
    return f"the least any {which}checkpoint plan reaches is {_mib_up(peak_bytes)}"


def _given(v: float) -> str:
    """An option's value as the user wrote it (0.001, 40), not rounded."""
    s = repr(float(v))
    return s[:-2] if s.endswith(".0") else s


@app.command("list")
def list_cmd(as_json: JsonOpt = False) -> None:
    """The catalog accelerators and built-in workloads."""
    from hwtune.accel.architecture import catalog_names, load_accelerator
    from hwtune.accel.models import WORKLOADS

    accs = {n: load_accelerator(n) for n in catalog_names()}
    if as_json:
        _emit(
            {
                "accelerators": {n: a.model_dump(mode="json") for n, a in accs.items()},
                "workloads": list(WORKLOADS),
            }
        )
        return
    for n, a in accs.items():
        cores = ", ".join(f"{c.count}x {c.pe_rows}x{c.pe_cols} {c.name}" for c in a.cores)
        sys.stdout.write(
            f"{n:16s} {cores}; shared {a.shared_memory.size_mib:g} MiB; DRAM {a.dram.bandwidth_gbps:g} GB/s; {a.area_mm2():.1f} mm2\n"
        )
    sys.stdout.write("workloads: " + ", ".join(WORKLOADS) + " (or a .yaml/.onnx graph)\n")


@app.command("evaluate")
def evaluate_cmd(
    workload: Workload = "resnet18",
    arch: Arch = "tpu-like-quad",
    batch: Batch = None,
    seq: Seq = None,
    image: Image = None,
    fusion: Annotated[
        int, typer.Option(help="most ops per fused group, 1-6 (1 = layer by layer)")
    ] = 1,
    optimizer: Annotated[str, typer.Option(help="adam | sgd")] = "adam",
    activation_limit_mib: Annotated[
        float | None,
        typer.Option(help="plan checkpointing to fit this, MiB (exit 1 if no plan fits)"),
    ] = None,
    ops: Annotated[bool, typer.Option("--ops", help="include every scheduled op (JSON)")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Latency, energy by component and peak memory per level of one training step."""
    from hwtune.accel.architecture import load_accelerator
    from hwtune.accel.evaluate import evaluate
    from hwtune.accel.schedule import MAX_FUSION_DEPTH

    try:
        if not 1 <= fusion <= MAX_FUSION_DEPTH:
            raise HwtuneInputError("fusion", fusion, f"an integer in [1, {MAX_FUSION_DEPTH}]")
        g = _workload(workload, batch, seq, image)
        acc = load_accelerator(arch)
        limit = (
            None
            if activation_limit_mib is None
            else _limit_bytes(activation_limit_mib, "activation-limit-mib")
        )
        ev = evaluate(
            g, acc, fusion_depth=fusion, optimizer=optimizer, activation_limit_bytes=limit
        )
    except HwtuneInputError as e:
        fail(e)
    doc = ev.to_dict()
    if ops:
        doc["ops"] = [o.__dict__ for o in ev.result.ops]
    doc.update(workload=g.name, accelerator=acc.name, fusion_depth=fusion)
    if ev.plan is not None:
        doc["limit_met"] = ev.plan.feasible
    unmet = ("--activation-limit-mib", activation_limit_mib or 0.0)
    if as_json:
        _emit(doc)
        _limit_unmet(ev.plan, as_json, *unmet)
        return
    _limit_unmet(ev.plan, as_json, *unmet)
    r = ev.result
    w = sys.stdout.write
    w(f"{g.name} on {acc.name} (fusion depth {fusion}, {optimizer})\n")
    w(
        f"  latency        {r.latency_s * 1e3:,.3f} ms   ({r.macs / 1e9:,.2f} GMAC, recompute {r.recompute_macs / 1e9:,.2f} GMAC)\n"
    )
    w(
        f"  energy         {r.total_energy_j * 1e3:,.3f} mJ  "
        + ", ".join(f"{k} {v * 1e3:,.2f}" for k, v in r.energy_j.items())
        + "\n"
    )
    w(
        f"  peak memory    local {_mib(r.peak_bytes['local'])}, shared {_mib(r.peak_bytes['shared'])}, DRAM {_mib(r.peak_bytes['dram'])}{'' if r.fits_dram else ' (exceeds DRAM capacity)'}\n"
    )
    w(
        f"  traffic        DRAM {_mib(r.dram_traffic_bytes)}, shared {_mib(r.shared_traffic_bytes)}, links {_mib(r.link_traffic_bytes)}\n"
    )
    if ev.plan is not None:
        p = ev.plan
        w(
            f"  checkpointing  {p.method}: keep {len(p.kept)}, recompute {len(p.dropped)}; activations {_mib(p.predicted_peak_bytes)} of limit {_mib(p.limit_bytes)}\n"
        )


@app.command("checkpoint")
def checkpoint_cmd(
    limit_mib: Annotated[
        float, typer.Option(help="activation memory limit, MiB (exit 1 if no plan fits)")
    ],
    workload: Workload = "resnet18",
    arch: Arch = "tpu-like-quad",
    batch: Batch = None,
    seq: Seq = None,
    image: Image = None,
    method: Annotated[str, typer.Option(help="auto | chain | greedy")] = "auto",
    as_json: JsonOpt = False,
) -> None:
    """Which activations to keep and which to recompute under a memory limit."""
    from hwtune.accel.architecture import load_accelerator
    from hwtune.accel.evaluate import evaluate

    try:
        g = _workload(workload, batch, seq, image)
        acc = load_accelerator(arch)
        limit = _limit_bytes(limit_mib, "limit-mib")
        ev = evaluate(g, acc, activation_limit_bytes=limit, checkpoint_method=method)
    except HwtuneInputError as e:
        fail(e)
    assert ev.plan is not None
    doc = ev.to_dict()
    doc["limit_met"] = ev.plan.feasible
    if as_json:
        _emit(doc)
        _limit_unmet(ev.plan, as_json, "--limit-mib", limit_mib, method)
        return
    _limit_unmet(ev.plan, as_json, "--limit-mib", limit_mib, method)
    p = ev.plan
    sys.stdout.write(
        f"{g.name}: {p.method}, meets {_mib(p.limit_bytes)}; "
        f"activations {_mib(p.predicted_peak_bytes)} (all kept: {_mib(p.all_kept_bytes)}); "
        f"recompute {len(p.dropped)} tensors, {ev.result.recompute_macs / 1e9:.2f} GMAC; "
        f"step {ev.result.latency_s * 1e3:.2f} ms\n"
    )


@app.command("search")
def search_cmd(
    workload: Workload = "resnet18",
    template: Annotated[
        str, typer.Option(help="accelerator whose energies/clock/area model are used")
    ] = "edge-hetero",
    batch: Batch = None,
    seq: Seq = None,
    image: Image = None,
    evaluations: Annotated[
        int,
        typer.Option(
            help="total evaluations, run exactly: population x generations, the last "
            "generation cut short when --pop-size does not divide it"
        ),
    ] = 5000,
    pop_size: Annotated[int, typer.Option(help="NSGA-II population")] = 100,
    workers: Annotated[int, typer.Option(help="local processes")] = 1,
    seed: Annotated[int, typer.Option(help="random seed")] = 0,
    objective: Annotated[str, typer.Option(help="third objective: area | memory")] = "area",
    area_budget_mm2: Annotated[
        float | None,
        typer.Option(help="area constraint (exit 2 if below the search space's smallest area)"),
    ] = None,
    power_budget_w: Annotated[
        float | None,
        typer.Option(
            help="average power constraint (exit 1 if no architecture found meets the budgets)"
        ),
    ] = None,
    activation_limit_mib: Annotated[
        float | None,
        typer.Option(
            help="plan checkpointing to fit this, MiB, on every architecture (one no plan fits "
            "is infeasible; exit 1 if none fits)"
        ),
    ] = None,
    checkpoint_method: Annotated[
        str | None,
        typer.Option(help="planner with --activation-limit-mib: auto (default) | chain | greedy"),
    ] = None,
    plot: Annotated[Path | None, typer.Option(help="write the Pareto plot (PNG/SVG)")] = None,
    table: Annotated[Path | None, typer.Option(help="write the Pareto table (CSV)")] = None,
    as_json: JsonOpt = False,
) -> None:
    """NSGA-II architecture search: latency, energy and area (or memory) under budgets."""
    from hwtune.accel.architecture import load_accelerator
    from hwtune.accel.search import Budget, Checkpointing, search
    from hwtune.accel.training import lower_training

    try:
        ckpt = None
        if activation_limit_mib is not None:
            ckpt = Checkpointing(
                _limit_bytes(activation_limit_mib, "activation-limit-mib"),
                "auto" if checkpoint_method is None else checkpoint_method,
            )
        elif checkpoint_method is not None:  # it would be ignored
            raise HwtuneInputError("checkpoint-method", checkpoint_method,
                                   "--activation-limit-mib with it (the limit to plan for)")  # fmt: skip
        if plot is not None:  # a path that cannot be written fails now, not after the search
            output_path(plot, "plot", plot_suffixes())
        if table is not None:
            output_path(table, "table")
        g = _workload(workload, batch, seq, image)
        t = load_accelerator(template)
        res = search(lower_training(g), t, evaluations, pop_size, workers, seed, objective,
                     Budget(area_budget_mm2, power_budget_w), ckpt)  # fmt: skip
    except HwtuneInputError as e:
        fail(e)
    rows = res.rows(t)
    if ckpt is not None and res.over_limit and not res.met_limit:
        # no architecture meets the limit: a result that does not meet the request (exit 1)
        doc = {"workload": g.name, "evaluations": res.evaluations, "seconds": res.seconds,
               "checkpointing": _search_ckpt_doc(res), "pareto": rows}  # fmt: skip
        if as_json:
            _emit(doc)
        else:
            small = res.smallest_activation_bytes or 0.0
            sys.stderr.write(
                f"error: --activation-limit-mib: {_given(activation_limit_mib or 0.0)} MiB cannot "
                f"be met: no plan fits it on any of the {res.over_limit} architectures planned "
                f"({res.evaluations} evaluations); {_least_reached(ckpt.method, small)}\n"
            )
        raise typer.Exit(1)
    for name, path in (("plot", plot), ("table", table)):
        if path is not None and not rows:  # nothing to write: say so rather than skip the file
            fail(HwtuneInputError(name, str(path), "Pareto points to write (no candidate of "
                                   f"the {res.evaluations} evaluations met the budgets)"))  # fmt: skip
    if not rows:  # the budgets admit none of the architectures evaluated: a request not met
        if as_json:
            _emit({"workload": g.name, "evaluations": res.evaluations, "seconds": res.seconds,
                   "pareto": rows})  # fmt: skip
        else:
            budgets = [f"--{k} {_given(v)}" for k, v in (("area-budget-mm2", area_budget_mm2),
                       ("power-budget-w", power_budget_w)) if v is not None]  # fmt: skip
            sys.stderr.write(
                f"error: none of the {res.evaluations} architectures evaluated meets "
                + (" and ".join(budgets) if budgets else "the search's constraints")
                + f" ({res.infeasible} infeasible: over a budget, or a layer fits no core); "
                "loosen the budget or raise --evaluations\n"
            )
        raise typer.Exit(1)
    if plot is not None and len(res.F):
        from hwtune.report.accel_plots import pareto_plot

        pareto_plot(res.F, plot, objective, res.all_F, f"{g.name}: {res.evaluations} evaluations")
    if table is not None and rows:
        with table.open("w", newline="") as fh:
            wr = csv.DictWriter(fh, fieldnames=list(rows[0]))
            wr.writeheader()
            wr.writerows(rows)
    if as_json:
        doc = {
            "workload": g.name,
            "evaluations": res.evaluations,
            "seconds": res.seconds,
            "pareto": rows,
        }
        if ckpt is not None:
            doc["checkpointing"] = _search_ckpt_doc(res)
        _emit(doc)
        return
    sys.stdout.write(
        f"{g.name}: {res.evaluations} evaluations in {res.seconds:.1f} s on {workers} process(es); {len(rows)} Pareto points\n"
    )
    if ckpt is not None:
        sys.stdout.write(
            f"checkpointing ({ckpt.method}) to an activation limit of {_mib(ckpt.limit_bytes)}: "
            f"{res.infeasible} of {res.evaluations} evaluations infeasible, {res.over_limit} of "
            "them because no plan fits the limit\n"
        )
    extra = f" {'DRAM MiB':>9}" if objective == "memory" else ""  # the third objective
    extra += f" {'act MiB':>9} {'recomp GMAC':>11}" if ckpt is not None else ""
    sys.stdout.write(
        f"{'cores':>5} {'PEs':>9} {'dataflow':>17} {'local':>8} {'shared':>7} {'DRAM':>7} {'fuse':>4} {'ms':>9} {'mJ':>9} {'mm2':>7}{extra}\n"
    )
    for r in rows:
        extra = f" {r['memory'] / 2**20:>9.1f}" if objective == "memory" else ""
        if ckpt is not None:
            extra += (
                f" {r['activation_peak_bytes'] / 2**20:>9.2f} {r['recompute_macs'] / 1e9:>11.3f}"
            )
        sys.stdout.write(
            f"{r['cores']:>5} {r['pe_rows']:>4}x{r['pe_cols']:<4} {r['dataflow']:>17} {r['local_kib']:>6.0f}K "
            f"{r['shared_mib']:>6g}M {r['dram_gbps']:>6g} {r['fusion_depth']:>4} {r['latency_s'] * 1e3:>9.3f} "
            f"{r['energy_j'] * 1e3:>9.3f} {r['area_mm2']:>7.2f}{extra}\n"
        )


def _search_ckpt_doc(res: SearchResult) -> dict:
    """The JSON summary of a search's checkpointing: limit, method, infeasible counts."""
    assert res.checkpointing is not None
    return {
        "activation_limit_bytes": res.checkpointing.limit_bytes,
        "method": res.checkpointing.method,
        "infeasible": res.infeasible,
        "over_limit": res.over_limit,
        "met_limit": res.met_limit,
        "smallest_activation_bytes": res.smallest_activation_bytes,
    }


@app.command("graph")
def graph_cmd(
    workload: Workload = "resnet18",
    batch: Batch = None,
    seq: Seq = None,
    image: Image = None,
    as_json: JsonOpt = False,
) -> None:
    """Layers of a workload with their exact MACs, weight and activation bytes."""

    try:
        g = _workload(workload, batch, seq, image)
    except HwtuneInputError as e:
        fail(e)
    layers = [
        {"name": x.name, "kind": x.kind, "macs": x.macs,
         "weight_bytes": g.tensors[x.weight].nbytes if x.weight else 0,
         "output_bytes": g.tensors[x.output].nbytes}
        for x in g.layers
    ]  # fmt: skip
    if as_json:
        _emit({"name": g.name, "macs": g.macs, "weight_bytes": g.weight_bytes(), "layers": layers})
        return
    for r in layers:
        sys.stdout.write(
            f"{r['name']:28s} {r['kind']:10s} {r['macs']:>14,} MAC {r['weight_bytes']:>12,} B weights {r['output_bytes']:>12,} B out\n"
        )
    sys.stdout.write(f"total {g.macs:,} MAC, {g.weight_bytes():,} B weights\n")
