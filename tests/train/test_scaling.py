"""Scaling sweeps (`hwtune.train.scaling`, `hwtune.report.scale_plot`): knees on synthetic
curves whose knees are known by construction, marginal fractions computed by hand, input
checks, and one small real sweep with its PNG plot."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from hwtune.errors import HwtuneInputError
from hwtune.hardware.cluster import make_cluster
from hwtune.model.catalog import get_model
from hwtune.model.spec import ModelSpec
from hwtune.report.scale_plot import plot_scaling
from hwtune.train.scaling import (
    RESOURCE,
    Knee,
    ScalePoint,
    ScaleResult,
    find_knees,
    marginal_fractions,
    saturating_resource,
    scale_sweep,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------ synthetic curves
def test_linear_then_flat_has_both_knees_at_the_next_point_after_64():
    ns = [8, 16, 32, 64, 128, 256]
    thr = [1000.0 * min(n, 64) for n in ns]  # linear up to 64 accelerators, then flat
    # up to 64 each added accelerator adds exactly the per-accelerator rate (fraction 1);
    # from 64 to 128 it adds nothing (fraction 0): both knees at 128
    assert marginal_fractions(ns, thr) == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0]
    assert find_knees(ns, thr) == [(0.9, 128), (0.5, 128)]


def test_marginal_fractions_by_hand_and_the_strict_threshold():
    ns = [1, 2, 4, 8, 16]
    thr = [100.0, 190.0, 340.0, 580.0, 740.0]
    # per-accelerator rate of the first point: 100/1 = 100
    # 1->2: (190-100)/1/100 = 0.90   (exactly at 0.9: not *below* it, so no knee yet)
    # 2->4: (340-190)/2/100 = 0.75   (below 0.9: the 0.9 knee is at 4)
    # 4->8: (580-340)/4/100 = 0.60   (above 0.5)
    # 8->16: (740-580)/8/100 = 0.20  (below 0.5: the 0.5 knee is at 16)
    assert marginal_fractions(ns, thr) == pytest.approx([1.0, 0.9, 0.75, 0.6, 0.2], abs=1e-12)
    assert find_knees(ns, thr) == [(0.9, 4), (0.5, 16)]
    # a fraction no step falls below yields no knee
    assert find_knees(ns, thr, fractions=(0.1,)) == []
    # fractions come back highest first whatever order they are given in
    assert find_knees(ns, thr, fractions=(0.5, 0.9, 0.7)) == [(0.9, 4), (0.7, 8), (0.5, 16)]


def test_uneven_steps_use_the_added_accelerators():
    # 10 -> 30 accelerators is 20 added; 1000 tokens/s more at 100/accelerator base is 0.5
    assert marginal_fractions([10, 30], [1000.0, 2000.0]) == pytest.approx([1.0, 0.5])


@settings(max_examples=25, deadline=None)
@given(
    rate=hs.floats(1e-3, 1e7),
    ns=hs.lists(hs.integers(1, 100_000), min_size=2, max_size=12, unique=True).map(sorted),
)
def test_a_linear_curve_has_marginal_fraction_one_and_no_knee(rate, ns):
    thr = [rate * n for n in ns]
    assert marginal_fractions(ns, thr) == pytest.approx([1.0] * len(ns), rel=1e-9)
    assert find_knees(ns, thr, fractions=(0.999, 0.9, 0.5)) == []


@pytest.mark.parametrize("ns", [[8, 8, 16], [16, 8], [8, 16, 12]])
def test_non_increasing_accelerator_counts_raise(ns):
    with pytest.raises(HwtuneInputError, match="gpus"):
        marginal_fractions(ns, [1.0] * len(ns))
    with pytest.raises(HwtuneInputError):
        find_knees(ns, [1.0] * len(ns))


def test_mismatched_or_empty_lists_raise():
    with pytest.raises(HwtuneInputError):
        marginal_fractions([8, 16], [1.0])
    with pytest.raises(HwtuneInputError):
        marginal_fractions([], [])


# ------------------------------------------------------------------ saturating resource
def _pt(n: int, shares: dict[str, float]) -> ScalePoint:
    return ScalePoint(n, 64, None, None, 1.0, shares=shares)  # type: ignore[arg-type]


def test_saturating_resource_is_the_share_that_grew_most():
    prev = _pt(8, {"dp": 0.05, "tp": 0.10, "bubble": 0.0})
    cur = _pt(16, {"dp": 0.25, "tp": 0.12, "bubble": 0.05})
    # dp grew by 0.20, bubble by 0.05, tp by 0.02
    assert saturating_resource(prev, cur) == RESOURCE["dp"]
    assert "NIC" in saturating_resource(prev, cur)
    # 8 -> 16 GPUs at 8 -> 12.5 tokens/s: 1 -> 1.28 GPU-seconds per token; the compute rest
    # stays 0.99 x 1 = 0.75 x 1.28 ~ 0.96, the bubble's part grows 0.01 -> 0.256
    prev2 = ScalePoint(8, 64, None, None, 8.0, shares={"bubble": 0.01})  # type: ignore[arg-type]
    cur2 = ScalePoint(16, 64, None, None, 12.5, shares={"bubble": 0.2, "dp": 0.05})  # type: ignore[arg-type]
    assert "bubble" in saturating_resource(prev2, cur2)


def test_saturating_resource_without_growth_or_without_a_fit():
    flat = _pt(8, {"dp": 0.1}), _pt(16, {"dp": 0.102})  # +0.002: nothing dominant
    assert saturating_resource(*flat).startswith("none dominant")
    assert saturating_resource(_pt(8, {"dp": 0.1}), _pt(16, {})).startswith("memory")


# ------------------------------------------------------------------ input checks
@pytest.mark.parametrize(
    "kw,field",
    [
        (dict(gpus=[0, 8], policy="strong", global_batch=64), "gpus"),
        (dict(gpus=[], policy="strong", global_batch=64), "gpus"),
        (dict(gpus=[8, 16], policy="medium", global_batch=64), "policy"),
        (dict(gpus=[8, 16], policy="strong"), "global_batch"),
        (dict(gpus=[8, 16], policy="weak"), "seqs_per_gpu"),
    ],
)
def test_scale_sweep_bad_input_raises_naming_the_field(kw, field):
    spec = ModelSpec(n_layers=2, d_model=256, n_heads=4, ffn_hidden=512, vocab=1000)
    with pytest.raises(HwtuneInputError) as ei:
        scale_sweep(spec, lambda n: make_cluster("h100-sxm-80gb", n), seq=1024, **kw)
    assert ei.value.field == field


def test_a_scale_with_no_layout_is_reported_as_no_fit():
    # 2 heads and 2 layers cap tp*pp at 4; a 2-token sequence leaves no context parallelism
    # (each rank needs an even chunk); 1 sequence allows dp = 1: 64 GPUs cannot be laid out
    spec = ModelSpec(n_layers=2, d_model=256, n_heads=2, ffn_hidden=512, vocab=1000)
    res = scale_sweep(spec, lambda n: make_cluster("h100-sxm-80gb", n), [1, 2, 64], seq=2,
                      global_batch=1, top_k=1)  # fmt: skip
    last = res.points[-1]
    assert last.n_gpus == 64 and last.best is None
    assert last.throughput == 0.0 and last.efficiency == 0.0
    assert last.label == "no strategy fits"
    assert res.points[0].efficiency == 1.0


# ------------------------------------------------------------------ a real sweep
@pytest.fixture(scope="module")
def sweep():
    spec = get_model("llama3.1-8b")
    return scale_sweep(spec, lambda n: make_cluster("h100-sxm-80gb", n), [32, 8, 16, 64], 8192,
                       policy="strong", global_batch=64, top_k=1)  # fmt: skip


def test_real_strong_sweep_points_and_efficiencies(sweep):
    assert sweep.policy == "strong"
    assert [p.n_gpus for p in sweep.points] == [8, 16, 32, 64]  # sorted
    assert all(p.global_batch == 64 for p in sweep.points)  # strong: fixed global batch
    # the first point is the reference of the scaling efficiency
    assert sweep.points[0].efficiency == 1.0
    for p in sweep.points:
        assert p.best is not None and p.throughput > 0
        assert 0 < p.efficiency <= 1.2
        # efficiency = per-GPU throughput / per-GPU throughput at the first point
        first = sweep.points[0]
        assert p.efficiency == pytest.approx(
            (p.throughput / p.n_gpus) / (first.throughput / first.n_gpus), rel=1e-12
        )
        assert p.best.strategy.n_gpus == p.n_gpus
        assert all(0 <= s <= 1 for s in p.shares.values())
    for k in sweep.knees:
        assert k.kind in ("efficiency", "regime")
        assert k.n_gpus in (16, 32, 64)


def test_weak_sweep_grows_the_global_batch_with_the_gpus():
    spec = get_model("llama3.1-8b")
    res = scale_sweep(spec, lambda n: make_cluster("h100-sxm-80gb", n), [8, 16], 4096,
                      policy="weak", seqs_per_gpu=2, top_k=1)  # fmt: skip
    assert [p.global_batch for p in res.points] == [16, 32]
    assert all(0 < p.efficiency <= 1.2 for p in res.points)


def test_plot_scaling_writes_a_png(sweep, tmp_path):
    out = plot_scaling(sweep, tmp_path / "scale.png", "llama3.1-8b strong scaling")
    assert out == tmp_path / "scale.png"
    data = out.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert len(data) > 10_000  # axes, lines and labels, not an empty canvas


def test_plot_scaling_marks_knees(sweep, tmp_path):
    knees = [Knee("efficiency", 32, "below 90%", 0.9, RESOURCE["dp"]), Knee("regime", 64, "a -> b")]
    res = ScaleResult(sweep.points, knees, "strong")
    out = plot_scaling(res, tmp_path / "k.png", "with knees")
    assert out.read_bytes()[:8] == PNG_MAGIC


def test_plot_scaling_of_a_sweep_with_an_unfit_point(tmp_path):
    spec = ModelSpec(n_layers=2, d_model=256, n_heads=2, ffn_hidden=512, vocab=1000)
    res = scale_sweep(spec, lambda n: make_cluster("h100-sxm-80gb", n), [1, 2, 64], seq=2,
                      global_batch=1, top_k=1)  # fmt: skip
    out = plot_scaling(res, tmp_path / "s.png", "tiny")
    assert out.read_bytes()[:8] == PNG_MAGIC
