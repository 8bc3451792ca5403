"""`hwtune compile`: model + strategy (flags or YAML) + cluster -> device plan, simulated step,
Perfetto trace and Gantt chart; ``--run`` trains the tiny runtime models under the same strategy,
on CPU/gloo (default) or, with ``--device cuda``, one GPU per process over NCCL. Parse, call the library, render: no formulas here."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from hwtune.cli.parsing import flag_error, output_path, plot_suffixes
from hwtune.errors import HwtuneInputError

GPU_DEFAULT = "h100-sxm-80gb"
_MESH_AXES = ("dp", "tp", "pp", "ep", "cp")  # the flags that are mesh degrees


def _fail(e: Exception) -> None:
    sys.stderr.write(f"error: {e}\n")
    raise typer.Exit(2)


def compile_cmd(
    model: Annotated[
        str, typer.Option("--model", "-m", help="catalog name or config.json")
    ] = "llama3.1-8b",
    strategy: Annotated[
        Path | None, typer.Option(help="strategy YAML (annotations, schedule)")
    ] = None,
    gpu: Annotated[
        str, typer.Option(help="catalog GPU name, a device YAML or a `hwtune bench` profile")
    ] = GPU_DEFAULT,
    gpus: Annotated[int | None, typer.Option(help="GPUs (default: dp*tp*pp*cp)")] = None,
    gpus_per_node: Annotated[int | None, typer.Option(help="GPUs per node")] = None,
    nic_gbps: Annotated[float | None, typer.Option(help="scale-out Gb/s per GPU")] = None,
    cluster: Annotated[Path | None, typer.Option(help="cluster YAML file")] = None,
    dp: Annotated[int | None, typer.Option(help="data-parallel degree")] = None,
    tp: Annotated[int | None, typer.Option(help="tensor-parallel degree")] = None,
    pp: Annotated[int | None, typer.Option(help="pipeline-parallel degree")] = None,
    ep: Annotated[int | None, typer.Option(help="expert-parallel degree")] = None,
    cp: Annotated[int | None, typer.Option(help="context-parallel degree")] = None,
    zero: Annotated[int | None, typer.Option(help="ZeRO stage 0-3")] = None,
    micro_batch: Annotated[int | None, typer.Option(help="sequences per micro-batch")] = None,
    global_batch: Annotated[int | None, typer.Option(help="sequences per step")] = None,
    seq: Annotated[int | None, typer.Option(help="sequence length")] = None,
    schedule: Annotated[
        str | None, typer.Option(help="gpipe|1f1b|interleaved|zb-h1|zbv|dualpipe|dualpipev")
    ] = None,
    vpp: Annotated[int | None, typer.Option(help="model chunks per rank (interleaved)")] = None,
    recompute: Annotated[str | None, typer.Option(help="none|selective|selective-op|full")] = None,
    trace: Annotated[Path | None, typer.Option(help="write the Perfetto trace JSON here")] = None,
    gantt: Annotated[Path | None, typer.Option(help="write the PNG Gantt chart here")] = None,
    show_orders: Annotated[
        bool, typer.Option("--orders", help="print the per-rank action orders")
    ] = False,
    run: Annotated[
        bool, typer.Option("--run", help="train the tiny runtime model (CPU/gloo by default)")
    ] = False,
    steps: Annotated[int | None, typer.Option(help="training steps with --run (default 3)")] = None,
    device: Annotated[
        str | None,
        typer.Option(help="with --run: cpu (gloo, default) or cuda (NCCL, one GPU per process)"),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON document")] = False,
) -> None:
    """Compile a strategy into per-rank device plans and simulate the step as a DAG."""
    from hwtune.hardware.cluster import load_cluster_file, make_cluster
    from hwtune.model.catalog import get_model
    from hwtune.parallel.actions import format_orders
    from hwtune.parallel.compiler import compile_plan
    from hwtune.parallel.simulator import simulate
    from hwtune.parallel.spec import load_spec, make_spec
    from hwtune.report.parallel_trace import write_gantt, write_trace

    flags = dict(dp=dp, tp=tp, pp=pp, ep=ep, cp=cp, zero=zero, micro_batch=micro_batch,
                 global_batch=global_batch, seq=seq, recompute=recompute)  # fmt: skip
    try:
        if trace is not None:  # a path that cannot be written fails now, not after the work
            output_path(trace, "trace")
        if gantt is not None:
            output_path(gantt, "gantt", plot_suffixes())
        if zero is not None and zero < 0:  # -1 is the spec's "default" sentinel, not a stage
            raise HwtuneInputError("zero", zero, "a ZeRO stage 0-3")
        if cluster is not None:  # the file gives the GPUs and network: flags would be ignored
            for name, v in (("gpu", None if gpu == GPU_DEFAULT else gpu), ("gpus", gpus),
                            ("gpus-per-node", gpus_per_node), ("nic-gbps", nic_gbps)):  # fmt: skip
                if v is not None:
                    raise HwtuneInputError(
                        name, v, "no such option with --cluster (the file gives the cluster)"
                    )
        if not run:
            for name, v in (("steps", steps), ("device", device)):
                if v is not None:
                    raise HwtuneInputError(name, v, "--run beside it (it sets the training run)")
        elif steps is not None and steps < 1:
            raise HwtuneInputError("steps", steps, "a positive number of training steps")
        spec_model = get_model(model)
        base = load_spec(strategy).model_dump(exclude_defaults=True) if strategy else {}
        for name, v in flags.items():  # a flag that would silently replace the file's value
            given = (base.get("mesh") or {}).get(name) if name in _MESH_AXES else base.get(name)
            if v is not None and given is not None and given != v:
                raise HwtuneInputError(name.replace("_", "-"), v, f"the strategy file's {name}: "
                                       f"{given} (set it in one place)")  # fmt: skip
        if schedule is not None or vpp is not None:
            sched = dict(base.get("schedule") or {})
            if schedule is not None and sched.get("actions") is not None:
                raise HwtuneInputError(  # the file's explicit actions would override it
                    "schedule", schedule, "no --schedule beside the strategy's explicit actions"
                )
            if schedule is not None:
                sched["name"] = schedule
            if vpp is not None:
                sched["vpp"] = vpp
            base["schedule"] = sched
        spec = make_spec(base, **flags)
        if cluster is not None:
            cl = load_cluster_file(cluster)
        else:
            cl = make_cluster(
                gpu,
                spec.mesh.world if gpus is None else gpus,
                gpus_per_node=gpus_per_node,
                nic_gbps=nic_gbps,
            )
        plan = compile_plan(spec, spec_model, cl)
        res = simulate(plan)
        title = f"{spec_model.name} on {cl.n_gpus} x {cl.device.name}: {plan.schedule}"
        if trace:
            write_trace(res, trace, title)
        if gantt:
            write_gantt(res, gantt, title)
        run_doc = None
        if run:
            from hwtune.parallel.runtime.launch import run_spec

            run_doc = run_spec(spec, steps=3 if steps is None else steps, device=device or "cpu")
    except HwtuneInputError as e:
        # a batch the flags set is named by its flag (`parsing.flag_error`); one from the
        # strategy file keeps the file's key
        given = {n: "--" + n.replace("_", "-") for n in ("global_batch", "micro_batch")
                 if flags.get(n) is not None}  # fmt: skip
        _fail(flag_error(e, given))
        return
    doc = {"model": spec_model.name, "gpu": cl.device.name, "n_gpus": cl.n_gpus,
           "plan": plan.summary(), "simulation": res.to_dict(), "strategy": spec.model_dump(mode="json")}  # fmt: skip
    if run_doc is not None:
        doc["run"] = run_doc
    if as_json:
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        _check_run(run_doc)
        return
    gib = 2**30
    print(title)
    print(
        f"  stages {len(plan.stage_rank)} over pp={plan.pp}, {plan.n_micro} micro-batches, {len(plan.ops)} ops"
    )
    print(f"  simulated step time {res.step_time_s * 1e3:.1f} ms")
    for r in range(plan.pp):
        print(f"  rank {r}: stages {plan.summary()['ranks'][r]['stages']}, bubble {res.bubble_fraction[r]:.1%}, "
              f"peak memory {res.peak_bytes[r] / gib:.1f} GiB")  # fmt: skip
    if show_orders:
        print(format_orders(plan.orders))
    for p in (trace, gantt):
        if p:
            print(f"  wrote {p}")
    if run_doc is not None:
        how = f"{run_doc['world']} processes, {run_doc['backend']}"
        print(f"  run ({how}): losses {run_doc['losses']}")
        print(f"  single process:                  losses {run_doc['reference']}")
        print(f"  max |difference| {run_doc['max_abs_diff']:.2e}")
    _check_run(run_doc)


def _check_run(run_doc: dict | None) -> None:
    """A run whose losses disagree with the single-process run is a failed check: exit 1."""
    if run_doc is not None and not run_doc["agrees"]:
        sys.stderr.write(
            f"error: run: losses differ from the single-process run by {run_doc['max_abs_diff']:.2e}"
            f" (expected within {run_doc['tolerance']:g} relative)\n"
        )
        raise typer.Exit(1)
