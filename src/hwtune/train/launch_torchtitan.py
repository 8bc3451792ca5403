"""A strategy as a torchtitan launch command (``torchrun ... -m torchtitan.train``).

Option names, defaults and checks from pytorch/torchtitan at ``TORCHTITAN_COMMIT`` (2026-08-21).
torchtitan reads ``--module M --config F`` (a function of ``torchtitan/models/M/config_registry.py``
that returns the whole ``Trainer.Config``, model included), then ``--section.field value``
options on top of it, parsed by tyro (``torchtitan/config/manager.py``; ``run_train.sh:47``
runs ``torchrun ... -m torchtitan.train --module ... --config ...``). The option set is frozen
(``torchtitan/config/README.md``; the list is ``_FROZEN_CLI_OPTIONS`` in
``tests/unit_tests/test_no_new_cli_options.py:18-242``); `TORCHTITAN_CLI_OPTIONS` holds the ones
written here, and ``benchmarks/check_torchtitan_launch.py`` checks them against that file and
parses emitted commands with torchtitan's own config classes. A boolean ``f`` is ``--s.f`` /
``--s.no_f``; an activation-checkpointing policy is a tyro subcommand, written last.

- degrees (``config/configs.py`` ``ParallelismConfig``): ``data_parallel_replicate_degree``,
  ``data_parallel_shard_degree`` (:122, :133), ``tensor_parallel_degree`` (:166),
  ``pipeline_parallel_degree`` (:180), ``context_parallel_degree`` (:239),
  ``expert_parallel_degree`` (:282); ``enable_sequence_parallel`` (:169, on by default);
- ZeRO: torchtitan always applies FSDP2 (``models/llama3/parallelize.py``, "Always run
  apply_fsdp_to_decoder"); data parallelism is replicated (ZeRO 0: ``data_parallel_replicate``)
  or sharded (ZeRO 1-3: ``data_parallel_shard``), FSDP sharding over ``dp_shard x cp``
  (``distributed/parallel_dims.py`` ``build_mesh``). ZeRO 3 reshards after forward
  (``fsdp_reshard_after_forward`` ``default``, i.e. always without pipelining, the last blocks
  excepted; ``always`` with it: ``distributed/fsdp.py:124-133``). ZeRO 1 and 2 are
  ``never``: parameters stay gathered from forward through backward, one all-gather and one
  gradient reduce-scatter per micro-batch. That is ZeRO 2's and ZeRO 1's traffic (hwtune: one
  gather per step, a reduce-scatter per micro-batch at ZeRO 2, per step at ZeRO 1) only with
  one micro-batch per step, or with pipelining: ``torch.distributed.pipelining``
  defers FSDP's gradient sync and resharding to a stage's last micro-batch
  (``stage.py`` ``backward_maybe_with_nosync``), so gradients are held whole and reduced once,
  as ZeRO 1 does, and as the estimate prices ZeRO 2 and 3 under a pipeline (ZeRO 2 then is
  ZeRO 1; ZeRO 3 gathers once per micro-batch). torchtitan's training loop has no such deferral (``trainer.py``), so
  without pipelining every micro-batch reduces (and, below ZeRO 3, regathers). With one
  micro-batch, FSDP2 at ZeRO 1 holds a shard of the gradients, not all of them: the run needs
  less memory than the estimate. What does not match is refused (`torchtitan_refusal`);
- pipeline (``pipeline_parallel_schedule``, :216): the names ``torch.distributed.pipelining``'s
  ``get_schedule_class`` accepts, as torchtitan's own configurations write them
  (``torchtitan_recipes/tests/features.py``: ``GPipe`` :163, ``1F1B`` :133,
  ``ZBVZeroBubble`` :229; ``models/llama3/config_registry.py:66`` ``Interleaved1F1B``;
  ``DualPipeV``, a V schedule beside ZBV, ``distributed/pipeline_parallel.py:551-552``). hwtune's
  gpipe, 1f1b, interleaved, zbv and dualpipev; its ZB-H1 (one chunk per rank) and two-copy
  DualPipe have no torch schedule. ``num_pp_microbatches`` (:232) is the micro-batch count per
  step; stages split the layers evenly, the first ones taking the remainder, as hwtune does,
  with ``pipeline_parallel_first_stage_less_layers``/``last_stage_less_layers`` 0 (:197, :203;
  ``pipeline_parallel.py:357-447``); the stage count is the schedule's default (1 per rank,
  2 for looped and V schedules, ``pipeline_parallel.py:259-263``) or set by
  ``pipeline_parallel_layers_per_stage`` (:209; stages = ceil(layers / it),
  ``pipeline_parallel.py:219-225``);
  ``training.disable_cuda_graphs`` with pipelining (``trainer.py:172-176`` raises without it)
  and with expert parallelism (``trainer.py:178-199``, unless the model's dispatcher runs
  without host synchronization);
- a micro-batch's tokens split evenly over the TP (with sequence parallelism) and 2 x CP
  shards (``trainer.py:296-307``);
- batch in tokens (``TrainingConfig``): ``num_tokens_per_microbatch_per_dp_rank`` (:37,
  micro-batch x sequence: one packed row), ``num_tokens_per_train_step`` (:43, global batch x
  sequence; ``trainer.py:412-427`` derives the accumulation steps), ``max_context_length``
  (:51, the sequence length);
- precision: ``training.mixed_precision_param`` bfloat16 or float32 (:94; FSDP2's
  ``MixedPrecisionPolicy``), gradients reduced in float32, the only ``mixed_precision_reduce``
  (:102); ``training.dtype bfloat16`` (:87) keeps parameters, gradients and AdamW states in
  bf16 without fp32 copies: hwtune's ``adam-bf16``. The optimizer is the configuration's
  (AdamW; ``components/optimizer/optimizer.py:142-146`` has Adam, AdamW and DistMuon, no SGD);
- activation checkpointing (``distributed/activation_checkpoint.py:332-336``):
  ``activation-checkpoint:none``, ``:full`` (every block), ``:selective`` (per-op SAC: every
  other matmul recomputed, hwtune's ``selective-op``). It has no core-attention-only policy
  (hwtune's Megatron ``selective``);
- compile: ``--framework torchtitan-flex-compile`` is ``compile.enable`` with ``compile.components
  model`` (:295, :301; hwtune's preset keeps the loss eager); TP communication overlap is
  ``compile.enable_async_tensor_parallel`` (:298), which needs compile (:306-313);
- kernels: what runs is priced as ``--framework torchtitan-flex`` (`hwtune.train.frameworks`),
  not as the SDPA of torchtitan's Dec 2024 runs (``--framework torchtitan``). Attention is
  FlexAttention: ``model_registry`` defaults ``attn_backend`` to ``"flex"``
  (``models/llama3/__init__.py:369-377``), which ``llama3_8b`` and ``llama3_70b`` keep
  (``config_registry.py:195, 268``); ``get_attention_config`` raises for ``"sdpa"``
  (``models/common/config_utils.py:97-101``), and no command-line option reaches the model
  configuration (the frozen list has no ``model.`` option), so no launch selects SDPA. The
  loss is ``ChunkedLossWrapper`` over ``CrossEntropyLoss`` (``config_registry.py:197-201,
  270-274``) with its default 8 slices (``components/loss.py:544``); ``loss.num_chunks`` is
  in the frozen list, but an unchunked loss is not (a slice count of 1 still runs the wrapper),
  so the launch leaves the configuration's 8, which the estimate prices
  (`hwtune.cost.memory.LOSS_CHUNKS`). Each rank's tokens of a micro-batch must split into the
  8 slices (``loss.py:604-607``).

Refused (`torchtitan_refusal`), each naming its field: the schedules above; fp16 (no such
``mixed_precision_param``) and fp8 (torchtitan's float8 is a converter in the model
configuration, ``Float8LinearConverter`` with rowwise recipes only,
``components/quantization/float8.py:58``: no option sets it); 8-bit and SGD optimizers; optimizer
offload (``training.enable_cpu_offload``, :70, offloads parameters and gradients too); 16-bit
gradient reduction; kernels of another framework, torchtitan's own of Dec 2024 included (SDPA,
the unchunked loss, and an eager RMSNorm of seven kernels where torchtitan calls PyTorch's
fused ``nn.RMSNorm``); unfused attention; dropout (torchtitan's models have none); DeepEP dispatch
and the MoE all-to-all overlap (set in the model configuration, not by an option); turned-off
gradient or gather overlap (FSDP2 always prefetches and overlaps); ZeRO 0 with context
parallelism, or with experts over more than the TP ranks (FSDP shards over ``dp_shard x cp``, and
EP takes its ranks from ``dp_shard x cp x tp``, ``parallel_dims.py:186-193``); the ZeRO stages
whose traffic differs (above); virtual stages that no ``pipeline_parallel_layers_per_stage``
gives; and micro-batches whose tokens per rank the chunked loss cannot split into its 8 slices.

The model is named only for a catalog model whose torchtitan configuration carries nothing that
a strategy option does not override (`TORCHTITAN_CONFIGS`); otherwise ``--module`` and
``--config`` are to be added, with the data and optimizer hyperparameters (`Launch.note`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hwtune.cost.memory import LOSS_CHUNKS
from hwtune.errors import HwtuneInputError
from hwtune.model.spec import ModelSpec
from hwtune.train.estimator import grads_in_fp32
from hwtune.train.strategy import Strategy

if TYPE_CHECKING:
    from hwtune.train.launch import Launch

TORCHTITAN_COMMIT = "b5bcd76c66d0acb1a08b176d9639425bc55e0b2a"
TORCHTITAN_ENTRY = "-m torchtitan.train"
TORCHTITAN_SCHEDULES: dict[str, str] = {
    "gpipe": "GPipe",
    "1f1b": "1F1B",
    "interleaved": "Interleaved1F1B",
    "zbv": "ZBVZeroBubble",
    "dualpipev": "DualPipeV",
}
"""hwtune's schedule -> torchtitan's ``parallelism.pipeline_parallel_schedule``."""
TORCHTITAN_RECOMPUTE: dict[str, str] = {
    "none": "none",
    "selective-op": "selective",
    "full": "full",
}
"""hwtune's recomputation -> torchtitan's ``activation-checkpoint:`` subcommand."""
TORCHTITAN_OPTIMIZERS: tuple[str, ...] = ("adam", "adam-bf16")
TORCHTITAN_CLI_OPTIONS: frozenset[str] = frozenset(
    {
        "parallelism.data_parallel_replicate_degree",
        "parallelism.data_parallel_shard_degree",
        "parallelism.tensor_parallel_degree",
        "parallelism.pipeline_parallel_degree",
        "parallelism.context_parallel_degree",
        "parallelism.expert_parallel_degree",
        "parallelism.enable_sequence_parallel",
        "parallelism.fsdp_reshard_after_forward",
        "parallelism.pipeline_parallel_schedule",
        "parallelism.num_pp_microbatches",
        "parallelism.pipeline_parallel_layers_per_stage",
        "parallelism.pipeline_parallel_first_stage_less_layers",
        "parallelism.pipeline_parallel_last_stage_less_layers",
        "training.num_tokens_per_microbatch_per_dp_rank",
        "training.num_tokens_per_train_step",
        "training.max_context_length",
        "training.mixed_precision_param",
        "training.dtype",
        "training.disable_cuda_graphs",
        "compile.enable",
        "compile.components",
        "compile.enable_async_tensor_parallel",
    }
)
"""The ``section.field`` options this module writes, each in torchtitan's frozen CLI list
(``tests/unit_tests/test_no_new_cli_options.py:18-242`` at `TORCHTITAN_COMMIT`)."""
TORCHTITAN_AC_SUBCOMMANDS: tuple[str, ...] = ("selective", "full", "memory-budget", "none")
"""``activation-checkpoint:<name>`` (``distributed/activation_checkpoint.py:332-336``)."""
TORCHTITAN_CONFIGS: dict[str, tuple[str, str]] = {
    "llama3.1-8b": ("llama3", "llama3_8b"),
    "llama3.1-70b": ("llama3", "llama3_70b"),
}
"""Catalog model -> (``--module``, ``--config``): ``models/llama3/config_registry.py:194, 267``
(Llama-3.1 8B and 70B in bf16, flex attention). Not ``llama3_405b``: it carries a float8
converter and async TP (:305-320), which no option removes."""
NEEDS_MODEL = (
    "add --module and --config naming the model's torchtitan configuration "
    "(torchtitan/models/<model>/config_registry.py), then the data and optimizer settings"
)


def _generic_kernels() -> str:
    """What the estimate assumes of a configuration the launch does not name: the attention
    backend most ``model_registry`` functions default to (``"flex"``: llama3, qwen3,
    deepseek_v3 ...; ``gpt_oss`` defaults to ``"varlen"``) and the loss of the Llama 3
    configurations, its slice count `LOSS_CHUNKS`'s."""
    return (
        f"; the estimate prices flex attention and the {LOSS_CHUNKS['chunked']}-slice "
        "ChunkedLossWrapper (the defaults of torchtitan's model registries), not a "
        "configuration's varlen attention or unchunked loss"
    )


def _refuse(field: str, value: object, expected: str) -> HwtuneInputError:
    return HwtuneInputError(field, value, expected)


def torchtitan_precision_refusal(precision: str) -> HwtuneInputError | None:
    """Why torchtitan cannot train in ``precision``, or None (bf16 and fp32): checked before a
    search, since no strategy in another precision would run."""
    if precision == "fp16":
        return _refuse("precision", "fp16", "bf16 or fp32 (torchtitan's "
                       "training.mixed_precision_param is bfloat16 or float32; fp32 on a GPU "
                       "without bf16, such as V100, where fp16 is the default)")  # fmt: skip
    if precision == "fp8":
        return _refuse(
            "precision", "fp8", "bf16 or fp32 (torchtitan's float8 is a converter in the model "
            "configuration, rowwise recipes only; no command-line option sets it)",
        )  # fmt: skip
    return None


def torchtitan_refusal(st: Strategy, model: ModelSpec | None = None) -> HwtuneInputError | None:
    """Why torchtitan cannot run ``st`` as hwtune models it (the first reason, as a one-line
    error naming the field), or None. With ``model``, also the pipeline stage split."""
    if st.pp > 1 and st.schedule not in TORCHTITAN_SCHEDULES:
        return _refuse(
            "schedule", st.schedule, "a schedule torchtitan (torch.distributed.pipelining) "
            "runs: " + ", ".join(TORCHTITAN_SCHEDULES) + " (no single-chunk zero-bubble, no "
            "two-copy DualPipe)",
        )  # fmt: skip
    if st.offload_activation_layers:
        return _refuse(
            "offload_activation_layers", st.offload_activation_layers, "0 (torchtitan has no "
            "activation offloading; its memory savers are checkpointing and FSDP)",
        )  # fmt: skip
    if st.mtp_layers:
        return _refuse(
            "mtp_layers", st.mtp_layers, "0 (torchtitan's models train no multi-token-prediction "
            "module)",
        )  # fmt: skip
    if st.fp8_param_gather:
        return _refuse(
            "fp8_param_gather", True, "False (Megatron-Core's fp8 parameters; torchtitan's "
            "float8 FSDP all-gather casts 16/32-bit parameters and keeps them)",
        )  # fmt: skip
    if st.pipeline_split != "layers":
        return _refuse(
            "pipeline_split", st.pipeline_split, "layers (the embedding/loss split and the "
            "custom layouts are Megatron-Core's; hwtune writes torchtitan's stages as layer "
            "counts)",
        )  # fmt: skip
    if st.recompute not in TORCHTITAN_RECOMPUTE:
        return _refuse(
            "recompute", st.recompute, "none, selective-op or full (torchtitan's selective "
            "activation checkpointing is per op; it has no core-attention-only policy)",
        )  # fmt: skip
    bad_precision = torchtitan_precision_refusal(st.precision)
    if bad_precision is not None:
        return bad_precision
    if st.optimizer not in TORCHTITAN_OPTIMIZERS:
        return _refuse("optimizer", st.optimizer, "adam or adam-bf16 (torchtitan's AdamW, "
                       "fp32 or all-bf16 with --training.dtype bfloat16)")  # fmt: skip
    if st.offload_optimizer:
        return _refuse(
            "offload_optimizer", True, "off (torchtitan's training.enable_cpu_offload "
            "offloads the parameters and gradients too, FSDP2's CPUOffloadPolicy)",
        )  # fmt: skip
    kernels = (
        ("attention_kernel", st.attention_kernel, "flex", "FlexAttention (its language models "
         "have no SDPA backend: models/common/config_utils.py:97-101)"),
        ("loss_kernel", st.loss_kernel, "chunked", f"its ChunkedLossWrapper over "
         f"{LOSS_CHUNKS['chunked']} slices of the tokens (models/llama3/config_registry.py:"
         "197-201)"),
        ("grad_accumulation", st.grad_accumulation, "fused", "autograd's accumulation"),
    )  # fmt: skip
    for field, value, titan, what in kernels:
        if value != titan:
            return _refuse(field, value, f"{titan!r}: torchtitan runs {what} (--framework "
                           "torchtitan-flex or torchtitan-flex-compile)")  # fmt: skip
    if not st.fused_elementwise and not st.fused_norm:  # compiled, the norm is fused anyway
        return _refuse("fused_norm", False, "True without torch.compile: torchtitan's RMSNorm is "
                       "nn.RMSNorm, one fused kernel (models/common/nn_modules.py:134-148; "
                       "--framework torchtitan-flex)")  # fmt: skip
    if not st.flash_attention:
        return _refuse("flash_attention", False, "True: torchtitan's attention is fused (the "
                       "model configuration's backend)")  # fmt: skip
    if st.dropout:
        return _refuse("dropout", True, "off (torchtitan's models have no dropout)")
    if st.zero == 3 and st.zero3_gather != "layer":
        return _refuse("zero3_gather", st.zero3_gather, "layer (FSDP2 gathers a block)")
    if st.precision != "fp32" and not grads_in_fp32(st.grad_reduce_dtype, st.zero):
        return _refuse("grad_reduce_dtype", st.grad_reduce_dtype or "bf16 (ZeRO 3's default)",
                       "fp32 (torchtitan's mixed_precision_reduce is float32 only)")  # fmt: skip
    if st.ep > 1 and st.moe_dispatch != "alltoall":
        return _refuse("moe_dispatch", st.moe_dispatch, "alltoall (torchtitan's DeepEP "
                       "dispatcher is chosen in the model configuration, not by an option)")  # fmt: skip
    if st.ep > 1 and st.overlap_moe_a2a:
        return _refuse("overlap_moe_a2a", True, "off (torchtitan has no option for it; its "
                       "DualPipeV schedule overlaps micro-batches)")  # fmt: skip
    if st.overlap_tp_comm and st.tp > 1 and not st.fused_elementwise:
        return _refuse(
            "overlap_tp_comm", True, "off without torch.compile (torchtitan's async TP, "
            "compile.enable_async_tensor_parallel, needs it: --framework torchtitan-flex-compile)",
        )  # fmt: skip
    if st.dp * st.cp > 1 and not st.overlap_grad_reduce:
        return _refuse("overlap_grad_reduce", False, "True: FSDP2 overlaps the gradient "
                       "reduction with the backward, with no option to turn it off")  # fmt: skip
    if st.dp * st.cp > 1 and st.zero >= 1 and not st.overlap_param_gather:
        return _refuse("overlap_param_gather", False, "True: FSDP2 prefetches the next "
                       "block's parameters, with no option to turn it off")  # fmt: skip
    zero = _zero_refusal(st)
    if zero is not None:
        return zero
    divisor = (st.tp if st.sequence_parallel else 1) * (2 * st.cp if st.cp > 1 else 1)
    if (st.micro_batch * st.seq) % divisor:  # trainer.py:296-307
        return _refuse("seq", st.seq, f"a length whose micro-batch of {st.micro_batch} rows "
                       f"torchtitan splits evenly over {divisor} TP x 2 CP shards")  # fmt: skip
    slices = LOSS_CHUNKS["chunked"]
    if (st.micro_batch * st.seq // st.cp) % slices:  # components/loss.py:604-607
        return _refuse("seq", st.seq, f"a length whose {st.micro_batch}-row micro-batch leaves "
                       f"each of the {st.cp} CP ranks a token count that torchtitan's chunked "
                       f"loss splits into its {slices} slices")  # fmt: skip
    if model is not None and st.pp > 1 and _layers_per_stage(st, model.n_layers) == 0:
        chunks = st.pp * _stages_per_rank(st)
        if chunks > model.n_layers:
            return _refuse("pp", st.pp, f"at most {model.n_layers // _stages_per_rank(st)} "
                           f"with {_stages_per_rank(st)} stages per rank (torchtitan gives each "
                           f"stage at least one of the {model.n_layers} layers)")  # fmt: skip
        return _refuse("vpp", st.vpp, f"a count of virtual stages that torchtitan's "
                       f"pipeline_parallel_layers_per_stage gives for {model.n_layers} layers "
                       f"(no whole number of layers splits them into {chunks} stages)")  # fmt: skip
    return None


def _zero_refusal(st: Strategy) -> HwtuneInputError | None:
    """The ZeRO stages whose torchtitan run has other traffic or sharding (module docstring)."""
    m = st.grad_accum
    if st.zero == 0 and st.cp > 1:
        return _refuse("zero", 0, "1, 2 or 3 with context parallelism (torchtitan shards "
                       "parameters over the context-parallel ranks: FSDP over dp_shard x cp)")  # fmt: skip
    if st.zero == 0 and st.ep > 1 and st.ep != st.tp:
        return _refuse("zero", 0, f"1, 2 or 3 with experts over more than the {st.tp} TP ranks "
                       "(torchtitan's EP takes ranks from dp_shard x cp x tp, and FSDP shards "
                       "experts over the rest)")  # fmt: skip
    if st.pp == 1 and m > 1 and st.zero < 3:
        return _refuse(
            "zero", st.zero, f"3, or one micro-batch per step (here {m}): without pipelining "
            "torchtitan reduces the gradients, and below ZeRO 3 regathers the parameters, "
            "every micro-batch",
        )  # fmt: skip
    # with pipelining, ZeRO 2 and 3 run as the estimate prices a pipeline's FSDP2 stages
    # (`cost.memory.sharded_state_bytes`, ``pipelined``): whole gradients, one reduce-scatter;
    # but not ZeRO 3 under a split backward: torch's schedule runtime reshards a stage between a
    # micro-batch's I and W and W's gradients miss the reduce-scatter (hwtune's own runs on
    # torch 2.13, `parallel.runtime.launch`)
    if st.pp > 1 and st.zero >= 3 and st.dp * st.cp > 1 and st.schedule in ("zbv", "dualpipev"):
        return _refuse(
            "zero", st.zero, f"at most 2 with {st.schedule} and dp x cp > 1 (FSDP2 stages "
            "resharded between the input and weight gradients lose the latter's reduction)",
        )  # fmt: skip
    return None


def _stages_per_rank(st: Strategy) -> int:
    """Model chunks per pipeline rank: V schedules hold two, interleaving ``vpp``."""
    if st.schedule in ("zbv", "dualpipev"):
        return 2
    return st.vpp


def _layers_per_stage(st: Strategy, n_layers: int) -> int | None:
    """``pipeline_parallel_layers_per_stage`` for ``st`` (None: the schedule's default stage
    count is right; 0: no value gives the stage count)."""
    per_rank = _stages_per_rank(st)
    chunks = st.pp * per_rank
    if chunks > n_layers:  # a stage without layers (pipeline_parallel.py:393-397)
        return 0
    default = 2 if st.schedule in ("interleaved", "zbv", "dualpipev") else 1
    if per_rank == default:
        return None
    k = -(-n_layers // chunks)  # stages = ceil(layers / k) (pipeline_parallel.py:219-225)
    return k if -(-n_layers // k) == chunks else 0


def _opt(name: str, value: object) -> list[str]:
    assert name in TORCHTITAN_CLI_OPTIONS, name
    return [f"--{name}", str(value)]


def _switch(name: str, on: bool) -> list[str]:
    assert name in TORCHTITAN_CLI_OPTIONS, name
    section, _, field = name.rpartition(".")
    return [f"--{name}" if on else f"--{section}.no_{field}"]


def torchtitan_launch(st: Strategy, model: ModelSpec, n_gpus: int, gpus_per_node: int) -> Launch:
    """``st`` as a torchtitan launch over ``n_gpus`` GPUs (`hwtune.train.launch.Launch`; see the
    module docstring for each option's source); a one-line error for what torchtitan cannot run
    as modelled."""
    from hwtune.train.launch import Launch  # noqa: F811 -- at run time (launch imports this module)

    st.validate_for(model, n_gpus)
    refusal = torchtitan_refusal(st, model)
    if refusal is not None:
        raise refusal
    a: list[str] = []
    named = TORCHTITAN_CONFIGS.get(model.name)
    if named is not None:
        a += ["--module", named[0], "--config", named[1]]
    replicate, shard = (st.dp, 1) if st.zero == 0 else (1, st.dp)
    a += _opt("parallelism.data_parallel_replicate_degree", replicate)
    a += _opt("parallelism.data_parallel_shard_degree", shard)
    a += _opt("parallelism.tensor_parallel_degree", st.tp)
    a += _opt("parallelism.pipeline_parallel_degree", st.pp)
    a += _opt("parallelism.context_parallel_degree", st.cp)
    a += _opt("parallelism.expert_parallel_degree", st.ep)
    a += _switch("parallelism.enable_sequence_parallel", st.sequence_parallel)
    if st.zero >= 1:
        reshard = "never" if st.zero < 3 else ("always" if st.pp > 1 else "default")
        a += _opt("parallelism.fsdp_reshard_after_forward", reshard)
    if st.pp > 1:
        a += _opt("parallelism.pipeline_parallel_schedule", TORCHTITAN_SCHEDULES[st.schedule])
        a += _opt("parallelism.num_pp_microbatches", st.grad_accum)
        a += _opt("parallelism.pipeline_parallel_first_stage_less_layers", 0)
        a += _opt("parallelism.pipeline_parallel_last_stage_less_layers", 0)
        per_stage = _layers_per_stage(st, model.n_layers)
        if per_stage:
            a += _opt("parallelism.pipeline_parallel_layers_per_stage", per_stage)
    a += _opt("training.num_tokens_per_microbatch_per_dp_rank", st.micro_batch * st.seq)
    a += _opt("training.num_tokens_per_train_step", st.global_batch_seqs * st.seq)
    a += _opt("training.max_context_length", st.seq)
    param = "float32" if st.precision == "fp32" else "bfloat16"
    a += _opt("training.mixed_precision_param", param)
    a += _opt("training.dtype", "bfloat16" if st.optimizer == "adam-bf16" else "float32")
    if st.pp > 1 or st.ep > 1:
        a += _switch("training.disable_cuda_graphs", True)
    a += _switch("compile.enable", st.fused_elementwise)
    if st.fused_elementwise:
        a += _opt("compile.components", "model")
    if st.tp > 1:
        overlap = st.overlap_tp_comm and st.fused_elementwise
        a += _switch("compile.enable_async_tensor_parallel", overlap)
    a.append("activation-checkpoint:" + TORCHTITAN_RECOMPUTE[st.recompute])  # a subcommand: last
    per_node = min(gpus_per_node, n_gpus)
    nodes = max(1, n_gpus // per_node)
    env = (("PYTORCH_ALLOC_CONF", "expandable_segments:True"),)  # as run_train.sh:43 sets it
    note = NEEDS_MODEL + _generic_kernels()
    if named is not None:
        note = (f"the model, data and optimizer of torchtitan's {named[1]} configuration, with "
                f"its flex attention and {LOSS_CHUNKS['chunked']}-slice chunked loss, as "
                "estimated")  # fmt: skip
    return Launch("torchtitan", nodes, per_node, TORCHTITAN_ENTRY, tuple(a), env, note)


__all__ = [
    "TORCHTITAN_AC_SUBCOMMANDS",
    "TORCHTITAN_CLI_OPTIONS",
    "TORCHTITAN_COMMIT",
    "TORCHTITAN_CONFIGS",
    "TORCHTITAN_RECOMPUTE",
    "TORCHTITAN_SCHEDULES",
    "torchtitan_launch",
    "torchtitan_refusal",
]
