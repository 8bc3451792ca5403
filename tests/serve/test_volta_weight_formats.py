"""Volta and CDNA2 serve no fp8 or fp4 weights (vLLM's quantization hardware table: no FP8 W8A8
on Volta and no Marlin on either), while 16-bit weights (and int4 GPTQ on Volta) run; Ampere runs
fp8 weight-only, CDNA3 fp8 natively."""

from __future__ import annotations

import pytest

from hwtune.errors import HwtuneInputError
from hwtune.hardware.catalog import get_device
from hwtune.model.catalog import get_model
from hwtune.serve.config import ReplicaConfig

_RUN = ["serve", "--num-requests", "2", "--concurrency", "1", "--input-len", "64",
        "--output-len", "4"]  # fmt: skip


@pytest.mark.parametrize("precision", ["fp8", "fp4"])
@pytest.mark.parametrize("gpu", ["v100", "v100-sxm3"])
def test_float_weights_on_volta_are_refused(rejects, precision, gpu):
    rejects([*_RUN, "--gpu", gpu, "--precision", precision], "precision", precision, "volta",
            "fp16 or int4")  # fmt: skip


def test_an_fp8_checkpoint_on_volta_is_refused_by_default():
    # DeepSeek-V3 ships fp8 weights, the serving default; Volta cannot load them as they are
    with pytest.raises(HwtuneInputError, match="^precision: got 'fp8'"):
        ReplicaConfig(get_model("deepseek-v3"), get_device("v100"), tp=8)


@pytest.mark.parametrize(("gpu", "precision"), [("v100", "int4"), ("v100", "fp16"),
                                                ("a100", "fp8"), ("a100", "fp4")])  # fmt: skip
def test_what_runs_there_is_simulated(gpu, precision):
    cfg = ReplicaConfig(get_model("llama3.1-8b"), get_device(gpu), weight_dtype=precision)
    assert cfg.weight_dtype == precision


def test_volta_serves_16_bits_as_fp16(rejects):
    # vLLM: --dtype auto of a bf16 checkpoint is fp16 below compute capability 8.0, and an
    # explicit bfloat16 is refused there
    import json

    from typer.testing import CliRunner

    from hwtune.cli.main import app

    r = CliRunner().invoke(app, [*_RUN, "--gpu", "v100", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert (doc["precision"], doc["kv_precision"]) == ("fp16", "fp16")
    for opt in ("--precision", "--kv-precision"):
        rejects([*_RUN, "--gpu", "v100", opt, "bf16"], opt,
                "fp16 on v100", "bfloat16")  # fmt: skip
    cfg = ReplicaConfig(get_model("llama3.1-8b"), get_device("v100"))
    assert (cfg.weight_dtype, cfg.kv_dtype) == ("fp16", "fp16")
    assert ReplicaConfig(get_model("llama3.1-8b"), get_device("a100")).weight_dtype == "bf16"
    with pytest.raises(HwtuneInputError, match="^precision: got 'bf16'"):
        ReplicaConfig(get_model("llama3.1-8b"), get_device("v100"), weight_dtype="bf16")


def test_volta_launches_its_fp16_default():
    # the bf16 checkpoint loads as fp16 there with no flag (--dtype auto): not a format mismatch
    from hwtune.serve.config import Deployment
    from hwtune.serve.launch import vllm_launch, vllm_refusal

    cfg = ReplicaConfig(get_model("llama3.1-8b"), get_device("v100"))
    assert vllm_refusal(cfg) is None
    assert "--dtype" not in vllm_launch(Deployment(cfg), "m").args


@pytest.mark.parametrize("precision", ["fp8", "fp4"])
def test_float_weights_on_cdna2_are_refused(rejects, precision):
    # MI250X: no FP8 matrix rate in AMD's specification, and no Marlin on AMD GPUs (vLLM's
    # quantization hardware table); vLLM issue #16394: an fp8 checkpoint fails on gfx90a
    rejects([*_RUN, "--gpu", "mi250x", "--precision", precision], "precision", precision,
            "cdna2", "bf16 or fp16")  # fmt: skip


@pytest.mark.parametrize("model", ["deepseek-v3", "gpt-oss-120b"])
def test_a_float_checkpoint_on_cdna2_is_refused_by_default(model):
    # DeepSeek-V3 ships fp8 weights and gpt-oss-120b MXFP4: what a plain launch would load
    with pytest.raises(HwtuneInputError, match="^precision: got 'fp[48]'.*mi250x"):
        ReplicaConfig(get_model(model), get_device("mi250x"), tp=8)


@pytest.mark.parametrize(("gpu", "precision"), [("mi250x", "bf16"), ("mi250x", "fp16"),
                                                ("mi300x", "fp8"), ("mi300x", "fp4")])  # fmt: skip
def test_what_amd_gpus_run_is_simulated(gpu, precision):
    # CDNA3 has fp8 matrix cores (and runs MXFP4 weights weight-only); CDNA2 its 16-bit formats
    cfg = ReplicaConfig(get_model("llama3.1-8b"), get_device(gpu), weight_dtype=precision)
    assert cfg.weight_dtype == precision
