"""Estimator details: the pipeline-schedule rule shared by `hwtune estimate` and `hwtune
compile`, the optimizer's bytes per parameter, step energy, the embedding's stored activations."""

from __future__ import annotations

import pytest


# ---- 1. interleaved needs pp > 1 and vpp >= 2, the same rule for estimate and compile ---------
# An interleaved schedule splits each pipeline rank's layers into vpp >= 2 chunks (Narayanan et
# al. 2021, §2.2.2); with one chunk per rank it is plain 1F1B, and without pipeline parallelism
# there is no schedule at all. Each error names the field to change and what it must be, and
# following it never leads back to the previous error.
@pytest.mark.parametrize("command", ["estimate", "compile"])
@pytest.mark.parametrize(
    ("args", "field", "words"),
    [
        # pp=1: the interleaved schedule itself is meaningless
        (["--schedule", "interleaved"], "schedule", ("interleaved", "1f1b", "pp=1")),
        (["--schedule", "interleaved", "--vpp", "1"], "schedule", ("1f1b", "pp=1")),
        # pp=1 with chunks: vpp first (then the schedule above)
        (["--schedule", "interleaved", "--vpp", "2"], "vpp", ("2", "1 without pipeline")),
        # pp=2: one chunk per rank is not interleaved
        (["--pp", "2", "--global-batch", "4", "--schedule", "interleaved"], "vpp",
         ("got 1", "at least 2")),
        (["--pp", "2", "--global-batch", "4", "--schedule", "interleaved", "--vpp", "1"], "vpp",
         ("got 1", "at least 2")),
        # chunks without the interleaved schedule
        (["--pp", "2", "--global-batch", "4", "--vpp", "2"], "vpp", ("2", "interleaved")),
    ],
)  # fmt: skip
def test_interleaved_rule_is_the_same_for_estimate_and_compile(
    rejects, command, args, field, words
):
    extra = ["--gpus", "8"] if command == "estimate" else []
    rejects([command, *extra, *args], field, *words)


@pytest.mark.parametrize("command", ["estimate", "compile"])
def test_interleaved_with_two_chunks_on_two_ranks_runs(command):
    from typer.testing import CliRunner

    from hwtune.cli.main import app

    extra = ["--gpus", "2"] if command == "estimate" else []
    args = ["--pp", "2", "--global-batch", "4", "--schedule", "interleaved", "--vpp", "2"]
    r = CliRunner().invoke(app, [command, *extra, *args])
    assert r.exit_code == 0, r.output


# ---- 2. amsgrad's third 8-bit state -----------------------------------------------------------
# hwtune.optim.AdamW (FlashOptim, Gonzalez Ortiz et al. 2026, Table 1): 2 (bf16 weight) + 1 (int8
# master correction) + 2 (bf16 gradient) + 1 + 1 (8-bit moments) = 7 bytes per parameter, and a
# 2-byte fp16 scale per 32 elements of each 8-bit state. amsgrad (Reddi et al. 2018, Algorithm 2)
# keeps max(v) as a third 8-bit state coded as v is: 8 bytes + 3 scales.
SCALE = 2.0 / 32


def _total(optimizer: str) -> float:
    from hwtune.cost.memory import state_bytes_per_param

    sb = state_bytes_per_param("bf16", optimizer, fp32_grads=False)
    return sb.weights + sb.grads + sb.optimizer


def test_amsgrad_is_8_bytes_per_param_and_adamw_7():
    assert _total("adam-8bit") == pytest.approx(7 + 2 * SCALE)
    assert _total("adam-8bit-amsgrad") == pytest.approx(8 + 3 * SCALE)


def test_amsgrad_with_gradient_release_drops_the_2_byte_gradient():
    assert _total("adam-8bit-release") == pytest.approx(5 + 2 * SCALE)
    assert _total("adam-8bit-release-amsgrad") == pytest.approx(6 + 3 * SCALE)


def test_estimate_with_amsgrad_holds_one_more_byte_per_local_parameter():
    """ZeRO-0, one GPU: the optimizer part grows by exactly (1 + 2/32) bytes x the parameters
    (the bf16 weights are 2 bytes each), weights and gradients stay."""
    from hwtune.hardware.cluster import make_cluster
    from hwtune.model.catalog import get_model
    from hwtune.train.estimator import estimate_memory
    from hwtune.train.strategy import Strategy

    spec = get_model("llama3.1-8b")
    cl = make_cluster("h100-sxm-80gb", 1)
    plain, ams = (
        estimate_memory(spec, cl, Strategy(zero=0, seq=1024, optimizer=o))
        for o in ("adam-8bit", "adam-8bit-amsgrad")
    )
    n = plain.weights / 2.0
    assert ams.weights == plain.weights and ams.gradients == plain.gradients
    assert ams.optimizer - plain.optimizer == pytest.approx(n * (1 + SCALE), rel=1e-9)


def test_cli_takes_the_amsgrad_optimizer():
    import json

    from typer.testing import CliRunner

    from hwtune.cli.main import app

    args = ["estimate", "--gpus", "1", "--seq", "1024", "--zero", "0", "--json"]
    out = {}
    for o in ("adam-8bit", "adam-8bit-amsgrad"):
        r = CliRunner().invoke(app, [*args, "--optimizer", o])
        assert r.exit_code == 0, r.output
        out[o] = json.loads(r.output)
    assert out["adam-8bit-amsgrad"]["strategy"]["optimizer"] == "adam-8bit-amsgrad"
    plain, ams = (out[o]["memory_per_gpu_bytes"] for o in ("adam-8bit", "adam-8bit-amsgrad"))
    extra = ams["optimizer"] - plain["optimizer"]
    assert extra == pytest.approx(plain["weights"] / 2.0 * (1 + SCALE), rel=1e-9)


# ---- 3. step energy: one integral of the power model ----------------------------------------
def test_step_energy_by_hand():
    """Power = static + u x dynamic at f = f_max (no cap): compute at u = 1, exposed
    communication at u = COMM_ACTIVITY = 0.3, the rest of the step (a pipeline bubble) at
    static only; two GPUs. Per GPU: 0.7 s x (100 + 400) + 0.1 s x (100 + 0.3 x 400) + 0.2 s x 100
    = 350 + 22 + 20 = 392 J."""
    from types import SimpleNamespace

    from hwtune.hardware.cluster import make_cluster
    from hwtune.train.step_energy import step_energy

    power = SimpleNamespace(static_w=100.0, dynamic_w=400.0, v_floor=0.0, memory_w=50.0)
    est = SimpleNamespace(
        step_time_s=1.0,
        n_gpus=2,
        tokens_per_step=1000,
        breakdown={
            "forward": 0.2,
            "backward": 0.4,
            "optimizer": 0.1,
            "dp_comm_exposed": 0.1,
            "pipeline_bubble": 0.2,
        },
    )
    se = step_energy(est, make_cluster("h100-sxm-80gb", 2), power)
    assert se.parts_j == pytest.approx({"compute": 700.0, "communication": 44.0, "idle": 40.0})
    assert se.energy_j == pytest.approx(784.0)
    assert se.avg_power_w_per_gpu == pytest.approx(392.0)
    assert se.energy_per_token_j == pytest.approx(0.784)


# ---- 4. the first stage keeps no second copy of the embedding output -------------------------
# Korthikanti et al. 2022 §4.2.3: with 1F1B the first stage holds p micro-batches of L/p layers;
# §4.1/Table 2: with sequence parallelism and selective recomputation a layer keeps 34 s b h / t,
# of which 2 s b h / t are the two 1-byte dropout masks: 32 s b h / t without dropout. §4.3: the
# embedding keeps only its dropout mask (s b h / t per micro-batch), so without dropout the first
# stage holds exactly 32 s b h L / t (times the allocator's FRAGMENTATION); with dropout
# 34 s b h L / t + s b h p / t.
@pytest.mark.parametrize("dropout", [False, True])
def test_gpt3_first_stage_activations_without_an_embedding_copy(dropout):
    from hwtune.hardware.cluster import make_cluster
    from hwtune.model.catalog import get_model
    from hwtune.train.estimator import FRAGMENTATION, estimate_memory
    from hwtune.train.strategy import Strategy

    s, h, L, t, p = 2048, 12288, 96, 8, 8  # GPT-3 175B (Brown et al. 2020, Table 2.1)
    spec = get_model("gpt3-175b")
    assert (spec.d_model, spec.n_layers) == (h, L)
    st = Strategy(tp=t, pp=p, dp=1, micro_batch=1, global_batch=64, seq=s,
                  sequence_parallel=True, recompute="selective", flash_attention=False,
                  dropout=dropout)  # fmt: skip
    mem = estimate_memory(spec, make_cluster("h100-sxm-80gb", 64), st)
    hand = (34 * s * h * L / t + s * h * p / t) if dropout else 32 * s * h * L / t
    assert mem.activations == pytest.approx(hand * FRAGMENTATION, rel=1e-12)


def test_embedding_keeps_only_its_dropout_mask():
    from hwtune.cost.memory import ActShape, embedding_activation_bytes
    from hwtune.model.catalog import get_model

    spec = get_model("gpt3-175b")
    a = ActShape(tokens=2 * 2048, seq=2048, tp=8, sp=True, act_bytes=2.0)
    assert embedding_activation_bytes(spec, a) == 0.0
    # one byte per element of the s b h / t sequence-parallel shard
    masked = ActShape(tokens=2 * 2048, seq=2048, tp=8, sp=True, act_bytes=2.0, dropout=True)
    assert embedding_activation_bytes(spec, masked) == 2 * 2048 * 12288 / 8
    # without sequence parallelism each TP rank holds the whole s b h
    full = ActShape(tokens=2 * 2048, seq=2048, tp=8, sp=False, act_bytes=2.0, dropout=True)
    assert embedding_activation_bytes(spec, full) == 2 * 2048 * 12288
