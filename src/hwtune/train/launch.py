"""A strategy as a framework's launch command: apply what `estimate` and `plan` chose.

torchtitan (``torchrun ... -m torchtitan.train``): `hwtune.train.launch_torchtitan`, with its
sources; `launch_for` is the one entry point for both.

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
  (``--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads`` / ``optim_grads_params``)
  with the ``--ckpt-format fsdp_dtensor`` it asserts (``arguments.py:1169``);
- gradient dtype: Megatron-LM reduces in fp32 by default only with ``--bf16``; fp32 gradients
  with ``--fp16`` are ``--accumulate-allreduce-grads-in-fp32``, with Megatron-FSDP
  ``--megatron-fsdp-main-grads-dtype fp32`` (its default is the model's dtype), bf16 ones with
  ``--bf16`` ``--grad-reduce-in-bf16`` (``arguments.py:1204-1216``, ``3691``);
- environment: ``CUDA_DEVICE_MAX_CONNECTIONS=1`` with TP or CP > 1, which ``validate_args``
  asserts before Blackwell (``arguments.py:1453-1478``) except with Megatron-FSDP (which asserts
  it is not 1) or the MoE all-to-all overlap;
- MoE: ``--moe-grouped-gemm --moe-permute-fusion --moe-router-fusion`` (all off by default,
  ``transformer_config.py:850, 941, 944``), the kernels `hwtune.model.lowering` models, and
  ``--expert-tensor-parallel-size 1`` at TP > 1 (its default is the TP degree,
  ``arguments.py:587-588``; hwtune folds EP with expert TP 1);
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
SDPA, FlexAttention, eager elementwise ops, the fp32 and the chunked cross-entropy);
DeepSpeed's ZeRO-3 gathers and fp32 gradient copies; and what Megatron-LM asserts against (`_megatron_assertion`): parameter-gather
overlap without gradient-reduce overlap, interleaving at pp=2
without p2p overlap, the MoE all-to-all overlap with PP but no virtual stages, full
recomputation, fp32, or Megatron-FSDP with virtual stages; a MoE model at TP > 1 without
sequence parallelism (``moe_layer.py:636``); with the model, a pipeline whose stages it does
not build as estimated (`_stage_args`: uneven splits other than one extra layer on the first
rank or one fewer on the last, which ``--decoder-first/last-pipeline-num-layers`` write).
Optimizer offload at ZeRO 0, which Megatron-LM
does not run either, is refused for every framework (`Strategy.validate_for`).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import get_args

from hwtune.errors import HwtuneInputError
from hwtune.model.spec import ModelSpec
from hwtune.train.estimator import grads_in_fp32
from hwtune.train.pipeline_layout import is_layout, parse_layout
from hwtune.train.strategy import RecomputeModule, Strategy

LAUNCH_FRAMEWORKS: tuple[str, ...] = ("megatron", "torchtitan")
MEGATRON_SCHEDULES: tuple[str, ...] = ("1f1b", "interleaved")
MEGATRON_RECOMPUTE: tuple[str, ...] = ("none", "selective", "full")
MEGATRON_OPTIMIZERS: tuple[str, ...] = ("adam", "sgd")
MEGATRON_ENTRY = "pretrain_gpt.py"
RENDEZVOUS_HOST = "NODE_0"
"""The placeholder for the host of torchrun's c10d rendezvous in a several-node command (any
one of the job's nodes; the output says to replace it, as the serving launches' host names)."""


@dataclass(frozen=True)
class Launch:
    """A framework's launch: ``torchrun`` over ``nnodes`` x ``nproc_per_node`` processes."""

    framework: str
    nnodes: int
    nproc_per_node: int
    entry: str  # the script, or "-m module"
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()  # environment assignments before torchrun
    note: str = ""  # what is to be added beyond the model, data and optimizer hyperparameters

    def rendezvous(self) -> tuple[str, ...]:
        """torchrun's options that let every node run the same command: none on one node (the
        default static rendezvous on localhost); on several, the c10d rendezvous at
        `RENDEZVOUS_HOST` (torchrun's default is node rank 0 at 127.0.0.1, so each node would
        wait for the others on itself)."""
        if self.nnodes == 1:
            return ()
        return ("--rdzv-backend", "c10d", "--rdzv-endpoint", f"{RENDEZVOUS_HOST}:29500")

    def command(self) -> str:
        """The shell command line (model, data and optimizer hyperparameters to be added)."""
        run = [f"{k}={v}" for k, v in self.env]
        run += ["torchrun", "--nnodes", str(self.nnodes), "--nproc-per-node"]
        run += [str(self.nproc_per_node), *self.rendezvous()]
        return shlex.join([*run, *self.entry.split(), *self.args])

    def instructions(self) -> str:
        """What to run where, and what to add: the same for every launch document."""
        where = (
            "run it once, on one node"
            if self.nnodes == 1
            else f"run it on each of the {self.nnodes} nodes, with {RENDEZVOUS_HOST} replaced "
            "by the host name of one of them"
        )
        add = self.note or "add the model, data and optimizer hyperparameters"
        return f"{where}; {add}"

    def to_dict(self) -> dict[str, object]:
        doc: dict[str, object] = {
            "framework": self.framework,
            "nnodes": self.nnodes,
            "nproc_per_node": self.nproc_per_node,
            "gpus": self.nnodes * self.nproc_per_node,
            "entry": self.entry,
            "args": list(self.args),
            "env": dict(self.env),
            "files": {},
            "command": self.command(),
            "note": self.instructions(),
        }
        return doc


def megatron_refusal(st: Strategy, model: ModelSpec | None = None) -> HwtuneInputError | None:
    """Why Megatron-LM cannot run ``st`` (the first reason, as a one-line error), or None; with
    ``model``, also a pipeline Megatron-LM does not split as estimated (`_stage_args`)."""
    if st.pp > 1 and st.schedule not in MEGATRON_SCHEDULES:
        return HwtuneInputError(
            "schedule",
            st.schedule,
            "a schedule Megatron-LM runs: " + " or ".join(MEGATRON_SCHEDULES),
        )
    if model is not None:
        stages = _stage_args(st, model.n_layers)
        if isinstance(stages, HwtuneInputError):
            return stages
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
    if st.loss_kernel == "te":  # arguments.py at d98e8a64 (since b57449928a, 2026-06)
        return HwtuneInputError(
            "loss_kernel", "te", "'fused': Megatron-LM refuses Transformer Engine's cross-entropy "
            "('disabled due to stability issues'); its own fused kernel takes 6 B per logit",
        )  # fmt: skip
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
    if (
        st.recompute == "selective"
        and "moe_act" in st.recompute_modules
        and (st.precision == "fp8" and st.fp8_recipe == "delayed")
    ):  # transformer_config.py:2001-2004 at d98e8a64
        return HwtuneInputError(
            "recompute_modules", "moe_act", "no moe_act with fp8 delayed scaling (Megatron-LM: "
            "'Delayed scaling does not support moe_act and layernorm recompute for fp8')",
        )  # fmt: skip
    if st.precision == "fp8" and not st.fp8_saved_inputs:
        return HwtuneInputError(
            "fp8_saved_inputs", False, "True: Megatron-LM's Transformer Engine layers keep their "
            "inputs in fp8",
        )  # fmt: skip
    return _megatron_assertion(st)


def _megatron_assertion(st: Strategy) -> HwtuneInputError | None:
    """What Megatron-LM asserts against among the switches `megatron_launch` writes (the
    "True: ..." of a switch that was turned off reads "off: ..." for its ``--no-`` option)."""
    gathers = st.overlap_param_gather and st.zero >= 1 and st.dp * st.cp > 1
    if gathers and not st.overlap_grad_reduce:  # arguments.py:1028
        return HwtuneInputError(
            "overlap_grad_reduce", False, "True: Megatron-LM's --overlap-param-gather (the "
            "parameter all-gathers of ZeRO >= 1 overlapped) needs --overlap-grad-reduce",
        )  # fmt: skip
    if st.schedule == "interleaved" and st.pp == 2 and not st.overlap_p2p_comm:
        return HwtuneInputError(  # arguments.py:1006
            "overlap_p2p_comm", False, "True: Megatron-LM interleaves at pp=2 only with "
            "--overlap-p2p-communication (without it, pp > 2)",
        )  # fmt: skip
    if st.overlap_moe_a2a and st.ep > 1:  # transformer_config.py:3002-3037
        why = None
        if st.pp > 1 and st.schedule != "interleaved":
            why = "pipeline parallelism without virtual stages (interleaved schedule)"
        elif st.recompute == "full":
            why = "full recomputation"
        elif st.precision == "fp32":
            why = "fp32 (a bf16 or fp16 model only)"
        elif st.zero >= 2 and st.vpp > 1:  # pipeline_parallel/combined_1f1b.py:205
            why = "Megatron-FSDP (ZeRO 2, 3) and virtual stages"
        if why is not None:
            return HwtuneInputError(
                "overlap_moe_a2a", True, f"off with {why}: Megatron-LM's "
                "--overlap-moe-expert-parallel-comm does not run there",
            )  # fmt: skip
    return None


_MOE_NEEDS_SP = HwtuneInputError(
    "sequence_parallel", False, "on for a MoE model at TP > 1 (Megatron-LM's MoE layer raises "
    "without it in training, core/transformer/moe/moe_layer.py:636)",
)  # fmt: skip


EMBEDDING_SPLIT, LOSS_SPLIT = (
    "--account-for-embedding-in-pipeline-split",
    "--account-for-loss-in-pipeline-split",
)
"""Megatron-LM's switches that count the input embedding and the loss as one pipeline layer
each (`Strategy.pipeline_split`); transformer_config.py asserts that the layers plus these
divide evenly over the stages."""

LAYOUT_FLAG = "--pipeline-model-parallel-layout"
"""Megatron-LM's custom layout of the layers over the pp x vpp chunks (a `Strategy.pipeline_split`
layout string; arguments.py:3103 at d98e8a64). At most one of it,
``--num-virtual-stages-per-pipeline-rank`` and ``--num-layers-per-virtual-pipeline-stage`` may be
given (arguments.py:927-939); the layout's chunk count sets the virtual stages."""

FIRST_STAGE, LAST_STAGE = (
    "--decoder-first-pipeline-num-layers",
    "--decoder-last-pipeline-num-layers",
)


def _stage_args(st: Strategy, n_layers: int) -> dict[str, int] | HwtuneInputError:
    """The uneven-stage flags that make Megatron-LM build the stages the estimate prices, or why
    it cannot. The estimate gives the remainder of ``n_layers / (pp * vpp)`` to the first
    chunks (`hwtune.train.estimator._stage_layers`); Megatron-LM builds ``n_layers / pp`` layers
    per rank and ``1/vpp`` of those per virtual stage, asserting both divide (arguments.py:985-998,
    "Number of layers should be divisible by the pipeline-model-parallel size";
    transformer_block.py:156-158, 175-178), unless the first or last stage is given its own
    count, the other stages then even (``--decoder-first-pipeline-num-layers``,
    ``--decoder-last-pipeline-num-layers``; transformer_block.py:110-135). So one extra layer
    on the first rank, or one fewer on the last, is expressible without virtual stages."""
    if st.pp == 1 or st.pipeline_split != "layers":
        return {}  # the embedding/loss split is its own pair of switches (`megatron_launch`)
    v = st.vpp if st.schedule == "interleaved" else 1
    base, extra = divmod(n_layers, st.pp * v)
    if extra == 0:
        return {}
    if v == 1 and extra == 1:
        return {FIRST_STAGE: base + 1}
    if v == 1 and extra == st.pp - 1:
        return {LAST_STAGE: base}
    if v > 1:
        return HwtuneInputError(
            "vpp", st.vpp, f"a divisor of the {n_layers // st.pp} layers per pipeline rank"
            if n_layers % st.pp == 0 else f"1 with {n_layers} layers over {st.pp} stages "
            "(Megatron-LM's uneven first and last stages hold whole ranks)",
        )  # fmt: skip
    return HwtuneInputError(
        "pp", st.pp, f"a pipeline over the model's {n_layers} layers that Megatron-LM builds as "
        f"estimated: even stages, or one more layer on the first ({FIRST_STAGE}) or one fewer on "
        "the last",
    )  # fmt: skip


def megatron_launch(st: Strategy, model: ModelSpec, n_gpus: int, gpus_per_node: int) -> Launch:
    """``st`` as a Megatron-LM ``pretrain_gpt.py`` launch over ``n_gpus`` GPUs (see the module
    docstring for each flag's source); a one-line error for what Megatron-LM cannot run."""
    st.validate_for(model, n_gpus)
    refusal = megatron_refusal(st, model)
    if refusal is not None:
        raise refusal
    if model.moe is not None and st.tp > 1 and not st.sequence_parallel:
        raise _MOE_NEEDS_SP
    a: list[str] = [
        "--tensor-model-parallel-size", str(st.tp),
        "--pipeline-model-parallel-size", str(st.pp),
        "--context-parallel-size", str(st.cp),
        "--expert-model-parallel-size", str(st.ep),
    ]  # fmt: skip
    if st.sequence_parallel:
        a.append("--sequence-parallel")
    if is_layout(st.pipeline_split):  # its chunk count sets the virtual stages (arguments.py:941)
        a += [LAYOUT_FLAG, st.pipeline_split]
    elif st.schedule == "interleaved":
        a += ["--num-virtual-stages-per-pipeline-rank", str(st.vpp)]
    for flag, n in _stage_args(st, model.n_layers).items():  # type: ignore[union-attr]
        a += [flag, str(n)]  # the uneven stage the estimate has (refused above if none fits)
    if st.pipeline_split == "layers+embedding+loss":
        a += [EMBEDDING_SPLIT, LOSS_SPLIT]
    if st.mtp_layers:  # a TransformerConfig field (mtp_num_layers), an argument at d98e8a64
        a += ["--mtp-num-layers", str(st.mtp_layers)]
    if st.offload_activation_layers:  # a count > 0 turns cpu_offloading on (arguments.py:1950)
        a += ["--cpu-offloading-num-layers", str(st.offload_activation_layers)]
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
    if st.fp8_param_gather:
        a.append("--fp8-param-gather")
    if st.recompute == "selective":
        a += ["--recompute-granularity", "selective"]
        if st.recompute_modules != ("core_attn",):
            a += ["--recompute-modules", *st.recompute_modules]
    elif st.recompute == "full":
        a += ["--recompute-granularity", "full", "--recompute-method", "uniform"]
        a += ["--recompute-num-layers", "1"]
    a += ["--optimizer", st.optimizer]
    if st.offload_optimizer:
        a += ["--optimizer-cpu-offload", "--use-precision-aware-optimizer"]
    fp32_grads = grads_in_fp32(st.grad_reduce_dtype, st.zero)
    if st.zero in (2, 3):  # arguments.py:1169; its gradients: --megatron-fsdp-main-grads-dtype
        a += ["--ckpt-format", "fsdp_dtensor"]  # (auto: the model's dtype, arguments.py:3691)
        if fp32_grads and st.precision != "fp32":
            a += ["--megatron-fsdp-main-grads-dtype", "fp32"]
    elif st.precision == "fp16" and fp32_grads:  # fp32 only with --bf16 by default
        a.append("--accumulate-allreduce-grads-in-fp32")  # (arguments.py:1204-1216)
    elif st.precision in ("bf16", "fp8") and not fp32_grads:
        a.append("--grad-reduce-in-bf16")
    if st.overlap_grad_reduce and st.dp * st.cp > 1:
        a.append("--overlap-grad-reduce")
    if st.overlap_param_gather and st.zero >= 1 and st.dp * st.cp > 1:
        a.append("--overlap-param-gather")
    if st.overlap_tp_comm and st.tp > 1:
        a.append("--tp-comm-overlap")
    if model.moe is not None:  # the fused MoE kernels hwtune's lowering models (off by default)
        a += ["--moe-grouped-gemm", "--moe-permute-fusion", "--moe-router-fusion"]
        if st.tp > 1:  # expert TP defaults to the TP degree (arguments.py:587-588); hwtune's is 1
            a += ["--expert-tensor-parallel-size", "1"]
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
    env: tuple[tuple[str, str], ...] = ()
    a2a_overlap = st.overlap_moe_a2a and model.moe is not None and st.ep > 1
    if (st.tp > 1 or st.cp > 1) and st.zero < 2 and not a2a_overlap:
        env = (("CUDA_DEVICE_MAX_CONNECTIONS", "1"),)  # arguments.py:1453-1478 (Megatron-FSDP
        # asserts it is not 1, arguments.py:1166)
    per_node = min(gpus_per_node, n_gpus)
    nodes = max(1, n_gpus // per_node)
    return Launch("megatron", nodes, per_node, MEGATRON_ENTRY, tuple(a), env)


MEGATRON_SWITCHES: dict[str, tuple[str, object]] = {
    "--sequence-parallel": ("sequence_parallel", True),
    "--bf16": ("_bf16", True),
    "--fp16": ("_fp16", True),
    "--use-distributed-optimizer": ("_distopt", True),
    "--use-megatron-fsdp": ("_mfsdp", True),
    "--use-torch-fsdp2": ("_fsdp2", True),
    "--optimizer-cpu-offload": ("offload_optimizer", True),
    "--use-precision-aware-optimizer": ("_precision_aware", True),
    "--grad-reduce-in-bf16": ("grad_reduce_dtype", "bf16"),
    "--overlap-grad-reduce": ("overlap_grad_reduce", True),
    "--overlap-param-gather": ("overlap_param_gather", True),
    "--fp8-param-gather": ("fp8_param_gather", True),
    "--tp-comm-overlap": ("overlap_tp_comm", True),
    "--overlap-moe-expert-parallel-comm": ("overlap_moe_a2a", True),
    "--no-overlap-p2p-communication": ("overlap_p2p_comm", False),
    "--moe-enable-deepep": ("_deepep", True),
    "--recompute-activations": ("_recompute_activations", True),
    "--accumulate-allreduce-grads-in-fp32": ("_accumulate_fp32", True),
    "--moe-grouped-gemm": ("_moe_fused", True),
    "--moe-permute-fusion": ("_moe_fused", True),
    "--moe-router-fusion": ("_moe_fused", True),
    "--cpu-offloading": ("_cpu_offloading", True),
    EMBEDDING_SPLIT: ("_split_embedding", True),
    LOSS_SPLIT: ("_split_loss", True),
}
"""Megatron-LM switches (no value) that `strategy_from_megatron` reads, and what each sets."""
MEGATRON_VALUES: dict[str, str] = {
    "--tensor-model-parallel-size": "tp",
    "--pipeline-model-parallel-size": "pp",
    "--context-parallel-size": "cp",
    "--expert-model-parallel-size": "ep",
    "--num-virtual-stages-per-pipeline-rank": "_vstages",
    "--num-layers-per-virtual-pipeline-stage": "_vlayers",
    "--micro-batch-size": "micro_batch",
    "--global-batch-size": "global_batch",
    "--seq-length": "seq",
    "--fp8-format": "_fp8",
    "--fp8-recipe": "_fp8_recipe",
    "--data-parallel-sharding-strategy": "_sharding",
    "--recompute-granularity": "_recompute",
    "--recompute-method": "_recompute_method",
    "--recompute-num-layers": "_recompute_layers",
    "--optimizer": "optimizer",
    "--moe-token-dispatcher-type": "_dispatcher",
    "--moe-flex-dispatcher-backend": "_flex_backend",
    "--attention-backend": "_attention",
    "--hidden-dropout": "_hidden_dropout",
    "--attention-dropout": "_attention_dropout",
    "--megatron-fsdp-main-grads-dtype": "_fsdp_grads",
    "--ckpt-format": "_ckpt_format",  # what Megatron-FSDP needs; no effect on the step
    "--expert-tensor-parallel-size": "_etp",
    "--exp-avg-dtype": "_aware_exp_avg",
    "--exp-avg-sq-dtype": "_aware_exp_avg_sq",
    "--main-params-dtype": "_aware_main_params",
    "--main-grads-dtype": "_aware_main_grads",
    "--optimizer-offload-fraction": "_offload_fraction",
    "--cpu-offloading-num-layers": "_cpu_offloading_layers",
    LAYOUT_FLAG: "_layout",
    "--mtp-num-layers": "mtp_layers",
}
"""Megatron-LM options with a value that `strategy_from_megatron` reads."""
MEGATRON_LISTS: dict[str, str] = {
    "--recompute-modules": "_recompute_modules",
    "--cp-comm-type": "_cp_comm",
}
"""Megatron-LM options with one or more values (``nargs="+"``) that it reads."""
MEGATRON_SHAPE: dict[str, str] = {
    "--num-layers": "n_layers",
    "--hidden-size": "d_model",
    "--ffn-hidden-size": "ffn_hidden",
    "--num-attention-heads": "n_heads",
    "--num-query-groups": "kv_heads",
    "--num-experts": "moe.n_routed_experts",
    "--moe-router-topk": "moe.top_k",
    "--moe-ffn-hidden-size": "moe.expert_ffn_hidden",
}
"""Megatron-LM model-shape options checked against the `ModelSpec` being estimated
(``--num-query-groups`` only with ``--group-query-attention``, as Megatron-LM reads it)."""
TORCHRUN_VALUES = {"--nnodes": "nnodes", "--nproc-per-node": "nproc", "--nproc_per_node": "nproc"}
TORCHRUN_OTHER = frozenset(
    f"--{name.replace('_', sep)}"
    for name in [
        "node_rank",
        "master_addr",
        "master_port",
        "rdzv_backend",
        "rdzv_endpoint",
        "rdzv_id",
        "rdzv_conf",
        "max_restarts",
        "monitor_interval",
        "start_method",
        "log_dir",
        "local_addr",
        "role",
        "redirects",
        "tee",
    ]
    for sep in "-_"
)
"""torchrun's own options with a value (torch/distributed/run.py, both spellings): where the
processes meet, not what they train, so neither read nor listed as Megatron-LM options not read."""
SHARDING_ZERO = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}
"""Megatron-FSDP's ``--data-parallel-sharding-strategy`` as a ZeRO stage."""


@dataclass(frozen=True)
class MegatronJob:
    """What a Megatron-LM command line says of a training step: the `Strategy` fields it sets,
    the GPU count when it has ``torchrun --nnodes N --nproc-per-node G``, and the options it
    has that are not read (learning rate, data, model shape, and what hwtune does not model)."""

    fields: dict[str, object]
    n_gpus: int | None
    not_read: tuple[str, ...]
    shape: tuple[tuple[str, int], ...] = ()  # (option, value) of `MEGATRON_SHAPE`
    stages: tuple[tuple[str, int], ...] = ()  # (option, value): uneven first or last stage


def split_command(text: str) -> list[str]:
    """A command line or script fragment as tokens: backslash-newline continuations joined,
    ``#`` comments dropped (`shlex`)."""
    return shlex.split(text.replace("\\\n", " "), comments=True)


def strategy_from_megatron(tokens: list[str]) -> MegatronJob:
    """Read a Megatron-LM ``pretrain_gpt.py`` command line (optionally after ``torchrun`` and
    its ``--nnodes``/``--nproc-per-node``) into `Strategy` fields, with Megatron-LM's defaults
    where an option is absent (its overlaps off, dropout 0.1, the ``allgather`` MoE
    dispatcher) and its own adjustments (sequence parallelism off at TP 1). The inverse of
    `megatron_launch` on what that writes; a one-line error, naming the option, for a value
    hwtune does not model."""
    raw: dict[str, object] = {}
    run: dict[str, int] = {}
    shape: dict[str, int] = {}
    stages: dict[str, int] = {}
    gqa = False
    not_read: list[str] = []
    i = 0
    while i < len(tokens):
        t = tokens[i]
        name, eq, inline = t.partition("=")
        value_next = i + 1 < len(tokens) and not tokens[i + 1].startswith("--")
        if not name.startswith("--"):
            i += 1  # torchrun, the script, values of options not read
            continue
        if name in MEGATRON_SWITCHES and not eq:
            key, v = MEGATRON_SWITCHES[name]
            raw[key] = v
            i += 1
            continue
        if name in (FIRST_STAGE, LAST_STAGE) and (eq or value_next):
            stages[name] = _int(name, inline if eq else tokens[i + 1])
            i += 1 if eq else 2
            continue
        if name in MEGATRON_SHAPE and (eq or value_next):
            shape[name] = _int(name, inline if eq else tokens[i + 1])
            i += 1 if eq else 2
            continue
        if name == "--group-query-attention" and not eq:
            gqa = True
            i += 1
            continue
        if name in MEGATRON_LISTS:  # nargs="+"
            j = i + 1
            while j < len(tokens) and not tokens[j].startswith("--"):
                j += 1
            raw[MEGATRON_LISTS[name]] = [inline] if eq else tokens[i + 1 : j]
            i = i + 1 if eq else j
            continue
        if name in MEGATRON_VALUES or name in TORCHRUN_VALUES:
            if not eq and not value_next:
                raise HwtuneInputError(name, None, "a value after it")
            v = inline if eq else tokens[i + 1]
            if name in TORCHRUN_VALUES:
                run[TORCHRUN_VALUES[name]] = _int(name, v)
            else:
                raw[MEGATRON_VALUES[name]] = v
            i += 1 if eq else 2
            continue
        if name in TORCHRUN_OTHER or name == "--standalone":
            i += 1 if eq or name == "--standalone" or not value_next else 2
            continue
        not_read.append(name)
        i += 1
    if "--num-layers" in shape:
        raw["_layers"] = shape["--num-layers"]
    if not gqa:
        shape.pop("--num-query-groups", None)
    fields = _megatron_fields(raw)
    n = run["nnodes"] * run["nproc"] if {"nnodes", "nproc"} <= set(run) else None
    return MegatronJob(
        fields, n, tuple(dict.fromkeys(not_read)), tuple(shape.items()), tuple(stages.items())
    )


def _int(flag: str, v: object) -> int:
    try:
        n = int(str(v))
    except ValueError:
        raise HwtuneInputError(flag, v, "a positive integer") from None
    if n < 1:
        raise HwtuneInputError(flag, v, "a positive integer")
    return n


def _megatron_fields(raw: dict[str, object]) -> dict[str, object]:
    f: dict[str, object] = {}
    for key in ("tp", "pp", "cp", "ep", "micro_batch", "global_batch", "seq", "mtp_layers"):
        if key in raw:
            flag = next(k for k, v in MEGATRON_VALUES.items() if v == key)
            f[key] = _int(flag, raw[key])
    cp_comm = " ".join(raw.get("_cp_comm", ["p2p"]))  # type: ignore[arg-type]
    if f.get("cp", 1) > 1 and set(cp_comm.split()) != {"p2p"}:  # arguments.py:3221
        raise HwtuneInputError("--cp-comm-type", cp_comm, "p2p (the ring of K/V hwtune models)")
    # expert TP: the TP degree unless set (arguments.py:587-588); checked against the model
    f["_etp"] = _int("--expert-tensor-parallel-size", raw.get("_etp", f.get("tp", 1)))
    if raw.get("sequence_parallel") and f.get("tp", 1) > 1:  # arguments.py: off at TP 1
        f["sequence_parallel"] = True
    vpp = 1
    if "_layout" in raw:
        if "_vstages" in raw or "_vlayers" in raw:
            raise HwtuneInputError(
                LAYOUT_FLAG, raw["_layout"], "no virtual-stage option beside it (Megatron-LM "
                "allows one of them, arguments.py:927-939)",
            )  # fmt: skip
        layout = str(raw["_layout"])
        try:
            chunks = len(parse_layout(layout))
        except HwtuneInputError as e:
            raise HwtuneInputError(LAYOUT_FLAG, layout, e.expected) from None
        pp = int(f.get("pp", 1))  # type: ignore[call-overload]
        if chunks % pp:
            raise HwtuneInputError(LAYOUT_FLAG, layout, f"a multiple of the {pp} pipeline "
                                   f"stages in chunks (it has {chunks})")  # fmt: skip
        vpp = chunks // pp
        f["pipeline_split"] = layout
    elif "_vstages" in raw:
        vpp = _int("--num-virtual-stages-per-pipeline-rank", raw["_vstages"])
    elif "_vlayers" in raw:
        per_chunk = _int("--num-layers-per-virtual-pipeline-stage", raw["_vlayers"])
        if "_layers" not in raw:
            raise HwtuneInputError(
                "--num-layers-per-virtual-pipeline-stage", per_chunk,
                "--num-layers beside it (or --num-virtual-stages-per-pipeline-rank)",
            )  # fmt: skip
        per_stage = _int("--num-layers", raw["_layers"]) // int(f.get("pp", 1))  # type: ignore[call-overload]
        if per_stage % per_chunk:
            raise HwtuneInputError(
                "--num-layers-per-virtual-pipeline-stage", per_chunk,
                f"a divisor of the {per_stage} layers per pipeline stage",
            )  # fmt: skip
        vpp = per_stage // per_chunk
    if vpp > 1:
        f["vpp"], f["schedule"] = vpp, "interleaved"
    # activation offloading: a positive --cpu-offloading-num-layers turns it on (arguments.py
    # of d98e8a64, line 1950); older Megatron-LM also took the --cpu-offloading switch
    if raw.get("_cpu_offloading") or raw.get("_cpu_offloading_layers") not in (None, "0"):
        f["offload_activation_layers"] = _int(
            "--cpu-offloading-num-layers", raw.get("_cpu_offloading_layers", "absent")
        )
    split_flags = (bool(raw.get("_split_embedding")), bool(raw.get("_split_loss")))
    if "_layout" in raw and any(split_flags):
        raise HwtuneInputError(
            EMBEDDING_SPLIT if split_flags[0] else LOSS_SPLIT, "beside " + LAYOUT_FLAG,
            "one of them (the layout places the embedding and the loss itself)",
        )  # fmt: skip
    if split_flags == (True, True):
        f["pipeline_split"] = "layers+embedding+loss"
    elif any(split_flags):
        given, missing = (
            (EMBEDDING_SPLIT, LOSS_SPLIT) if split_flags[0] else (LOSS_SPLIT, EMBEDDING_SPLIT)
        )
        raise HwtuneInputError(
            given, "alone", f"{missing} beside it (hwtune models the embedding and loss split "
            "as a pair)",
        )  # fmt: skip
    if raw.get("_bf16") and raw.get("_fp16"):  # Megatron-LM asserts the same at start-up
        raise HwtuneInputError("--fp16", True, "not beside --bf16 (Megatron-LM takes one)")
    if "_fp8" in raw:
        if raw["_fp8"] not in ("hybrid", "e4m3"):
            raise HwtuneInputError("--fp8-format", raw["_fp8"], "hybrid or e4m3")
        f["precision"] = "fp8"
        recipe = str(raw.get("_fp8_recipe", "delayed"))
        if recipe not in ("delayed", "tensorwise"):
            raise HwtuneInputError(
                "--fp8-recipe", recipe, "delayed or tensorwise (the fp8 recipes hwtune models)"
            )
        f["fp8_recipe"] = "delayed" if recipe == "delayed" else "current"
    elif raw.get("_bf16"):
        f["precision"] = "bf16"
    elif raw.get("_fp16"):
        f["precision"] = "fp16"
    else:
        f["precision"] = "fp32"
    if raw.get("_mfsdp"):
        sharding = str(raw.get("_sharding", "optim_grads_params"))
        if sharding not in SHARDING_ZERO:
            raise HwtuneInputError(
                "--data-parallel-sharding-strategy", sharding, "one of " + ", ".join(SHARDING_ZERO)
            )
        f["zero"] = SHARDING_ZERO[sharding]
    elif raw.get("_fsdp2"):
        f["zero"] = 3
    else:
        f["zero"] = 1 if raw.get("_distopt") else 0
    granularity = raw.get("_recompute")
    if raw.get("_recompute_activations"):  # arguments.py:607-608
        granularity = "selective"
    if granularity == "selective":
        modules = raw.get("_recompute_modules", ["core_attn"])  # transformer_config.py:1941
        known = get_args(RecomputeModule)
        for mod in modules:  # type: ignore[union-attr]
            if mod not in known:
                raise HwtuneInputError(
                    "--recompute-modules", mod,
                    "one of " + ", ".join(known) + " (the modules hwtune models)",
                )  # fmt: skip
        f["recompute"] = "selective"
        f["recompute_modules"] = tuple(modules)  # type: ignore[arg-type]
    elif granularity == "full":
        method = raw.get("_recompute_method", "uniform")
        layers = raw.get("_recompute_layers", "1")
        if method != "uniform" or str(layers) != "1":
            raise HwtuneInputError(
                "--recompute-method", f"{method} --recompute-num-layers {layers}",
                "uniform with --recompute-num-layers 1 (hwtune models every layer recomputed)",
            )  # fmt: skip
        f["recompute"] = "full"
    elif granularity is not None:
        raise HwtuneInputError("--recompute-granularity", granularity, "full or selective")
    if "optimizer" in raw:
        if raw["optimizer"] not in MEGATRON_OPTIMIZERS:
            raise HwtuneInputError("--optimizer", raw["optimizer"], "adam or sgd")
        f["optimizer"] = raw["optimizer"]
    if raw.get("offload_optimizer"):
        f["offload_optimizer"] = True
        fraction = str(raw.get("_offload_fraction", "1.0"))  # arguments.py:2922
        try:
            whole = float(fraction) == 1.0
        except ValueError:
            whole = False
        if not whole:
            raise HwtuneInputError(
                "--optimizer-offload-fraction", fraction, "1.0 (hwtune offloads all of it)"
            )
    if raw.get("_precision_aware"):  # its state dtypes, arguments.py:3667-3684 (fp32 default)
        for key, v in raw.items():
            if key.startswith("_aware_") and v != "fp32":
                flag = next(k for k, name in MEGATRON_VALUES.items() if name == key)
                raise HwtuneInputError(
                    flag, v, "fp32 (hwtune's Megatron optimizer keeps fp32 states)"
                )
    for key in ("overlap_tp_comm", "overlap_moe_a2a", "overlap_p2p_comm"):
        if key in raw:
            f[key] = raw[key]
    fp32_grads = _fp32_gradients(raw, str(f["precision"]), int(f["zero"]))  # type: ignore[call-overload]
    if fp32_grads is not None and fp32_grads != grads_in_fp32(None, int(f["zero"])):  # type: ignore[call-overload]
        f["grad_reduce_dtype"] = "fp32" if fp32_grads else "bf16"  # bf16: 16-bit (fp16 too)
    f["overlap_grad_reduce"] = bool(raw.get("overlap_grad_reduce", False))
    f["overlap_param_gather"] = bool(raw.get("overlap_param_gather", False))
    if raw.get("fp8_param_gather"):  # checked against precision, ZeRO and optimizer by Strategy
        f["fp8_param_gather"] = True
    dispatcher = raw.get("_dispatcher", "allgather")
    backend = raw.get("_flex_backend", "deepep")  # transformer_config.py:898
    if dispatcher == "flex" and backend != "deepep":
        raise HwtuneInputError(
            "--moe-flex-dispatcher-backend", backend, "deepep (the flex backend hwtune models)"
        )
    deepep = raw.get("_deepep") or backend == "deepep"
    if dispatcher == "flex" and deepep:
        f["moe_dispatch"] = "deepep"
    elif dispatcher in ("alltoall", "allgather"):
        f["_moe_dispatcher"] = dispatcher  # checked against the model: alltoall only
    else:
        raise HwtuneInputError(
            "--moe-token-dispatcher-type", dispatcher, "alltoall, or flex with the deepep backend"
        )
    if raw.get("_attention") in ("unfused", "local"):  # local: Megatron-Core's, unfused
        f["flash_attention"] = False
    drop = []
    for key, flag in (("_hidden_dropout", "--hidden-dropout"), ("_attention_dropout",
                                                               "--attention-dropout")):  # fmt: skip
        try:
            p = float(str(raw.get(key, "0.1")))  # Megatron-LM's default, transformer_config.py
        except ValueError:
            p = -1.0
        if not 0 <= p < 1:
            raise HwtuneInputError(flag, raw[key], "a probability in [0, 1)")
        drop.append(p)
    f["dropout"] = any(d > 0 for d in drop)
    return f


def _fp32_gradients(raw: dict[str, object], precision: str, zero: int) -> bool | None:
    """Whether Megatron-LM keeps and reduces gradients in fp32 (None: as hwtune's default).
    Megatron-FSDP: ``--megatron-fsdp-main-grads-dtype`` (auto: the model's dtype,
    ``arguments.py:3691``); else ``--bf16`` reduces in fp32 unless ``--grad-reduce-in-bf16``
    and ``--fp16`` in fp16 unless ``--accumulate-allreduce-grads-in-fp32``
    (``arguments.py:1204-1216``)."""
    if precision == "fp32":
        return None
    if raw.get("_mfsdp"):
        dtype = str(raw.get("_fsdp_grads", "auto"))
        if dtype not in ("auto", "fp32", "bf16"):
            raise HwtuneInputError("--megatron-fsdp-main-grads-dtype", dtype, "auto, fp32 or bf16")
        return dtype == "fp32"
    if raw.get("_fsdp2"):
        return None
    if precision == "fp16":
        return bool(raw.get("_accumulate_fp32"))
    return raw.get("grad_reduce_dtype") != "bf16"


def megatron_strategy(job: MegatronJob, model: ModelSpec, n_gpus: int) -> Strategy:
    """The `Strategy` of a Megatron-LM job on ``n_gpus`` GPUs (data parallelism is what the
    other degrees leave, as Megatron-LM computes it) for ``model``."""
    from hwtune.train.strategy import make_strategy

    for flag, value in job.shape:
        attr = MEGATRON_SHAPE[flag]
        owner = model.moe if attr.startswith("moe.") else model
        have = getattr(owner, attr.removeprefix("moe."), None) if owner is not None else None
        if have != value:
            raise HwtuneInputError(
                flag, value, f"{have if have is not None else 'no such setting'}, as in the model "
                f"being estimated ({model.name}; --model)",
            )  # fmt: skip
    f = dict(job.fields)
    if "seq" not in f:  # Megatron-LM has no default sequence length
        raise HwtuneInputError("--seq-length", None, "a sequence length in the command line")
    dispatcher = f.pop("_moe_dispatcher", None)
    etp = f.pop("_etp", 1)
    if model.moe is not None and int(f.get("tp", 1)) > 1 and not f.get("sequence_parallel"):  # type: ignore[call-overload]
        e = _MOE_NEEDS_SP
        raise HwtuneInputError("--sequence-parallel", "absent", e.expected)
    if model.moe is not None and etp != 1:
        raise HwtuneInputError(
            "--expert-tensor-parallel-size", etp, "1 (hwtune models expert TP 1; Megatron-LM's "
            "default is the TP degree)",
        )  # fmt: skip
    if model.moe is not None and int(f.get("ep", 1)) > 1 and dispatcher == "allgather":  # type: ignore[call-overload]
        raise HwtuneInputError(
            "--moe-token-dispatcher-type", "allgather (the default)",
            "alltoall, or flex with the deepep backend (the dispatchers hwtune models)",
        )  # fmt: skip
    if model.moe is None:
        f.pop("overlap_moe_a2a", None)
        f.pop("moe_dispatch", None)
    other = int(f.get("tp", 1)) * int(f.get("pp", 1)) * int(f.get("cp", 1))  # type: ignore[call-overload]
    if n_gpus % other:
        raise HwtuneInputError(
            "GPU count", n_gpus, f"a multiple of tp*pp*cp = {other} from the Megatron-LM flags"
        )
    st = make_strategy(dp=n_gpus // other, **f)
    want = _stage_args(st, model.n_layers)
    if isinstance(want, HwtuneInputError):
        flag = {"pp": "--pipeline-model-parallel-size"}.get(
            want.field, "--num-virtual-stages-per-pipeline-rank"
        )
        raise HwtuneInputError(flag, want.value, want.expected)
    got = dict(job.stages)
    for flag in (FIRST_STAGE, LAST_STAGE):
        if got.get(flag) != want.get(flag):
            raise HwtuneInputError(
                flag, got.get(flag, "absent"), f"{want.get(flag, 'absent')} for {model.n_layers} "
                f"layers over {st.pp} stages (the stages the estimate models: the remaining "
                "layers on the first ones)",
            )  # fmt: skip
    return st


def launch_for(
    framework: str, st: Strategy, model: ModelSpec, n_gpus: int, gpus_per_node: int
) -> Launch:
    """The launch of ``st`` in ``framework`` (one of `LAUNCH_FRAMEWORKS`)."""
    if framework == "megatron":
        return megatron_launch(st, model, n_gpus, gpus_per_node)
    if framework == "torchtitan":
        from hwtune.train.launch_torchtitan import torchtitan_launch

        return torchtitan_launch(st, model, n_gpus, gpus_per_node)
    raise HwtuneInputError("launch", framework, "one of " + ", ".join(LAUNCH_FRAMEWORKS))


__all__ = [
    "LAUNCH_FRAMEWORKS",
    "MEGATRON_RECOMPUTE",
    "MEGATRON_SCHEDULES",
    "Launch",
    "MegatronJob",
    "launch_for",
    "megatron_strategy",
    "split_command",
    "strategy_from_megatron",
    "megatron_launch",
    "megatron_refusal",
]
