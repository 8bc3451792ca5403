"""A strategy as a framework's launch command: apply what `estimate` and `plan` chose.

Megatron-LM (``pretrain_gpt.py`` under ``torchrun``). Flag names and defaults from
NVIDIA/Megatron-LM at d98e8a64 (2026-08): ``megatron/training/arguments.py`` and the dataclass
fields it turns into flags (``megatron/core/model_parallel_config.py``,
``megatron/core/transformer/transformer_config.py``, ``megatron/training/config/``; a field
``a_b`` is ``--a-b``, a boolean that defaults to True is ``--no-a-b``):

- degrees: ``--tensor-model-parallel-size``, ``--pipeline-model-parallel-size``,
  ``--context-parallel-size``, ``--expert-model-parallel-size`` (data parallelism is what the
  world size leaves); ``--sequence-parallel``; ``--num-virtual-stages-per-pipeline-rank`` for the
  interleaved schedule (Megatron's only pipeline schedules are 1F1B and interleaved 1F1B);
- batch: ``--micro-batch-size``, ``--global-batch-size``, ``--seq-length``;
- ZeRO: 1 is ``--use-distributed-optimizer``; 2 and 3 are Megatron-FSDP
  (``--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads`` / ``optim_grads_params``);
- precision: ``--bf16``, ``--fp16``; fp8 is ``--bf16 --fp8-format hybrid`` (Megatron-LM's
  ``examples/llama/train_llama3_8b_h100_fp8.sh``) with ``--fp8-recipe delayed`` or
  ``tensorwise`` (per-tensor current scaling, hwtune's ``current``);
- recomputation: ``--recompute-granularity selective`` (core attention, Korthikanti et al.
  2022, Megatron's default ``recompute_modules``) or ``full`` with ``--recompute-method
  uniform --recompute-num-layers 1``;
- optimizer: ``--optimizer adam|sgd``; offload is ``--optimizer-cpu-offload``, which Megatron
  runs only with ``--use-precision-aware-optimizer``;
- overlap: ``--overlap-grad-reduce`` and ``--overlap-param-gather`` are off by default in
  Megatron-LM (on in hwtune's `Strategy`), the second only with a sharded optimizer;
  ``--tp-comm-overlap``; ``--overlap-moe-expert-parallel-comm``;
  ``--no-overlap-p2p-communication``;
- MoE dispatch: ``--moe-token-dispatcher-type alltoall``, or ``flex`` with
  ``--moe-flex-dispatcher-backend deepep``;
- dropout: Megatron-LM's ``hidden_dropout`` and ``attention_dropout`` default to 0.1, so a
  strategy without dropout sets both to 0.

What Megatron-LM cannot run is refused with the field that stops it (`megatron_refusal`):
GPipe, ZB-H1, ZB-V, DualPipe(V); TP communication overlap without sequence parallelism
(``arguments.py`` asserts it); per-op selective recomputation (torchtitan's); the 8-bit and
pure-bf16 optimizers of `hwtune.optim`; kernels of another framework (FlashAttention-2 through
SDPA, eager elementwise ops, the fp32 cross-entropy); DeepSpeed's ZeRO-3 gathers and fp32
gradient copies.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from hwtune.errors import HwtuneInputError
from hwtune.model.spec import ModelSpec
from hwtune.train.strategy import Strategy

LAUNCH_FRAMEWORKS: tuple[str, ...] = ("megatron",)
MEGATRON_SCHEDULES: tuple[str, ...] = ("1f1b", "interleaved")
MEGATRON_RECOMPUTE: tuple[str, ...] = ("none", "selective", "full")
MEGATRON_OPTIMIZERS: tuple[str, ...] = ("adam", "sgd")
MEGATRON_ENTRY = "pretrain_gpt.py"


@dataclass(frozen=True)
class Launch:
    """A framework's launch: ``torchrun`` over ``nnodes`` x ``nproc_per_node`` processes."""

    framework: str
    nnodes: int
    nproc_per_node: int
    entry: str
    args: tuple[str, ...]

    def command(self) -> str:
        """The shell command line (model, data and optimizer hyperparameters to be added)."""
        run = ["torchrun", "--nnodes", str(self.nnodes), "--nproc-per-node"]
        return shlex.join([*run, str(self.nproc_per_node), self.entry, *self.args])

    def to_dict(self) -> dict[str, object]:
        return {
            "framework": self.framework,
            "nnodes": self.nnodes,
            "nproc_per_node": self.nproc_per_node,
            "entry": self.entry,
            "args": list(self.args),
            "command": self.command(),
        }


def megatron_refusal(st: Strategy) -> HwtuneInputError | None:
    """Why Megatron-LM cannot run ``st`` (the first reason, as a one-line error), or None."""
    if st.pp > 1 and st.schedule not in MEGATRON_SCHEDULES:
        return HwtuneInputError(
            "schedule",
            st.schedule,
            "a schedule Megatron-LM runs: " + " or ".join(MEGATRON_SCHEDULES),
        )
    if st.recompute not in MEGATRON_RECOMPUTE:
        return HwtuneInputError(
            "recompute", st.recompute, "none, selective or full (Megatron-LM has no per-op policy)"
        )
    if st.optimizer not in MEGATRON_OPTIMIZERS:
        return HwtuneInputError(
            "optimizer", st.optimizer, "adam or sgd (Megatron-LM keeps fp32 master weights)"
        )
    kernels = (
        ("attention_kernel", st.attention_kernel, "best", "its fused attention (cuDNN)"),
        ("fused_elementwise", st.fused_elementwise, True, "fused elementwise kernels (TE)"),
        ("loss_kernel", st.loss_kernel, "fused", "its vocab-parallel cross-entropy"),
    )
    for field, value, megatron, what in kernels:
        if value != megatron:
            return HwtuneInputError(field, value, f"{megatron!r}: Megatron-LM runs {what}")
    if st.zero == 3 and st.zero3_gather != "layer":
        return HwtuneInputError(
            "zero3_gather", st.zero3_gather, "layer (Megatron-FSDP gathers a layer at a time)"
        )
    if st.overlap_tp_comm and st.tp > 1 and not st.sequence_parallel:
        return HwtuneInputError(
            "overlap_tp_comm", True, "sequence parallelism beside it (Megatron-LM overlaps TP "
            "communication only with --sequence-parallel)",
        )  # fmt: skip
    if st.grad_accumulation != "fused":
        return HwtuneInputError(
            "grad_accumulation", st.grad_accumulation, "fused (Megatron-LM's accumulation fusion)"
        )
    return None


def megatron_launch(st: Strategy, model: ModelSpec, n_gpus: int, gpus_per_node: int) -> Launch:
    """``st`` as a Megatron-LM ``pretrain_gpt.py`` launch over ``n_gpus`` GPUs (see the module
    docstring for each flag's source); a one-line error for what Megatron-LM cannot run."""
    st.validate_for(model, n_gpus)
    refusal = megatron_refusal(st)
    if refusal is not None:
        raise refusal
    a: list[str] = [
        "--tensor-model-parallel-size", str(st.tp),
        "--pipeline-model-parallel-size", str(st.pp),
        "--context-parallel-size", str(st.cp),
        "--expert-model-parallel-size", str(st.ep),
    ]  # fmt: skip
    if st.sequence_parallel:
        a.append("--sequence-parallel")
    if st.schedule == "interleaved":
        a += ["--num-virtual-stages-per-pipeline-rank", str(st.vpp)]
    if st.pp > 1 and not st.overlap_p2p_comm:
        a.append("--no-overlap-p2p-communication")
    a += ["--micro-batch-size", str(st.micro_batch)]
    a += ["--global-batch-size", str(st.global_batch_seqs), "--seq-length", str(st.seq)]
    a += {"bf16": ["--bf16"], "fp16": ["--fp16"], "fp32": [], "fp8": ["--bf16"]}[st.precision]
    if st.precision == "fp8":
        recipe = {"delayed": "delayed", "current": "tensorwise"}[st.fp8_recipe]
        a += ["--fp8-format", "hybrid", "--fp8-recipe", recipe]
    if st.zero == 1:
        a.append("--use-distributed-optimizer")
    elif st.zero in (2, 3):
        sharding = "optim_grads" if st.zero == 2 else "optim_grads_params"
        a += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", sharding]
    if st.recompute == "selective":
        a += ["--recompute-granularity", "selective"]
    elif st.recompute == "full":
        a += ["--recompute-granularity", "full", "--recompute-method", "uniform"]
        a += ["--recompute-num-layers", "1"]
    a += ["--optimizer", st.optimizer]
    if st.offload_optimizer:
        a += ["--optimizer-cpu-offload", "--use-precision-aware-optimizer"]
    if st.grad_reduce_dtype == "bf16":
        a.append("--grad-reduce-in-bf16")
    if st.overlap_grad_reduce and st.dp * st.cp > 1:
        a.append("--overlap-grad-reduce")
    if st.overlap_param_gather and st.zero >= 1 and st.dp * st.cp > 1:
        a.append("--overlap-param-gather")
    if st.overlap_tp_comm and st.tp > 1:
        a.append("--tp-comm-overlap")
    if model.moe is not None and st.ep > 1:
        if st.moe_dispatch == "deepep":
            a += ["--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", "deepep"]
        else:
            a += ["--moe-token-dispatcher-type", "alltoall"]
        if st.overlap_moe_a2a:
            a.append("--overlap-moe-expert-parallel-comm")
    if not st.flash_attention:
        a += ["--attention-backend", "unfused"]
    if not st.dropout:
        a += ["--hidden-dropout", "0", "--attention-dropout", "0"]
    per_node = min(gpus_per_node, n_gpus)
    return Launch("megatron", max(1, n_gpus // per_node), per_node, MEGATRON_ENTRY, tuple(a))


def launch_for(
    framework: str, st: Strategy, model: ModelSpec, n_gpus: int, gpus_per_node: int
) -> Launch:
    """The launch of ``st`` in ``framework`` (one of `LAUNCH_FRAMEWORKS`)."""
    if framework == "megatron":
        return megatron_launch(st, model, n_gpus, gpus_per_node)
    raise HwtuneInputError("launch", framework, "one of " + ", ".join(LAUNCH_FRAMEWORKS))


__all__ = [
    "LAUNCH_FRAMEWORKS",
    "MEGATRON_RECOMPUTE",
    "MEGATRON_SCHEDULES",
    "Launch",
    "launch_for",
    "megatron_launch",
    "megatron_refusal",
]
