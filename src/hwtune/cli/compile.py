"""`hwtune compile`: model + strategy (flags or YAML) + cluster -> device plan, simulated step,
Perfetto trace and Gantt chart; ``--run`` trains the tiny runtime models under the same strategy,
on CPU/gloo (default) or, with ``--device cuda``, one GPU per process over NCCL. Parse, call the library, render: no formulas here."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Annotated

import typer

from hwtune.cli.parsing import CLUSTER_FLAGS, fail, output_path, plot_suffixes
from hwtune.errors import HwtuneInputError

GPU_DEFAULT = "h100-sxm-80gb"
_MESH_AXES = ("dp", "tp", "pp", "ep", "cp")  # the flags that are mesh degrees
_FLAG_OF = {
    **{f"mesh.{a}": f"--{a}" for a in _MESH_AXES}, "seq": "--seq", "zero": "--zero",
    "micro_batch": "--micro-batch", "global_batch": "--global-batch", "recompute": "--recompute",
    "schedule.name": "--schedule", "schedule": "--schedule", "schedule.vpp": "--vpp",
}  # fmt: skip
"""The strategy's fields (their paths in a strategy file) that a flag of `compile` sets."""
_ALIAS = {**{a: f"mesh.{a}" for a in _MESH_AXES}, "vpp": "schedule.vpp"}
"""The estimator's `Strategy` names of those fields (its checks name them so)."""


def _in_file(data: dict, path: str) -> bool:
    """Whether the strategy file's mapping ``data`` gives the field at dotted ``path``."""
    for key in path.split("."):
        if not isinstance(data, dict) or key not in data:
            return False
        data = data[key]
    return True


def _named(e: HwtuneInputError, typed: set[str], gpus_typed: bool, strategy: Path | None,
           data: dict | None, cluster: Path | None = None) -> HwtuneInputError:  # fmt: skip
    """``e`` naming where the user gave the value: the flag they typed (``--tp``), else the
    strategy file's field (``s.yaml.mesh.tp``), else the flag that sets a defaulted field; the
    checks below the CLI name the spec's, the estimator's or the cluster's fields."""
    from hwtune.parallel.spec import ParallelSpec

    if e.field == "cluster.n_gpus":  # the GPU count is --gpus's, or the mesh's product
        # the node size the count is checked against: --gpus-per-node's or the --cluster file's
        node = f"{cluster.name} gpus_per_node" if cluster is not None else "--gpus-per-node"
        expected = e.expected.replace("gpus_per_node", node)
        return HwtuneInputError("--gpus" if gpus_typed else "dp*tp*pp*cp", e.value, expected)
    if cluster is None and e.field in ("cluster.gpus_per_node", "cluster.nic_gbps_per_gpu"):
        return HwtuneInputError(CLUSTER_FLAGS[e.field], e.value, e.expected)
    if e.field == "n_gpus":  # the cluster's count against the mesh's product
        where = "--gpus" if gpus_typed or cluster is None else f"{cluster.name} n_gpus"
        return HwtuneInputError(where, e.value, e.expected)
    path = e.field.removeprefix("strategy.")
    if path == "pp*vpp":  # the stage count: from the flags typed, else the file's two fields
        if strategy is not None and not typed & {"--pp", "--vpp"}:
            return HwtuneInputError(f"{strategy.name}.mesh.pp x schedule.vpp", e.value, e.expected)
        return HwtuneInputError("--pp x --vpp", e.value, e.expected)
    path = _ALIAS.get(path, path)
    flag = _FLAG_OF.get(path)
    if flag is not None and flag in typed:
        return HwtuneInputError(flag, e.value, e.expected)
    if strategy is not None and data is not None:
        top = re.split(r"[.\[ ]", path, maxsplit=1)[0]
        if _in_file(data, path) or (flag is None and top in ParallelSpec.model_fields):
            return HwtuneInputError(f"{strategy.name}.{path}", e.value, e.expected)
    if flag is not None:
        return HwtuneInputError(flag, e.value, e.expected)
    return e


def _annotated_recompute(spec, model) -> str:  # noqa: ANN001
    """What the modules' annotations set apart from the strategy's recompute, for its line
    (`` (full on 4 of 32 layers)``); empty where they set nothing else."""
    from collections import Counter

    from hwtune.parallel.spec import validate

    layers = validate(spec, model)
    other = Counter(lp.recompute for lp in layers if lp.recompute != spec.recompute)
    parts = [f"{k} on {n} of {len(layers)} layers" for k, n in sorted(other.items())]
    return f" ({', '.join(parts)})" if parts else ""


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
    zero: Annotated[
        int | None, typer.Option(help="ZeRO stage 0-3 (default: 3 without pp, 1 with)")
    ] = None,
    micro_batch: Annotated[
        int | None, typer.Option(help="sequences per micro-batch (default 1)")
    ] = None,
    global_batch: Annotated[
        int | None, typer.Option(help="sequences per step (default micro-batch*dp)")
    ] = None,
    seq: Annotated[int | None, typer.Option(help="sequence length (default 4096)")] = None,
    schedule: Annotated[
        str | None, typer.Option(help="gpipe, 1f1b, interleaved, zb-h1, zbv, dualpipe or dualpipev")
    ] = None,
    vpp: Annotated[int | None, typer.Option(help="model chunks per rank (interleaved)")] = None,
    recompute: Annotated[
        str | None, typer.Option(help="none, selective, selective-op or full")
    ] = None,
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
    save: Annotated[
        Path | None,
        typer.Option(help="with --run: write checkpoints DIR/step-<k>.pt (after the last step)"),
    ] = None,
    save_every: Annotated[int | None, typer.Option(help="with --save: also every K steps")] = None,
    resume: Annotated[
        Path | None,
        typer.Option(
            help="with --run: continue from a checkpoint file, or a directory's latest, "
            "under this layout"
        ),
    ] = None,
    max_restarts: Annotated[
        int | None,
        typer.Option(help="with --save: restart from its latest checkpoint when a rank dies"),
    ] = None,
    fail_at: Annotated[
        str | None,
        typer.Option(
            help="STEP[:RANK]: that rank (default 0) exits at that step, first attempt only "
            "(tests --max-restarts)"
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON document")] = False,
) -> None:
    """Compile a strategy into per-rank device plans and simulate the step as a DAG."""
    from hwtune.hardware.cluster import load_cluster_file, make_cluster
    from hwtune.model.catalog import get_model
    from hwtune.parallel.actions import format_orders
    from hwtune.parallel.compiler import compile_plan
    from hwtune.parallel.simulator import simulate
    from hwtune.parallel.spec import make_spec, read_spec_file, spec_fields
    from hwtune.report.parallel_trace import write_gantt, write_trace
    from hwtune.train.estimator import tier_note

    flags = dict(dp=dp, tp=tp, pp=pp, ep=ep, cp=cp, zero=zero, micro_batch=micro_batch,
                 global_batch=global_batch, seq=seq, recompute=recompute)  # fmt: skip
    typed = {"--" + n.replace("_", "-") for n, v in flags.items() if v is not None}
    typed |= {f for f, v in (("--schedule", schedule), ("--vpp", vpp)) if v is not None}
    base: dict | None = None
    try:
        if trace is not None:  # a path that cannot be written fails now, not after the work
            output_path(trace, "--trace", ("json",))
        if gantt is not None:
            output_path(gantt, "--gantt", plot_suffixes())
        if zero is not None and zero < 0:  # -1 is the spec's "default" sentinel, not a stage
            raise HwtuneInputError("--zero", zero, "a ZeRO stage 0-3")
        if cluster is not None:  # the file gives the GPUs and network: flags would be ignored
            for name, v in (("gpu", None if gpu == GPU_DEFAULT else gpu), ("gpus", gpus),
                            ("gpus-per-node", gpus_per_node), ("nic-gbps", nic_gbps)):  # fmt: skip
                if v is not None:
                    raise HwtuneInputError(
                        "--" + name, v, "no such option with --cluster (the file gives the cluster)"
                    )
        if not run:
            for name, v in (("steps", steps), ("device", device), ("save", save),
                            ("save-every", save_every), ("resume", resume),
                            ("max-restarts", max_restarts), ("fail-at", fail_at)):  # fmt: skip
                if v is not None:
                    raise HwtuneInputError(
                        "--" + name, v, "--run beside it (it sets the training run)"
                    )
        elif steps is not None and steps < 1:
            raise HwtuneInputError("--steps", steps, "a positive number of training steps")
        spec_model = get_model(model)
        # the fields the file sets, also those it sets to their default (`mesh: {pp: 1}`
        # beside `--pp 2` is a contradiction too), checked with the flags added: the file
        # may leave to the flags what it needs (`schedule: {name: zbv}` with `--pp 2`)
        if strategy is not None:
            base = read_spec_file(strategy)
            base = spec_fields(base)
        else:
            base = {}
        for name, v in (*flags.items(), ("schedule", schedule), ("vpp", vpp)):
            # a flag that would silently replace the file's value
            path = _ALIAS.get(name, {"schedule": "schedule.name"}.get(name, name))
            if v is None or not _in_file(base, path):
                continue
            given = base
            for key in path.split("."):
                given = given[key]
            if given != v or type(given) is not type(v):  # a file's 2.0 or true is no 2 or 1
                raise HwtuneInputError(_FLAG_OF[path], v, f"the strategy file's {name}: "
                                       f"{given} (set it in one place)")  # fmt: skip
        if schedule is not None or vpp is not None:
            sched = base.get("schedule") or {}
            if not isinstance(sched, dict):  # not replaced silently by the flag
                raise HwtuneInputError(  # the file's value (strategy is set: base is its)
                    f"{strategy.name}.schedule",
                    sched,
                    "a schedule name or a mapping like {name: 1f1b}",
                )
            sched = dict(sched)
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
        from hwtune.train.estimator import with_default_precision

        # bf16, or fp16 where the GPU has no bf16 (V100); the spec printed is the one compiled
        spec = with_default_precision(spec, cl.device)
        plan = compile_plan(spec, spec_model, cl)
        res = simulate(plan)
        title = f"{spec_model.name} on {cl.n_gpus} x {cl.device.name}: {plan.schedule}"
        if trace:
            write_trace(res, trace, title)
        if gantt:
            write_gantt(res, gantt, title)
        run_doc = None
        if run:
            from hwtune.parallel.runtime.launch import RankFailed, run_spec

            try:
                run_doc = run_spec(spec, steps=3 if steps is None else steps,
                                   device=device or "cpu", save=save, save_every=save_every,
                                   resume=resume, max_restarts=max_restarts,
                                   fail_at=fail_at)  # fmt: skip
            except RankFailed as e:  # a rank process died (out of restarts): a failed run
                sys.stderr.write(f"error: {e}\n")
                raise typer.Exit(1) from None
    except HwtuneInputError as e:
        # named by the flag the user typed, else by the strategy file's field
        fail(_named(e, typed, gpus is not None, strategy, base, cluster))
    # the peak of each rank against the device's memory (what `estimate` calls OUT OF MEMORY)
    cap = cl.device.memory_bytes
    summary = plan.summary()  # once: each call walks every op per rank
    over = [r for r in range(plan.pp) if res.peak_bytes[r] > cap]
    doc = {"model": spec_model.name, "gpu": cl.device.name, "n_gpus": cl.n_gpus,
           "plan": summary, "simulation": res.to_dict(), "strategy": spec.model_dump(mode="json"),
           "zero_stage": spec.zero_stage, "memory_capacity_bytes": cap, "fits": not over,
           "tier": 2 if cl.device.profile is not None else 1}  # fmt: skip
    if show_orders:
        doc["orders"] = {r: [str(a) for a in v] for r, v in plan.orders.items()}
    if run_doc is not None:
        doc["run"] = run_doc
    if as_json:
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        _check_run(run_doc)
        return
    gib = 2**30
    print(title)
    m = spec.mesh  # the strategy as run: ZeRO's default resolved, the batch filled in
    print(f"  strategy: dp={m.dp} tp={m.tp} pp={m.pp} cp={m.cp} ep={m.ep} zero={spec.zero_stage} "
          f"mb={spec.micro_batch} gb={spec.global_batch_seqs} seq={spec.seq} "
          f"recompute={spec.recompute}{_annotated_recompute(spec, spec_model)} {spec.precision}")  # fmt: skip
    mbs = "micro-batch" if plan.n_micro == 1 else "micro-batches"
    print(
        f"  stages {len(plan.stage_rank)} over pp={plan.pp}, {plan.n_micro} {mbs}, {len(plan.ops)} ops"
    )
    print(f"  simulated step time {res.step_time_s * 1e3:.1f} ms")
    if over:
        worst = max(res.peak_bytes)
        print(f"  OUT OF MEMORY: needs {worst / gib:.1f} GiB per GPU, {cap / gib:.0f} GiB there; "
              "the step cannot run as planned (try hwtune plan)")  # fmt: skip
    for r in range(plan.pp):
        flag = f" (over the {cap / gib:.0f} GiB)" if r in over else ""
        print(f"  rank {r}: stages {summary['ranks'][r]['stages']}, bubble {res.bubble_fraction[r]:.1%}, "
              f"peak memory {res.peak_bytes[r] / gib:.1f} GiB{flag}")  # fmt: skip
    if show_orders:
        print(format_orders(plan.orders))
    for p in (trace, gantt):
        if p:
            print(f"  wrote {p}")
    if run_doc is not None:
        if "model" in run_doc:  # the tiny model the run trained
            n, first = len(run_doc["losses"]), run_doc.get("first_step", 0)
            steps = f"{n} step{'' if n == 1 else 's'}"
            if first:  # resumed: the steps this run trained, of the job's
                steps = f"steps {first}..{first + n - 1} of {first + n}"
            print(f"  run: {run_doc['model']}, fp32 AdamW, {steps}")
        for r in run_doc.get("restarts", []):
            print(f"  restarted: failed at step {r['failed_at_step']} ({r['error']}), "
                  f"resumed from step {r['resumed_from_step']}")  # fmt: skip
        if run_doc.get("resumed_from"):  # its steps: the run line above
            print(f"  resumed from {run_doc['resumed_from']}")
        for f in run_doc.get("saved", []):
            print(f"  saved {f}")
        if run_doc.get("not_run"):
            print(f"  not in the run: {'; '.join(run_doc['not_run'])}")
        run_label = f"run ({run_doc['world']} processes, {run_doc['backend']}):"
        w = len(run_label)
        print(f"  {run_label} losses {run_doc['losses']}")
        print(f"  {'single process:':<{w}} losses {run_doc['reference']}")
        print(f"  max |difference| {run_doc['max_abs_diff']:.2e}")
    print(f"note: {tier_note(cl.device)}")
    _check_run(run_doc)


def _check_run(run_doc: dict | None) -> None:
    """A run whose losses disagree with the single-process run is a failed check: exit 1."""
    if run_doc is not None and not run_doc["agrees"]:
        sys.stderr.write(
            f"error: run: losses differ from the single-process run by {run_doc['max_abs_diff']:.2e}"
            f" (expected within {run_doc['tolerance']:g} relative)\n"
        )
        raise typer.Exit(1)
