"""Tier 2: a calibration profile replaces the catalog efficiencies and host overheads."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hwtune.errors import HwtuneInputError
from hwtune.serve.profile import load_profile
from hwtune.serve.request import Workload
from hwtune.serve.simulator import simulate


def _tpot(cfg):
    return simulate(cfg, Workload((256,), (64,), "closed", 1)).requests[0].tpot


def test_profile_changes_the_prediction_as_physics_says(tmp_path, cfg8b):
    f = tmp_path / "h100.yaml"
    # half the catalog HBM efficiency: batch-1 decode (bandwidth-bound) gets ~2x slower
    f.write_text(f"device: h100-sxm-80gb\nmemory_bw_efficiency: {cfg8b.device.memory_bw_efficiency / 2}\n"
                 "host_overhead_per_iteration_s: 0.0\nhost_overhead_per_sequence_s: 0.0\n")  # fmt: skip
    prof = load_profile(f)
    base = replace(cfg8b, host_overhead_s=0.0, host_overhead_per_seq_s=0.0)
    slow = replace(cfg8b, profile=prof)
    r = _tpot(slow) / _tpot(base)
    assert 1.6 < r < 2.05  # the memory-bound share doubles; launch overheads do not


def test_profile_json_and_bad_fields(tmp_path):
    g = tmp_path / "p.json"
    g.write_text('{"gemm_efficiency": 0.7, "intra_busbw_gbps": 350}')
    assert load_profile(g).gemm_efficiency == 0.7
    g.write_text('{"gemm_efficiency": 1.7}')
    with pytest.raises(HwtuneInputError, match="gemm_efficiency"):
        load_profile(g)
    g.write_text('{"gemm_eff": 0.7}')
    with pytest.raises(HwtuneInputError, match="gemm_eff"):
        load_profile(g)


def test_fused_elementwise_describes_the_engine(tmp_path):
    """An engine profile says whether norms, rotary and SwiGLU run fused (serving engines; the
    default) or as eager PyTorch ops (`transformers`); a non-boolean names the field."""
    from hwtune.serve.profile import CalibrationProfile, elementwise_fused

    assert elementwise_fused(None) and elementwise_fused(CalibrationProfile())
    f = tmp_path / "hf.yaml"
    f.write_text("fused_elementwise: false\nhost_overhead_per_iteration_s: 1.2e-3\n")
    prof = load_profile(f)
    assert elementwise_fused(prof) is False and prof.host_overhead_per_iteration_s == 1.2e-3
    f.write_text("fused_elementwise: sometimes\n")
    with pytest.raises(HwtuneInputError, match="fused_elementwise"):
        load_profile(f)
