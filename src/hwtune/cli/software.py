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
Fp8Recipe = Annotated[
    str,
    typer.Option(
        help="with --precision fp8: delayed (amax history, one fused cast) | current (amax of "
        "the tensor first: Transformer Engine Float8CurrentScaling)"
    ),
]


def software_fields(
    attention_kernel: str, eager: bool, loss: str, moe_dispatch: str, fp8_recipe: str
) -> dict:
    """The `Strategy` fields these options set (validated by `Strategy` itself)."""
    return {
        "attention_kernel": attention_kernel,
        "fused_elementwise": not eager,
        "loss_kernel": loss,
        "moe_dispatch": moe_dispatch,
        "fp8_recipe": fp8_recipe,
    }
