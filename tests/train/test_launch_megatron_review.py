"""Review of `--launch megatron` and `--megatron-args` against Megatron-LM's source.

Reference: NVIDIA/Megatron-LM at d98e8a64 (2026-08); each test names the line of
``megatron/training/arguments.py`` (``validate_args`` and the flag definitions),
``megatron/core/transformer/transformer_config.py`` (``__post_init__``) or the module that
decides. The launch lines below were also run through that commit's ``parse_args`` and
``validate_args`` and ``core_transformer_config_from_args`` (with Transformer Engine stubbed)."""

from __future__ import annotations

import pytest
from launch_args import flags

from hwtune.errors import HwtuneInputError
from hwtune.model.catalog import get_model
from hwtune.train.estimator import grads_in_fp32
from hwtune.train.launch import (
    megatron_launch,
    megatron_strategy,
    split_command,
)
from hwtune.train.strategy import Strategy


def strategy_from_megatron(tokens: list[str]):  # noqa: ANN201
    """`hwtune.train.launch.strategy_from_megatron`, with ``--seq-length 4096`` added to the short
    command lines of these tests that leave it out (Megatron-LM has no default for it)."""
    from hwtune.train.launch import strategy_from_megatron as read

    return read(tokens if "--seq-length" in tokens else [*tokens, "--seq-length", "4096"])


LLAMA, MIXTRAL = get_model("llama3.1-8b"), get_model("mixtral-8x7b")


# ---- the launch command ----------------------------------------------------------------------
def test_tensor_parallel_launch_sets_cuda_device_max_connections() -> None:
    # arguments.py:1453-1478: with TP or CP > 1 before Blackwell, unless Megatron-FSDP or the
    # MoE all-to-all overlap, validate_args asserts CUDA_DEVICE_MAX_CONNECTIONS == "1"
    # (the example scripts export it)
    st = Strategy(tp=2, dp=4, sequence_parallel=True, zero=1)
    cmd = megatron_launch(st, LLAMA, 8, 8).command()
    assert cmd.startswith("CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun ")
    st = Strategy(cp=2, dp=4, zero=1)
    assert megatron_launch(st, LLAMA, 8, 8).command().startswith("CUDA_DEVICE_MAX_CONNECTIONS=1 ")
    # arguments.py:1166: Megatron-FSDP asserts it is *not* 1
    st = Strategy(tp=2, dp=4, sequence_parallel=True, zero=3)
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in megatron_launch(st, LLAMA, 8, 8).command()
    # and reading the line back ignores the environment assignment
    job = strategy_from_megatron(split_command(megatron_launch(Strategy(tp=2, dp=4, zero=1), LLAMA, 8,
                                                               8).command()))  # fmt: skip
    assert job.not_read == () and job.n_gpus == 8


@pytest.mark.parametrize("zero", [2, 3])
def test_megatron_fsdp_sets_its_checkpoint_format(zero: int) -> None:
    # arguments.py:1169: assert args.ckpt_format == "fsdp_dtensor" with --use-megatron-fsdp
    f = flags(megatron_launch(Strategy(dp=8, zero=zero), LLAMA, 8, 8).args)
    assert f["--ckpt-format"] == "fsdp_dtensor"
    f = flags(megatron_launch(Strategy(dp=8, zero=1), LLAMA, 8, 8).args)
    assert "--ckpt-format" not in f


def test_moe_launch_runs_the_fused_kernels_the_estimate_models() -> None:
    # transformer_config.py:850, 941, 944: moe_grouped_gemm, moe_permute_fusion and
    # moe_router_fusion default to False; hwtune's MoE lowering models TE GroupedLinear and the
    # fused permutation and router kernels (hwtune.model.lowering.moe_routing_ops), as the
    # Mixtral example script (--moe-grouped-gemm) and gptoss/02_train.sh run them
    st = Strategy(dp=8, ep=8, zero=1)
    f = flags(megatron_launch(st, MIXTRAL, 8, 8).args)
    for switch in ("--moe-grouped-gemm", "--moe-permute-fusion", "--moe-router-fusion"):
        assert switch in f and f[switch] is None
    f = flags(megatron_launch(Strategy(dp=8), LLAMA, 8, 8).args)
    assert not any(k.startswith("--moe-") for k in f)


def test_fp16_gradients_in_fp32_are_asked_for() -> None:
    # arguments.py:1204-1216: only --bf16 turns accumulate_allreduce_grads_in_fp32 on; with
    # --fp16 the gradient buffers stay fp16 unless --accumulate-allreduce-grads-in-fp32
    # (arguments.py:3069). hwtune keeps fp32 gradients below ZeRO-3 by default.
    st = Strategy(dp=8, zero=1, precision="fp16")
    assert grads_in_fp32(st.grad_reduce_dtype, st.zero)
    f = flags(megatron_launch(st, LLAMA, 8, 8).args)
    assert "--accumulate-allreduce-grads-in-fp32" in f
    # with 16-bit gradients asked for, nothing (and no --grad-reduce-in-bf16 beside --fp16)
    st = Strategy(dp=8, zero=1, precision="fp16", grad_reduce_dtype="bf16")
    f = flags(megatron_launch(st, LLAMA, 8, 8).args)
    assert "--accumulate-allreduce-grads-in-fp32" not in f and "--grad-reduce-in-bf16" not in f


def test_megatron_fsdp_fp32_gradients_are_asked_for() -> None:
    # arguments.py:3691: --megatron-fsdp-main-grads-dtype defaults to auto, the model's dtype
    # (bf16); Megatron-FSDP takes its gradient dtype from it, not from
    # --accumulate-allreduce-grads-in-fp32 (mcore_fsdp_adapter.py:141). hwtune's ZeRO-2 keeps
    # fp32 gradients.
    st = Strategy(dp=8, zero=2)
    assert grads_in_fp32(st.grad_reduce_dtype, st.zero)
    f = flags(megatron_launch(st, LLAMA, 8, 8).args)
    assert f["--megatron-fsdp-main-grads-dtype"] == "fp32"
    st = Strategy(dp=8, zero=3)  # bf16 gradients, Megatron-FSDP's default
    assert not grads_in_fp32(st.grad_reduce_dtype, st.zero)
    assert "--megatron-fsdp-main-grads-dtype" not in megatron_launch(st, LLAMA, 8, 8).args


@pytest.mark.parametrize(
    ("model", "fields", "field"),
    [
        # arguments.py:1028: 'Must use --overlap-param-gather with --overlap-grad-reduce'
        ("llama3.1-8b", {"dp": 8, "zero": 1, "overlap_grad_reduce": False}, "overlap_grad_reduce"),
        # core/optimizer/__init__.py:1057: --use-precision-aware-optimizer (which
        # --optimizer-cpu-offload needs, arguments.py:1885) only with the distributed optimizer
        ("llama3.1-8b", {"dp": 8, "zero": 0, "offload_optimizer": True}, "offload_optimizer"),
        # arguments.py:1006: interleaving without p2p overlap needs pp > 2
        ("llama3.1-8b", {"pp": 2, "dp": 4, "schedule": "interleaved", "vpp": 2,
                         "global_batch": 8, "overlap_p2p_comm": False}, "overlap_p2p_comm"),
        # transformer_config.py:3008: EP all-to-all overlap with PP needs virtual stages
        ("mixtral-8x7b", {"pp": 2, "dp": 4, "ep": 4, "overlap_moe_a2a": True}, "overlap_moe_a2a"),
        # transformer_config.py:3022: ... and no full recomputation
        ("mixtral-8x7b", {"dp": 8, "ep": 8, "overlap_moe_a2a": True, "recompute": "full"},
         "overlap_moe_a2a"),
        # transformer_config.py:3035: ... and a bf16 or fp16 model
        ("mixtral-8x7b", {"dp": 8, "ep": 8, "overlap_moe_a2a": True, "precision": "fp32"},
         "overlap_moe_a2a"),
        # pipeline_parallel/combined_1f1b.py:205: not with Megatron-FSDP and virtual stages
        ("mixtral-8x7b", {"pp": 2, "dp": 4, "ep": 4, "overlap_moe_a2a": True, "zero": 3,
                          "schedule": "interleaved", "vpp": 2, "global_batch": 8},
         "overlap_moe_a2a"),
    ],
)  # fmt: skip
def test_what_megatron_asserts_against_is_refused(model: str, fields: dict, field: str) -> None:
    st = Strategy(**fields)
    with pytest.raises(HwtuneInputError) as info:
        megatron_launch(st, get_model(model), 8, 8)
    assert info.value.field == field


def test_cli_names_the_option_for_the_new_refusals(rejects) -> None:  # noqa: ANN001
    rejects(["estimate", "--dp", "8", "--zero", "1", "--no-overlap-grad", "--launch", "megatron"],
            "--no-overlap-grad", "--overlap-param-gather", "megatron")  # fmt: skip
    # offload at ZeRO 0 is refused before any launch now (no framework runs it:
    # tests/train/test_device_limits_25.py)
    rejects(["estimate", "--dp", "8", "--zero", "0", "--offload", "--launch", "megatron"],
            "--offload", "ZeRO stage 1")  # fmt: skip


# ---- reading a command line ------------------------------------------------------------------
def test_flex_dispatcher_defaults_to_deepep() -> None:
    # transformer_config.py:898: moe_flex_dispatcher_backend defaults to "deepep" (the
    # Megatron-FSDP DeepSeek-V3 example passes --moe-token-dispatcher-type flex alone)
    args = ["--expert-model-parallel-size", "8", "--moe-token-dispatcher-type", "flex", "--bf16"]
    st = megatron_strategy(strategy_from_megatron(args), MIXTRAL, 8)
    assert st.moe_dispatch == "deepep"
    with pytest.raises(HwtuneInputError) as info:
        strategy_from_megatron([*args, "--moe-flex-dispatcher-backend", "hybridep"])
    assert info.value.field == "--moe-flex-dispatcher-backend"


def test_recompute_activations_is_selective() -> None:
    # arguments.py:607-608: --recompute-activations sets recompute_granularity = 'selective'
    job = strategy_from_megatron(["--recompute-activations", "--bf16"])
    assert "--recompute-activations" not in job.not_read
    assert megatron_strategy(job, LLAMA, 8).recompute == "selective"


def test_recompute_modules_hwtune_does_not_model_are_refused() -> None:
    # transformer_config.py:1940-1941: selective recomputation defaults to ["core_attn"];
    # sbatch_mfsdp_deepseek_v3.sh recomputes mlp moe mla_up_proj layernorm instead, of which
    # hwtune models mlp and mla_up_proj (and core_attn, moe_act), not moe or layernorm
    job = strategy_from_megatron(["--recompute-granularity", "selective", "--recompute-modules",
                                  "core_attn", "--bf16"])  # fmt: skip
    st = megatron_strategy(job, LLAMA, 8)
    assert st.recompute == "selective" and st.recompute_modules == ("core_attn",)
    job = strategy_from_megatron(["--recompute-granularity", "selective", "--recompute-modules",
                                  "core_attn", "mlp", "--bf16"])  # fmt: skip
    assert megatron_strategy(job, LLAMA, 8).recompute_modules == ("core_attn", "mlp")
    with pytest.raises(HwtuneInputError) as info:
        strategy_from_megatron(["--recompute-granularity", "selective", "--recompute-modules",
                                "mlp", "moe", "--bf16"])  # fmt: skip
    assert info.value.field == "--recompute-modules" and info.value.value == "moe"


def test_local_attention_backend_is_unfused() -> None:
    # core/transformer/enums.py:51-58 and arguments.py:436: "local" is Megatron-Core's own
    # (unfused) DotProductAttention, like "unfused"
    job = strategy_from_megatron(["--attention-backend", "local", "--bf16"])
    assert not megatron_strategy(job, LLAMA, 8).flash_attention


def test_moe_fusion_switches_are_read() -> None:
    job = strategy_from_megatron(["--moe-grouped-gemm", "--moe-permute-fusion",
                                  "--moe-router-fusion", "--bf16"])  # fmt: skip
    assert job.not_read == ()


def test_fp16_without_fp32_accumulation_has_16_bit_gradients() -> None:
    # examples/gpt3/train_gpt3_175b_distributed.sh runs --fp16 without
    # --accumulate-allreduce-grads-in-fp32: fp16 gradient buffers (arguments.py:1204-1216)
    st = megatron_strategy(strategy_from_megatron(["--fp16"]), LLAMA, 8)
    assert not grads_in_fp32(st.grad_reduce_dtype, st.zero)
    st = megatron_strategy(
        strategy_from_megatron(["--fp16", "--accumulate-allreduce-grads-in-fp32"]), LLAMA, 8
    )
    assert grads_in_fp32(st.grad_reduce_dtype, st.zero)


def test_megatron_fsdp_gradients_follow_its_main_grads_dtype() -> None:
    # arguments.py:3691: auto (the model's bf16) unless --megatron-fsdp-main-grads-dtype fp32
    base = ["--bf16", "--use-megatron-fsdp", "--data-parallel-sharding-strategy", "optim_grads"]
    st = megatron_strategy(strategy_from_megatron(base), LLAMA, 8)
    assert st.zero == 2 and not grads_in_fp32(st.grad_reduce_dtype, st.zero)
    job = strategy_from_megatron([*base, "--megatron-fsdp-main-grads-dtype", "fp32"])
    st = megatron_strategy(job, LLAMA, 8)
    assert grads_in_fp32(st.grad_reduce_dtype, st.zero) and job.not_read == ()


def test_custom_pipeline_layout_must_split_over_the_stages() -> None:
    # arguments.py:941-951: the layout's chunk count divided by pp sets the virtual stages, and
    # must divide; this one unrolls to 17 chunks ("Ett", 14 x "tt", "t", "tmL") over 4 stages
    args = ["--pipeline-model-parallel-size", "4", "--pipeline-model-parallel-layout",
            "Et*2|(tt|)*14t|tmL", "--bf16"]  # fmt: skip
    with pytest.raises(HwtuneInputError) as info:
        strategy_from_megatron(args)
    assert info.value.field == "--pipeline-model-parallel-layout"
    assert "17" in info.value.expected


def test_context_parallel_communication_other_than_the_ring_is_refused() -> None:
    # arguments.py:3221: --cp-comm-type (nargs "+", default p2p: the K/V ring hwtune models)
    base = ["--context-parallel-size", "2", "--bf16"]
    job = strategy_from_megatron([*base, "--cp-comm-type", "p2p"])
    assert megatron_strategy(job, LLAMA, 8).cp == 2 and job.not_read == ()
    for value in (["a2a"], ["p2p", "a2a+p2p"]):
        with pytest.raises(HwtuneInputError) as info:
            strategy_from_megatron([*base, "--cp-comm-type", *value])
        assert info.value.field == "--cp-comm-type"
    # without context parallelism it changes nothing
    job = strategy_from_megatron(["--cp-comm-type", "a2a", "--bf16"])
    assert megatron_strategy(job, LLAMA, 8).cp == 1


def test_moe_launch_keeps_expert_tensor_parallelism_at_one() -> None:
    # arguments.py:587-588: expert_tensor_parallel_size defaults to the TP degree; hwtune folds
    # EP over TP x CP x DP with expert TP 1 (hwtune.train.strategy.expert_data_parallel)
    st = Strategy(tp=2, dp=4, ep=8, zero=1, sequence_parallel=True)
    f = flags(megatron_launch(st, MIXTRAL, 8, 8).args)
    assert f["--expert-tensor-parallel-size"] == "1"
    # and read back it is the same strategy
    job = strategy_from_megatron(split_command(megatron_launch(st, MIXTRAL, 8, 8).command()))
    assert job.not_read == () and megatron_strategy(job, MIXTRAL, 8).tp == 2


def test_moe_read_without_expert_tp_one_is_refused() -> None:
    # a MoE line at TP 2 without --expert-tensor-parallel-size runs the experts at TP 2
    # (arguments.py:587-588), which the estimate does not model
    args = ["--tensor-model-parallel-size", "2", "--expert-model-parallel-size", "4",
            "--moe-token-dispatcher-type", "alltoall", "--sequence-parallel", "--bf16"]  # fmt: skip
    with pytest.raises(HwtuneInputError) as info:
        megatron_strategy(strategy_from_megatron(args), MIXTRAL, 8)
    assert info.value.field == "--expert-tensor-parallel-size" and info.value.value == 2
    job = strategy_from_megatron([*args, "--expert-tensor-parallel-size", "1"])
    assert megatron_strategy(job, MIXTRAL, 8).ep == 4
    # a dense model has no experts: the option changes nothing
    job = strategy_from_megatron(["--tensor-model-parallel-size", "2", "--bf16"])
    assert megatron_strategy(job, LLAMA, 8).tp == 2


def test_moe_at_tensor_parallelism_needs_sequence_parallelism() -> None:
    # core/transformer/moe/moe_layer.py:636-640: training a MoE layer with TP > 1 and without
    # sequence parallelism raises ValueError (hwtune's MoE lowering takes the sequence-parallel
    # layout: each TP rank dispatches its own token shard)
    st = Strategy(tp=2, dp=4, ep=8, zero=1)
    with pytest.raises(HwtuneInputError) as info:
        megatron_launch(st, MIXTRAL, 8, 8)
    assert info.value.field == "sequence_parallel"
    megatron_launch(Strategy(tp=2, dp=4, zero=1), LLAMA, 8, 8)  # dense: runs
    args = ["--tensor-model-parallel-size", "2", "--expert-model-parallel-size", "4",
            "--expert-tensor-parallel-size", "1", "--moe-token-dispatcher-type", "alltoall",
            "--bf16"]  # fmt: skip
    with pytest.raises(HwtuneInputError) as info:
        megatron_strategy(strategy_from_megatron(args), MIXTRAL, 8)
    assert info.value.field == "--sequence-parallel"


def test_cli_moe_tensor_parallel_without_sequence_parallel(rejects) -> None:  # noqa: ANN001
    rejects(["estimate", "-m", "mixtral-8x7b", "--tp", "2", "--ep", "4", "--zero", "1",
             "--launch", "megatron"], "--sequence-parallel", "MoE", "megatron")  # fmt: skip


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        # arguments.py:3671-3684: with --use-precision-aware-optimizer the main gradients,
        # main parameters and Adam moments may be kept below fp32 (hwtune's Megatron optimizer
        # keeps them all in fp32)
        ("--exp-avg-dtype", "bf16"),
        ("--exp-avg-sq-dtype", "fp8"),
        ("--main-params-dtype", "fp16"),
        ("--main-grads-dtype", "bf16"),
        # arguments.py:2922: only that fraction of the optimizer goes to the CPU
        ("--optimizer-offload-fraction", "0.5"),
    ],
)
def test_precision_aware_optimizer_dtypes_other_than_fp32_are_refused(
    flag: str, value: str
) -> None:
    base = ["--bf16", "--use-distributed-optimizer", "--use-precision-aware-optimizer",
            "--optimizer-cpu-offload"]  # fmt: skip
    with pytest.raises(HwtuneInputError) as info:
        strategy_from_megatron([*base, flag, value])
    assert info.value.field == flag
    ok = "1.0" if flag == "--optimizer-offload-fraction" else "fp32"
    job = strategy_from_megatron([*base, flag, ok])
    assert job.not_read == () and megatron_strategy(job, LLAMA, 8).offload_optimizer


def test_ffn_width_must_match_the_model() -> None:
    # --ffn-hidden-size (transformer_config.py ffn_hidden_size; the Llama-3 8B and Mixtral
    # example scripts pass 14336) is the dense FFN width: another width is another model
    job = strategy_from_megatron(["--num-layers", "32", "--ffn-hidden-size", "11008", "--bf16"])
    with pytest.raises(HwtuneInputError) as info:
        megatron_strategy(job, LLAMA, 8)
    assert info.value.field == "--ffn-hidden-size" and "14336" in info.value.expected
    job = strategy_from_megatron(["--ffn-hidden-size", "14336", "--bf16"])
    assert job.not_read == ()
    megatron_strategy(job, MIXTRAL, 8)
