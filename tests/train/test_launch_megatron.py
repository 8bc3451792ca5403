"""`--launch megatron`: a strategy as the Megatron-LM launch that runs it.

References: Megatron-LM's own example scripts at NVIDIA/Megatron-LM d98e8a64 (2026-08), whose
flags and values are written out below, and its ``megatron/training/arguments.py`` (flag names,
defaults, and the combinations it asserts against)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs
from launch_args import flags
from typer.testing import CliRunner

from hwtune.cli.main import app
from hwtune.errors import HwtuneInputError
from hwtune.hardware.cluster import make_cluster
from hwtune.model.catalog import get_model
from hwtune.train.launch import (
    MEGATRON_RECOMPUTE,
    MEGATRON_SCHEDULES,
    megatron_launch,
    megatron_refusal,
)
from hwtune.train.search import Constraints, plan
from hwtune.train.strategy import Strategy


def strategy_from_megatron(tokens: list[str]):  # noqa: ANN201
    """`hwtune.train.launch.strategy_from_megatron`, with ``--seq-length 4096`` added to the short
    command lines of these tests that leave it out (Megatron-LM has no default for it)."""
    from hwtune.train.launch import strategy_from_megatron as read

    return read(tokens if "--seq-length" in tokens else [*tokens, "--seq-length", "4096"])


def test_mixtral_example_script() -> None:
    # examples/mixtral/train_mixtral_8x7b_distributed.sh: TP 1, PP 4, EP 8, distributed
    # optimizer, alltoall dispatcher, both overlaps, micro-batch 1, global batch 256, seq 4096,
    # bf16 (on 32 GPUs: dp = 8 so that EP 8 folds over it)
    st = Strategy(tp=1, pp=4, dp=8, ep=8, zero=1, micro_batch=1, global_batch=256, seq=4096)
    la = megatron_launch(st, get_model("mixtral-8x7b"), 32, 8)
    f = flags(la.args)
    for k, v in {
        "--tensor-model-parallel-size": "1", "--pipeline-model-parallel-size": "4",
        "--expert-model-parallel-size": "8", "--micro-batch-size": "1",
        "--global-batch-size": "256", "--seq-length": "4096",
        "--moe-token-dispatcher-type": "alltoall",
    }.items():  # fmt: skip
        assert f[k] == v, (k, f.get(k))
    for switch in ("--use-distributed-optimizer", "--overlap-param-gather",
                   "--overlap-grad-reduce", "--bf16"):  # fmt: skip
        assert switch in f and f[switch] is None
    # the script also passes --sequence-parallel, which arguments.py turns off at TP 1
    assert "--sequence-parallel" not in f
    assert (la.nnodes, la.nproc_per_node) == (4, 8)


def test_gpt3_175b_example_script() -> None:
    # examples/gpt3/train_gpt3_175b_distributed.sh: TP 8, PP 16, micro-batch 1, global batch
    # 1536, seq 2048, --fp16, no distributed optimizer
    st = Strategy(
        tp=8, pp=16, dp=1, zero=0, micro_batch=1, global_batch=1536, seq=2048, precision="fp16"
    )
    f = flags(megatron_launch(st, get_model("gpt3-175b"), 128, 8).args)
    assert f["--tensor-model-parallel-size"] == "8"
    assert f["--pipeline-model-parallel-size"] == "16"
    assert (f["--global-batch-size"], f["--seq-length"]) == ("1536", "2048")
    assert "--fp16" in f and "--bf16" not in f
    assert "--use-distributed-optimizer" not in f and "--use-megatron-fsdp" not in f
    # no data parallelism: nothing to overlap (and --overlap-param-gather needs a sharded
    # optimizer, arguments.py)
    assert "--overlap-grad-reduce" not in f and "--overlap-param-gather" not in f


def test_llama3_8b_fp8_example_script() -> None:
    # examples/llama/train_llama3_8b_h100_fp8.sh: TP 1, CP 1, PP 1 on 8 GPUs, micro-batch 1,
    # global batch 128, seq 8192, --bf16 with --fp8-format hybrid, distributed optimizer with
    # both overlaps
    st = Strategy(dp=8, zero=1, micro_batch=1, global_batch=128, seq=8192, precision="fp8")
    f = flags(megatron_launch(st, get_model("llama3.1-8b"), 8, 8).args)
    assert "--bf16" in f and f["--fp8-format"] == "hybrid"
    assert (f["--micro-batch-size"], f["--global-batch-size"], f["--seq-length"]) == (
        "1", "128", "8192",
    )  # fmt: skip
    for switch in (
        "--use-distributed-optimizer",
        "--overlap-grad-reduce",
        "--overlap-param-gather",
    ):
        assert switch in f


def test_megatron_defaults_that_differ_are_set() -> None:
    # transformer_config.py: hidden_dropout and attention_dropout default to 0.1; hwtune's
    # strategy has no dropout unless asked
    f = flags(megatron_launch(Strategy(dp=8), get_model("llama3.1-8b"), 8, 8).args)
    assert f["--hidden-dropout"] == "0" and f["--attention-dropout"] == "0"
    f = flags(megatron_launch(Strategy(dp=8, dropout=True), get_model("llama3.1-8b"), 8, 8).args)
    assert "--hidden-dropout" not in f


@pytest.mark.parametrize(
    ("zero", "expect"),
    [
        (0, set()),
        (1, {"--use-distributed-optimizer"}),
        (2, {"--use-megatron-fsdp", "optim_grads"}),
        (3, {"--use-megatron-fsdp", "optim_grads_params"}),
    ],
)
def test_zero_stages(zero: int, expect: set[str]) -> None:
    la = megatron_launch(Strategy(dp=8, zero=zero), get_model("llama3.1-8b"), 8, 8)
    sharding = {"--use-distributed-optimizer", "--use-megatron-fsdp", "optim_grads",
                "optim_grads_params"}  # fmt: skip
    assert set(la.args) & sharding == expect


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"pp": 4, "dp": 2, "schedule": "zb-h1"}, "schedule"),
        ({"pp": 4, "dp": 2, "schedule": "zbv"}, "schedule"),
        ({"pp": 4, "dp": 2, "schedule": "dualpipev"}, "schedule"),
        ({"pp": 4, "dp": 2, "schedule": "gpipe"}, "schedule"),
        ({"dp": 8, "recompute": "selective-op"}, "recompute"),
        ({"dp": 8, "optimizer": "adam-8bit"}, "optimizer"),
        ({"dp": 8, "optimizer": "adam-bf16"}, "optimizer"),
        ({"dp": 8, "attention_kernel": "fa2"}, "attention_kernel"),
        ({"dp": 8, "fused_elementwise": False}, "fused_elementwise"),
        ({"dp": 8, "loss_kernel": "pytorch"}, "loss_kernel"),
        ({"dp": 8, "zero": 3, "zero3_gather": "module"}, "zero3_gather"),
        ({"dp": 8, "grad_accumulation": "fp32-copy"}, "grad_accumulation"),
        # arguments.py: TP communication overlap asserts sequence parallelism
        ({"dp": 4, "tp": 2, "overlap_tp_comm": True}, "overlap_tp_comm"),
    ],
)
def test_what_megatron_cannot_run_is_refused(fields: dict, field: str) -> None:
    st = Strategy(**fields)
    e = megatron_refusal(st)
    assert e is not None and e.field == field
    with pytest.raises(HwtuneInputError) as info:
        megatron_launch(st, get_model("llama3.1-8b"), 8, 8)
    assert info.value.field == field


@settings(max_examples=60, deadline=None)
@given(
    tp=hs.sampled_from([1, 2, 4, 8]),
    pp=hs.sampled_from([1, 2, 4, 8]),
    cp=hs.sampled_from([1, 2]),
    dp=hs.sampled_from([1, 2, 4]),
    zero=hs.sampled_from([0, 1, 2, 3]),
    recompute=hs.sampled_from(MEGATRON_RECOMPUTE),
    precision=hs.sampled_from(["bf16", "fp16", "fp8", "fp32"]),
    interleave=hs.booleans(),
)
def test_launch_describes_the_strategy(
    tp: int, pp: int, cp: int, dp: int, zero: int, recompute: str, precision: str,
    interleave: bool,
) -> None:  # fmt: skip
    """Every Megatron-runnable strategy: each degree appears once with its value, the world of
    torchrun is the strategy's GPU count, the ZeRO stage is one sharding setting, and the
    precision one switch."""
    sched, vpp = ("interleaved", 2) if interleave and pp > 1 else ("1f1b", 1)
    m = 2 * pp
    st = Strategy(
        tp=tp, pp=pp, cp=cp, dp=dp, zero=zero, recompute=recompute, precision=precision,
        schedule=sched, vpp=vpp, sequence_parallel=tp > 1, micro_batch=1, global_batch=m * dp,
        seq=4096, optimizer="adam",
    )  # fmt: skip
    n = tp * pp * cp * dp
    la = megatron_launch(st, get_model("llama3.1-70b"), n, 8)
    f = flags(la.args)
    assert la.nnodes * la.nproc_per_node == n
    assert int(f["--tensor-model-parallel-size"]) == tp  # type: ignore[arg-type]
    assert int(f["--pipeline-model-parallel-size"]) == pp  # type: ignore[arg-type]
    assert int(f["--context-parallel-size"]) == cp  # type: ignore[arg-type]
    assert int(f["--global-batch-size"]) == m * dp  # type: ignore[arg-type]
    assert ("--num-virtual-stages-per-pipeline-rank" in f) == (sched == "interleaved")
    assert ("--use-distributed-optimizer" in f) == (zero == 1)
    assert ("--use-megatron-fsdp" in f) == (zero >= 2)
    assert sum(k in f for k in ("--bf16", "--fp16")) == (0 if precision == "fp32" else 1)
    assert ("--fp8-format" in f) == (precision == "fp8")
    assert ("--recompute-granularity" in f) == (recompute != "none")
    assert ("--sequence-parallel" in f) == (tp > 1)


def test_plan_searches_only_what_megatron_runs() -> None:
    model, cl = get_model("llama3.1-8b"), make_cluster("h100-sxm-80gb", 32)
    fixed = {"pp": 4, "vpp": 1}
    free = plan(model, cl, 64, 8192, top_k=3, constraints=Constraints(fixed=fixed))
    # without the framework's limits the best is a zero-bubble or DualPipe schedule
    assert free.top[0].strategy.schedule not in MEGATRON_SCHEDULES
    c = Constraints(fixed=fixed, schedules=MEGATRON_SCHEDULES, recomputes=MEGATRON_RECOMPUTE)
    r = plan(model, cl, 64, 8192, top_k=3, constraints=c)
    assert r.top
    for e in r.top:
        assert megatron_refusal(e.strategy) is None
    # and the narrowed search cannot beat the free one
    assert r.top[0].step_time_s >= free.top[0].step_time_s


def test_plan_launch_json_is_the_best_strategy() -> None:
    res = CliRunner().invoke(
        app,
        ["plan", "-m", "llama3.1-8b", "--gpus", "32", "--global-batch", "64", "--seq", "8192",
         "--fix", "pp=4", "--fix", "vpp=1", "--top", "2", "--launch", "megatron", "--json"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    best = doc["top"][0]["strategy"]
    assert best["schedule"] in MEGATRON_SCHEDULES
    f = flags(tuple(doc["launch"]["args"]))
    assert int(f["--pipeline-model-parallel-size"]) == best["pp"] == 4  # type: ignore[arg-type]
    assert int(f["--micro-batch-size"]) == best["micro_batch"]  # type: ignore[arg-type]
    # four nodes: torchrun's c10d rendezvous sits between its sizes and the script, so that
    # every node runs the same line (tests/test_launch_user_review.py)
    assert "torchrun --nnodes 4 --nproc-per-node 8 --rdzv-backend c10d " in doc["launch"]["command"]
    assert " pretrain_gpt.py --tensor-model-parallel-size " in doc["launch"]["command"]


def test_estimate_launch_prints_the_command() -> None:
    res = CliRunner().invoke(app, ["estimate", "--dp", "8", "--zero", "1", "--launch", "megatron"])
    assert res.exit_code == 0, res.output
    assert "torchrun --nnodes 1 --nproc-per-node 8 pretrain_gpt.py" in res.output
    assert "--use-distributed-optimizer" in res.output


@pytest.mark.parametrize(
    ("args", "field", "words"),
    [
        (["estimate", "--pp", "2", "--dp", "4", "--schedule", "zb-h1"], "--schedule", ["zb-h1"]),
        (["estimate", "--recompute", "selective-op"], "--recompute", ["selective-op"]),
        (["estimate", "--optimizer", "adam-8bit"], "--optimizer", ["adam-8bit"]),
        (["estimate", "--framework", "torchtitan"], "--framework", ["torchtitan"]),
        (["estimate", "--eager"], "--eager", ["fused elementwise"]),
        (["plan", "--schedule", "dualpipe"], "--schedule", ["dualpipe", "1f1b"]),
        (["plan", "--fix", "recompute=selective-op"], "--fix recompute", ["selective-op"]),
        (["plan", "--gpu", "h100-sxm-80gb,b200"], "--launch", ["one GPU type"]),
    ],
)
def test_cli_refusals(rejects, args: list[str], field: str, words: list[str]) -> None:  # noqa: ANN001
    rejects([*args, "--launch", "megatron"], field, *words, "megatron")


def test_unknown_launch_framework(rejects) -> None:  # noqa: ANN001
    rejects(["estimate", "--launch", "deepspeed"], "--launch", "deepspeed", "megatron")


# ---- reading a Megatron-LM command line (estimate --megatron-args) ----------------------------
MIXTRAL_SCRIPT = """
torchrun --nproc_per_node 8 --nnodes 4 pretrain_gpt.py \\
    --num-layers 32 --hidden-size 4096 --seq-length 4096 \\
    --moe-token-dispatcher-type alltoall --overlap-param-gather --overlap-grad-reduce \\
    --micro-batch-size 1 --global-batch-size 256 --lr 1e-4 --train-iters 500000 --bf16 \\
    --tensor-model-parallel-size 1 --pipeline-model-parallel-size 4 \\
    --expert-model-parallel-size 8 --use-distributed-optimizer \\
    --sequence-parallel  # the Mixtral example's flags, 4 nodes of 8
"""


def test_reads_the_mixtral_example() -> None:
    from hwtune.train.launch import megatron_strategy, split_command

    job = strategy_from_megatron(split_command(MIXTRAL_SCRIPT))
    assert job.n_gpus == 32
    assert set(job.not_read) == {"--lr", "--train-iters"}
    st = megatron_strategy(job, get_model("mixtral-8x7b"), job.n_gpus)
    assert (st.tp, st.pp, st.ep, st.dp, st.zero) == (1, 4, 8, 8, 1)
    assert (st.micro_batch, st.global_batch, st.seq, st.precision) == (1, 256, 4096, "bf16")
    assert st.overlap_grad_reduce and st.overlap_param_gather
    assert not st.sequence_parallel  # arguments.py turns it off at TP 1
    # the script leaves hidden_dropout and attention_dropout at Megatron-LM's 0.1
    assert st.dropout


def test_megatron_defaults_when_absent() -> None:
    from hwtune.train.launch import megatron_strategy

    job = strategy_from_megatron(["--hidden-dropout", "0", "--attention-dropout", "0"])
    st = megatron_strategy(job, get_model("llama3.1-8b"), 8)
    # Megatron-LM: no overlaps, no distributed optimizer, fp32 without --bf16/--fp16
    assert (st.overlap_grad_reduce, st.overlap_param_gather, st.zero) == (False, False, 0)
    assert st.precision == "fp32" and not st.dropout and st.dp == 8


def test_layers_per_virtual_stage() -> None:
    from hwtune.train.launch import megatron_strategy

    # arguments.py: vpp = (num_layers / pp) / num_layers_per_virtual_pipeline_stage
    args = ["--num-layers", "80", "--pipeline-model-parallel-size", "4", "--tensor-model-"
            "parallel-size", "8", "--num-layers-per-virtual-pipeline-stage", "5",
            "--global-batch-size", "64", "--bf16"]  # fmt: skip
    st = megatron_strategy(strategy_from_megatron(args), get_model("llama3.1-70b"), 64)
    assert (st.vpp, st.schedule, st.dp) == (4, "interleaved", 2)


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--recompute-granularity", "full", "--recompute-method", "block"], "--recompute-method"),
        (["--bf16", "--fp8-format", "hybrid", "--fp8-recipe", "mxfp8"], "--fp8-recipe"),
        (["--optimizer", "muon"], "--optimizer"),
        (["--use-megatron-fsdp", "--data-parallel-sharding-strategy", "all"],
         "--data-parallel-sharding-strategy"),
        (["--tensor-model-parallel-size", "two"], "--tensor-model-parallel-size"),
        (["--micro-batch-size"], "--micro-batch-size"),
        (["--hidden-dropout", "abc"], "--hidden-dropout"),
        (["--attention-dropout", "1.5"], "--attention-dropout"),
        (["--num-layers-per-virtual-pipeline-stage", "5"], "--num-layers-per-virtual-pipeline-stage"),
    ],
)  # fmt: skip
def test_unmodelled_values_are_refused(args: list[str], flag: str) -> None:

    with pytest.raises(HwtuneInputError) as info:
        strategy_from_megatron(args)
    assert info.value.field == flag


def test_model_shape_must_match() -> None:
    from hwtune.train.launch import megatron_strategy

    job = strategy_from_megatron(["--num-layers", "32", "--num-attention-heads", "64"])
    with pytest.raises(HwtuneInputError) as info:
        megatron_strategy(job, get_model("llama3.1-8b"), 8)  # 32 layers, but 32 heads
    assert info.value.field == "--num-attention-heads" and "32" in info.value.expected
    # a MoE dispatcher the estimate does not model: Megatron-LM's default allgather
    job = strategy_from_megatron(["--expert-model-parallel-size", "8", "--bf16"])
    with pytest.raises(HwtuneInputError) as info:
        megatron_strategy(job, get_model("mixtral-8x7b"), 8)
    assert info.value.field == "--moe-token-dispatcher-type"


def _normal(st: Strategy, moe: bool) -> dict:
    """Fields that change nothing where they do not apply, at one value."""
    d = st.model_dump()
    if st.dp * st.cp == 1:
        d["overlap_grad_reduce"] = d["overlap_param_gather"] = False
    if st.zero == 0:
        d["overlap_param_gather"] = False
    if st.tp == 1:
        d["overlap_tp_comm"] = False
    if not moe or st.ep == 1:
        d["overlap_moe_a2a"], d["moe_dispatch"] = False, "alltoall"
    return d


@settings(max_examples=60, deadline=None)
@given(
    tp=hs.sampled_from([1, 2, 4]),
    pp=hs.sampled_from([1, 2, 4]),
    cp=hs.sampled_from([1, 2]),
    dp=hs.sampled_from([1, 2, 4, 8]),
    ep=hs.sampled_from([1, 2, 8]),
    zero=hs.sampled_from([0, 1, 2, 3]),
    recompute=hs.sampled_from(MEGATRON_RECOMPUTE),
    precision=hs.sampled_from(["bf16", "fp16", "fp8", "fp32"]),
    flags_=hs.lists(hs.booleans(), min_size=8, max_size=8),
)
def test_read_inverts_launch(
    tp: int, pp: int, cp: int, dp: int, ep: int, zero: int, recompute: str, precision: str,
    flags_: list[bool],
) -> None:  # fmt: skip
    """Reading back what `megatron_launch` writes gives the same strategy (up to switches that
    do nothing where they do not apply)."""
    from hypothesis import assume

    from hwtune.train.launch import megatron_strategy, split_command

    model = get_model("mixtral-8x7b")
    assume((tp * cp * dp) % ep == 0)
    interleave, sp, og, opg, otp, oa2a, deepep, dropout = flags_
    sched, vpp = ("interleaved", 2) if interleave and pp > 1 else ("1f1b", 1)
    st = Strategy(
        tp=tp, pp=pp, cp=cp, dp=dp, ep=ep, zero=zero, recompute=recompute, precision=precision,
        schedule=sched, vpp=vpp, sequence_parallel=sp and tp > 1, micro_batch=1,
        global_batch=2 * pp * dp, seq=4096, overlap_grad_reduce=og, overlap_param_gather=opg,
        overlap_tp_comm=otp and sp and tp > 1, overlap_moe_a2a=oa2a,
        moe_dispatch="deepep" if deepep else "alltoall", dropout=dropout,
        fp8_recipe="current" if precision == "fp8" and og else "delayed",
    )  # fmt: skip
    assume(megatron_refusal(st) is None)  # what Megatron-LM asserts against (review file)
    assume(tp == 1 or st.sequence_parallel)  # a MoE model: moe_layer.py raises without it
    n = tp * pp * cp * dp
    line = megatron_launch(st, model, n, 8).command()
    job = strategy_from_megatron(split_command(line))
    assert job.n_gpus == n and job.not_read == ()
    back = megatron_strategy(job, model, n)
    assert _normal(back, True) == _normal(st, True)


@pytest.mark.parametrize(
    ("extra", "field", "words"),
    [
        (["--tp", "2"], "--tp", ["no value with --megatron-args"]),
        (["--no-flash"], "--no-flash", ["--megatron-args"]),
        (["--gpus", "16"], "--gpus", ["32"]),
    ],
)
def test_cli_megatron_args_conflicts(rejects, tmp_path, extra, field, words) -> None:  # noqa: ANN001
    f = tmp_path / "args.sh"
    f.write_text(MIXTRAL_SCRIPT)
    rejects(["estimate", "-m", "mixtral-8x7b", "--megatron-args", f"@{f}", *extra], field, *words)


def test_cli_megatron_args_errors(rejects) -> None:  # noqa: ANN001
    rejects(["estimate", "--megatron-args", "--bf16"], "--megatron-args", "--gpus")
    rejects(["estimate", "--megatron-args", "@/no/such/file"], "--megatron-args", "readable")
    rejects(["estimate", "--megatron-args", "--bf16 'x", "--gpus", "8"], "--megatron-args")
    rejects(
        ["estimate", "-m", "llama3.1-8b", "--gpus", "8", "--megatron-args",
         "--expert-model-parallel-size 8 --moe-token-dispatcher-type alltoall --seq-length 4096"],
        "--expert-model-parallel-size (in --megatron-args)", "dense",
    )  # fmt: skip


def test_cli_megatron_args_estimate(tmp_path) -> None:  # noqa: ANN001
    f = tmp_path / "args.sh"
    f.write_text(MIXTRAL_SCRIPT)
    res = CliRunner().invoke(
        app, ["estimate", "-m", "mixtral-8x7b", "--megatron-args", f"@{f}", "--json"]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["n_gpus"] == 32 and doc["strategy"]["pp"] == 4 and doc["strategy"]["ep"] == 8
    assert doc["megatron_args"] == {"n_gpus": 32, "not_read": ["--lr", "--train-iters"]}


def test_sequence_length_is_required() -> None:
    # Megatron-LM has no default --seq-length: a line without one is not a job
    from hwtune.train.launch import megatron_strategy
    from hwtune.train.launch import strategy_from_megatron as read

    with pytest.raises(HwtuneInputError) as info:
        megatron_strategy(read(["--bf16"]), get_model("llama3.1-8b"), 8)
    assert info.value.field == "--seq-length"
