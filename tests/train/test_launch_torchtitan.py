"""`--launch torchtitan`: a strategy as the torchtitan launch that runs it.

References: pytorch/torchtitan at b5bcd76c (2026-08-21), its option names and defaults
(``torchtitan/config/configs.py``), the configurations it ships
(``torchtitan/models/llama3/config_registry.py``, ``torchtitan_recipes/tests/features.py``), and
the checks its trainer and parallelism code make (``torchtitan/trainer.py``,
``torchtitan/distributed/parallel_dims.py``); each fact is cited where it is used."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs
from launch_args import flags
from typer.testing import CliRunner

from hwtune.cli.main import app
from hwtune.cli.software import launch_constraints, launch_fields, software_fields
from hwtune.errors import HwtuneInputError
from hwtune.hardware.cluster import make_cluster
from hwtune.model.catalog import get_model
from hwtune.train.launch import LAUNCH_FRAMEWORKS, launch_for
from hwtune.train.launch_torchtitan import (
    TORCHTITAN_AC_SUBCOMMANDS,
    TORCHTITAN_CLI_OPTIONS,
    torchtitan_launch,
    torchtitan_refusal,
)
from hwtune.train.search import Constraints, plan
from hwtune.train.strategy import Strategy

TITAN = {"attention_kernel": "flex", "fused_elementwise": False, "fused_norm": True,
         "loss_kernel": "chunked", "grad_reduce_dtype": "fp32"}  # fmt: skip
"""The kernels of torchtitan at b5bcd76c (`hwtune.train.frameworks` ``torchtitan-flex``: flex
attention, the chunked loss) and its fp32 gradient reduction."""
COMPILE = {**TITAN, "fused_elementwise": True}
P = "--parallelism."


def titan(**fields: object) -> Strategy:
    return Strategy(**{**TITAN, **fields})


def split(args: tuple[str, ...]) -> tuple[dict[str, str | None], str]:
    """The ``--section.field`` options and the trailing tyro subcommand."""
    assert not args[-1].startswith("--"), args
    return flags(args[:-1]), args[-1]


def launch(st: Strategy, model: str = "llama3.1-8b", n: int | None = None):  # noqa: ANN201
    return torchtitan_launch(st, get_model(model), n or st.n_gpus, 8)


# ---- option values that torchtitan's own sources write -----------------------------------------
@pytest.mark.parametrize(
    ("schedule", "vpp", "name"),
    [
        ("gpipe", 1, "GPipe"),  # torchtitan_recipes/tests/features.py:163
        ("1f1b", 1, "1F1B"),  # features.py:133; configs.py:216 (the default)
        ("interleaved", 2, "Interleaved1F1B"),  # models/llama3/config_registry.py:66
        ("zbv", 1, "ZBVZeroBubble"),  # features.py:229
        # experiments/graph_trainer/tests/test_numerics.py:626 runs
        # ("Interleaved1F1B", "ZBVZeroBubble", "DualPipeV")
        ("dualpipev", 1, "DualPipeV"),
    ],
)
def test_schedule_names_are_torchtitans(schedule: str, vpp: int, name: str) -> None:
    st = titan(pp=4, dp=2, zero=1, schedule=schedule, vpp=vpp, global_batch=16)
    f, _ = split(launch(st).args)
    assert f[P + "pipeline_parallel_schedule"] == name
    assert f[P + "pipeline_parallel_degree"] == "4"
    # num_pp_microbatches: micro-batches per data-parallel rank (configs.py:232)
    assert f[P + "num_pp_microbatches"] == "8"
    # trainer.py:172-176 raises for pipelining unless CUDA graphs are off
    assert "--training.disable_cuda_graphs" in f


def test_interleaved_stage_count() -> None:
    # pipeline_parallel.py:219-225: stages = ceil((layers + first + last weights) / per_stage);
    # with the weights 0, 32 layers in 4 ranks x 4 chunks is 2 layers per stage
    st = titan(pp=4, dp=2, zero=1, schedule="interleaved", vpp=4, global_batch=16)
    f, _ = split(launch(st).args)
    assert f[P + "pipeline_parallel_layers_per_stage"] == "2"
    assert f[P + "pipeline_parallel_first_stage_less_layers"] == "0"
    assert f[P + "pipeline_parallel_last_stage_less_layers"] == "0"
    # two chunks per rank is the looped schedules' default (pipeline_parallel.py:259-263)
    st = titan(pp=4, dp=2, zero=1, schedule="interleaved", vpp=2, global_batch=16)
    assert P + "pipeline_parallel_layers_per_stage" not in split(launch(st).args)[0]


def test_llama3_config_batches() -> None:
    # llama3_70b (config_registry.py:286-287): num_tokens_per_microbatch_per_dp_rank=8 * 8192,
    # max_context_length=8192 -- a micro-batch of 8 sequences of 8192 tokens
    st = titan(tp=8, dp=4, micro_batch=8, seq=8192, global_batch=64)
    la = launch(st, "llama3.1-70b")
    f, _ = split(la.args)
    assert f["--training.num_tokens_per_microbatch_per_dp_rank"] == str(8 * 8192)
    assert f["--training.max_context_length"] == "8192"
    assert (f["--module"], f["--config"]) == ("llama3", "llama3_70b")
    # trainer.py:426: accumulation steps = tokens per step / (tokens per DP rank x DP degree)
    steps = int(f["--training.num_tokens_per_train_step"]) // (8 * 8192 * 4)  # type: ignore[arg-type]
    assert steps == 2 == st.grad_accum


@pytest.mark.parametrize(
    ("zero", "replicate", "shard", "reshard"),
    [
        (0, "4", "1", None),  # data_parallel_replicate only: DDP (configs.py:122-131)
        (1, "1", "4", "never"),
        (2, "1", "4", "never"),
        (3, "1", "4", "default"),  # reshards after forward without PP (fsdp.py:129-133)
    ],
)
def test_data_parallel_kinds(zero: int, replicate: str, shard: str, reshard: str | None) -> None:
    st = titan(dp=4, tp=2, zero=zero, sequence_parallel=True)
    f, _ = split(launch(st).args)
    assert f[P + "data_parallel_replicate_degree"] == replicate
    assert f[P + "data_parallel_shard_degree"] == shard
    # the policy is Literal["default", "always", "never"] (configs.py:145)
    assert f.get(P + "fsdp_reshard_after_forward") == reshard


def test_precision_and_optimizer_options() -> None:
    # configs.py:87, 94: dtype and mixed_precision_param are "bfloat16" or "float32"
    f, _ = split(launch(titan(dp=8, precision="fp32")).args)
    assert f["--training.mixed_precision_param"] == "float32"
    assert f["--training.dtype"] == "float32"
    f, _ = split(launch(titan(dp=8, optimizer="adam-bf16")).args)
    assert (f["--training.mixed_precision_param"], f["--training.dtype"]) == (
        "bfloat16", "bfloat16",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("recompute", "subcommand"),
    [
        # experiments/transformers_modeling_backend/tests/run_moe_tests.sh:160
        ("none", "activation-checkpoint:none"),
        # distributed/minimal_async_ep/api.py:138
        ("full", "activation-checkpoint:full"),
        # activation_checkpoint.py:333: SelectiveAC (per op) is the "selective" subcommand
        ("selective-op", "activation-checkpoint:selective"),
    ],
)
def test_activation_checkpointing_subcommand(recompute: str, subcommand: str) -> None:
    _, last = split(launch(titan(dp=8, recompute=recompute)).args)
    assert last == subcommand
    assert last.removeprefix("activation-checkpoint:") in TORCHTITAN_AC_SUBCOMMANDS


def test_compile_follows_the_framework() -> None:
    f, _ = split(launch(titan(dp=8)).args)
    assert "--compile.no_enable" in f and "--compile.enable" not in f
    st = Strategy(**COMPILE, dp=4, tp=2, sequence_parallel=True, overlap_tp_comm=True)
    f, _ = split(launch(st).args)
    assert "--compile.enable" in f and "--compile.enable_async_tensor_parallel" in f
    # CompileConfig.__post_init__ (configs.py:306-313): async TP needs compile with "model"
    assert "model" in (f["--compile.components"] or "").split(",")


def test_emitted_options_are_in_the_frozen_list() -> None:
    st = titan(pp=2, dp=2, tp=2, sequence_parallel=True, zero=1, global_batch=8)
    for la in (launch(st), launch(titan(dp=4, cp=2, zero=3))):
        f, _ = split(la.args)
        for opt in f:
            if opt in ("--module", "--config"):
                continue
            section, _, field = opt.removeprefix("--").rpartition(".")
            name = f"{section}.{field.removeprefix('no_')}"
            assert name in TORCHTITAN_CLI_OPTIONS, opt


def test_unknown_model_is_left_to_add() -> None:
    la = launch(titan(dp=8), "qwen3-8b")
    assert "--module" not in la.args and "--module" in la.note
    assert la.command().startswith(
        "PYTORCH_ALLOC_CONF=expandable_segments:True torchrun --nnodes 1 --nproc-per-node 8 "
        "-m torchtitan.train "
    )


# ---- refusals -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"pp": 4, "dp": 2, "schedule": "zb-h1"}, "schedule"),
        ({"pp": 4, "dp": 2, "schedule": "dualpipe", "global_batch": 16}, "schedule"),
        ({"dp": 8, "recompute": "selective"}, "recompute"),
        ({"dp": 8, "precision": "fp16"}, "precision"),  # configs.py:94
        ({"dp": 8, "precision": "fp8"}, "precision"),
        ({"dp": 8, "optimizer": "sgd"}, "optimizer"),  # optimizer.py:142-146
        ({"dp": 8, "optimizer": "adam-8bit"}, "optimizer"),
        ({"dp": 8, "zero": 1, "offload_optimizer": True}, "offload_optimizer"),
        ({"dp": 8, "attention_kernel": "best"}, "attention_kernel"),
        ({"dp": 8, "loss_kernel": "fused"}, "loss_kernel"),
        ({"dp": 8, "flash_attention": False}, "flash_attention"),
        ({"dp": 8, "dropout": True}, "dropout"),
        ({"dp": 8, "zero": 3, "grad_reduce_dtype": "bf16"}, "grad_reduce_dtype"),  # configs.py:102
        ({"dp": 8, "overlap_grad_reduce": False}, "overlap_grad_reduce"),
        ({"dp": 4, "tp": 2, "overlap_tp_comm": True}, "overlap_tp_comm"),  # configs.py:306-313
        ({"dp": 4, "cp": 2, "zero": 0}, "zero"),  # FSDP over dp_shard x cp
        ({"dp": 8, "zero": 1, "global_batch": 32}, "zero"),  # 4 micro-batches without PP
    ],
)
def test_what_torchtitan_cannot_run_is_refused(fields: dict, field: str) -> None:
    st = titan(**fields)
    e = torchtitan_refusal(st)
    assert e is not None and e.field == field
    with pytest.raises(HwtuneInputError) as info:
        launch(st)
    assert info.value.field == field


def test_virtual_stages_no_split_gives() -> None:
    # 61 layers in 4 ranks x 3 chunks: per_stage 6 gives ceil(61/6) = 11 stages, 5 gives 13
    st = titan(pp=4, dp=8, ep=8, zero=1, schedule="interleaved", vpp=3, global_batch=64, seq=4096)
    e = torchtitan_refusal(st, get_model("deepseek-v3"))
    assert e is not None and e.field == "vpp"


def test_expert_parallel_with_replicated_data() -> None:
    # parallel_dims.py:186-193: EP divides dp_shard x cp x tp; with ZeRO 0 (dp_shard 1) the
    # experts span the TP ranks only
    model = get_model("mixtral-8x7b")
    e = torchtitan_refusal(titan(dp=8, ep=8, zero=0), model)
    assert e is not None and e.field == "zero"
    st = titan(dp=4, tp=2, ep=2, zero=0, sequence_parallel=True)
    f, _ = split(torchtitan_launch(st, model, 8, 8).args)
    assert f[P + "expert_parallel_degree"] == "2"
    assert "--training.disable_cuda_graphs" in f  # trainer.py:178-199


# ---- the CLI --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "field", "words"),
    [
        (["estimate", "--pp", "2", "--dp", "4", "--schedule", "zb-h1"], "--schedule", ["zb-h1"]),
        (["estimate", "--recompute", "selective"], "--recompute", ["selective-op"]),
        (["estimate", "--precision", "fp16"], "--precision", ["fp16", "bf16"]),
        (["estimate", "--framework", "megatron"], "--framework", ["torchtitan-flex-compile"]),
        (["estimate", "--no-flash"], "--no-flash", ["fused"]),
        (["estimate", "--dp", "8", "--zero", "1", "--global-batch", "32"], "--zero", ["micro"]),
        (["estimate", "--optimizer", "sgd"], "--optimizer", ["adam-bf16"]),
        (["plan", "--schedule", "zb-h1"], "--schedule", ["zbv", "dualpipev"]),
        (["plan", "--fix", "recompute=selective"], "--fix recompute", ["selective-op"]),
    ],
)
def test_cli_refusals(rejects, args: list[str], field: str, words: list[str]) -> None:  # noqa: ANN001
    rejects([*args, "--launch", "torchtitan"], field, *words, "torchtitan")


def test_estimate_launch_uses_torchtitans_kernels() -> None:
    res = CliRunner().invoke(
        app, ["estimate", "--dp", "8", "--zero", "3", "--launch", "torchtitan", "--json"]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["strategy"]["attention_kernel"] == "flex"
    assert doc["strategy"]["grad_reduce_dtype"] == "fp32"  # configs.py:102
    assert doc["launch"]["framework"] == "torchtitan"
    assert "torchrun --nnodes 1 --nproc-per-node 8 -m torchtitan.train " in doc["launch"]["command"]


def test_plan_launch_json_is_the_best_strategy() -> None:
    res = CliRunner().invoke(
        app,
        ["plan", "-m", "llama3.1-8b", "--gpus", "32", "--global-batch", "64", "--seq", "8192",
         "--fix", "pp=4", "--top", "2", "--launch", "torchtitan",
         "--framework", "torchtitan-flex-compile", "--json"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    best = doc["top"][0]["strategy"]
    f, _ = split(tuple(doc["launch"]["args"]))
    assert int(f[P + "pipeline_parallel_degree"]) == best["pp"] == 4  # type: ignore[arg-type]
    assert best["fused_elementwise"] and "--compile.enable" in f
    assert "torchtitan" in LAUNCH_FRAMEWORKS


# ---- every plan's answer launches ----------------------------------------------------------------
@settings(max_examples=12, deadline=None)
@given(
    model=hs.sampled_from(["llama3.1-8b", "llama3.1-70b", "mixtral-8x7b"]),
    n=hs.sampled_from([8, 16, 32, 64]),
    per_gpu=hs.sampled_from([1, 2, 4]),
    seq=hs.sampled_from([2048, 4096, 8192]),
    compiled=hs.booleans(),
)
def test_plan_answers_launch(model: str, n: int, per_gpu: int, seq: int, compiled: bool) -> None:
    spec = get_model(model)
    cl = make_cluster("h100-sxm-80gb", n)
    fw = "torchtitan-flex-compile" if compiled else "torchtitan-flex"
    base = software_fields("best", False, "fused", "alltoall", "delayed", fw)
    base |= launch_fields("torchtitan")
    c = launch_constraints("torchtitan", Constraints(), spec)
    r = plan(spec, cl, n * per_gpu, seq, top_k=3, constraints=c, base=base)
    for e in r.top:
        st = e.strategy
        assert torchtitan_refusal(st, spec) is None
        la = launch_for("torchtitan", st, spec, n, 8)
        f, _ = split(la.args)
        degrees = [int(f[P + k + "_degree"]) for k in (  # type: ignore[arg-type]
            "data_parallel_replicate", "data_parallel_shard", "tensor_parallel",
            "pipeline_parallel", "context_parallel",
        )]  # fmt: skip
        # parallel_dims.py:182: dp_replicate * dp_shard * cp * tp * pp == WORLD_SIZE
        product = 1
        for d in degrees:
            product *= d
        assert product == n == la.nnodes * la.nproc_per_node
        # parallel_dims.py:186-193: EP divides dp_shard * cp * tp
        ep = int(f[P + "expert_parallel_degree"])  # type: ignore[arg-type]
        assert (degrees[1] * degrees[4] * degrees[2]) % ep == 0
        assert ("--compile.enable" in f) == compiled


@pytest.mark.parametrize(("zero", "reshard"), [(2, "never"), (3, "always")])
def test_pipelined_zero_2_and_3_launch_as_the_estimate_prices_them(zero: int, reshard: str) -> None:
    # torch.distributed.pipelining holds the gradients whole and reduce-scatters once per step:
    # the estimate prices a pipeline's ZeRO 2 as ZeRO 1 and its ZeRO 3 with whole gradients
    # (`cost.memory.sharded_state_bytes`, ``pipelined``), so these launch instead of refusing
    st = titan(dp=2, pp=4, zero=zero, global_batch=16)
    assert st.grad_accum > 1 and torchtitan_refusal(st) is None
    f, _ = split(launch(st).args)
    assert f[P + "data_parallel_shard_degree"] == "2"
    assert f.get(P + "fsdp_reshard_after_forward") == reshard


@pytest.mark.parametrize("schedule", ["zbv", "dualpipev"])
def test_pipelined_zero3_under_a_split_backward_is_refused(schedule: str) -> None:
    # torch's schedule runtime reshards an FSDP2 stage between I and W and W's gradients miss
    # the reduce-scatter (hwtune's own runs, tests/parallel/test_runtime_review_s48.py)
    e = torchtitan_refusal(titan(dp=2, pp=4, zero=3, schedule=schedule, global_batch=16))
    assert e is not None and e.field == "zero" and schedule in e.expected
    assert torchtitan_refusal(titan(dp=2, pp=4, zero=2, schedule=schedule, global_batch=16)) is None
