"""Training precision follows the device: bf16 by default, fp16 on V100, which has FP16 tensor
cores only (NVIDIA Tesla V100 GPU Architecture whitepaper, 2017, Table 1: 125 TFLOPS "Tensor",
FP16 inputs, no BF16). bf16 was once priced at V100's fp16 rate and reported as bf16; now an
explicit bf16 there is refused, and every training entry point defaults to the device's format."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import hwtune
from hwtune.cli.main import app
from hwtune.errors import HwtuneInputError
from hwtune.hardware.catalog import get_device
from hwtune.hardware.cluster import make_cluster
from hwtune.hardware.device import PeakTflops

V100 = "v100-sxm2-32gb"
V100_FP16_TFLOPS = 125.0  # V100 whitepaper (2017), Table 1: Tensor TFLOPS at 1530 MHz


def _run(args: list[str]) -> dict:
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.mark.parametrize("gpu", [V100, "v100-sxm3-32gb"])
def test_volta_has_no_bf16_and_it_is_not_priced_at_the_fp16_rate(gpu: str) -> None:
    dev = get_device(gpu)
    assert dev.sixteen_bit_dtype == "fp16"
    with pytest.raises(HwtuneInputError) as info:
        dev.peak_flops("bf16")
    assert info.value.field == "precision" and "fp16" in info.value.expected


def test_a_device_with_bf16_only_has_no_fp16_stand_in() -> None:
    # nor the other way round: a device that lists bf16 alone is not priced for fp16
    h100 = get_device("h100-sxm-80gb")
    dev = h100.model_copy(update={"name": "bf16-only", "peak_tflops": PeakTflops(bf16=100.0)})
    assert dev.sixteen_bit_dtype == "bf16"
    assert dev.peak_flops("bf16") == pytest.approx(100e12)
    with pytest.raises(HwtuneInputError) as info:
        dev.peak_flops("fp16")
    assert "bf16" in info.value.expected  # names what the device has


@pytest.mark.parametrize("gpu", ["h100-sxm-80gb", "a100-sxm4-80gb", "mi300x"])
def test_gpus_with_bf16_default_to_it(gpu: str) -> None:
    assert get_device(gpu).sixteen_bit_dtype == "bf16"
    est = hwtune.estimate("gpt-1.7b", gpu=gpu, gpus=8, seq=2048)
    assert est.strategy.precision == "bf16"


def test_estimate_on_v100_defaults_to_fp16_against_the_fp16_peak() -> None:
    est = hwtune.estimate("gpt-1.7b", gpu=V100, gpus=8, seq=2048)
    assert est.strategy.precision == "fp16"
    # MFU is model FLOP/s over the datasheet fp16 tensor peak
    assert est.mfu == pytest.approx(est.model_tflops_per_gpu / V100_FP16_TFLOPS, rel=1e-9)
    same = hwtune.estimate("gpt-1.7b", gpu=V100, gpus=8, seq=2048, precision="fp16")
    assert same.step_time_s == est.step_time_s


def test_explicit_bf16_on_v100_is_refused(rejects) -> None:  # noqa: ANN001
    with pytest.raises(HwtuneInputError) as info:
        hwtune.estimate("gpt-1.7b", gpu=V100, gpus=8, seq=2048, precision="bf16")
    assert info.value.field == "precision" and info.value.value == "bf16"
    base = ["--model", "gpt-1.7b", "--gpu", V100, "--gpus", "8", "--seq", "2048"]
    rejects(["estimate", *base, "--precision", "bf16"], "--precision", "bf16", "fp16", V100)
    rejects(["plan", *base, "--global-batch", "64", "--precision", "bf16"], "--precision", "fp16")
    rejects(["size", "--gpu", V100, "--precision", "bf16"], "--precision", "fp16")
    rejects(["scale", "--model", "gpt-1.7b", "--gpu", V100, "--gpus", "8,16", "--seq", "2048",
             "--precision", "bf16"], "--precision", "fp16")  # fmt: skip


def test_plan_refuses_bf16_on_v100_before_searching() -> None:
    cl = make_cluster(V100, 8)
    with pytest.raises(HwtuneInputError) as info:
        hwtune.plan("gpt-1.7b", cl, 64, 2048, precision="bf16", progress=_never_called)
    assert info.value.field == "precision"


def _never_called(done: int, total: int) -> None:
    raise AssertionError("the search started before the precision was checked")


def test_plan_searches_in_each_gpus_own_format() -> None:
    args = ["plan", "--model", "gpt-1.7b", "--gpu", f"h100-sxm-80gb,{V100}", "--gpus", "8",
            "--seq", "2048", "--global-batch", "64", "--top", "1", "--json"]  # fmt: skip
    rows = {r["gpu"]: r for r in _run(args)["hardware"]}
    assert rows["h100-sxm-80gb"]["precision"] == "bf16"
    assert rows[V100]["precision"] == "fp16"
    one = _run(["plan", "--model", "gpt-1.7b", "--gpu", V100, "--gpus", "8", "--seq", "2048",
                "--global-batch", "64", "--top", "1", "--json"])  # fmt: skip
    assert one["top"][0]["strategy"]["precision"] == "fp16"


def test_scale_and_size_report_fp16_on_v100() -> None:
    doc = _run(["scale", "--model", "gpt-1.7b", "--gpu", V100, "--gpus", "8,16", "--seq", "2048",
                "--json"])  # fmt: skip
    assert doc["precision"] == "fp16"
    from hwtune.model.catalog import get_model
    from hwtune.train.sizing import check

    dev = get_device(V100)
    assert check(get_model("gpt-1.7b"), dev) == check(get_model("gpt-1.7b"), dev, dtype="fp16")
    with pytest.raises(HwtuneInputError):
        check(get_model("gpt-1.7b"), dev, dtype="bf16")


def test_study_grid_takes_each_gpus_format_unless_one_is_given() -> None:
    from hwtune.train.study import grid

    pts = grid(["gpt-1.7b"], ["h100-sxm-80gb", V100], ["default"], [8], 64, 2048)
    assert {p.gpu: p.precision for p in pts} == {"h100-sxm-80gb": "bf16", V100: "fp16"}
    fixed = grid(["gpt-1.7b"], ["h100-sxm-80gb", V100], ["default"], [8], 64, 2048, "fp32")
    assert {p.precision for p in fixed} == {"fp32"}


def test_compile_takes_the_gpus_format_unless_the_strategy_file_sets_one(tmp_path) -> None:  # noqa: ANN001
    base = ["compile", "--model", "gpt-1.7b", "--gpu", V100, "--dp", "8", "--seq", "2048"]
    assert _run([*base, "--json"])["strategy"]["precision"] == "fp16"
    h100 = ["compile", "--model", "gpt-1.7b", "--gpu", "h100-sxm-80gb", "--dp", "8", "--json"]
    assert _run(h100)["strategy"]["precision"] == "bf16"
    f = tmp_path / "s.yaml"
    f.write_text("precision: bf16\n")
    r = CliRunner().invoke(app, [*base, "--strategy", str(f)])
    assert r.exit_code == 2 and "precision" in r.output and "fp16" in r.output, r.output
    f.write_text("precision: fp32\n")
    assert _run([*base, "--strategy", str(f), "--json"])["strategy"]["precision"] == "fp32"


@pytest.mark.parametrize(
    ("gpu", "names"), [("a100-sxm4-80gb", "fp32, fp16, bf16"), (V100, "fp32, fp16")]
)
def test_fp8_training_where_there_is_no_fp8_names_the_precisions_there_are(
    rejects, gpu, names
) -> None:  # noqa: ANN001
    # A100 and V100 have no FP8 tensor cores (their datasheets list none); the refusal names
    # the training precisions, not every dtype the catalog lists (tf32, int8, fp64)
    for cmd in (["estimate"], ["plan"], ["size"]):
        line = rejects([*cmd, "--gpu", gpu, "--precision", "fp8"], "--precision", names, "no fp8")
        assert "int8" not in line and "tf32" not in line
    from hwtune.train.study import check_points, grid

    with pytest.raises(HwtuneInputError) as info:
        check_points(grid(["gpt-1.7b"], [gpu], ["default"], [8], 64, 2048, "fp8"))
    assert info.value.field == "precision" and names in info.value.expected


def test_a_strategy_that_does_not_set_its_precision_takes_the_devices() -> None:
    from hwtune.train.strategy import Strategy

    cl = make_cluster(V100, 8)
    est = hwtune.estimate("gpt-1.7b", cl, Strategy(dp=8, global_batch=8, seq=2048))
    assert est.strategy.precision == "fp16"
    with pytest.raises(HwtuneInputError):  # a Strategy that says bf16 means it
        hwtune.estimate("gpt-1.7b", cl, Strategy(dp=8, global_batch=8, seq=2048, precision="bf16"))
    from hwtune.model.catalog import get_model
    from hwtune.parallel.compiler import compile_plan
    from hwtune.parallel.simulator import simulate
    from hwtune.parallel.spec import make_spec

    def step(fields: dict) -> float:
        return simulate(compile_plan(make_spec(fields), get_model("gpt-1.7b"), cl)).step_time_s

    base = {"mesh": {"dp": 8}, "seq": 2048}
    assert step(base) == step({**base, "precision": "fp16"}) != step({**base, "precision": "fp32"})
    with pytest.raises(HwtuneInputError):
        compile_plan(make_spec({"mesh": {"dp": 8}, "precision": "bf16"}), get_model("gpt-1.7b"), cl)


def test_a_device_without_16_bit_peaks_trains_in_fp32_by_default() -> None:
    from hwtune.train.estimator import default_precision

    cpu = get_device("h100-sxm-80gb").model_copy(
        update={"name": "cpu-like", "peak_tflops": PeakTflops(fp32=2.0)}
    )
    assert default_precision(cpu) == "fp32"
    assert default_precision(get_device(V100)) == "fp16"
    assert hwtune.estimate("gpt-1.7b", make_cluster(cpu, 1), seq=512).strategy.precision == "fp32"


def test_bf16_refusals_in_training_name_fp32_too(rejects) -> None:  # noqa: ANN001
    # torchtitan on a V100 needs fp32, so the training refusal lists both, with the Megatron
    # flag that asked for bf16 when it came from --megatron-args
    rejects(["estimate", "--gpu", V100, "--precision", "bf16"], "--precision", "fp32, fp16")
    job = ("torchrun --nnodes 1 --nproc-per-node 8 pretrain_gpt.py --tensor-model-parallel-size 1 "
           "--micro-batch-size 1 --global-batch-size 8 --seq-length 2048 --bf16")  # fmt: skip
    rejects(["estimate", "-m", "gpt-1.7b", "--gpu", V100, "--megatron-args", job],
            "--bf16/--fp16/--fp8-format (in --megatron-args)", "fp16")  # fmt: skip


def test_a_study_point_without_a_precision_takes_its_gpus() -> None:
    from hwtune.train.study import StudyPoint

    assert StudyPoint("gpt-1.7b", V100, "default", 8, 64, 2048).precision == "fp16"
    assert StudyPoint("gpt-1.7b", "h100-sxm-80gb", "default", 8, 64, 2048).precision == "bf16"
    assert StudyPoint("gpt-1.7b", V100, "default", 8, 64, 2048, "fp32").precision == "fp32"
