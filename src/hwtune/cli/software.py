"""The framework's kernels as CLI options, shared by `estimate` and `plan` (one definition)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from hwtune.hardware.cluster import Cluster
    from hwtune.model.spec import ModelSpec
    from hwtune.train.estimator import Estimate
    from hwtune.train.search import Constraints
    from hwtune.train.strategy import Strategy

AttentionKernel = Annotated[
    str,
    typer.Option(
        help="best (the device's fastest fused kernel: FA3/cuDNN on Hopper, FA4/cuDNN on "
        "Blackwell) | fa2 "
        "(FlashAttention-2, PyTorch SDPA's flash backend) | flex (FlexAttention's compiled "
        "Triton kernel: torchtitan)"
    ),
]
Fp8ParamGather = Annotated[
    bool,
    typer.Option(
        "--fp8-param-gather/--no-fp8-param-gather",
        help="with --precision fp8 and ZeRO 1-2: fp8 weights, 1 byte each, gathered in fp8 "
        "(Megatron-Core --fp8-param-gather)",
    ),
]
Eager = Annotated[
    bool,
    typer.Option("--eager/--fused", help="eager PyTorch elementwise ops (no torch.compile, no TE)"),
]
Loss = Annotated[
    str,
    typer.Option(
        help="fused (Megatron's in-place vocab-parallel cross-entropy) | te (Transformer "
        "Engine's, the gradient written into the 16-bit logits: Megatron-Bridge) | flash "
        "(flash-attn's, a new 16-bit gradient: llm-foundry) | pytorch "
        "(F.cross_entropy on an fp32 upcast: torchtitan of 2024, Hugging Face) | chunked "
        "(torchtitan's ChunkedLossWrapper: LM head and loss over 8 slices of the tokens)"
    ),
]
MoeDispatch = Annotated[
    str,
    typer.Option(
        help="alltoall (one copy per routed expert) | deepep (one network copy per node, "
        "fanned out over NVLink)"
    ),
]
Framework = Annotated[
    str | None,
    typer.Option(
        help="megatron | megatron-bridge | torchtitan | torchtitan-compile (torchtitan of Dec 2024: SDPA) | "
        "torchtitan-flex | torchtitan-flex-compile (torchtitan of 2026: flex attention, chunked "
        "loss) | llm-foundry | huggingface | huggingface-deepspeed: sets the attention kernel, "
        "eager ops, loss and ZeRO-3 gathers as that framework runs them (other flags that "
        "differ from their defaults win)"
    ),
]
Zero3Gather = Annotated[
    str,
    typer.Option(
        help="with ZeRO stage 3: layer (FSDP: a transformer block, the next prefetched) | module "
        "(DeepSpeed: per nn.Module under its live-parameter cap) | parameter (DeepSpeed of "
        "2021: one synchronous all-gather per parameter, none overlapped)"
    ),
]
GradAccumulation = Annotated[
    str,
    typer.Option(
        help="fused (the weight-gradient GEMMs accumulate into the main gradients: Megatron-Core, "
        "TE) | fp32-copy (DeepSpeed's BF16_Optimizer: each micro-batch's bf16 gradients cast and "
        "added into fp32 copies, 18 B per parameter)"
    ),
]
PipelineSplit = Annotated[
    str,
    typer.Option(
        help="with pipeline parallelism: layers (even, the remainder to the first stages) | "
        "layers+embedding+loss (the embedding and the loss count as one layer each: "
        "Megatron-Core's --account-for-embedding-in-pipeline-split and "
        "--account-for-loss-in-pipeline-split, as Megatron-Bridge's Llama 3.1 405B and "
        "Qwen3-235B recipes run) | a Megatron-Core layout (--pipeline-model-parallel-layout) "
        "of the pp x vpp chunks in model order, e.g. 'Et|(tt|)*30tL': E embedding, t "
        "transformer layer, L loss, '|' between chunks, (..)*n and x*n repeats"
    ),
]
RecomputeModules = Annotated[
    str,
    typer.Option(
        help="with --recompute selective: what is recomputed, comma-separated (Megatron-Core "
        "--recompute-modules): core_attn (the default) | mla_up_proj (MLA's up-projections, "
        "the latents kept) | mlp (a dense layer's MLP) | moe_act (the experts' activation)"
    ),
]
MtpLayers = Annotated[
    int,
    typer.Option(
        help="multi-token-prediction modules trained beside the model (DeepSeek-V3's 1; "
        "Megatron-Core --mtp-num-layers): each a block shaped as the last layer, a projection "
        "and the shared head and loss, on the last pipeline stage or where a layout's m puts it"
    ),
]
Fp8Recipe = Annotated[
    str,
    typer.Option(
        help="with --precision fp8: delayed (amax history, one fused cast) | current (amax of "
        "the tensor first: Transformer Engine Float8CurrentScaling)"
    ),
]


def software_fields(
    attention_kernel: str,
    eager: bool,
    loss: str,
    moe_dispatch: str,
    fp8_recipe: str,
    framework: str | None = None,
    zero3_gather: str = "layer",
    grad_accumulation: str = "fused",
    pipeline_split: str = "layers",
    recompute_modules: str = "core_attn",
    mtp_layers: int = 0,
    fp8_param_gather: bool = False,
) -> dict:
    """The `Strategy` fields these options set (validated by `Strategy` itself): a framework
    preset first (`hwtune.train.frameworks`), then every flag that differs from its default."""
    from hwtune.train.frameworks import framework_fields

    out: dict = framework_fields(framework) if framework is not None else {}
    flags = {
        "attention_kernel": (attention_kernel, "best"),
        "fused_elementwise": (not eager, True),
        "loss_kernel": (loss, "fused"),
        "moe_dispatch": (moe_dispatch, "alltoall"),
        "fp8_recipe": (fp8_recipe, "delayed"),
        "zero3_gather": (zero3_gather, "layer"),
        "grad_accumulation": (grad_accumulation, "fused"),
        "pipeline_split": (pipeline_split, "layers"),
        "mtp_layers": (mtp_layers, 0),
        "fp8_param_gather": (fp8_param_gather, False),
    }
    for key, (value, default) in flags.items():
        if value != default or key not in out:
            out[key] = value
    if recompute_modules != "core_attn":
        from typing import get_args

        from hwtune.errors import HwtuneInputError
        from hwtune.train.strategy import RecomputeModule

        mods = tuple(m.strip() for m in recompute_modules.split(","))
        known = get_args(RecomputeModule)
        for m in mods:
            if m not in known:
                raise HwtuneInputError("--recompute-modules", m, "one of " + ", ".join(known))
        out["recompute_modules"] = mods
    return out


LaunchOpt = Annotated[
    str | None,
    typer.Option(
        "--launch",
        help="megatron | torchtitan: also give the strategy as that framework's launch command "
        "(torchrun ... pretrain_gpt.py, or torchrun ... -m torchtitan.train, with its "
        "parallelism, batch, precision, recomputation and overlap options); `plan` then "
        "searches only what the framework runs",
    ),
]

LAUNCH_REFUSAL_FLAGS = {
    "schedule": "--schedule", "recompute": "--recompute", "optimizer": "--optimizer",
    "attention_kernel": "--attention-kernel", "fused_elementwise": "--eager",
    "loss_kernel": "--loss", "zero3_gather": "--zero3-gather", "mtp_layers": "--mtp-layers",
    "grad_accumulation": "--grad-accumulation", "overlap_tp_comm": "--overlap-tp",
    "pipeline_split": "--pipeline-split", "fp8_saved_inputs": "--framework",
    "recompute_modules": "--recompute-modules", "fp8_param_gather": "--fp8-param-gather",
    "offload_activation_layers": "--offload-activations",
    "overlap_grad_reduce": "--no-overlap-grad", "offload_optimizer": "--offload",
    "overlap_p2p_comm": "--no-overlap-p2p", "overlap_moe_a2a": "--overlap-a2a",
    "sequence_parallel": "--sequence-parallel", "precision": "--precision", "zero": "--zero",
    "vpp": "--vpp", "pp": "--pp", "moe_dispatch": "--moe-dispatch", "flash_attention": "--no-flash",
}  # fmt: skip
"""The option that set each `Strategy` field a framework's launch can refuse
(`hwtune.train.launch.megatron_refusal`, `hwtune.train.launch_torchtitan.torchtitan_refusal`)."""
NEGATED_SWITCHES = (
    "fused_elementwise",
    "overlap_grad_reduce",
    "overlap_p2p_comm",
    "flash_attention",
)
"""Fields a ``--no-``/``--eager`` option turned off: the refusal names that option, typed."""


LAUNCH_KERNELS: dict[str, tuple[str, ...]] = {
    "megatron": ("megatron",),
    "torchtitan": ("torchtitan-flex", "torchtitan-flex-compile"),
}
"""The ``--framework`` kernel sets each ``--launch`` framework runs (the first is its default;
torchtitan-flex-compile is torchtitan-flex with ``--compile.enable``). torchtitan at the commit
the launch is written for runs flex attention and a chunked loss (`hwtune.train.frameworks`),
not the SDPA kernels of its Dec 2024 runs (``--framework torchtitan``)."""


def check_launch_framework(launch: str | None, framework: str | None) -> str | None:
    """``--launch`` is a framework it knows, and ``--framework`` (its kernels) one of its
    kernel sets; returns the kernel set to use (torchtitan's by default with ``--launch
    torchtitan``; Megatron's are the strategy's defaults)."""
    from hwtune.errors import HwtuneInputError
    from hwtune.train.launch import LAUNCH_FRAMEWORKS

    if launch is None:
        return framework
    if launch not in LAUNCH_FRAMEWORKS:
        raise HwtuneInputError("--launch", launch, "one of " + ", ".join(LAUNCH_FRAMEWORKS))
    allowed = LAUNCH_KERNELS[launch]
    if framework is not None and framework not in allowed:
        raise HwtuneInputError(
            "--framework", framework, f"{' or '.join(allowed)} (or none) with --launch {launch}"
        )
    if framework is None and launch != "megatron":
        return allowed[0]
    return framework


def check_torchtitan_precision(framework: str | None, launch: str | None, precision: str) -> None:
    """Refuse a training ``precision`` torchtitan cannot run when ``framework`` is one of its
    kernel sets: fp16 always (its ``training.mixed_precision_param`` is bfloat16 or float32);
    fp8 only with ``launch`` (its float8 is a model converter the kernel sets price but no
    launch option sets)."""
    from hwtune.train.launch_torchtitan import torchtitan_precision_refusal

    if not (framework or "").startswith("torchtitan"):
        return
    bad = torchtitan_precision_refusal(precision) if precision == "fp16" or launch else None
    if bad is not None:
        raise bad


def launch_fields(launch: str | None) -> dict:
    """`Strategy` fields a ``--launch`` framework fixes beside its kernels: torchtitan reduces
    gradients in fp32 only (``training.mixed_precision_reduce``)."""
    return {"grad_reduce_dtype": "fp32"} if launch == "torchtitan" else {}


def launch_document(
    framework: str | None, est: Estimate, model: ModelSpec, cluster: Cluster
) -> dict:
    """The launch of ``est``'s strategy in ``framework`` as a JSON-ready dict (`Launch.to_dict`);
    a refusal names the option that set the field, with ``--launch`` in the expectation."""
    from hwtune.errors import HwtuneInputError
    from hwtune.train.launch import launch_for

    if framework is None:
        return {}
    try:
        launch = launch_for(framework, est.strategy, model, cluster.n_gpus, cluster.gpus_per_node)
    except HwtuneInputError as e:
        if e.field == "launch":
            raise HwtuneInputError("--launch", e.value, e.expected) from None
        flag, value, expected = LAUNCH_REFUSAL_FLAGS.get(e.field, e.field), e.value, e.expected
        if e.field in NEGATED_SWITCHES:  # --eager or --no-... set it False
            value, expected = True, "off" + expected.removeprefix("True")
        raise HwtuneInputError(flag, value, f"{expected} (--launch {framework})") from None
    return launch.to_dict()


def print_launch(doc: dict) -> None:
    """The launch command under a human-readable result (nothing without ``--launch``)."""
    if not doc:
        return
    from rich.console import Console
    from rich.markup import escape

    con = Console(soft_wrap=True)
    n, g = doc["nnodes"], doc["nproc_per_node"]
    size = f"{n} node{'s' if n > 1 else ''} x {g} GPU{'s' if g > 1 else ''}"
    con.print(f"\n[bold]{doc['framework']} launch[/bold] ({escape(size)}; {escape(doc['note'])}):",
              highlight=False)  # fmt: skip
    con.print(doc["command"], highlight=False, markup=False)


def launch_constraints(launch: str, c: Constraints, model: ModelSpec | None = None) -> Constraints:
    """The search constraints ``c`` narrowed to what framework ``launch`` runs (its pipeline
    schedules and recomputation policies, and a filter of what it refuses, which for torchtitan
    reads ``model``'s layer count); a ``--schedule`` or ``--fix`` outside them is a one-line
    error."""
    from dataclasses import replace

    from hwtune.errors import HwtuneInputError
    from hwtune.train.launch import MEGATRON_RECOMPUTE, MEGATRON_SCHEDULES, megatron_refusal
    from hwtune.train.launch_torchtitan import (
        TORCHTITAN_RECOMPUTE,
        TORCHTITAN_SCHEDULES,
        torchtitan_refusal,
    )

    if launch == "torchtitan":
        schedules, recomputes = tuple(TORCHTITAN_SCHEDULES), tuple(TORCHTITAN_RECOMPUTE)

        def runs(st: Strategy) -> bool:
            return torchtitan_refusal(st, model) is None
    else:
        schedules, recomputes = MEGATRON_SCHEDULES, MEGATRON_RECOMPUTE

        def runs(st: Strategy) -> bool:
            return megatron_refusal(st, model) is None

    for s in c.schedules or ():
        if s not in schedules:
            raise HwtuneInputError(
                "--schedule", s, f"one of {', '.join(schedules)} (--launch {launch})"
            )
    for knob, allowed in {"schedule": schedules, "recompute": recomputes}.items():
        v = c.fixed.get(knob)
        if v is not None and v not in allowed:
            raise HwtuneInputError(
                f"--fix {knob}", v, f"one of {', '.join(allowed)} (--launch {launch})"
            )
    return replace(
        c,
        schedules=c.schedules or schedules,
        recomputes=recomputes,
        runs=runs,
        allow_offload=c.allow_offload and launch != "torchtitan",  # it offloads more (refused)
    )
