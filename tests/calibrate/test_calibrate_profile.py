"""Device profiles as plain data (no torch): file round-trip, interpolation invariants, the
alpha-beta fit, bad files, and the refusal of another device's profile."""

from __future__ import annotations

import json
import math

import pytest
import yaml
from calib_profile_data import make_doc
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hwtune.errors import HwtuneInputError
from hwtune.hardware.catalog import get_device
from hwtune.hardware.device import load_device_file
from hwtune.hardware.profile import (
    AttentionPoint,
    CollectivePoint,
    DeviceProfile,
    GemmPoint,
    SizedPoint,
    attach_profile,
    load_profile_file,
)


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_round_trip(tmp_path, suffix):
    doc = make_doc()
    p = tmp_path / f"prof{suffix}"
    p.write_text(json.dumps(doc) if suffix == ".json" else yaml.safe_dump(doc))
    dev = load_device_file(p)
    assert dev.name == "Test CPU" and dev.profile is not None
    assert len(dev.profile.gemm) == 2 and dev.profile.skipped[0].reason == "no native bf16"
    # the profile written back as data loads to an equal profile
    again = DeviceProfile(**dev.profile.model_dump())
    assert again == dev.profile and hash(again) == hash(dev.profile)


def test_version1_files_without_new_fields_load(tmp_path):
    doc = make_doc()
    del doc["skipped"]
    for e in doc["elementwise"]:
        del e["op"]
    p = tmp_path / "old.yaml"
    p.write_text(yaml.safe_dump(doc))
    assert load_device_file(p).profile.elementwise_time(3e5) == pytest.approx(1e-5)


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d["gemm"][0].update(m=-4), "gemm.0.m"),
        (lambda d: d["collectives"][0].update(op="broadcast_all"), "collectives.0.op"),
        (lambda d: d["memory"].pop("copy_bytes_per_s"), "memory.copy_bytes_per_s"),
        (lambda d: d["attention"][0].update(phase="sideways"), "attention.0.phase"),
        (lambda d: d.update(gemmz=[]), "gemmz"),
    ],
)
def test_malformed_profile_names_the_field(tmp_path, mutate, field):
    doc = make_doc()
    mutate(doc)
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(doc))
    with pytest.raises(HwtuneInputError) as e:
        load_device_file(p)
    assert field in str(e.value) and "\n" not in str(e.value)


def test_bad_device_block_names_the_field(tmp_path):
    doc = make_doc()
    doc["device"]["sm_count"] = 0
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(doc))
    with pytest.raises(HwtuneInputError, match="sm_count"):
        load_device_file(p)


@pytest.mark.parametrize("ver", [0, 2, "1", None])
def test_incompatible_version_refused(tmp_path, ver):
    p = tmp_path / "v.yaml"
    p.write_text(yaml.safe_dump(make_doc(profile_version=ver)))
    with pytest.raises(HwtuneInputError, match="profile_version"):
        load_profile_file(p)


def test_not_a_profile(tmp_path):
    p = tmp_path / "x.yaml"
    p.write_text("profile_version: 1\ngemm: []\n")
    with pytest.raises(HwtuneInputError, match="device"):
        load_profile_file(p)
    p.write_text("profile_version: [1\n")
    with pytest.raises(HwtuneInputError, match="valid YAML"):
        load_profile_file(p)
    with pytest.raises(HwtuneInputError, match="readable"):
        load_profile_file(tmp_path / "missing.yaml")


def test_attach_profile_refuses_another_device(tmp_path):
    h100 = get_device("h100-sxm-80gb")
    p = tmp_path / "cpu.yaml"
    p.write_text(yaml.safe_dump(make_doc()))
    with pytest.raises(HwtuneInputError, match="device.name"):
        attach_profile(h100, p)
    doc = make_doc()
    doc["device"]["name"] = h100.name.upper()
    p.write_text(yaml.safe_dump(doc))
    dev = attach_profile(h100, p)
    assert dev.profile is not None and dev.peak_flops("bf16") == h100.peak_flops("bf16")


# ---- interpolation invariants ------------------------------------------------------------------
dims = st.sampled_from([1, 16, 64, 256, 1024, 4096])
rates = st.floats(min_value=1e9, max_value=1e12)


@st.composite
def gemm_profiles(draw: st.DrawFn) -> DeviceProfile:
    shapes = draw(st.lists(st.tuples(dims, dims, dims), min_size=1, max_size=12, unique=True))
    pts = []
    for m, n, k in shapes:
        r = draw(rates)
        pts.append(GemmPoint(dtype="fp32", m=m, n=n, k=k, seconds=2.0 * m * n * k / r))
    return DeviceProfile(gemm=tuple(pts))


@given(gemm_profiles())
@settings(max_examples=60, deadline=None)
def test_gemm_rate_exact_at_measured_points(prof):
    """Each measured shape gets its time, unless a measured shape at least as large in m, n
    and k ran faster: then that time (the time never falls as a dimension grows)."""
    for p in prof.gemm:
        t = min(q.seconds for q in prof.gemm if q.m >= p.m and q.n >= p.n and q.k >= p.k)
        assert prof.gemm_rate(p.m, p.n, p.k, "fp32") == pytest.approx(p.flops / t)
    assert prof.gemm_rate(64, 64, 64, "bf16") is None


@given(gemm_profiles(), st.integers(1, 8192), st.integers(1, 8192), st.integers(1, 8192))
@settings(max_examples=100, deadline=None)
def test_gemm_rate_within_measured_range(prof, m, n, k):
    """Never faster than the fastest measured rate, never quicker than the quickest measured
    time (below the measured shapes the time is held, not the rate)."""
    rs = [p.flops / p.seconds for p in prof.gemm]
    r = prof.gemm_rate(m, n, k, "fp32")
    assert r <= max(rs) * (1 + 1e-9)
    assert 2.0 * m * n * k / r >= min(p.seconds for p in prof.gemm) * (1 - 1e-9)


@given(st.lists(st.floats(1e3, 1e9), min_size=2, max_size=8, unique=True), st.floats(1e8, 1e11))
@settings(max_examples=60, deadline=None)
@example(sizes=[1000.0, 1000.0000000000001], bw=1e8)  # sizes one rounding step apart
def test_elementwise_time_monotone_for_a_constant_bandwidth(sizes, bw):
    prof = DeviceProfile(elementwise=tuple(SizedPoint(op="add", bytes=s, seconds=s / bw)
                                           for s in sizes))  # fmt: skip
    xs = sorted(sizes + [min(sizes) / 3, max(sizes) * 3])
    ts = [prof.elementwise_time(x) for x in xs]
    assert all(b >= a for a, b in zip(ts, ts[1:], strict=False))
    for x, t in zip(xs, ts, strict=True):
        assert t == pytest.approx(x / bw, rel=1e-9)


def test_elementwise_time_is_the_median_over_ops():
    pts = [
        SizedPoint(op=o, bytes=1e6, seconds=s) for o, s in (("a", 1e-4), ("b", 2e-4), ("c", 9e-4))
    ]
    prof = DeviceProfile(elementwise=tuple(pts))
    assert prof.elementwise_time(1e6) == pytest.approx(2e-4)
    assert prof.elementwise_time(2e6) == pytest.approx(4e-4)  # extrapolated per op
    assert DeviceProfile().elementwise_time(1e6) is None


def _attn(flops: float, secs: float, phase: str = "fwd", seq_q: int = 512) -> AttentionPoint:
    return AttentionPoint(dtype="fp32", phase=phase, batch=1, heads=8, seq_q=seq_q, seq_k=512,
                          head_dim=64, flops=flops, seconds=secs)  # fmt: skip


def test_attention_rate_interpolates_in_log_flops():
    prof = DeviceProfile(attention=(_attn(1e8, 1e8 / 2e10), _attn(1e10, 1e10 / 6e10),
                                    _attn(1e6, 1e6 / 1e9, seq_q=1)))  # fmt: skip
    assert prof.attention_rate("fwd", "fp32", flops=1e8) == pytest.approx(2e10)
    assert prof.attention_rate("fwd", "fp32", flops=1e10) == pytest.approx(6e10)
    mid = prof.attention_rate("fwd", "fp32", flops=1e9)
    assert 2e10 < mid < 6e10
    # log(time per FLOP) is linear in log(FLOPs) between the neighbours: 1e9 is the geometric
    # midpoint of 1e8 and 1e10, so its time per FLOP is the geometric mean of theirs
    assert 1 / mid == pytest.approx(math.sqrt(1 / 2e10 * 1 / 6e10))
    assert prof.attention_rate("fwd", "fp32", flops=1e12) == pytest.approx(6e10)  # clamped
    assert prof.attention_rate("fwd", "fp32", decode=True) == pytest.approx(1e9)
    assert prof.attention_rate("bwd", "fp32", flops=1e9) is None
    assert prof.attention_rate("fwd", "fp32") == pytest.approx(6e10)  # median without flops


@given(
    st.floats(1e-6, 1e-3),
    st.floats(1e8, 1e11),
    st.lists(st.integers(2, 16), min_size=1, max_size=3),
    st.sampled_from(["all_reduce", "all_gather", "reduce_scatter"]),
)
@settings(max_examples=80, deadline=None)
def test_collective_fit_recovers_ring_alpha_beta(alpha, beta, ranks, op):
    c = 2.0 if op == "all_reduce" else 1.0
    pts = [
        CollectivePoint(op=op, ranks=n, bytes=s,
                        seconds=c * (n - 1) * alpha + c * (n - 1) / n * s / beta)
        for n in ranks for s in (1024.0, 65536.0, 4.0 * 2**20, 64.0 * 2**20)
    ]  # fmt: skip
    a, b = DeviceProfile(collectives=tuple(pts)).collective_fit(op)
    assert a == pytest.approx(alpha, rel=1e-6, abs=1e-12)
    assert b == pytest.approx(beta, rel=1e-6)


def test_collective_fit_needs_two_points():
    one = CollectivePoint(op="all_reduce", ranks=2, bytes=1e6, seconds=1e-3)
    assert DeviceProfile(collectives=(one,)).collective_fit() is None
    assert DeviceProfile().collective_fit("all_to_all") is None


def test_hash_ignores_cached_curves():
    prof = DeviceProfile(elementwise=(SizedPoint(op="a", bytes=1e6, seconds=1e-4),))
    h = hash(prof)
    prof.elementwise_time(5e5)
    assert hash(prof) == h and prof == DeviceProfile(**prof.model_dump())
    assert math.isfinite(prof.elementwise_time(5e5))


# ---- decode-size GEMMs with cold weights ---------------------------------------------------------
BW = 1.2e10  # weight bytes/s of a memory-bound CPU core (STREAM copy scale)
LAUNCH = 5e-6


def _cold(m: int, n: int, k: int, seconds: float) -> GemmPoint:
    return GemmPoint(dtype="fp32", m=m, n=n, k=k, seconds=seconds, cold=True)


def _streaming_profile(rows=(1, 2, 4, 8, 16), flops_rate=4e10) -> DeviceProfile:
    """Cold points of a device where a decode GEMM costs a launch plus the slower of reading its
    fp32 weight at BW and its FLOPs at ``flops_rate`` (the roofline), on the bench's square
    grid; plus hot square points far above (which must not be used for small m)."""
    pts = [
        _cold(m, d, d, LAUNCH + max(4.0 * d * d / BW, 2.0 * m * d * d / flops_rate))
        for m in rows for d in (64, 256, 1024, 4096)
    ]  # fmt: skip
    pts += [GemmPoint(dtype="fp32", m=d, n=d, k=d, seconds=2.0 * d**3 / 1.5e11)
            for d in (64, 256, 1024)]  # fmt: skip
    return DeviceProfile(gemm=tuple(pts))


@pytest.mark.parametrize("n,k", [(1536, 512), (512, 1536), (128, 512), (8192, 512)])
def test_weight_bound_decode_gemm_is_priced_at_weight_bytes_over_bandwidth(n, k):
    """A batch-1 decode GEMM reads its weight once from memory: launch + 4nk/BW, also for
    weight shapes the bench did not measure (non-square, between the grid sizes)."""
    prof = _streaming_profile()
    t = prof.cold_gemm_time(1, n, k, "fp32")
    assert t == pytest.approx(LAUNCH + 4.0 * n * k / BW, rel=0.02)
    assert prof.gemm_rate(1, n, k, "fp32") == pytest.approx(2.0 * n * k / t)


def test_cold_time_is_linear_in_rows_between_measured_counts():
    """m = 3 lies between the weight-bound m = 2 and 4: the same time (the weight read); m = 12
    between 8 and 16, both FLOP-bound: 2mnk / rate. Above the cold rows, the hot grid, but
    never below the largest cold row count's time (this test pinned the hot rate at m = 17
    and 1024, a 75x drop, before 2026-12-02)."""
    fast = _streaming_profile(rows=(1, 2, 4), flops_rate=4e10)
    t2, t3 = fast.cold_gemm_time(2, 1024, 1024, "fp32"), fast.cold_gemm_time(3, 1024, 1024, "fp32")
    assert t3 == pytest.approx(t2, rel=1e-9)
    slow = _streaming_profile(rows=(8, 16), flops_rate=2e9)
    t12 = slow.cold_gemm_time(12, 1024, 1024, "fp32")
    assert t12 == pytest.approx(LAUNCH + 2.0 * 12 * 1024 * 1024 / 2e9, rel=1e-9)
    assert slow.cold_gemm_time(17, 1024, 1024, "fp32") is None
    # above the cold rows the hot points (75x faster here) do not drop the time below the
    # 16-row cold GEMM's on the same weight: it reads that weight and has more rows
    t16 = LAUNCH + 2.0 * 16 * 1000 * 1000 / 2e9
    assert slow.gemm_rate(17, 1000, 1000, "fp32") == pytest.approx(2.0 * 17 * 1000**2 / t16)
    t16 = LAUNCH + 2.0 * 16 * 1024**2 / 2e9
    assert slow.gemm_rate(1024, 1024, 1024, "fp32") == pytest.approx(2.0 * 1024**3 / t16)
    assert slow.gemm_rate(4096, 4096, 4096, "fp32") == pytest.approx(1.5e11)  # hot, slower


def test_profiles_without_cold_points_interpolate_as_before(tmp_path):
    hot = DeviceProfile(
        gemm=(
            GemmPoint(dtype="fp32", m=1, n=1024, k=1024, seconds=1e-4),
            GemmPoint(dtype="fp32", m=256, n=256, k=256, seconds=3e-4),
        )
    )
    assert hot.cold_gemm_time(1, 1024, 1024, "fp32") is None
    assert hot.gemm_rate(1, 1024, 1024, "fp32") == pytest.approx(2.0 * 1024 * 1024 / 1e-4)
    doc = make_doc()
    doc["gemm"].append({"dtype": "fp32", "m": 4, "n": 256, "k": 256, "batch": 1,
                        "seconds": 3e-5, "cold": True})  # fmt: skip
    f = tmp_path / "p.yaml"
    f.write_text(yaml.safe_dump(doc))
    _, prof = load_profile_file(f)
    assert prof.cold_gemm_time(4, 256, 256, "fp32") == pytest.approx(3e-5)
    assert prof.cold_gemm_time(4, 256, 256, "bf16") is None


ROWS = st.sampled_from([1, 2, 4, 8, 16])
SIDES = st.sampled_from([64, 256, 1024, 4096])


@given(st.lists(st.tuples(ROWS, SIDES), min_size=1, max_size=12, unique=True),
       st.floats(1e9, 1e11), st.integers(1, 16), st.integers(1, 8192),
       st.integers(1, 8192))  # fmt: skip
@settings(max_examples=80, deadline=None)
def test_cold_time_grows_with_the_weight(pts, bw, m, n, k):
    """With measured times that grow with the weight (launch + bytes / bandwidth), the
    interpolated time never shrinks when the weight grows, and is positive."""
    prof = DeviceProfile(gemm=tuple(_cold(r, d, d, LAUNCH + 4.0 * d * d / bw) for r, d in pts))
    if m > max(r for r, _ in pts):
        assert prof.cold_gemm_time(m, n, k, "fp32") is None
        return
    t = prof.cold_gemm_time(m, n, k, "fp32")
    assert t > 0
    assert prof.cold_gemm_time(m, 2 * n, k, "fp32") >= t * (1 - 1e-9)


def test_grouped_cold_gemm_is_one_kernel():
    """A batch of weight-streaming GEMMs (MoE experts) is one grouped kernel: one fixed cost,
    the weights of all experts streamed: the time of one GEMM against their stacked weight."""
    prof = DeviceProfile(gemm=[
        {"dtype": "fp8", "m": 1, "n": n, "k": n, "batch": 1, "cold": True,
         "seconds": 3e-6 + n * n / 4e12}
        for n in (256, 1024, 4096, 16384)
    ])  # fmt: skip
    one = 2.0 * 1 * 4096 * 4096 / prof.gemm_rate(1, 4096, 4096, "fp8")
    grouped = 2.0 * 32 * 4096 * 4096 / prof.gemm_rate(1, 4096, 4096, "fp8", batch=32)
    assert one == pytest.approx(3e-6 + 4096**2 / 4e12, rel=1e-6)
    assert grouped == pytest.approx(3e-6 + 32 * 4096**2 / 4e12, rel=0.05)
    assert grouped < 32 * one
