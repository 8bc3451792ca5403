"""Review of `hwtune scale` and of the hardware/network selection of `hwtune plan`: what the
sweep attributes a knee to, bad lists (duplicates, order, fractions), the JSON document and the
plot. Expected values are computed by hand in the comments."""

from __future__ import annotations

from hwtune.train.scaling import RESOURCE, ScalePoint, saturating_resource


def _pt(n: int, thr: float, shares: dict[str, float]) -> ScalePoint:
    return ScalePoint(n, 64, None, None, thr, shares=shares)  # type: ignore[arg-type]


# ------------------------------------------------------------------ saturating resource
def test_a_small_share_growth_is_not_named_when_compute_lost_more():
    # 100 GPUs at 1000 tokens/s: 0.1 GPU-s per token; 200 at 1600: 0.125 (+0.025).
    # data-parallel share 1% -> 3%: its GPU time per token 0.001 -> 0.00375 (+0.00275), an
    # eighth of the loss; the rest (compute) grew by 0.025 - 0.00275 = 0.02225. The share grew
    # by 2 points, over the old code's 0.5-point threshold, which named the NIC.
    prev, cur = _pt(100, 1000.0, {"dp": 0.01}), _pt(200, 1600.0, {"dp": 0.03})
    assert saturating_resource(prev, cur).startswith("none dominant")


def test_a_share_that_explains_the_loss_is_named():
    # as above but 20% data-parallel at 200 GPUs: 0.2 x 0.125 - 0.001 = 0.024 of the 0.025
    prev, cur = _pt(100, 1000.0, {"dp": 0.01}), _pt(200, 1600.0, {"dp": 0.2})
    assert saturating_resource(prev, cur) == RESOURCE["dp"]


def test_nothing_saturates_when_gpu_time_per_token_falls():
    # 100 -> 200 GPUs at 1000 -> 2400 tokens/s: 0.1 -> 0.083 GPU-s per token (superlinear,
    # e.g. offload no longer needed), though the tensor-parallel share grew 0 -> 10%
    prev, cur = _pt(100, 1000.0, {"tp": 0.0}), _pt(200, 2400.0, {"tp": 0.1})
    assert saturating_resource(prev, cur).startswith("none (")
