"""`implausible_points` on collectives (against the sum of a rank's links, all-reduce by its
algbw so that NVLink SHARP passes) and on memory-bound ops larger than the cache (against the
memory bandwidth, for the bytes beyond the cache): named on load, left out by the bench."""

from __future__ import annotations

import json

import pytest
import yaml
from calib_profile_data import make_doc
from hypothesis import given, settings
from hypothesis import strategies as st

from hwtune.errors import HwtuneInputError
from hwtune.hardware.catalog import get_device
from hwtune.hardware.device import load_device_file
from hwtune.hardware.profile import (
    PLAUSIBLE_MARGIN,
    CollectivePoint,
    DeviceProfile,
    SizedPoint,
    attach_profile,
    implausible_points,
)

LIMIT = 1.0 + PLAUSIBLE_MARGIN
H100_LINKS = (450 + 64) * 1e9  # devices.yaml h100-sxm-80gb: NVLink4 450 + PCIe Gen5 64 each way
H100_TOP = LIMIT * H100_LINKS
GIB = 2**30
OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "send_recv")

H100_FIELDS = {
    "name": "NVIDIA H100 80GB HBM3", "vendor": "nvidia", "form_factor": "SXM5",
    "peak_tflops": {"fp32": 67.0, "bf16": 989.4}, "memory_gib": 80.0,
    "memory_bandwidth_tbps": 3.35, "sm_count": 132, "l2_cache_mib": 50.0,
    "boost_clock_mhz": 1980.0, "tdp_w": 700.0, "scaleup_link": "NVLink4",
    "scaleup_gbps_per_direction": 450.0, "pcie_gbps_per_direction": 64.0,
    "sources": {"memory_bandwidth_tbps": "catalog h100-sxm-80gb data sheet"},
}  # fmt: skip
"""A bench profile's device of an H100 SXM (the catalog's links and bandwidth, as
`device_info.with_catalog_links` writes them)."""


def _with(device, collectives=(), elementwise=()):
    prof = DeviceProfile(collectives=tuple(collectives), elementwise=tuple(elementwise))
    return device.model_copy(update={"profile": prof})


def _busbw_point(op: str, n: int, nbytes: float, busbw_gbs: float) -> CollectivePoint:
    """A point measured at ``busbw_gbs`` (nccl-tests busbw, GB/s)."""
    factor = {"all_reduce": 2.0 * (n - 1) / n, "send_recv": 1.0}.get(op, (n - 1) / n)
    return CollectivePoint(
        op=op, ranks=n, bytes=nbytes, seconds=nbytes * factor / (busbw_gbs * 1e9)
    )


def _sized(nbytes: float, tbps: float, op: str = "add") -> SizedPoint:
    return SizedPoint(op=op, bytes=nbytes, seconds=nbytes / (tbps * 1e12))


def _gpu_doc(**over) -> dict:
    doc = make_doc(**over)
    doc["device"] = dict(H100_FIELDS)
    return doc


def _refused(tmp_path, doc, *words) -> str:
    p = tmp_path / "prof.yaml"
    p.write_text(yaml.safe_dump(doc))
    with pytest.raises(HwtuneInputError) as e:
        load_device_file(p)
    line = str(e.value)
    assert "\n" not in line and all(w in line for w in words), line
    return line


# ---- collectives ------------------------------------------------------------------------------


def test_published_nvls_and_nvlink_collectives_pass():
    """nccl-tests on 8 H100s with NVLink SHARP: all-reduce ~480 GB/s busbw (NCCL maintainer,
    nccl-tests #212), 473.6 at 4 GiB (#290), 482 (#309); ring and the other collectives
    ~370 GB/s busbw (#212); 8 H200s 475 (#272); one GB200 NVL72 rack, 72 GPUs: 839.16 busbw,
    425.49 algbw at 4 GiB (CoreWeave nccl-tests README). Points at several sizes, so the
    alpha-beta fit is checked too."""
    small = 2**20
    pts = [
        _busbw_point("all_reduce", 8, small, 60.0),
        _busbw_point("all_reduce", 8, GIB, 460.0),
        _busbw_point("all_reduce", 8, 4 * GIB, 480.0),
        _busbw_point("all_reduce", 8, 4 * GIB, 482.0),
        _busbw_point("all_reduce", 8, 4 * GIB, 473.6),
        *(_busbw_point(op, 8, s, bw) for op in ("reduce_scatter", "all_gather", "all_to_all")
          for s, bw in ((small, 40.0), (4 * GIB, 370.0))),
        _busbw_point("send_recv", 2, small, 30.0),
        _busbw_point("send_recv", 2, 4 * GIB, 380.0),
    ]  # fmt: skip
    h100 = _with(get_device("h100"), pts)
    assert h100.profile.collective_fit("all_reduce") is not None
    assert implausible_points(h100) == []
    assert implausible_points(_with(get_device("h200"), pts)) == []
    nvl72 = [_busbw_point("all_reduce", 72, small, 50.0),
             _busbw_point("all_reduce", 72, 4 * GIB, 839.16)]  # fmt: skip
    assert 4 * GIB / nvl72[1].seconds == pytest.approx(425.49e9, rel=1e-3)  # its algbw
    assert implausible_points(_with(get_device("gb200"), nvl72)) == []


def test_all_reduce_is_held_to_its_algbw_not_its_busbw():
    """NVLS moves S(1 + 1/n) per GPU each way (`cost.collectives._nvls_algbw`): at the switch's
    limit 8 H100s reach algbw 450 x 8/9 = 400 GB/s, busbw 700, above the 591 GB/s ceiling. Such
    an all-reduce is physical and passes; an algbw above the ceiling is not."""
    at_limit = CollectivePoint(op="all_reduce", ranks=8, bytes=4 * GIB,
                               seconds=4 * GIB / (450e9 * 8 / 9))  # fmt: skip
    assert 2 * 7 / 8 * 4 * GIB / at_limit.seconds > H100_TOP  # its busbw is over the ceiling
    assert implausible_points(_with(get_device("h100"), [at_limit])) == []
    over = at_limit.model_copy(update={"seconds": 4 * GIB / (1.02 * H100_TOP)})
    (bad,) = implausible_points(_with(get_device("h100"), [at_limit, over]))
    assert bad[0] == "collectives[1]" and "algbw" in bad[1] and "514 GB/s" in bad[2]


def test_a_busbw_above_the_links_is_refused_on_load(tmp_path):
    doc = _gpu_doc()
    doc["collectives"] = [p.model_dump() for p in (
        _busbw_point("all_gather", 8, 2**20, 40.0),
        _busbw_point("all_gather", 8, GIB, 650.0),  # 1.26x the 514 GB/s of the links
    )]  # fmt: skip
    _refused(tmp_path, doc, "prof.yaml.collectives[1]", "650 GB/s busbw", "all_gather",
             "at most 1.15 x the 514 GB/s each way", "NVLink4 450 + PCIe 64")  # fmt: skip
    doc["collectives"][1] = _busbw_point("all_gather", 8, GIB, 580.0).model_dump()
    p = tmp_path / "ok.yaml"
    p.write_text(yaml.safe_dump(doc))
    load_device_file(p)  # 1.13x: inside the margin


def test_a_catalog_device_refuses_an_attached_profile_with_a_fast_all_reduce(tmp_path):
    doc = _gpu_doc()
    doc["collectives"] = [_busbw_point("all_reduce", 8, GIB, 1200.0).model_dump()]  # algbw 686
    p = tmp_path / "prof.yaml"
    p.write_text(yaml.safe_dump(doc))
    with pytest.raises(HwtuneInputError, match=r"collectives\[0\].*686 GB/s algbw.*busbw 1.2e\+03"):
        attach_profile(get_device("h100"), p)


def _inconsistent_all_reduce() -> list[CollectivePoint]:
    """Two 8-rank all-reduces each under the ceiling (algbw 300 and 580 GB/s) whose times differ
    by 3%: their line has the 1 GiB between them move in 0.11 ms, ~9.8 TB/s."""
    return [CollectivePoint(op="all_reduce", ranks=8, bytes=GIB, seconds=GIB / 300e9),
            CollectivePoint(op="all_reduce", ranks=8, bytes=2 * GIB, seconds=2 * GIB / 580e9)]  # fmt: skip


def test_a_fit_beyond_the_links_is_named_even_when_each_point_passes(tmp_path):
    pts = _inconsistent_all_reduce()
    dev = _with(get_device("h100"), pts)
    assert all(p.bytes / p.seconds <= H100_TOP for p in pts)
    (bad,) = implausible_points(dev)
    assert bad[0] == "collectives(all_reduce fit)" and "at 8 ranks" in bad[1], bad
    doc = _gpu_doc(collectives=[p.model_dump() for p in pts])
    _refused(tmp_path, doc, "prof.yaml.collectives(all_reduce fit)", "514 GB/s")


def test_a_fit_leaves_out_the_points_already_named():
    """A point named on its own is not fitted again: with it the fit would go over the ceiling
    too, and the bench would drop every all-reduce instead of the one bad point."""
    good = [_busbw_point("all_reduce", 8, s, bw)
            for s, bw in ((2**20, 60.0), (GIB // 2, 440.0), (GIB, 460.0))]  # fmt: skip
    wild = CollectivePoint(op="all_reduce", ranks=8, bytes=8 * GIB, seconds=8 * GIB / 2000e9)
    alpha, beta = DeviceProfile(collectives=(*good, wild)).collective_fit("all_reduce")
    assert beta * 8 / 14 > H100_TOP  # fitted with it: beyond the links
    bad = implausible_points(_with(get_device("h100"), [*good, wild]))
    assert [b[0] for b in bad] == ["collectives[3]"]


def test_devices_whose_figures_bound_no_collective_are_not_checked():
    """A CPU (gloo ranks exchange through memory), a PCIe card the catalog models without the
    NVLink bridge that may join a pair (h100-pcie-80gb), the MI250X (its two GCDs of a package
    move 200 GB/s over a catalog figure of 100), a GPU the catalog does not know (no link
    figure: scaleup 0)."""
    fast = [_busbw_point("all_reduce", 2, GIB, 250.0)]  # a bridged H100 PCIe pair
    for name in ("h100-pcie-80gb", "mi250x"):
        assert implausible_points(_with(get_device(name), fast)) == []
    from hwtune.hardware.device import Device

    unknown = Device(**{k: v for k, v in H100_FIELDS.items()
                        if k not in ("scaleup_gbps_per_direction", "scaleup_link")})  # fmt: skip
    assert implausible_points(_with(unknown, fast)) == []
    cpu = Device(**make_doc()["device"])
    assert implausible_points(_with(cpu, fast)) == []
    # the same point on an NVLink H100 is checked (and passes: algbw 143 GB/s)
    assert implausible_points(_with(get_device("h100"), fast)) == []
    wild = [_busbw_point("all_reduce", 2, GIB, 1e6)]
    assert implausible_points(_with(get_device("h100"), wild))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(OPS), st.integers(2, 128), st.floats(1e3, 1e11), st.floats(1e-3, 0.999))
def test_a_point_at_or_below_the_ceiling_is_never_named(op, n, nbytes, u):
    share = 1.0 if op in ("all_reduce", "send_recv") else (n - 1) / n
    p = CollectivePoint(op=op, ranks=n, bytes=nbytes, seconds=share * nbytes / (u * H100_TOP))
    assert implausible_points(_with(get_device("h100"), [p])) == []


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(OPS), st.integers(2, 128), st.floats(1e3, 1e11), st.floats(1.001, 1e4))
def test_a_point_above_the_ceiling_is_always_named(op, n, nbytes, u):
    share = 1.0 if op in ("all_reduce", "send_recv") else (n - 1) / n
    p = CollectivePoint(op=op, ranks=n, bytes=nbytes, seconds=share * nbytes / (u * H100_TOP))
    assert [b[0] for b in implausible_points(_with(get_device("h100"), [p]))] == ["collectives[0]"]


# ---- memory-bound ops beyond the cache ---------------------------------------------------------


def test_memory_bound_ops_beyond_the_cache_are_held_to_the_memory_bandwidth(tmp_path):
    h100 = get_device("h100")  # 50 MiB L2, 3.35 TB/s
    ok = [_sized(24 * 2**20, 10.0),  # in the L2: faster than HBM is fine
          _sized(60 * 2**20, 8.0),  # 10 MiB past it: 50 of 60 MiB may still be served by it
          _sized(GIB, 3.0)]  # fmt: skip
    assert implausible_points(_with(h100, elementwise=ok)) == []
    # 1 GiB at 5 TB/s: 974 MiB must come from HBM, 1.15 x 3.35 x 1024/974 = 4.05 TB/s at most
    (bad,) = implausible_points(_with(h100, elementwise=[*ok, _sized(GIB, 5.0, "gelu")]))
    assert bad[0] == "elementwise[3]" and bad[1].startswith("5 TB/s (gelu of 1024 MiB"), bad
    assert "at most 4.05 TB/s" in bad[2] and "50 MiB cache" in bad[2]
    doc = _gpu_doc(elementwise=[p.model_dump() for p in (*ok, _sized(GIB, 5.0))])
    _refused(tmp_path, doc, "prof.yaml.elementwise[3]", "5 TB/s", "at most 4.05 TB/s",
             "memory bandwidth of NVIDIA H100 80GB HBM3 (3.35 TB/s)")  # fmt: skip


def test_the_shipped_h200_profile_passes_with_its_points_near_the_cache():
    from pathlib import Path

    h200 = Path(__file__).resolve().parents[2] / "src/hwtune/hardware/profiles/nvidia-h200-sxm.yaml"
    dev = get_device(str(h200))
    assert any(p.bytes > dev.l2_cache_mib * 2**20 for p in dev.profile.elementwise)
    assert implausible_points(dev) == []
    assert implausible_points(attach_profile(get_device("h200"), h200)) == []


def test_amd_infinity_cache_cpu_and_bench_measured_bandwidth_are_not_held_to_the_l2():
    # MI300X: 32 MiB L2 in the catalog, plus 256 MB Infinity Cache it does not count
    mi300 = get_device("mi300x")
    assert implausible_points(_with(mi300, elementwise=[_sized(128 * 2**20, 12.0)])) == []
    assert implausible_points(_with(mi300, elementwise=[_sized(4 * GIB, 12.0)]))
    # a bandwidth the bench measured (a GPU the catalog does not know) is no ceiling
    from hwtune.hardware.device import Device

    measured = {**H100_FIELDS, "name": "Some GPU", "sources": {
        "memory_bandwidth_tbps": "best of STREAM copy/scale/triad over 1024 MiB arrays, hwtune "
        "bench (memory_bw_efficiency 1.0)"}}  # fmt: skip
    assert implausible_points(_with(Device(**measured), elementwise=[_sized(GIB, 5.0)])) == []
    cpu = Device(**make_doc()["device"])  # sysfs reports one core complex's cache
    assert implausible_points(_with(cpu, elementwise=[_sized(GIB, 1.0)])) == []


@settings(max_examples=300, deadline=None)
@given(st.floats(1e3, 1e11), st.floats(1e-3, 1e4))
def test_an_op_is_named_only_beyond_the_cache_and_above_its_ceiling(nbytes, u):
    h100 = get_device("h100")
    cache, bw = 50 * 2**20, 3.35e12
    if nbytes > cache:
        top = LIMIT * bw * nbytes / (nbytes - cache)
        p = SizedPoint(bytes=nbytes, seconds=nbytes / (u * top))
    else:  # any speed
        p = SizedPoint(bytes=nbytes, seconds=nbytes / (u * 1e15))
    named = implausible_points(_with(h100, elementwise=[p])) != []
    if nbytes <= cache or u <= 0.999:
        assert not named
    elif u >= 1.001:
        assert named


# ---- the bench leaves them out -----------------------------------------------------------------


def test_bench_leaves_out_implausible_collectives_fits_and_ops(tmp_path, monkeypatch):
    from hwtune.calibrate import bench as bench_mod
    from hwtune.calibrate.bench import BenchConfig, run_bench, write_profile

    good_ar = [_busbw_point("all_reduce", 8, s, bw) for s, bw in ((2**20, 60.0), (GIB, 460.0))]
    fast_ag = _busbw_point("all_gather", 8, GIB, 900.0)
    pts = [*good_ar, fast_ag, *(_inconsistent_all_reduce()[i].model_copy(
        update={"op": "reduce_scatter"}) for i in (0, 1))]  # fmt: skip
    coll = tmp_path / "coll.json"
    coll.write_text(json.dumps({"collectives": [p.model_dump() for p in pts], "skipped": []}))
    ew = [p.model_dump() for p in (_sized(24 * 2**20, 10.0), _sized(GIB, 3.0), _sized(GIB, 6.0))]
    gemm = [{"dtype": "fp32", "m": 256, "n": 256, "k": 256, "batch": 1, "seconds": 3e-4}]
    monkeypatch.setattr(bench_mod, "bench_gemm", lambda *a, **k: [dict(p) for p in gemm])
    monkeypatch.setattr(
        bench_mod, "bench_elementwise", lambda *a, **k: ([dict(p) for p in ew], "bf16")
    )
    stream = {"copy_bytes_per_s": 3e12, "triad_bytes_per_s": 3e12, "launch_s": 5e-6,
              "array_bytes": GIB}  # fmt: skip
    monkeypatch.setattr(bench_mod, "bench_stream", lambda *a, **k: dict(stream))
    monkeypatch.setattr(bench_mod, "device_fields", lambda *a: json.loads(json.dumps(H100_FIELDS)))
    cfg = BenchConfig(sections=("gemm", "memory", "elementwise", "collectives"), budget_s=5.0,
                      threads=1, collectives_from=str(coll))  # fmt: skip
    res = run_bench(cfg)
    doc = res.document
    assert doc["collectives"] == [p.model_dump() for p in good_ar]  # the rest left out
    assert doc["elementwise"] == ew[:2]
    for name in ("collectives[2]", "collectives(reduce_scatter fit)", "elementwise[2]"):
        assert sum(name in w for w in res.warnings) == 1, (name, res.warnings)
    reasons = {s.what.split(" ")[0]: s.reason for s in res.skipped}
    assert reasons["collectives[2]"].startswith("implausible: 900 GB/s busbw")
    assert reasons["elementwise[2]"].startswith("implausible: 6 TB/s")
    p = write_profile(doc, tmp_path / "bench.yaml")
    assert len(load_device_file(p).profile.collectives) == 2  # what it wrote loads
