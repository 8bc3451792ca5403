"""A user's review of calibration: `hwtune bench` bad input, hand-corrupted profiles given as
``--gpu``, the profile used by `hwtune serve` (and said so), and invariants of the measured
curves (round trip, faster measurements never a slower step, monotone interpolation)."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import yaml
from calib_profile_data import make_doc
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from hwtune.errors import HwtuneInputError
from hwtune.hardware.device import Device, load_device_file
from hwtune.hardware.profile import (
    AttentionPoint,
    DeviceProfile,
    GemmPoint,
    SizedPoint,
)
from hwtune.model.spec import ModelSpec
from hwtune.train.estimator import estimate


def _write(tmp_path: Path, doc: object, name: str = "p.yaml") -> str:
    p = tmp_path / name
    p.write_text(json.dumps(doc) if name.endswith(".json") else yaml.safe_dump(doc))
    return str(p)


# ---- `hwtune bench` bad input: refused before the minutes of measuring --------------------
def _coll(tmp_path: Path, doc: dict) -> str:
    return _write(tmp_path, doc, "c.json")


GOOD = {"op": "all_reduce", "ranks": 2, "bytes": 1024, "seconds": 1e-5}


@pytest.mark.parametrize(
    ("doc", "field", "word"),
    [
        # an op the profile does not know, a rank count that is not whole, a key it refuses:
        # these passed the file check and failed as a traceback after the whole run
        ({"collectives": [{**GOOD, "op": "broadcast"}]}, "c.json.collectives[0].op", "broadcast"),
        ({"collectives": [{**GOOD, "ranks": 2.5}]}, "c.json.collectives[0].ranks", "2.5"),
        ({"collectives": [{**GOOD, "algbw": 3.0}]}, "c.json.collectives[0].algbw", "known"),
        # a skipped list that is not one, or holds no mappings: a traceback before the run
        ({"collectives": [GOOD], "skipped": 3}, "c.json.skipped", "3"),
        ({"collectives": [GOOD], "skipped": ["x"]}, "c.json.skipped[0]", "'x'"),
        ({"collectives": [GOOD], "skipped": [{"what": 3, "reason": "r"}]}, "skipped[0].what", "3"),
    ],
)
def test_collectives_file_checked_as_the_profile_checks_it(
    tmp_path: Path, doc: dict, field: str, word: str, rejects
):
    pytest.importorskip("torch")
    rejects(["bench", "--collectives-from", _coll(tmp_path, doc)], field, word)


@pytest.mark.parametrize(
    ("args", "field", "word"),
    [
        (["--ranks", "1"], "ranks", ">= 2"),  # ran, and recorded the section as skipped
        (["--sections", "gemm,memory", "--ranks", "2"], "ranks", "ignored"),  # was ignored
        (["--dtypes", "fp32,fp32"], "dtypes", "repeated"),  # measured the grid twice
        (["--sections", "gemm,memory,gemm"], "sections", "repeated"),
    ],
)
def test_bench_options_that_would_be_ignored_or_repeated(args: list[str], field, word, rejects):
    pytest.importorskip("torch")
    rejects(["bench", *args], field, word)


def test_unwritable_output_is_one_line_not_a_traceback(tmp_path: Path):
    from hwtune.calibrate.bench import write_profile

    target = tmp_path / "ro"
    target.mkdir()
    (target / "p.yaml").mkdir()  # a directory where the file should go: writing fails
    with pytest.raises(HwtuneInputError) as e:
        write_profile(make_doc(), target / "p.yaml")
    assert e.value.field == "output" and "writable" in e.value.expected


def test_output_dir_that_refuses_files_fails_before_the_run(rejects):
    """/proc takes no new files, yet ``os.access`` says it is writable to root: the profile was
    measured for minutes and then lost to an OSError traceback."""
    pytest.importorskip("torch")
    if not Path("/proc").is_dir():
        pytest.skip("no /proc")
    rejects(["bench", "--output", "/proc/hwtune-profile.yaml"], "output", "/proc")


# ---- corrupted profiles given as --gpu -------------------------------------------------------
EST = ["estimate", "-m", "llama3.1-8b", "--gpus", "1", "--seq", "512", "--precision", "fp32"]


def _set(path: tuple, value: object):
    def f(d: dict) -> None:
        for k in path[:-1]:
            d = d[k]
        d[path[-1]] = value

    return f


@pytest.mark.parametrize(
    ("mutate", "field", "word"),
    [
        (_set(("device",), [1]), "p.yaml.device", "[1]"),  # was a traceback
        (_set(("device",), None), "p.yaml.device", "None"),  # was a traceback
        (lambda d: d.pop("profile_version"), "p.yaml.profile_version", "None"),  # said `name`
        (_set(("profile_version",), True), "p.yaml.profile_version", "True"),  # read as 1
        (_set(("profile_version",), 1.0), "p.yaml.profile_version", "1.0"),
        (_set(("gemm", 0, "m"), True), "p.yaml.gemm.0.m", "True"),  # read as m = 1
        (_set(("gemm", 0, "seconds"), "3e-4"), "p.yaml.gemm.0.seconds", "'3e-4'"),
        (_set(("attention", 0, "causal"), "yes"), "p.yaml.attention.0.causal", "'yes'"),
        (_set(("memory", "copy_bytes_per_s"), True), "memory.copy_bytes_per_s", "True"),
        (_set(("device", "peak_tflops", "fp32"), "0.15"), "p.yaml.device.peak_tflops.fp32", "0.15"),
        (_set(("device", "memory_gib"), True), "p.yaml.device.memory_gib", "True"),
        (_set(("device", "memory_bandwidth_tbps"), math.inf), "memory_bandwidth_tbps", "inf"),
        (_set(("device", "peak_tflops", "fp32"), math.inf), "peak_tflops.fp32", "inf"),
        (_set(("device", "sm_count"), -2), "p.yaml.device.sm_count", "-2"),
        (_set(("gemm", 1, "seconds"), -1.0), "p.yaml.gemm.1.seconds", "-1.0"),
        (_set(("profile_version",), 2), "p.yaml.profile_version", "2"),
    ],
)
def test_corrupted_profile_as_gpu(tmp_path: Path, mutate, field: str, word: str, rejects):
    doc = copy.deepcopy(make_doc())  # make_doc shares its nested peak_tflops between calls
    mutate(doc)
    rejects([*EST, "--gpu", _write(tmp_path, doc)], field, word)


@pytest.mark.parametrize(("text", "word"), [("", "an empty file"), ("- 1\n- 2\n", "list")])
def test_profile_that_is_no_mapping(tmp_path: Path, text: str, word: str, rejects):
    p = tmp_path / "p.yaml"
    p.write_text(text)
    rejects([*EST, "--gpu", str(p)], "p.yaml", word)


def test_corrupted_profile_as_serve_gpu(tmp_path: Path, rejects):
    doc = make_doc()
    doc["device"] = "Test CPU"
    rejects(["serve", "--gpu", _write(tmp_path, doc)], "p.yaml.device", "Test CPU")


# ---- `hwtune serve --gpu PROFILE`: the curves are used, and the output says so -------------
def _serve(args: list[str]) -> tuple[dict, str]:
    from typer.testing import CliRunner

    from hwtune.cli.main import app

    base = ["serve", "-m", "llama3.1-8b", "--concurrency", "1", "--input-len", "256",
            "--output-len", "8", "--num-requests", "2", *args]  # fmt: skip
    r = CliRunner().invoke(app, [*base, "--json"])
    assert r.exit_code == 0, r.output
    text = CliRunner().invoke(app, base, terminal_width=300)
    assert text.exit_code == 0, text.output
    return json.loads(r.output), text.output


def test_serve_with_a_bench_profile_is_tier_2_and_says_so(tmp_path: Path):
    doc = make_doc()
    doc["device"]["peak_tflops"] = {"fp32": 0.15, "bf16": 0.6}
    doc["device"]["memory_gib"] = 80.0
    doc["device"]["memory_bandwidth_tbps"] = 1.0  # the spec sheet: 90x the measured copy
    doc["elementwise"] = [{"op": "add", "bytes": b, "seconds": 2e-6 + b / 1.1e10}
                          for b in (1e4, 1e6, 1e8)]  # fmt: skip
    prof = _write(tmp_path, doc)
    plain = _write(tmp_path, doc["device"], "device.yaml")  # the same device, no curves
    t2, out2 = _serve(["--gpu", prof])
    t1, out1 = _serve(["--gpu", plain])
    assert t2["tier"] == 2 and t1["tier"] == 1
    assert "tier 2: measured profile of Test CPU" in out2
    assert "measured profile" not in out1
    # the measured memory-bound ops (11 GB/s) are slower than the spec sheet's 1 TB/s
    assert t2["tpot_s"]["mean"] > t1["tpot_s"]["mean"]


# ---- invariants -------------------------------------------------------------------------------
pos = st.floats(1e-7, 1.0)
names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=12)


@st.composite
def profile_docs(draw: st.DrawFn) -> dict:
    doc = make_doc()
    # a device fast enough for every drawn time: a point above its peak or bandwidth is refused
    # (test_calibration_review_s49.py), and the round trip is the subject here
    doc["device"] = {**doc["device"], "peak_tflops": {"fp32": 1e8, "bf16": 1e8},
                     "memory_bandwidth_tbps": 100.0}  # fmt: skip
    doc["software"] = draw(st.dictionaries(names.filter(bool), names | st.integers(0, 10**6)
                                           | st.floats(-1e9, 1e9), max_size=4))  # fmt: skip
    doc["gemm"] = [{"dtype": draw(st.sampled_from(["fp32", "bf16"])), "m": m, "n": n, "k": k,
                    "batch": 1, "seconds": draw(pos), "cold": draw(st.booleans())}
                   for m, n, k in draw(st.lists(st.tuples(*[st.integers(1, 8192)] * 3),
                                                min_size=1, max_size=5))]  # fmt: skip
    n_ew = draw(st.integers(0, 4))
    doc["elementwise"] = [{"op": draw(names), "bytes": draw(st.floats(1.0, 1e12)),
                           "seconds": draw(pos)} for _ in range(n_ew)]  # fmt: skip
    doc["memory"] = {"copy_bytes_per_s": draw(st.floats(1e6, 1e13)), "launch_s": draw(pos)}
    doc["skipped"] = [{"section": "gemm", "what": draw(names), "reason": draw(names)}]
    return doc


@given(profile_docs(), st.sampled_from([".yaml", ".json"]))
@settings(max_examples=40, deadline=None)
def test_profile_round_trips_through_the_writer(doc: dict, suffix: str):
    """write_profile -> load_device_file gives the device `hwtune bench` built from the
    document, to the last bit of every float and character of every string."""
    import tempfile

    from hwtune.calibrate.bench import write_profile

    want = Device(**doc["device"], profile=DeviceProfile(**{k: v for k, v in doc.items()
                                                             if k != "device"}))  # fmt: skip
    with tempfile.TemporaryDirectory() as d:
        got = load_device_file(write_profile(doc, Path(d) / f"p{suffix}"))
    assert got == want and got.profile.gemm == want.profile.gemm


SPEC = ModelSpec(name="tiny-gpt2", family="gpt2", n_layers=2, d_model=256, n_heads=4,
                 ffn_hidden=1024, ffn_act="gelu", vocab=8192, tied_embeddings=True,
                 norm="layernorm", pos_emb="learned", max_position=256)  # fmt: skip


def _grid_doc() -> dict:
    doc = make_doc()
    doc["gemm"] = [
        {"dtype": "fp32", "m": m, "n": n, "k": k, "batch": 1,
         "seconds": 3e-6 + 2.0 * m * n * k / (2e10 * (1 + math.log2(m * n * k) / 10))}
        for m in (256, 1024, 4096) for n in (256, 1024, 8192) for k in (256, 1024, 4096)
    ] + [{"dtype": "fp32", "m": m, "n": 1024, "k": 1024, "batch": 1, "cold": True,
          "seconds": 4e-6 + 4.0 * 1024 * 1024 / 1e10 + 2.0 * m * 1024 * 1024 / 5e10}
         for m in (1, 16, 64)]  # fmt: skip
    doc["attention"] = [
        {"dtype": "fp32", "phase": ph, "batch": 1, "heads": 4, "seq_q": 256, "seq_k": 256,
         "head_dim": 64, "causal": True, "flops": f, "seconds": 5e-6 + f / 2e10}
        for ph in ("fwd", "bwd") for f in (1e7, 1e8, 1e9)
    ]  # fmt: skip
    doc["elementwise"] = [{"op": op, "bytes": b, "seconds": t0 + b / 8e9}
                          for op, t0 in (("add", 2e-6), ("gelu", 5e-6))
                          for b in (1e4, 1e6, 1e8)]  # fmt: skip
    return doc


def _faster(doc: dict, f: dict[str, float]) -> dict:
    out = json.loads(json.dumps(doc))
    for sec in ("gemm", "attention", "elementwise", "collectives"):
        for p in out[sec]:
            p["seconds"] *= f[sec]
    out["memory"]["copy_bytes_per_s"] /= f["memory"]
    out["memory"]["triad_bytes_per_s"] /= f["memory"]
    return out


def _step(doc: dict, tmp: Path, dp: int) -> float:
    dev = load_device_file(_write(tmp, doc))
    return estimate(SPEC, gpu=dev, gpus=dp, dp=dp, micro_batch=2, seq=256, precision="fp32",
                    zero=0, overlap_grad_reduce=False).step_time_s  # fmt: skip


factor = st.floats(0.1, 1.0)


@given(st.fixed_dictionaries({k: factor for k in ("gemm", "attention", "elementwise",
                                                   "collectives", "memory")}),
       st.sampled_from([1, 2]))  # fmt: skip
@settings(max_examples=30, deadline=None)
def test_faster_measurements_never_predict_a_slower_step(f: dict, dp: int):
    import tempfile

    doc = _grid_doc()  # peaks and bandwidth above its measurements made 10x faster (a point
    # above them is refused, test_calibration_review_s49.py)
    doc["device"] = {**doc["device"], "peak_tflops": {"fp32": 2.0}, "memory_bandwidth_tbps": 0.2}
    with tempfile.TemporaryDirectory() as d:
        base = _step(doc, Path(d), dp)
        fast = _step(_faster(doc, f), Path(d), dp)
    assert fast <= base * (1 + 1e-9)


@st.composite
def monotone_curve(draw: st.DrawFn, lo: float, hi: float) -> list[tuple[float, float]]:
    """(size, seconds) at distinct sizes (further apart than a rounding step: sizes within
    SAME_SIZE_REL are one size) with seconds non-decreasing in size."""
    drawn = sorted(draw(st.lists(st.floats(lo, hi), min_size=2, max_size=6, unique=True)))
    sizes = drawn[:1]
    for s in drawn[1:]:
        if s > sizes[-1] * (1 + 1e-3):
            sizes.append(s)
    assume(len(sizes) >= 2)
    t = draw(st.floats(1e-6, 1e-3))
    out = []
    for s in sizes:
        t *= draw(st.sampled_from([1.0, 1.0, 1.01, 1.5, 4.0]))  # flat stretches included
        out.append((s, t))
    return out


def _sweep(lo: float, hi: float, n: int = 200) -> list[float]:
    return [lo * (hi / lo) ** (i / (n - 1)) for i in range(n)]


def _non_decreasing(ts: list[float]) -> bool:
    return all(b >= a * (1 - 1e-9) for a, b in zip(ts, ts[1:], strict=False))


@given(monotone_curve(1e6, 1e12))
@settings(max_examples=80, deadline=None)
@example(curve=[(1e7, 1e-5), (1e9, 1e-5)])  # latency-bound: equal times 100x apart in size
def test_attention_time_is_monotone_where_the_measured_times_are(curve):
    """Time per FLOP linear in log(FLOPs) priced the kernel between two of equal time at 5x
    that time; the measured points are kept exactly."""
    prof = DeviceProfile(attention=tuple(
        AttentionPoint(dtype="fp32", phase="fwd", batch=1, heads=8, seq_q=512, seq_k=512,
                       head_dim=64, flops=f, seconds=t) for f, t in curve))  # fmt: skip
    xs = _sweep(curve[0][0] / 4, curve[-1][0] * 4)
    ts = [x / prof.attention_rate("fwd", "fp32", flops=x) for x in xs]
    assert _non_decreasing(ts)
    for f, t in curve:
        assert f / prof.attention_rate("fwd", "fp32", flops=f) == pytest.approx(t)


def test_attention_kernels_a_rounding_step_apart_are_one_size():
    """Two kernels 2e-12 apart in size (CI drew 1e12 FLOPs and a rounding step under it) are
    one measured size: both are priced at the mean of their times, not one at the other's."""
    pts = [(1e6, 1e-6), (1e12 * (1 - 2e-15), 1e-6), (1e12, 1.01e-6)]
    prof = DeviceProfile(attention=tuple(
        AttentionPoint(dtype="fp32", phase="fwd", batch=1, heads=8, seq_q=512, seq_k=512,
                       head_dim=64, flops=f, seconds=t) for f, t in pts))  # fmt: skip
    # the mean of time per FLOP, times the size: (1e-6 + 1.01e-6) / 2 at 1e12
    for f in (pts[1][0], pts[2][0]):
        assert f / prof.attention_rate("fwd", "fp32", flops=f) == pytest.approx(1.005e-6)
    assert 1e6 / prof.attention_rate("fwd", "fp32", flops=1e6) == pytest.approx(1e-6)


@given(st.lists(monotone_curve(1e3, 1e10), min_size=1, max_size=3))
@settings(max_examples=60, deadline=None)
def test_elementwise_time_is_monotone_where_the_measured_times_are(curves):
    prof = DeviceProfile(elementwise=tuple(
        SizedPoint(op=f"op{i}", bytes=b, seconds=t)
        for i, c in enumerate(curves) for b, t in c))  # fmt: skip
    assert _non_decreasing([prof.elementwise_time(x) for x in _sweep(1e2, 1e11)])


@given(st.lists(st.floats(1e-6, 1e-3), min_size=3, max_size=3),
       st.sampled_from([1.0, 1.2, 3.0]), st.sampled_from([1.0, 1.5, 8.0]))  # fmt: skip
@settings(max_examples=60, deadline=None)
def test_cold_gemm_time_is_monotone_in_rows_and_weight(t0s, grow_m, grow_w):
    """Cold points on a grid (rows 1, 16, 64 x weights 256^2, 1024^2, 4096^2) whose times do
    not fall with rows or with weight size: the time between and beyond them does not either."""
    rows, dims = (1, 16, 64), (256, 1024, 4096)
    base = sorted(t0s)
    pts = [GemmPoint(dtype="fp32", m=m, n=d, k=d, cold=True,
                     seconds=base[j] * grow_w**j * grow_m**i)
           for i, m in enumerate(rows) for j, d in enumerate(dims)]  # fmt: skip
    prof = DeviceProfile(gemm=tuple(pts))
    for d in (200, 700, 2048, 8192):
        assert _non_decreasing([prof.cold_gemm_time(m, d, d, "fp32") for m in range(1, 65)])
    for m in (1, 5, 16, 40, 64):
        ts = [prof.cold_gemm_time(m, d, d, "fp32") for d in range(64, 9000, 64)]
        assert _non_decreasing(ts)


def test_estimate_and_plan_print_a_cpu_profile_s_peak_and_say_tier_2(tmp_path: Path):
    """A measured CPU (0.15 TFLOP/s fp32) printed its peak as "of 0 TFLOP/s dense"; `hwtune
    plan` printed nothing on which tier priced its table."""
    from typer.testing import CliRunner

    from hwtune.cli.main import app

    doc = _grid_doc()
    doc["device"] = {**doc["device"], "memory_gib": 80.0}  # room for llama3.1-8b on 2
    prof = _write(tmp_path, doc)
    common = ["-m", "llama3.1-8b", "--gpu", prof, "--seq", "256", "--precision", "fp32"]
    r = CliRunner().invoke(app, ["estimate", *common, "--gpus", "1"], terminal_width=200)
    assert r.exit_code == 0, r.output
    assert "of 0.15 TFLOP/s dense" in r.output and "tier 2: measured profile" in r.output
    r = CliRunner().invoke(app, ["plan", *common, "--gpus", "2"], terminal_width=200)
    assert r.exit_code == 0, r.output
    assert "note: tier 2: measured profile of Test CPU" in r.output


@given(monotone_curve(1e6, 1e12), st.floats(1e-3, 1.0))
@settings(max_examples=60, deadline=None)
@example(curve=[(1e7, 1e-5), (1e8, 1e-5)], frac=0.01)  # latency-bound: the floor holds below
def test_attention_below_the_smallest_kernel_keeps_its_fixed_cost(curve, frac):
    """Below the smallest measured kernel the time lies between proportional scaling and the
    smallest kernel's time; when the two smallest take the same time (a fixed cost), a smaller
    kernel takes it too: at the smallest one's rate it was priced at ``frac`` of it."""
    prof = DeviceProfile(attention=tuple(
        AttentionPoint(dtype="fp32", phase="fwd", batch=1, heads=8, seq_q=512, seq_k=512,
                       head_dim=64, flops=f, seconds=t) for f, t in curve))  # fmt: skip
    (f0, t0), (f1, t1) = curve[0], curve[1]
    x = f0 * frac
    t = x / prof.attention_rate("fwd", "fp32", flops=x)
    assert t0 * frac * (1 - 1e-9) <= t <= t0 * (1 + 1e-9)
    if t1 == t0 and f1 > f0 * (1 + 1e-6):  # two sizes (not one a rounding step apart)
        assert t == pytest.approx(t0)
