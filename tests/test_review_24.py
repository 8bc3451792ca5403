"""Review of the 2026-12-02 changes (serve int4/fp4 scales, scale/plan exit codes, ...)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from hwtune.cli.main import app
from hwtune.hardware.catalog import get_device
from hwtune.hardware.profile import DeviceProfile, SizedPoint
from hwtune.model.catalog import get_model
from hwtune.serve.config import ReplicaConfig
from hwtune.serve.iteration import IterationModel
from hwtune.serve.memory import weight_bytes_per_gpu


def _invoke(args: list[str]):  # noqa: ANN202
    return CliRunner().invoke(app, args)


# --- a checkpoint's group size belongs to its own format ----------------------------------------
@pytest.mark.parametrize(("model", "other"), [("gpt-oss-120b", "int4"), ("kimi-k2.5", "fp4")])
def test_checkpoint_group_size_does_not_carry_over_to_another_format(model, other):
    # gpt-oss ships MXFP4 in blocks of 32; served as int4 its groups are int4's default (128),
    # not MXFP4's block. Kimi-K2.5 ships int4 in groups of 32; served as fp4 it is NVFP4's 16.
    spec = get_model(model)
    plain = spec.model_copy(update={"checkpoint_precision": None, "weight_group_size": None})
    dev = get_device("h100-sxm-80gb")
    cfg = ReplicaConfig(spec, dev, tp=8, weight_dtype=other)
    ref = ReplicaConfig(plain, dev, tp=8, weight_dtype=other)
    assert cfg.weight_group_size is None
    assert weight_bytes_per_gpu(cfg) == weight_bytes_per_gpu(ref)
    # the GEMMs read the same bytes (memory-bound decode GEMM of a routed expert's size)
    m_cfg, m_ref = IterationModel(cfg), IterationModel(ref)
    k, n = spec.d_model, 4 * spec.d_model
    assert m_cfg._gemm(1, n, k, expert=True) == m_ref._gemm(1, n, k, expert=True)
    # served in its own format the checkpoint's group size applies
    own = ReplicaConfig(spec, dev, tp=8)
    assert own.weight_group_size == spec.weight_group_size == 32


# --- exit 1 when nothing fits, as `hwtune plan` -------------------------------------------------
_NO_FIT = ["--model", "llama3.1-405b", "--gpu", "h100", "--seq", "4096"]


def test_plan_exits_1_when_nothing_fits():  # the reference the others follow
    assert _invoke(["plan", *_NO_FIT, "--gpus", "8", "--json"]).exit_code == 1


@pytest.mark.parametrize("as_json", [[], ["--json"]])
def test_scale_batch_sweep_where_nothing_fits_exits_1(as_json):
    r = _invoke(["scale", *_NO_FIT, "--fixed-gpus", "8", "--global-batches", "8,16", *as_json])
    assert r.exit_code == 1, r.output
    if as_json:
        assert all(p["strategy"] is None for p in json.loads(r.stdout)["points"])


def test_scale_batch_sweep_where_one_point_fits_exits_0():
    r = _invoke(["scale", "--model", "llama3.1-8b", "--gpu", "h100", "--seq", "4096",
                 "--fixed-gpus", "8", "--global-batches", "8,16", "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("as_json", [[], ["--json"]])
def test_plan_gpu_list_where_no_gpu_fits_exits_1(as_json):
    r = _invoke(["plan", *_NO_FIT[:2], "--gpu", "h100,a100", "--gpus", "8", "--seq", "4096",
                 *as_json])  # fmt: skip
    assert r.exit_code == 1, r.output


def test_plan_gpu_list_where_one_gpu_fits_exits_0():
    r = _invoke(["plan", "--model", "llama3.1-8b", "--gpu", "h100,a100", "--gpus", "8",
                 "--seq", "4096", "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("as_json", [[], ["--json"]])
def test_plan_what_if_where_no_value_fits_exits_1(as_json):
    r = _invoke(["plan", *_NO_FIT, "--gpus", "8", "--what-if", "nic=100,400", *as_json])
    assert r.exit_code == 1, r.output
    if not as_json:  # says so, with dashes rather than 0 tokens/s
        assert "no strategy fits at any nic" in r.output
        assert "keeps 90%" not in r.output and "0.0%" not in r.output


# --- profile: a near-repeat of the smallest size does not hide the next size -----------------
def test_below_the_smallest_size_the_line_runs_to_the_next_distinct_size():
    # a fixed 5 us launch plus bytes at 10 GB/s, measured at 1,000 B twice (one rounding step
    # apart) and at 1 MB: a 100-byte op still pays about the launch cost (the line through
    # 1,000 B and 1 MB), not a tenth of the smallest point's time (proportional scaling)
    def t(s: float) -> float:
        return 5e-6 + s / 1e10

    sizes = (1000.0, 1000.0000000000001, 1e6)
    prof = DeviceProfile(elementwise=tuple(SizedPoint(op="add", bytes=s, seconds=t(s))
                                           for s in sizes))  # fmt: skip
    assert prof.elementwise_time(100.0) == pytest.approx(t(100.0), rel=1e-9)


# --- scale_sweep: a fractional accelerator count is an error, not truncated -------------------
@pytest.mark.parametrize("gpus", [[8.5, 16], [8, 16.0], [True, 8]])
def test_scale_sweep_refuses_counts_that_are_not_whole(gpus):
    from hwtune.errors import HwtuneInputError
    from hwtune.hardware.cluster import make_cluster
    from hwtune.train.scaling import scale_sweep

    with pytest.raises(HwtuneInputError) as ei:
        scale_sweep(get_model("llama3.1-8b"), lambda n: make_cluster("h100-sxm-80gb", n), gpus,
                    1024, global_batch=64)  # fmt: skip
    assert ei.value.field == "gpus" and "whole" in str(ei.value)
