"""The cost models and the estimator with a synthetic profile (tier 2) against the same device
without it (tier 1): the profile is used, and one GEMM matches a hand computation."""

from __future__ import annotations

import pytest
import yaml
from calib_profile_data import make_doc

from hwtune.cost.compute import (
    KERNEL_OVERHEAD_S,
    attention_time,
    gemm_time,
    k_fill_efficiency,
    memory_time,
)
from hwtune.hardware.cluster import make_cluster
from hwtune.hardware.device import load_device_file
from hwtune.model.spec import ModelSpec
from hwtune.train.estimator import estimate

SPEC = ModelSpec(name="tiny-gpt2", family="gpt2", n_layers=2, d_model=256, n_heads=4,
                 ffn_hidden=1024, ffn_act="gelu", vocab=8192, tied_embeddings=True,
                 norm="layernorm", pos_emb="learned", max_position=256)  # fmt: skip


@pytest.fixture
def devices(tmp_path):
    doc = make_doc()
    # a GEMM grid that covers the model's shapes, at 60 GFLOP/s whatever the shape
    doc["gemm"] = [
        {"dtype": "fp32", "m": m, "n": n, "k": k, "batch": 1, "seconds": 2.0 * m * n * k / 6e10}
        for m in (256, 1024, 4096) for n in (256, 1024, 8192) for k in (256, 1024, 4096)
    ]  # fmt: skip
    doc["attention"] = [
        {"dtype": "fp32", "phase": ph, "batch": 1, "heads": 4, "seq_q": 256, "seq_k": 256,
         "head_dim": 64, "causal": True, "flops": f, "seconds": f / 2e10}
        for ph, f in (("fwd", 1.0e8), ("bwd", 2.5e8))
    ]  # fmt: skip
    p = tmp_path / "prof.yaml"
    p.write_text(yaml.safe_dump(doc))
    t2 = load_device_file(p)
    return t2.model_copy(update={"profile": None}), t2, p


def test_gemm_uses_the_measured_rate(devices):
    t1, t2, _ = devices
    m, n, k = 1024, 1024, 1024
    hand = 2.0 * m * n * k / 6e10  # the measured point, no launch overhead added
    assert gemm_time(m, n, k, t2, "fp32") == pytest.approx(hand)
    assert gemm_time(m, n, k, t1, "fp32") != pytest.approx(hand)
    # tier 1: the measured peak (150 GFLOP/s) at efficiency 1, the GPU K-loop fill factor of the
    # spec-sheet model (no tile or wave losses at this size), plus the launch overhead
    fill = k_fill_efficiency(k)
    assert gemm_time(m, n, k, t1, "fp32") == pytest.approx(
        2.0 * m * n * k / (1.5e11 * fill) + KERNEL_OVERHEAD_S, rel=1e-9
    )


def test_attention_and_memory_use_the_profile(devices):
    t1, t2, _ = devices
    assert attention_time(1e8, 1e6, t2, "fp32", backward=False) == pytest.approx(1e8 / 2e10)
    assert attention_time(1e8, 1e6, t2, "fp32", backward=True) == pytest.approx(2.5e8 / 2e10)
    assert memory_time(3e5, t2) == pytest.approx(1e-5)
    assert memory_time(3e5, t1) != pytest.approx(1e-5)


def test_estimate_with_profile_differs_from_tier1(devices):
    t1, t2, path = devices
    kw = {"precision": "fp32", "micro_batch": 4, "seq": 256, "zero": 0}
    e1 = estimate(SPEC, gpu=t1, gpus=1, **kw)
    e2 = estimate(SPEC, gpu=t2, gpus=1, **kw)
    e2p = estimate(SPEC, gpu=str(path), gpus=1, **kw)  # --gpu profile.yaml
    assert e2.step_time_s == pytest.approx(e2p.step_time_s)
    assert abs(e2.step_time_s / e1.step_time_s - 1) > 0.05
    # every weight GEMM of the step at 60 GFLOP/s: forward + backward GEMM time by hand
    tokens = 4 * 256
    gemm_flops = 6 * tokens * (2 * 12 * 256 * 256 + 8192 * 256)
    assert e2.breakdown["forward"] + e2.breakdown["backward"] > gemm_flops / 6e10


def test_collective_fit_drives_data_parallel_time(devices):
    _, t2, _ = devices
    alpha, beta = t2.profile.collective_fit("all_reduce")
    link = make_cluster(t2, 2).intra_link()
    assert (link.latency, link.bandwidth) == pytest.approx((alpha, beta))
    kw = {"precision": "fp32", "micro_batch": 4, "seq": 256, "zero": 0,
          "overlap_grad_reduce": False}  # fmt: skip
    e = estimate(SPEC, gpu=t2, gpus=2, dp=2, **kw)
    n_params = 2 * (12 * 256 * 256 + 4 * 256) + 8192 * 256 + 256 * 256 + 2 * 256
    grad_bytes = 4.0 * n_params
    hand = 2 * alpha + grad_bytes / beta  # ring all-reduce, n = 2: 2(n-1)a + 2(n-1)/n S/b
    assert e.breakdown["dp_comm_exposed"] == pytest.approx(hand, rel=1e-6)
