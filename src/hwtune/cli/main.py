"""The `hwtune` command: parse, call the library, render. No formulas here."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from typer.core import TyperGroup

from hwtune.cli.megatron import job_gpus, megatron_flags, read_megatron_args
from hwtune.cli.parsing import CLUSTER_FLAGS, ESTIMATE_FLAGS, cluster_only, fail, flag_error
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
    launch_document,
    launch_fields,
    print_launch,
    software_fields,
)
from hwtune.errors import HwtuneInputError, expected_from_pydantic

# click's base error, found through typer's own export (recent typer versions vendor click)
_CLICK_ERROR = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


class _OneLineErrors(TyperGroup):
    """The root group: a usage error (unknown option, a value of the wrong type, a missing
    argument) is one line on stderr with exit code 2, like hwtune's own input errors, instead of
    the usage block and framed message that click and typer print."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        empty = _empty_value(list(sys.argv[1:] if args is None else args))
        if empty is not None:
            sys.stderr.write(f"error: {empty}\n")
            sys.exit(2)
        try:
            rv = super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        except _CLICK_ERROR as e:
            if type(e).__name__ == "NoArgsIsHelpError":  # a bare `hwtune serve`: its help
                e.show()
                sys.exit(e.exit_code)
            msg = e.format_message().replace("\n", " ").rstrip(".")
            cause, param = e.__cause__, getattr(e, "param", None)
            if isinstance(cause, ValidationError) and param is not None:  # typer's coercion
                opt = max(param.opts, key=len) if param.opts else param.name
                first = cause.errors()[0]
                msg = str(
                    HwtuneInputError(opt, first.get("input"), expected_from_pydantic(first["msg"]))
                )
            ctx = getattr(e, "ctx", None)
            where = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
            sys.stderr.write(f"error: {msg}{where}\n")
            sys.exit(e.exit_code)
        except typer.Abort:
            sys.stderr.write("Aborted!\n")
            sys.exit(1)
        # not standalone: an Exit's code comes back as the value; commands return None
        sys.exit(rv if isinstance(rv, int) and not isinstance(rv, bool) else 0)


def _empty_value(argv: list[str]) -> HwtuneInputError | None:
    """An empty value on the command line (``--gpu ""``, ``--precision=``): no hwtune option
    takes one, and left to the commands some fell back to their defaults (``--gpu ""`` ran on
    the default GPU) instead of being refused."""
    for i, a in enumerate(argv):
        if a == "--":
            return None
        if a.startswith("--") and "=" in a and not a.split("=", 1)[1]:
            return HwtuneInputError(a.split("=", 1)[0], "", "a non-empty value")
        if a == "" or a.isspace():
            before = argv[i - 1] if i else ""
            name = before if before.startswith("-") else "argument"
            return HwtuneInputError(name, a, "a non-empty value")
    return None


app = typer.Typer(
    cls=_OneLineErrors,
    name="hwtune",
    help="Hardware-aware tuning of large-model training and serving.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """hwtune: estimate, search and simulate large-model training and serving."""


@app.command()
def estimate(
    ctx: typer.Context,
    model: Annotated[
        str, typer.Option("--model", "-m", help="catalog name or path to a config.json")
    ] = "llama3.1-8b",
    gpu: Annotated[
        str | None,
        typer.Option(
            help="catalog GPU name, device YAML or `hwtune bench` profile (default h100-sxm-80gb)"
        ),
    ] = None,
    gpus: Annotated[
        int | None, typer.Option(help="number of GPUs (default: dp*tp*pp*cp, or 8)")
    ] = None,
    gpus_per_node: Annotated[int | None, typer.Option(help="GPUs per node")] = None,
    nic_gbps: Annotated[float | None, typer.Option(help="scale-out Gb/s per GPU")] = None,
    scaleup_domain: Annotated[
        int | None, typer.Option(help="GPUs per NVLink domain (8 DGX, 72 NVL72)")
    ] = None,
    cluster: Annotated[
        Path | None,
        typer.Option(help="cluster YAML file (instead of --gpu/--gpus/--gpus-per-node/...)"),
    ] = None,
    tp: Annotated[int, typer.Option(help="tensor-parallel degree")] = 1,
    pp: Annotated[int, typer.Option(help="pipeline-parallel degree")] = 1,
    dp: Annotated[
        int | None, typer.Option(help="data-parallel degree (default: the GPUs left)")
    ] = None,
    ep: Annotated[int, typer.Option(help="expert-parallel degree (folded over dp*cp)")] = 1,
    cp: Annotated[int, typer.Option(help="context-parallel degree")] = 1,
    micro_batch: Annotated[int, typer.Option(help="sequences per micro-batch")] = 1,
    global_batch: Annotated[
        int | None, typer.Option(help="sequences per step (default dp*micro-batch)")
    ] = None,
    seq: Annotated[int, typer.Option(help="sequence length")] = 8192,
    vpp: Annotated[int, typer.Option(help="virtual stages per pipeline rank (interleaved)")] = 1,
    schedule: Annotated[
        str, typer.Option(help="gpipe|1f1b|interleaved|zb-h1|zbv|dualpipe|dualpipev")
    ] = "1f1b",
    recompute: Annotated[str, typer.Option(help="none|selective|selective-op|full")] = "none",
    zero: Annotated[
        int | None, typer.Option(help="ZeRO stage 0-3 (default: 3 = FSDP without PP, 1 with PP)")
    ] = None,
    sequence_parallel: Annotated[
        bool, typer.Option("--sequence-parallel/--no-sequence-parallel")
    ] = False,
    precision: Annotated[
        str | None,
        typer.Option(
            help="fp32|fp16|bf16|fp8 (default: bf16, or fp16 on a GPU without bf16: V100)"
        ),
    ] = None,
    optimizer: Annotated[
        str,
        typer.Option(
            help="adam|adam-bf16|adam-remainders|adam-8bit|adam-8bit-release|adam-8bit-amsgrad|"
            "adam-8bit-release-amsgrad|sgd"
        ),
    ] = "adam",
    offload: Annotated[
        bool, typer.Option("--offload/--no-offload", help="optimizer states on the CPU")
    ] = False,
    offload_activations: Annotated[
        int,
        typer.Option(
            help="layers whose activations go to host memory and back (Megatron-Core "
            "--cpu-offloading-num-layers; without --pp or --recompute)"
        ),
    ] = 0,
    moe_imbalance: Annotated[
        float, typer.Option(help="busiest expert's load / mean load (>= 1)")
    ] = 1.0,
    overlap_tp: Annotated[bool, typer.Option("--overlap-tp/--no-overlap-tp")] = False,
    overlap_a2a: Annotated[bool, typer.Option("--overlap-a2a/--no-overlap-a2a")] = False,
    overlap_grad: Annotated[bool, typer.Option("--overlap-grad/--no-overlap-grad")] = True,
    overlap_p2p: Annotated[
        bool,
        typer.Option(
            "--overlap-p2p/--no-overlap-p2p",
            help="interleaved schedule: pipeline send/recv behind the next chunk's compute",
        ),
    ] = True,
    flash: Annotated[
        bool, typer.Option("--flash/--no-flash", help="fused (flash) attention")
    ] = True,
    burst_clocks: Annotated[
        bool,
        typer.Option(
            "--burst-clocks",
            help="GEMMs at their short-burst rate instead of the clock a power-limited GPU "
            "sustains (the device's sustained_gemm_fraction); with a hwtune bench profile, at "
            "its measured (burst) rates",
        ),
    ] = False,
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
    megatron_args: Annotated[
        str | None,
        typer.Option(
            help="a Megatron-LM command line, or @FILE holding one: its parallelism, batch, "
            "precision, ZeRO, recomputation and overlap flags set the strategy (torchrun's "
            "--nnodes x --nproc-per-node, or --gpus, the GPU count); the model is --model's"
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON document")] = False,
) -> None:
    """Estimate one training step: time and its breakdown, MFU/HFU, throughput, memory."""
    from hwtune.hardware.cluster import load_cluster_file, make_cluster
    from hwtune.model.catalog import get_model
    from hwtune.train.estimator import default_precision
    from hwtune.train.estimator import estimate as run_estimate
    from hwtune.train.launch import megatron_strategy
    from hwtune.train.strategy import Strategy, make_strategy

    try:
        if zero is not None and zero not in (0, 1, 2, 3):
            raise HwtuneInputError("--zero", zero, "a ZeRO stage 0, 1, 2 or 3")
        framework = check_launch_framework(launch, framework)
        spec = get_model(model)
        job = read_megatron_args(megatron_args, ctx) if megatron_args is not None else None
        if job is not None and cluster is None:
            gpus = job_gpus(job, gpus)
            if gpus is None:
                raise HwtuneInputError("--megatron-args", megatron_args[:60], "torchrun --nnodes "
                                       "N --nproc-per-node G in it, or --gpus beside it")  # fmt: skip
        n = gpus if gpus is not None else (dp * tp * pp * cp if dp else max(8, tp * pp * cp))
        if cluster is not None:
            cluster_only(gpu=gpu, gpus=gpus, gpus_per_node=gpus_per_node, nic_gbps=nic_gbps,
                         scaleup_domain=scaleup_domain)  # fmt: skip
            cl = load_cluster_file(cluster)
        else:
            cl = make_cluster(
                gpu or "h100-sxm-80gb",
                n,
                gpus_per_node=gpus_per_node,
                nic_gbps=nic_gbps,
                scaleup_domain=scaleup_domain,
            )
        if burst_clocks:
            cl = cl.model_copy(update={"sustained_clocks": False})
        software = software_fields(attention_kernel, eager, loss, moe_dispatch, fp8_recipe,
                                   framework, zero3_gather, grad_accumulation,
                                   pipeline_split, recompute_modules, mtp_layers,
                                   fp8_param_gather)  # fmt: skip
        software |= launch_fields(launch)
        if job is not None:
            if job.n_gpus not in (None, cl.n_gpus):
                raise HwtuneInputError("--megatron-args", f"torchrun over {job.n_gpus} GPUs",
                                       f"the {cl.n_gpus} GPUs of --cluster")  # fmt: skip
            st = megatron_strategy(job, spec, cl.n_gpus)
            # the Megatron-LM flags set these fields; an option left at its default must not
            # undo them (--fp8-recipe, --fp8-param-gather read from the arguments)
            typed = {k: v for k, v in software.items()
                     if v != Strategy.model_fields[k].get_default(call_default_factory=True)}  # fmt: skip
            st = make_strategy(**{**st.model_dump(), **typed})
        else:
            check_torchtitan_precision(framework, launch, precision or default_precision(cl.device))
        est = run_estimate(spec, cl, st) if job is not None else run_estimate(
            spec, cl, None,
            tp=tp, pp=pp, dp=dp, ep=ep, cp=cp, micro_batch=micro_batch, global_batch=global_batch,
            seq=seq, vpp=vpp, schedule=schedule, recompute=recompute, zero=zero,
            sequence_parallel=sequence_parallel, precision=precision or default_precision(cl.device),
            optimizer=optimizer,
            offload_optimizer=offload, offload_activation_layers=offload_activations,
            moe_imbalance=moe_imbalance, overlap_tp_comm=overlap_tp,
            overlap_moe_a2a=overlap_a2a, overlap_grad_reduce=overlap_grad, flash_attention=flash,
            overlap_p2p_comm=overlap_p2p,
            **software,
        )  # fmt: skip
        if zero3_gather != "layer" and est.strategy.zero != 3:  # typed, it would change nothing
            raise HwtuneInputError(
                "--zero3-gather", zero3_gather,
                f"layer (the default) unless ZeRO stage 3 (here stage {est.strategy.zero}; --zero 3)",
            )  # fmt: skip
        if pipeline_split != "layers" and est.strategy.pp == 1:  # typed, it would change nothing
            raise HwtuneInputError("--pipeline-split", pipeline_split,
                                   "layers (the default) without pipeline parallelism (--pp > 1)")  # fmt: skip
        st_ = est.strategy
        if overlap_tp and st_.tp == 1:  # typed, it would change nothing
            raise HwtuneInputError("--overlap-tp", True, "tensor parallelism (--tp > 1) for it "
                                   "to overlap")  # fmt: skip
        if not overlap_p2p and not (st_.pp > 1 and st_.schedule == "interleaved"):
            raise HwtuneInputError("--no-overlap-p2p", True, "the interleaved schedule with "
                                   "--pp > 1, the only one whose transfers it unhides")  # fmt: skip
        if not flash and attention_kernel != "best":
            raise HwtuneInputError("--attention-kernel", attention_kernel, "best (the default) "
                                   "beside --no-flash, which materializes the scores")  # fmt: skip
        launch_doc = launch_document(launch, est, spec, cl)
    except HwtuneInputError as e:
        # the GPU count is --gpus's (typed, or its default 8) unless --dp made it
        # dp x tp x pp x cp; with --cluster it and the network are the file's
        flags = {k: v for k, v in ESTIMATE_FLAGS.items() if not k.startswith("cluster.")}
        flags["dp*tp*pp*cp"] = "--dp x --tp x --pp x --cp"
        if cluster is None:
            flags |= CLUSTER_FLAGS
            if gpus is None and dp:
                flags["cluster.n_gpus"] = flags["dp*tp*pp*cp"]
        if megatron_args is not None:  # the strategy's fields came from the Megatron-LM flags
            flags = {k: v for k, v in flags.items() if k.startswith("cluster.")}
            flags |= megatron_flags()
        fail(flag_error(e, flags))
    if as_json:
        doc = est.to_dict()
        doc["model"] = spec.name
        doc["gpu"] = cl.device.name
        if launch_doc:
            doc["launch"] = launch_doc
        if job is not None:
            doc["megatron_args"] = {"n_gpus": job.n_gpus, "not_read": list(job.not_read)}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return
    from hwtune.report.estimate_view import render_estimate

    render_estimate(est, f"{spec.name} on {cl.n_gpus} x {cl.device.name}")
    print_launch(launch_doc)
    if job is not None and job.not_read:
        print(f"Megatron-LM options not read (model shape, data, learning rate, or what hwtune "
              f"does not model): {' '.join(job.not_read)}")  # fmt: skip


from hwtune.cli.plan import plan_cmd, scale_cmd  # noqa: E402
from hwtune.cli.size_study import size_cmd, study_cmd  # noqa: E402

app.command("plan")(plan_cmd)
app.command("scale")(scale_cmd)
app.command("size")(size_cmd)
app.command("study")(study_cmd)

from hwtune.cli.energy import app as energy_app  # noqa: E402

app.add_typer(energy_app, name="energy")

from hwtune.cli.accel import app as accel_app  # noqa: E402
from hwtune.cli.bench import bench_cmd  # noqa: E402
from hwtune.cli.compile import compile_cmd  # noqa: E402
from hwtune.cli.serve import serve_app  # noqa: E402

app.add_typer(accel_app, name="accel")
app.command("bench")(bench_cmd)
app.add_typer(serve_app, name="serve")

app.command("compile")(compile_cmd)


def _one_line_summaries(t: typer.Typer) -> None:
    """Each command's line in its group's listing: the first paragraph of its docstring with
    the source's line breaks joined (Typer's rich help keeps them there, breaking a sentence
    in the middle), unless the command sets its own ``short_help``."""
    for info in t.registered_commands:
        doc = info.help or (info.callback.__doc__ if info.callback else None)
        if info.short_help is None and doc:
            info.short_help = " ".join(doc.strip().split("\n\n", 1)[0].split())
    for group in t.registered_groups:
        if group.typer_instance is not None:
            _one_line_summaries(group.typer_instance)


_one_line_summaries(app)


def main(group: str | None = None) -> None:
    """Run the root app; ``group`` runs one sub-app through it (``python -m hwtune.cli.serve``
    is ``hwtune serve``), so that a sub-app run as a module gets the root's one-line errors and
    its refusal of empty values."""
    if group is None:
        app()
    else:
        app([group, *sys.argv[1:]], prog_name="hwtune")


if __name__ == "__main__":
    main()
