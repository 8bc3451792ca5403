"""What a training framework runs: the kernel choices of `Strategy` as named presets.

The parallel layout says how the work is split; the framework decides which kernels do it. Each
preset sets `Strategy.attention_kernel`, `fused_elementwise` and `loss_kernel` (see their
descriptions) from what the framework's code calls:

- ``megatron`` (Megatron-LM, NeMo, Megatron-Bridge with Transformer Engine): cuDNN fused attention
  (the device's best kernel), fused elementwise kernels, Megatron-Core's in-place
  vocabulary-parallel cross-entropy. The `Strategy` defaults.
- ``megatron-bridge`` (NVIDIA-NeMo/Megatron-Bridge's performance scripts, NeMo 25.09 and
  later): the same kernels with Transformer Engine's cross-entropy, which every one of those
  scripts selects (``cross_entropy_fusion_impl = "te"``; `hwtune.cost.memory.LOSS_KERNELS`).
  Megatron-LM's own training arguments refuse that loss since 2026-06 (``arguments.py``,
  "Transformer Engine cross entropy loss fusion is disabled due to stability issues"), so
  ``--launch megatron`` keeps the ``megatron`` set.
- ``torchtitan`` (2024-25, eager): PyTorch SDPA with the flash backend first on Hopper
  (``ScaledDotProductAttention`` backends list; cuDNN only for B200 from torchtitan PR #1196,
  May 2025), i.e. FlashAttention-2; RMSNorm, SwiGLU and complex-form rotary run eagerly, one kernel
  per elementary op; ``F.cross_entropy`` on an fp32 upcast of the logits.
- ``torchtitan-compile``: the same with ``torch.compile`` fusing the elementwise ops of each block
  (the loss stays eager). These two are the torchtitan of the Dec 2024 benchmark runs of the
  training validation.
- ``torchtitan-flex`` (pytorch/torchtitan at b5bcd76c, 2026-08, what ``--launch torchtitan`` runs):
  FlexAttention, the attention backend every language-model registry defaults to
  (``models/llama3/__init__.py:371``; SDPA raises for language models,
  ``models/common/config_utils.py:97-101``), its Triton kernel compiled by ``torch.compile``
  whatever ``compile.enable`` says (``models/common/attention.py:258-261``); SwiGLU
  (``models/common/feed_forward.py:54``) and complex rotary (``models/common/rope.py:260-264``)
  eager as before, but RMSNorm is ``torch.nn.RMSNorm`` (``models/common/nn_modules.py:134-148``),
  one fused kernel in the PyTorch nightly torchtitan requires (its ``README.md:105-121``;
  `Strategy.fused_norm`); the loss is ``ChunkedLossWrapper`` over
  ``CrossEntropyLoss`` (``models/llama3/config_registry.py:197-201, 270-274``), 8 slices
  (`hwtune.cost.memory.LOSS_CHUNKS`).
- Every torchtitan preset trains fp8 through torchao's ``Float8Linear``, whose autograd function
  keeps the high-precision input of each linear layer for backward and casts it again there
  (``torchao/float8/float8_linear.py``, ``matmul_with_hp_or_float8_args.forward``:
  ``ctx.save_for_backward(input_hp, weight_hp_t)``): `Strategy.fp8_saved_inputs` False. The
  Megatron preset's Transformer Engine layers keep the fp8 copy instead.
- ``torchtitan-flex-compile``: the same with ``compile.enable`` (the model's elementwise ops fused).
- ``llm-foundry`` (MosaicML Composer, 2023): FlashAttention-2-class kernels (flash-attn 2 or
  Triton; FlashAttention-3 appeared in July 2024), fused LayerNorm/GeLU, flash-attn's
  cross-entropy (``loss_fn`` ``fused_crossentropy``, the MPT default; `hwtune.cost.memory.
  LOSS_KERNELS`).
- ``huggingface`` (``transformers`` + Trainer, eager, SDPA): FlashAttention-2 through SDPA, eager
  elementwise ops, ``F.cross_entropy`` on fp32 logits.
- ``huggingface-deepspeed``: the same under DeepSpeed, whose ZeRO-3 gathers parameters per
  ``nn.Module`` within its live-parameter cap instead of per transformer block
  (`Strategy.zero3_gather` "module"; `hwtune.train.estimator.zero3_transient_bytes`).
"""

from __future__ import annotations

from hwtune.errors import HwtuneInputError

FRAMEWORKS: dict[str, dict[str, object]] = {
    "megatron": {"attention_kernel": "best", "fused_elementwise": True, "loss_kernel": "fused"},
    "megatron-bridge": {"attention_kernel": "best", "fused_elementwise": True, "loss_kernel": "te"},
    "torchtitan": {
        "attention_kernel": "fa2",
        "fused_elementwise": False,
        "loss_kernel": "pytorch",
        "fp8_saved_inputs": False,
    },
    "torchtitan-compile": {
        "attention_kernel": "fa2",
        "fused_elementwise": True,
        "loss_kernel": "pytorch",
        "fp8_saved_inputs": False,
    },
    "torchtitan-flex": {
        "attention_kernel": "flex",
        "fused_elementwise": False,
        "fused_norm": True,
        "loss_kernel": "chunked",
        "fp8_saved_inputs": False,
    },
    "torchtitan-flex-compile": {
        "attention_kernel": "flex",
        "fused_elementwise": True,
        "fused_norm": True,
        "loss_kernel": "chunked",
        "fp8_saved_inputs": False,
    },
    "llm-foundry": {"attention_kernel": "fa2", "fused_elementwise": True, "loss_kernel": "flash"},
    "huggingface": {
        "attention_kernel": "fa2",
        "fused_elementwise": False,
        "loss_kernel": "pytorch",
    },
    "huggingface-deepspeed": {
        "attention_kernel": "fa2",
        "fused_elementwise": False,
        "loss_kernel": "pytorch",
        "zero3_gather": "module",
    },
}


def framework_fields(name: str) -> dict[str, object]:
    """The `Strategy` fields of framework ``name``; a one-line error for an unknown name."""
    try:
        return dict(FRAMEWORKS[name])
    except KeyError:
        raise HwtuneInputError("framework", name, "one of " + ", ".join(FRAMEWORKS)) from None


__all__ = ["FRAMEWORKS", "framework_fields"]
