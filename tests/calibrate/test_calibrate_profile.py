"""Device profiles as plain data (no torch): file round-trip, interpolation invariants, the
alpha-beta fit, bad files, and the refusal of another device's profile."""

from __future__ import annotations

import json
import math

import pytest
import yaml
from calib_profile_data import make_doc
from hypothesis import given, settings
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
    for p in prof.gemm:
        assert prof.gemm_rate(p.m, p.n, p.k, "fp32") == pytest.approx(p.flops / p.seconds)
    assert prof.gemm_rate(64, 64, 64, "bf16") is None


@given(gemm_profiles(), st.integers(1, 8192), st.integers(1, 8192), st.integers(1, 8192))
@settings(max_examples=100, deadline=None)
def test_gemm_rate_within_measured_range(prof, m, n, k):
    rs = [p.flops / p.seconds for p in prof.gemm]
    r = prof.gemm_rate(m, n, k, "fp32")
    assert min(rs) * (1 - 1e-9) <= r <= max(rs) * (1 + 1e-9)


@given(st.lists(st.floats(1e3, 1e9), min_size=2, max_size=8, unique=True), st.floats(1e8, 1e11))
@settings(max_examples=60, deadline=None)
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
    # time per FLOP is linear in log(FLOPs) between the neighbours
    assert 1 / mid == pytest.approx(0.5 * (1 / 2e10 + 1 / 6e10))
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
