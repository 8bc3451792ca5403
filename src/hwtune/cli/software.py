"""The framework's kernels as CLI options, shared by `estimate` and `plan` (one definition)."""

from __future__ import annotations

from typing import Annotated

import typer

AttentionKernel = Annotated[
    str,
    typer.Option(
        help="best (the device's fastest fused kernel: FA3/cuDNN on Hopper) | fa2 "
        "(FlashAttention-2, PyTorch SDPA's flash backend)"
    ),
]
Eager = Annotated[
    bool,
    typer.Option("--eager/--fused", help="eager PyTorch elementwise ops (no torch.compile, no TE)"),
]
Loss = Annotated[
    str,
    typer.Option(
        help="fused (Megatron's in-place vocab-parallel cross-entropy) | pytorch "
        "(F.cross_entropy on an fp32 upcast: torchtitan, Hugging Face)"
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
        help="megatron | torchtitan | torchtitan-compile | llm-foundry | huggingface | "
        "huggingface-deepspeed: sets the attention kernel, eager ops, loss and ZeRO-3 gathers as "
        "that framework runs them (other flags that differ from their defaults win)"
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
    }
    for key, (value, default) in flags.items():
        if value != default or key not in out:
            out[key] = value
    return out
