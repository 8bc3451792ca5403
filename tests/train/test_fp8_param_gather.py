"""fp8 parameters (`Strategy.fp8_param_gather`, Megatron-Core ``--fp8-param-gather``): "keep the
compute param in fp8 (do not use any other intermediate dtype) and perform the param
all-gather in fp8" (Megatron-Core arguments), with the fp32 main weights in the distributed
optimizer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hwtune.cli.main import app
from hwtune.errors import HwtuneInputError
from hwtune.hardware.cluster import make_cluster
from hwtune.model import params as P
from hwtune.model.catalog import get_model
from hwtune.parallel.spec import from_strategy
from hwtune.train.estimator import edge_bucket_params, estimate, rank_layouts, weight_bytes
from hwtune.train.launch import megatron_launch, megatron_strategy, strategy_from_megatron
from hwtune.train.launch_torchtitan import torchtitan_refusal
from hwtune.train.published import from_row
from hwtune.train.search import Constraints, plan
from hwtune.train.strategy import make_strategy

MLPERF = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "training_mlperf.jsonl"
MODEL = get_model("llama3.1-8b")
CL = make_cluster("h100-sxm-80gb", 64)


def _st(**kw):
    base = dict(precision="fp8", dp=64, zero=1, micro_batch=1, global_batch=64, seq=8192)
    return make_strategy(**(base | kw))


def test_linear_weights_take_one_byte_and_the_embedding_keeps_two():
    off = estimate(MODEL, CL, _st())
    on = estimate(MODEL, CL, _st(fp8_param_gather=True))
    # bf16 weights are 2 bytes per parameter; with fp8 parameters Transformer Engine's linear
    # weights are 1, while the embedding, output head and final norm (not TE layers) stay 2
    emb = P.embedding_params(MODEL) + P.final_norm_params(MODEL)
    assert off.memory.weights == pytest.approx(2.0 * P.total_params(MODEL))
    assert on.memory.weights == pytest.approx(1.0 * (P.total_params(MODEL) - emb) + 2.0 * emb)
    assert on.memory.optimizer == off.memory.optimizer  # the fp32 main weights stay
    assert on.memory.gradients == off.memory.gradients


def test_the_parameter_gather_moves_fewer_bytes_but_its_16_bit_group_waits():
    # MLPerf's Llama 3.1 8B on 64 H100 (Cisco hpf_n8, fp8_params) needed 85 GiB of 80 before
    off = estimate(MODEL, CL, _st())
    on = estimate(MODEL, CL, _st(fp8_param_gather=True))
    assert not off.fits and on.fits
    n, emb = P.total_params(MODEL), P.embedding_params(MODEL) + P.final_norm_params(MODEL)
    assert weight_bytes(n, emb, True) == pytest.approx(n + emb)  # 1 byte, the 16-bit ones 2
    # Megatron-Core 25.09 merges every 16-bit bucket into the last fp8 bucket group
    # (partition_buckets, case 3): the output head's gradient, ready first in the backward,
    # waits with the embedding's for the end of it, and the whole group's gather is the first
    # forward's wait; without fp8 weights that group is the input embedding's bucket
    first = rank_layouts(MODEL, 1, 1)[0]
    vd = 128256 * 4096  # Llama 3.1 8B config.json: vocab_size x hidden_size
    assert edge_bucket_params(MODEL, first, 1, False) == vd
    assert edge_bucket_params(MODEL, first, 1, True) == 2 * vd + 4096  # embedding, head, norm
    assert edge_bucket_params(MODEL, first, 4, True) == (2 * vd + 4096) / 4
    # so the exposed data-parallel time is not the whole difference in gathered bytes
    saved = (weight_bytes(n, emb, False) - weight_bytes(n, emb, True)) / weight_bytes(n, emb, False)
    assert saved == pytest.approx(1 - (n + emb) / (2 * n))
    assert on.breakdown["dp_comm_exposed"] > (1 - saved) * off.breakdown["dp_comm_exposed"]


@pytest.mark.parametrize(
    "kw",
    [dict(precision="bf16"), dict(zero=0), dict(zero=3), dict(optimizer="adam-bf16"),
     dict(offload_optimizer=True), dict(fp8_saved_inputs=False)],
)  # fmt: skip
def test_fp8_parameters_need_fp8_and_the_distributed_optimizer(kw):
    # refused where the strategy is built, so no entry point (the search's candidates
    # included) prices a combination hwtune does not model
    with pytest.raises(HwtuneInputError, match="fp8_param_gather"):
        _st(fp8_param_gather=True, **kw)


def test_plan_searches_zero_1_and_2_only_and_refuses_what_cannot_hold_them():
    r = plan(MODEL, make_cluster("h100-sxm-80gb", 8), 64, 8192, precision="fp8",
             base={"fp8_param_gather": True})  # fmt: skip
    assert r.top and all(e.strategy.zero in (1, 2) and e.strategy.fp8_param_gather for e in r.top)
    with pytest.raises(HwtuneInputError, match="fp8_param_gather"):
        plan(MODEL, make_cluster("h100-sxm-80gb", 8), 64, 8192, precision="bf16",
             base={"fp8_param_gather": True})  # fmt: skip
    with pytest.raises(HwtuneInputError, match="ZeRO 1 or 2"):
        plan(MODEL, make_cluster("h100-sxm-80gb", 8), 64, 8192, precision="fp8",
             base={"fp8_param_gather": True}, constraints=Constraints(fixed={"zero": 3}))  # fmt: skip


def test_the_parallel_compiler_refuses_it():
    with pytest.raises(HwtuneInputError, match="fp8_param_gather"):
        from_strategy(_st(fp8_param_gather=True))


def test_megatron_launch_passes_it_and_reads_it_back():
    st = _st(fp8_param_gather=True, fp8_recipe="current")
    launch = megatron_launch(st, MODEL, 64, 8)
    assert "--fp8-param-gather" in launch.args
    back = megatron_strategy(strategy_from_megatron(list(launch.args)), MODEL, 64)
    assert back.fp8_param_gather and back.zero == 1 and back.precision == "fp8"
    assert "--fp8-param-gather" not in megatron_launch(_st(), MODEL, 64, 8).args


def test_torchtitan_refuses_it():
    err = torchtitan_refusal(_st(fp8_param_gather=True))
    assert err is not None and "fp8_param_gather" in str(err)


def test_cli_refuses_it_without_fp8(rejects):
    rejects(["estimate", "-m", "llama3.1-8b", "--gpus", "8", "--precision", "bf16",
             "--fp8-param-gather"], "--fp8-param-gather", "precision fp8")  # fmt: skip


def test_megatron_args_keep_their_fp8_settings():
    # an option left at its default must not undo what the Megatron-LM flags set
    args = ("torchrun --nproc-per-node 8 --nnodes 8 pretrain_gpt.py --tensor-model-parallel-size 1 "
            "--micro-batch-size 1 --global-batch-size 64 --seq-length 8192 --bf16 --fp8-format "
            "hybrid --fp8-recipe tensorwise --use-distributed-optimizer --fp8-param-gather")  # fmt: skip
    out = CliRunner().invoke(app, ["estimate", "-m", "llama3.1-8b", "--gpus", "64",
                                   "--megatron-args", args, "--json"])  # fmt: skip
    assert out.exit_code == 0, out.output
    st = json.loads(out.output)["strategy"]
    assert st["fp8_param_gather"] is True and st["fp8_recipe"] == "current"


def test_a_row_stating_both_is_not_expressed():
    row = json.loads(MLPERF.read_text().splitlines()[0])
    row["precision_detail"] += "; fp8_param_gather=False"
    assert "both true and false" in from_row(row).skip_reason
