"""Architecture names: every table that gates a code path by architecture uses the names the
catalog and the calibration write, and a known name in another case is refused (it would match
no gate and price the device as an unknown architecture)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from hwtune.calibrate.device_info import CUDA_ARCHITECTURES, ROCM_ARCHITECTURES, _gpu_architecture
from hwtune.cost.compute import FA2_SHARE_OF_BEST
from hwtune.cost.quantized_gemm import NO_FLOAT_WEIGHT_ARCHITECTURES
from hwtune.errors import HwtuneInputError
from hwtune.hardware.catalog import devices, get_device
from hwtune.hardware.device import ARCHITECTURES, load_device_file
from hwtune.serve.launch import TRTLLM_ARCHITECTURES, TRTLLM_MLA_ARCHITECTURES
from hwtune.train.accuracy import ARCHITECTURE_RECORDS, COVERED_ARCHITECTURES
from hwtune.train.estimator import PRE_FA2_ARCHS


def test_every_gate_and_source_uses_known_names() -> None:
    named = {
        "catalog": {d.architecture for d in devices().values()},
        "CUDA_ARCHITECTURES": set(CUDA_ARCHITECTURES.values()),
        "ROCM_ARCHITECTURES": set(ROCM_ARCHITECTURES.values()),
        "FA2_SHARE_OF_BEST": set(FA2_SHARE_OF_BEST),
        "NO_FLOAT_WEIGHT_ARCHITECTURES": set(NO_FLOAT_WEIGHT_ARCHITECTURES),
        "TRTLLM_ARCHITECTURES": set(TRTLLM_ARCHITECTURES) | set(TRTLLM_MLA_ARCHITECTURES),
        "accuracy records": set(ARCHITECTURE_RECORDS) | set(COVERED_ARCHITECTURES),
        "PRE_FA2_ARCHS": set(PRE_FA2_ARCHS),
    }
    for table, names in named.items():
        assert names <= set(ARCHITECTURES), (table, names - set(ARCHITECTURES))


@pytest.mark.parametrize(
    ("cc", "arch"),
    # NVIDIA CUDA C++ Programming Guide, compute capabilities: T4 7.5, A100 8.0, L40S 8.9,
    # H100 9.0, B200 10.0, B300 10.3
    [((7, 5), "turing"), ((8, 0), "ampere"), ((8, 9), "ada"), ((9, 0), "hopper"),
     ((10, 0), "blackwell"), ((10, 3), "blackwell-ultra"), ((9, 9), "sm_99")],
)  # fmt: skip
def test_cuda_compute_capability_names(cc: tuple[int, int], arch: str) -> None:
    props = SimpleNamespace(major=cc[0], minor=cc[1])
    assert _gpu_architecture("cuda", props) == arch


@pytest.mark.parametrize(
    ("gfx", "arch"),
    # ROCm reports the target with its feature flags (e.g. MI300X "gfx942:sramecc+:xnack-")
    [("gfx942:sramecc+:xnack-", "cdna3"), ("gfx90a:sramecc+:xnack-", "cdna2"), ("gfx950", "cdna4"),
     ("gfx1100", "gfx1100"), ("", "rocm")],
)  # fmt: skip
def test_rocm_targets_map_to_catalog_names(gfx: str, arch: str) -> None:
    assert _gpu_architecture("rocm", SimpleNamespace(gcnArchName=gfx)) == arch


def test_a_calibrated_mi300x_is_gated_as_the_catalog_one() -> None:
    assert _gpu_architecture("rocm", SimpleNamespace(gcnArchName="gfx942:sramecc+:xnack-")) == (
        get_device("mi300x").architecture
    )


def test_known_architecture_in_another_case_is_refused(tmp_path) -> None:
    f = tmp_path / "g.yaml"
    f.write_text(
        "name: g\narchitecture: Hopper\npeak_tflops: {bf16: 989}\nmemory_gib: 80\n"
        "memory_bandwidth_tbps: 3.35\nsm_count: 132\nboost_clock_mhz: 1980\ntdp_w: 700\n"
    )
    with pytest.raises(HwtuneInputError) as e:
        load_device_file(f)
    assert "architecture" in str(e.value) and "'hopper'" in str(e.value)
    # another name (a CPU, an unlisted target) stays free text
    f.write_text(f.read_text().replace("Hopper", "GenuineIntel family 6 model 85"))
    assert load_device_file(f).architecture == "GenuineIntel family 6 model 85"
