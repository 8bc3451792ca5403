"""Training-planner review fixes (2026-12-07): multi-token prediction in the hardware FLOPs,
options that would change nothing refused, unbounded inputs bounded."""

from __future__ import annotations

import pytest

from hwtune.hardware.catalog import get_device
from hwtune.hardware.cluster import make_cluster
from hwtune.model.catalog import get_model
from hwtune.model.lowering import model_flops_per_token
from hwtune.train.estimator import estimate
from hwtune.train.pipeline_layout import parse_layout


def test_mtp_modules_count_in_hfu_not_in_mfu() -> None:
    spec = get_model("llama3.1-8b")
    cl = make_cluster(get_device("h100-sxm-80gb"), 8)
    e0 = estimate(spec, cl, None, seq=8192)
    e1 = estimate(spec, cl, None, seq=8192, mtp_layers=1)
    assert e0.hfu == pytest.approx(e0.mfu)  # no recomputation, no MTP: the same FLOPs
    # one MTP module per token, by hand: a Llama-3.1-8B layer's weights (q, o 4096 x 4096; k, v
    # 4096 x 1024; gate, up, down 4096 x 14336), the 4096 x 8192 projection and the 4096 x
    # 128256 head, 6 FLOPs per weight, plus one layer's attention 12 d s (the model-FLOPs
    # convention, non-causal: PaLM App. B)
    d, s = 4096, 8192
    layer = d * (d + 1024 + 1024 + d) + 3 * d * 14336
    extra = 6 * (layer + 2 * d * d + d * 128256) + 12 * d * s
    assert e1.hfu / e1.mfu == pytest.approx(1 + extra / model_flops_per_token(spec, s), rel=0.01)


@pytest.mark.parametrize(
    ("args", "field"),
    [(["--overlap-tp"], "--overlap-tp"), (["--pp", "2", "--no-overlap-p2p"], "--no-overlap-p2p"),
     (["--no-flash", "--attention-kernel", "fa2"], "--attention-kernel"),
     (["--mtp-layers", "100"], "--mtp-layers")],
)  # fmt: skip
def test_estimate_refuses_options_that_would_change_nothing(rejects, args, field) -> None:
    rejects(["estimate", "--gpus", "8", *args], field)


def test_a_layout_repeat_past_the_bound_is_refused_not_unrolled() -> None:
    from hwtune.errors import HwtuneInputError

    with pytest.raises(HwtuneInputError, match="at most 100,000 symbols"):
        parse_layout("E(t)*99999999999999|L")
    assert parse_layout("Et*3|(t)*2L") == ("Ettt", "ttL")


def test_a_device_tile_of_zero_is_refused(rejects, tmp_path) -> None:
    f = tmp_path / "g.yaml"
    f.write_text("name: g\ngemm_tile: [0, 256]\npeak_tflops: {bf16: 989}\nmemory_gib: 80\n"
                 "memory_bandwidth_tbps: 3.35\nsm_count: 132\nboost_clock_mhz: 1980\ntdp_w: 700\n")  # fmt: skip
    rejects(["estimate", "--gpu", str(f), "--gpus", "8"], "gemm_tile")


@pytest.mark.parametrize(
    ("args", "field", "word"),
    [(["--gpu", "v100-sxm2-32gb", "--attention-kernel", "fa2"], "--attention-kernel", "volta"),
     (["--schedule", "zbv", "--fix", "pp=1"], "--schedule", "pp=1")],
)  # fmt: skip
def test_plan_refuses_what_estimate_refuses(rejects, args, field, word) -> None:
    rejects(["plan", "--model", "llama3.1-8b", "--gpus", "8", *args], field, word)


def test_plan_with_a_zero3_gather_searches_zero3_only() -> None:
    from hwtune.train.search import plan

    spec = get_model("llama3.1-8b")
    cl = make_cluster(get_device("h100-sxm-80gb"), 8)
    res = plan(spec, cl, global_batch=8, seq=4096, base={"zero3_gather": "parameter"})
    assert res.top and all(e.strategy.zero == 3 for e in res.top)
