"""Cluster-scale energy per step/token, per-stage pipeline clocks (Perseus), edge profiles."""

from __future__ import annotations

import pytest
from energy_fakes import write

from hwtune.energy.cluster import (
    StageWork,
    one_f_one_b_time,
    plan_stage_frequencies,
    rank_by_energy,
    step_energy,
)
from hwtune.energy.profiles import get_profile, load_profile_file, profiles
from hwtune.errors import HwtuneInputError
from hwtune.hardware.cluster import make_cluster
from hwtune.train.estimator import estimate

# --- energy per step -------------------------------------------------------------------------


def test_step_energy_bounds_and_per_token():
    cl = make_cluster("h100-sxm-80gb", 16)
    est = estimate("llama3.1-8b", cl, tp=2, pp=2, micro_batch=1, global_batch=64, seq=4096)
    se = step_energy(est, cl)
    dev = cl.device
    static = dev.idle_w if dev.idle_w is not None else 0.12 * dev.tdp_w
    # every GPU draws at least static power and at most its board power for the whole step
    assert 16 * static * est.step_time_s <= se.energy_j <= 16 * dev.tdp_w * est.step_time_s
    assert se.energy_per_token_j == pytest.approx(se.energy_j / est.tokens_per_step)
    assert sum(se.parts_j.values()) == pytest.approx(se.energy_j)
    assert se.parts_j["idle"] > 0  # the pipeline bubble idles at static power


def test_power_cap_trades_time_for_power():
    free = make_cluster("h100-sxm-80gb", 8)
    capped = make_cluster("h100-sxm-80gb", 8, power_cap_w=400)
    kw = {"micro_batch": 1, "seq": 4096}
    a = step_energy(estimate("llama3.1-8b", free, **kw), free)
    b = step_energy(estimate("llama3.1-8b", capped, **kw), capped)
    assert b.avg_power_w_per_gpu <= 400 + 1e-6 < a.avg_power_w_per_gpu
    assert b.step_time_s > a.step_time_s


def test_rank_by_energy_orders_by_energy_per_token():
    cl = make_cluster("h100-sxm-80gb", 8)
    cands = [(estimate("llama3.1-8b", cl, tp=t, micro_batch=1, seq=4096), cl) for t in (1, 2, 8)]
    ranked = rank_by_energy(cands)
    vals = [s.energy_per_token_j for s, _ in ranked]
    assert vals == sorted(vals)


# --- per-stage clocks ------------------------------------------------------------------------
ORIN = get_profile("jetson-agx-orin-64gb")
PM = ORIN.default_power_model()


def test_balanced_1f1b_matches_the_closed_form():
    # 1F1B with equal stages: (m + p - 1)(F + B) (Narayanan et al. SC'21 §2.2.1)
    st = [StageWork(1.0, 2.0)] * 4
    t, _ = one_f_one_b_time(st, 8, [1.0] * 4)
    assert t == pytest.approx((8 + 4 - 1) * 3.0)


def test_balanced_pipeline_has_nothing_to_slow():
    plan = plan_stage_frequencies([StageWork(1.0, 2.0, 0.2)] * 4, 16, ORIN.frequencies_hz, PM)
    assert set(plan.frequencies_hz) == {ORIN.f_max_hz}
    assert plan.saved_fraction == pytest.approx(0.0)


def test_imbalanced_pipeline_slows_the_light_stages_only():
    st = [StageWork(1.0, 2.0, 0.2)] * 3 + [StageWork(1.3, 2.6, 0.2)]
    plan = plan_stage_frequencies(st, 16, ORIN.frequencies_hz, PM)
    assert plan.step_time_s <= plan.baseline_step_time_s + 1e-9  # the step is not longer
    assert plan.frequencies_hz[-1] == ORIN.f_max_hz  # the critical stage keeps its clock
    assert all(f < ORIN.f_max_hz for f in plan.frequencies_hz[:3])
    assert 0.0 < plan.saved_fraction < 0.3
    loose = plan_stage_frequencies(st, 16, ORIN.frequencies_hz, PM, tolerance=0.05)
    assert loose.saved_fraction >= plan.saved_fraction
    assert loose.step_time_s <= 1.05 * plan.baseline_step_time_s + 1e-9


def test_pipeline_bad_input():
    with pytest.raises(HwtuneInputError, match="micro-batches"):
        plan_stage_frequencies([StageWork(1, 2)], 0, ORIN.frequencies_hz, PM)
    with pytest.raises(HwtuneInputError, match="f_ref"):
        plan_stage_frequencies([StageWork(1, 2)], 4, [1e8, 2e8], PM)


# --- edge profiles ---------------------------------------------------------------------------
REQUIRED_SOURCES = ("gpu", "memory", "frequencies", "power_modes", "static_w", "gpu_dynamic_w",
                    "memory_w", "v_floor")  # fmt: skip


@pytest.mark.parametrize("name", sorted(profiles()))
def test_every_profile_is_consistent_and_sourced(name):
    p = profiles()[name]
    assert all(k in p.sources and p.sources[k] for k in REQUIRED_SOURCES)
    table = p.gpu_frequencies_mhz
    assert list(table) == sorted(table) and table[-1] == p.gpu_max_mhz
    for m in p.power_modes:
        assert m.tpcs * 2 <= p.sm_count and m.cpu_online <= p.cpu_cores
        if m.gpu_max_mhz is not None:
            assert m.gpu_max_mhz in table  # nvpmodel caps are steps of the devfreq table
    # LPDDR5 bandwidth = EMC clock x 2 (DDR) x bus bytes: 256-bit at 3199 MHz = 204.8 GB/s
    dev = p.to_device()
    assert dev.memory_bandwidth_tbps * 1000 == pytest.approx(p.memory_bandwidth_gbps)
    pm = p.default_power_model()
    assert pm.power_w(p.f_max_hz, 1.0, 1.0) <= p.module_power_w[1]


def test_agx_orin_figures_against_the_data_sheet():
    p = get_profile("orin")
    assert p.name == "jetson-agx-orin-64gb" and p.sm_count == 16
    assert p.memory_bandwidth_gbps == pytest.approx(3199e6 * 2 * 32 / 1e9, rel=1e-3)
    assert p.mode("MODE_15W").gpu_max_mhz == 408 and p.mode(2).tpcs == 4
    # derived modules scale the 64 GB peak by SMs x clock: NX 16GB = 42.5 x 8/16 x 918/1300
    nx = get_profile("orin-nx").to_device()
    assert nx.peak_tflops.bf16 == pytest.approx(42.5 * 8 / 16 * 918 / 1300)
    with pytest.raises(HwtuneInputError, match="power mode"):
        p.mode("turbo")


def test_profile_names_and_files(tmp_path):
    with pytest.raises(HwtuneInputError, match="jetson-orin-nano"):
        get_profile("orin-nanoo")
    raw = profiles()["jetson-orin-nano-4gb"].model_dump(mode="json")
    raw["gpu_frequencies_mhz"] = [306, 200, 624.75]
    import yaml

    f = write(tmp_path / "mine.yaml", yaml.safe_dump(raw))
    with pytest.raises(HwtuneInputError, match="increasing"):
        load_profile_file(f)
    raw["gpu_frequencies_mhz"] = [306, 624.75]
    f.write_text(yaml.safe_dump(raw))
    assert get_profile(str(f)).gpu_frequencies_mhz == (306, 624.75)
