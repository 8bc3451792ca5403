"""Catalog figures: presence, provenance, datasheet spot checks and invariants.

The spot checks restate vendor datasheet numbers independently of the YAML, each with the reason
the number is what it is, so that a typo or a sparse-for-dense mix-up in the catalog fails here.
"""

from __future__ import annotations

from importlib import resources

import pytest
import yaml

from hwtune.hardware.catalog import _norm, devices, get_device
from hwtune.hardware.cluster import Cluster, make_cluster, systems
from hwtune.hardware.device import DTYPES, Device

REQUIRED_DEVICES = [
    "v100-sxm2-32gb",
    "v100-sxm3-32gb",
    "a100-sxm4-40gb",
    "a100-sxm4-80gb",
    "a100-pcie-80gb",
    "h100-sxm-80gb",
    "h100-pcie-80gb",
    "h100-sxm-96gb",
    "h800-sxm-80gb",
    "h200-sxm-141gb",
    "b200",
    "b300",
    "gb200",
    "gb300",
    "mi250x",
    "mi300x",
    "mi325x",
    "mi355x",
    "mi350x",
    "l40s",
    "rtx-4090",
    "jetson-agx-orin-64gb",
]

REQUIRED_SYSTEMS = [
    "dgx-v100",
    "dgx-a100",
    "dgx-h100",
    "dgx-h200",
    "dgx-b200",
    "gb200-nvl72",
    "gb300-nvl72",
    "mi300x-platform",
]

# Keys a system preset may carry: Cluster fields plus `name` and `source`, which
# load_cluster_file() drops before building the Cluster (extra keys would be rejected).
SYSTEM_KEYS = {
    "name",
    "source",
    "nvls_allreduce_algbw_gbps",
    "nvls_source",
    "host_memory_gbps_per_node",
    "host_memory_source",
    "device",
    "gpus_per_node",
    "scaleup_domain",
    "nic_gbps_per_gpu",
    "topology",
    "oversubscription",
}

# Spellings used by the validation data (shared/validation): hardware.gpu in
# training_published.jsonl and the `system` column of serving_measured.csv.
VALIDATION_SPELLINGS = {
    "NVIDIA A100-SXM4-80GB": "a100-sxm4-80gb",
    "NVIDIA A100 80GB": "a100-sxm4-80gb",
    "NVIDIA A100 40GB": "a100-sxm4-40gb",
    "NVIDIA H100 80GB": "h100-sxm-80gb",
    "NVIDIA H100-SXM5-80GB (DGX H100)": "h100-sxm-80gb",
    "NVIDIA H100 SXM 96GB HBM2e (500 W power limit)": "h100-sxm-96gb",
    "NVIDIA H100 SXM 96GB HBM3": "h100-sxm-96gb",
    "NVIDIA V100-SXM3-32GB": "v100-sxm3-32gb",
    "h100_sxm": "h100-sxm-80gb",
    "h200_sxm": "h200-sxm-141gb",
}


def _raw(name: str) -> dict:
    text = resources.files("hwtune.hardware").joinpath(f"catalog/{name}.yaml").read_text()
    return yaml.safe_load(text)


@pytest.fixture(scope="module")
def raw_devices() -> list[dict]:
    return _raw("devices")["devices"]


@pytest.fixture(scope="module")
def raw_systems() -> list[dict]:
    return _raw("systems")["systems"]


def peak(name: str, dtype: str) -> float | None:
    return getattr(get_device(name).peak_tflops, dtype)


# --------------------------------------------------------------------------- presence, provenance


def test_yaml_entries_validate_and_names_unique(raw_devices):
    names = [e["name"] for e in raw_devices]
    assert len(names) == len(set(names)), "duplicate device names"
    for e in raw_devices:
        Device(**e)  # extra="forbid": any unknown key fails here
        assert e["name"] == e["name"].lower() and " " not in e["name"]


def test_required_devices_present():
    missing = [n for n in REQUIRED_DEVICES if n not in devices()]
    assert not missing, missing


@pytest.mark.parametrize("name", REQUIRED_DEVICES)
def test_sources_for_peaks_and_memory(name):
    src = get_device(name).sources
    for key in ("peak_tflops", "memory", "gemm_efficiency", "memory_bw_efficiency"):
        assert src.get(key, "").strip(), f"{name}: no source for {key}"


def test_every_catalog_device_has_core_sources():
    for d in devices().values():
        assert d.sources.get("peak_tflops") and d.sources.get("memory"), d.name


# --------------------------------------------------------------------------- datasheet spot checks


def test_a100_dense_peaks():
    # A100 datasheet: BF16/FP16 tensor 312 dense (624 with sparsity); TF32 156; INT8 624 TOPS.
    for n in ("a100-sxm4-40gb", "a100-sxm4-80gb", "a100-pcie-80gb"):
        assert peak(n, "bf16") == pytest.approx(312)
        assert peak(n, "tf32") == pytest.approx(156)
        assert peak(n, "int8") == pytest.approx(624)
        assert peak(n, "fp8") is None  # Ampere has no FP8 tensor path


def test_h100_sxm_dense_peaks():
    # H100 SXM datasheet prints 1,979 TFLOPS BF16 *with sparsity*; dense is half: 989.4
    # (132 SMs x 4096 dense bf16 FLOP/clk x ~1.83 GHz). FP8 doubles the bf16 rate.
    h = get_device("h100-sxm-80gb")
    assert h.peak_tflops.bf16 == pytest.approx(989.4, abs=1)
    assert h.peak_tflops.fp16 == pytest.approx(989.4, abs=1)
    assert h.peak_tflops.fp8 == pytest.approx(2 * h.peak_tflops.bf16, rel=0.01)
    assert h.peak_tflops.tf32 == pytest.approx(h.peak_tflops.bf16 / 2, rel=0.01)
    implied = 132 * 4096 * 1.83e9 / 1e12
    assert implied == pytest.approx(h.peak_tflops.bf16, rel=0.01)


def test_hopper_siblings_share_tensor_peaks():
    # H200 and H800 use the same GH100 tensor configuration as H100 SXM; H800 cuts FP64 only.
    for n in ("h200-sxm-141gb", "h800-sxm-80gb", "h100-sxm-96gb"):
        assert peak(n, "bf16") == pytest.approx(peak("h100-sxm-80gb", "bf16"))
    assert peak("h800-sxm-80gb", "fp64") == pytest.approx(1)
    # H100 PCIe datasheet: 1,513 TFLOPS BF16 sparse -> 756 dense (114 SMs, lower clock)
    assert peak("h100-pcie-80gb", "bf16") == pytest.approx(756, abs=1)


def test_mi300x_peaks():
    # AMD MI300X: 2100 MHz x 1216 matrix cores x 256 bf16 FMA x 2 = 1307.4 TFLOPS (dense)
    implied = 2100e6 * 1216 * 256 * 2 / 1e12
    assert implied == pytest.approx(1307.4, abs=0.1)
    assert peak("mi300x", "bf16") == pytest.approx(1307.4, abs=0.1)
    assert peak("mi300x", "fp8") == pytest.approx(2614.9, abs=0.1)
    assert peak("mi325x", "bf16") == pytest.approx(1307.4, abs=0.1)  # same compute die


def test_mi355x_and_mi250x_peaks():
    # MI355X: 2400 MHz x 1024 matrix cores x 512 FMA x 2 = 2516.6 (AMD prints "2.5 PF")
    assert peak("mi355x", "bf16") == pytest.approx(2400e6 * 1024 * 512 * 2 / 1e12, abs=0.1)
    # MI350X: the same die at 2.2 GHz (Hot Chips 2025), AMD prints "2.3 PF"
    assert peak("mi350x", "bf16") == pytest.approx(2200e6 * 1024 * 512 * 2 / 1e12, abs=0.1)
    assert round(peak("mi350x", "bf16") / 1000, 1) == 2.3
    # AMD prints 383 TFLOPS for the 2-GCD MI250X package; software sees each GCD as a GPU
    # (OLCF Frontier user guide), so the catalog's mi250x is one GCD: half, and 110 CUs x 1024
    # bf16 FLOP/clk (4 matrix cores x 256) x 1.7 GHz
    assert peak("mi250x", "bf16") == pytest.approx(383 / 2)
    assert peak("mi250x", "bf16") == pytest.approx(110 * 1024 * 1.7e9 / 1e12, rel=1e-3)
    assert get_device("mi250x").sm_count == 220 // 2
    assert "2-GCD" in get_device("mi250x").sources["peak_tflops"]
    # MAMF (ml-engineering): one GCD's bf16 matmul reaches 147.0 of 191.5 TFLOPS
    assert get_device("mi250x").gemm_efficiency == pytest.approx(147.0 / 191.5, abs=0.005)


def test_cdna4_fp8_gemm_rates_are_the_measured_ones():
    # AMD's CDNA4 FP8 GEMM blog (2026-03-10, ROCm 7.1.0): hipBLASLt e4m3 8192^3 3130.21 TFLOP/s
    # on an MI355X; HipKittens' files (ROCm 7.0 preview): MI350X hipBLASLt FP8 8192^3 2660.15,
    # bf16 (PyTorch / AITER) 1255.8 / 1292.5 TFLOP/s
    assert get_device("mi355x").gemm_efficiency_fp8 == pytest.approx(3130.21 / 5033.2, abs=0.005)
    assert get_device("mi350x").gemm_efficiency_fp8 == pytest.approx(2660.15 / 4613.7, abs=0.005)
    assert 1255.8 / 2306.9 <= get_device("mi350x").gemm_efficiency <= 1292.5 / 2306.9
    # CDNA3 stays where Azure's MI300X run put it: FP8 below bf16, unlike CDNA4
    assert get_device("mi300x").gemm_efficiency_fp8 < get_device("mi300x").gemm_efficiency


def test_b300_sustains_the_b200s_clock_share():
    # assumed equal (flashinfer PR #2899's B200 series); both power-limited under dense GEMMs
    assert get_device("b300").sustained_gemm_fraction == get_device("b200").sustained_gemm_fraction
    assert "ASSUMED" in get_device("b300").sources["sustained_gemm_fraction"]


def test_blackwell_peaks():
    # DGX B200: 72 PFLOPS FP8 (sparse) for 8 GPUs -> 9 sparse -> 4.5 dense per GPU; bf16 half of fp8
    assert peak("b200", "fp8") == pytest.approx(72_000 / 8 / 2)
    assert peak("b200", "bf16") == pytest.approx(2250)
    # GB200 NVL72: 360 PF BF16 sparse over 72 GPUs -> 2500 dense per GPU
    assert peak("gb200", "bf16") == pytest.approx(360_000 / 72 / 2)
    # GB300 NVL72: 1,080 PF dense FP4 over 72 GPUs -> 15000 per GPU
    assert peak("gb300", "fp4") == pytest.approx(1_080_000 / 72)
    # Blackwell Ultra trades FP64 away (~1.3 TFLOPS vs 40+ on B200)
    assert peak("b300", "fp64") < 2 < peak("b200", "fp64")


def test_ada_and_jetson_peaks():
    # L40S datasheet: 733 TFLOPS BF16 with sparsity -> 362 dense
    assert peak("l40s", "bf16") == pytest.approx(362, abs=1)
    # RTX 4090 (Ada whitepaper): FP16 w/ FP32 accumulate 165.2 dense (GeForce half rate)
    assert peak("rtx-4090", "bf16") == pytest.approx(165.2, abs=0.1)
    # Jetson AGX Orin GPU: 170 sparse INT8 TOPS -> 85 dense; FP16 half of INT8
    assert peak("jetson-agx-orin-64gb", "int8") == pytest.approx(170 / 2)
    assert peak("jetson-agx-orin-64gb", "fp16") == pytest.approx(85 / 2)


def test_memory_figures():
    expected_gib = {
        "v100-sxm2-32gb": 32,
        "a100-sxm4-40gb": 40,
        "a100-sxm4-80gb": 80,
        "h100-sxm-80gb": 80,
        "h100-sxm-96gb": 96,
        "h200-sxm-141gb": 141,
        "b200": 180,  # DGX B200: 1,440 GB / 8
        "b300": 288,
        "mi250x": 64,  # one GCD: OLCF "8 separate GPUs, each having 64 GB" (128 per package)
        "mi300x": 192,
        "mi325x": 256,
        "mi355x": 288,
        "mi350x": 288,
        "l40s": 48,
        "rtx-4090": 24,
        "jetson-agx-orin-64gb": 64,
    }
    for n, gib in expected_gib.items():
        assert get_device(n).memory_gib == pytest.approx(gib), n
    expected_tbps = {
        "a100-sxm4-40gb": 1.555,
        "a100-sxm4-80gb": 2.039,
        "h100-sxm-80gb": 3.35,
        "h100-sxm-96gb": 2.4,  # torchtitan's benchmark page: "96GB HBM2e with 2.4 TB/sec"
        "h200-sxm-141gb": 4.8,
        "b200": 8.0,
        "mi300x": 5.3,
        "mi325x": 6.0,
    }
    for n, tbps in expected_tbps.items():
        assert get_device(n).memory_bandwidth_tbps == pytest.approx(tbps), n


def test_scaleup_per_direction():
    # NVLink figures are bidirectional totals: 900 GB/s (NVLink4) => 450 each way;
    # 600 (NVLink3) => 300; 1.8 TB/s (NVLink5) => 900; 300 (NVLink2) => 150; H800 400 => 200.
    per_dir = {
        "h100-sxm-80gb": 900 / 2,
        "h200-sxm-141gb": 900 / 2,
        "a100-sxm4-80gb": 600 / 2,
        "b200": 1800 / 2,
        "gb200": 1800 / 2,
        "v100-sxm2-32gb": 300 / 2,
        "h800-sxm-80gb": 400 / 2,
        "mi300x": 7 * 128 / 2,  # 7 xGMI links x 128 GB/s bidirectional
    }
    for n, gbs in per_dir.items():
        assert get_device(n).scaleup_gbps_per_direction == pytest.approx(gbs), n
    assert get_device("h100-sxm-80gb").scaleup_bandwidth_si == pytest.approx(450e9)
    # PCIe-only parts fall back to PCIe for scale-up
    assert get_device("l40s").scaleup_bandwidth_si == pytest.approx(32e9)


def test_power_limits():
    assert get_device("h100-sxm-80gb").tdp_w == 700
    assert get_device("h100-sxm-96gb").tdp_w == 500  # torchtitan's power-capped part
    assert get_device("v100-sxm3-32gb").tdp_w == 450  # DGX-2H


# --------------------------------------------------------------------------- invariants


@pytest.mark.parametrize("name", sorted(e["name"] for e in _raw("devices")["devices"]))
def test_dtype_ordering_and_efficiencies(name):
    d = get_device(name)
    chain = [getattr(d.peak_tflops, t) for t in ("fp4", "fp8", "bf16", "tf32", "fp32")]
    present = [v for v in chain if v is not None]
    assert present == sorted(present, reverse=True), f"{name}: {chain}"
    if d.peak_tflops.bf16 and d.peak_tflops.fp16:
        assert d.peak_tflops.bf16 == pytest.approx(d.peak_tflops.fp16)
    assert 0.3 < d.gemm_efficiency <= 1
    assert 0.3 < d.memory_bw_efficiency <= 1
    assert all(t > 0 for t in d.gemm_tile)
    assert d.supported_dtypes() and set(d.supported_dtypes()) <= set(DTYPES)
    assert d.peak_flops(d.sixteen_bit_dtype) > 0  # every device computes in 16 bits


def test_aliases_resolve_uniquely(raw_devices):
    owner: dict[str, str] = {}
    for e in raw_devices:
        for alias in (e["name"], *e.get("aliases", [])):
            key = _norm(alias)
            assert owner.setdefault(key, e["name"]) == e["name"], (
                f"{alias!r} is claimed by {owner[key]} and {e['name']}"
            )
    for key, name in owner.items():
        assert get_device(key).name == name


@pytest.mark.parametrize(("spelling", "name"), sorted(VALIDATION_SPELLINGS.items()))
def test_validation_spellings_resolve(spelling, name):
    assert get_device(spelling).name == name
    assert get_device(spelling.upper()).name == name  # case-insensitive


# --------------------------------------------------------------------------- systems


def test_required_systems_present(raw_systems):
    names = [s["name"] for s in raw_systems]
    assert len(names) == len(set(names))
    assert not [n for n in REQUIRED_SYSTEMS if n not in names]
    assert set(systems()) == set(names)


@pytest.mark.parametrize("sysname", [s["name"] for s in _raw("systems")["systems"]])
def test_system_is_buildable(sysname):
    s = dict(systems()[sysname])
    assert set(s) <= SYSTEM_KEYS, set(s) - SYSTEM_KEYS
    assert s["device"] in devices(), f"{sysname}: unknown device {s['device']}"
    assert s.get("source", "").strip()
    # an NVLink SHARP figure names where it was measured
    assert ("nvls_allreduce_algbw_gbps" in s) == bool(s.get("nvls_source", "").strip())
    # so does a host memory figure, and the figure is the product its source spells out
    assert ("host_memory_gbps_per_node" in s) == bool(s.get("host_memory_source", "").strip())
    if "host_memory_gbps_per_node" in s:
        assert f"{s['host_memory_gbps_per_node']:g} GB/s" in s["host_memory_source"]
    drop = ("name", "source", "nvls_source", "host_memory_source")
    fields = {k: v for k, v in s.items() if k not in drop}
    fields["device"] = get_device(fields["device"])
    dom = fields.get("scaleup_domain") or fields["gpus_per_node"]
    c = Cluster(n_gpus=max(dom, fields["gpus_per_node"]) * 2, **fields)
    assert c.domain == dom
    assert c.inter_link().bandwidth > 0


def test_system_figures():
    s = systems()
    # host DRAM: sockets x channels x MT/s x 8 bytes (CPU data sheets; DGX H100: 2x Xeon
    # Platinum 8480C, 8 channels of DDR5-4800 each; DGX A100: 2x EPYC 7742, 8 of DDR4-3200)
    assert s["dgx-h100"]["host_memory_gbps_per_node"] == pytest.approx(2 * 8 * 4800 * 8 / 1e3)
    assert s["dgx-a100"]["host_memory_gbps_per_node"] == pytest.approx(2 * 8 * 3200 * 8 / 1e3)
    assert s["dgx-h100"]["nic_gbps_per_gpu"] == 400  # 8x ConnectX-7 NDR 400 Gb/s
    assert s["dgx-a100"]["nic_gbps_per_gpu"] == 200  # 8x ConnectX-6 HDR 200 Gb/s
    assert s["dgx-v100"]["nic_gbps_per_gpu"] == 8 * 100 / 16  # DGX-2H: 8x EDR for 16 GPUs
    assert s["gb200-nvl72"]["scaleup_domain"] == 72
    assert s["gb200-nvl72"]["gpus_per_node"] == 4


def test_make_cluster_uses_reference_preset():
    c = make_cluster("h100-sxm-80gb", gpus=16)
    assert c.nic_gbps_per_gpu == 400 and c.domain == 8
    c = make_cluster("gb200", gpus=144)
    assert c.domain == 72 and c.gpus_per_node == 4
    c = make_cluster("NVIDIA V100-SXM3-32GB", gpus=512)
    assert c.gpus_per_node == 16 and c.nic_gbps_per_gpu == 50


def test_frontier_node_is_eight_gcds():
    # OLCF Frontier user guide: 4 MI250X = 8 GCDs per node, seen as 8 GPUs; 4 Slingshot-11
    # NICs of 200 Gb/s, one per MI250X, so 100 Gb/s per GCD
    from hwtune.hardware.cluster import make_cluster

    cl = make_cluster("mi250x", 16)
    assert (cl.gpus_per_node, cl.scaleup_domain) == (8, 8)
    assert cl.nic_gbps_per_gpu * cl.gpus_per_node == 4 * 200
    assert get_device("AMD Instinct MI250X").name == "mi250x"  # what torch names a GCD
