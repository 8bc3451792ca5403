"""Session 49's calibration review: tier 2 takes the sustained clock (a profile's rates are
bursts, so --burst-clocks matters there), a measured point faster than the device can run is
refused when read and left out by the bench, a collective fit never yields a negative latency or an
unmeasured (near-infinite, zero or negative) bandwidth without saying so, and `serve measure`
errors are one line."""

from __future__ import annotations

import json
import math
import socket
from pathlib import Path

import pytest
import yaml
from calib_profile_data import make_doc
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from hwtune.cli.main import app
from hwtune.cost.compute import attention_time, gemm_time, memory_time
from hwtune.cost.power import clock_fraction, power_limited
from hwtune.errors import HwtuneInputError
from hwtune.hardware.catalog import get_device
from hwtune.hardware.cluster import make_cluster
from hwtune.hardware.device import load_device_file
from hwtune.hardware.profile import CollectivePoint, DeviceProfile
from hwtune.model.spec import ModelSpec
from hwtune.train.estimator import estimate

SPEC = ModelSpec(name="tiny-gpt2", family="gpt2", n_layers=2, d_model=256, n_heads=4,
                 ffn_hidden=1024, ffn_act="gelu", vocab=8192, tied_embeddings=True,
                 norm="layernorm", pos_emb="learned", max_position=256)  # fmt: skip
SPEC_KW = dict(global_batch=8, seq=256, precision="fp32")
H200 = Path(__file__).resolve().parents[2] / "src/hwtune/hardware/profiles/nvidia-h200-sxm.yaml"


# ---- tier 2 at the sustained clock (item 1) ---------------------------------------------------


def _sustained_copy(tmp_path: Path) -> Path:
    """The shipped H200 profile, labelled as measured at the sustained clock."""
    p = tmp_path / "h200-sustained.yaml"
    p.write_text(H200.read_text() + "\ngemm_clocks: sustained\n")
    return p


def _step(gpu: str, burst: bool) -> tuple[float, list[str]]:
    cl = make_cluster(gpu, 8).model_copy(update={"sustained_clocks": not burst})
    est = estimate("llama3.1-8b", cl, global_batch=8, seq=4096)
    return est.step_time_s, est.notes


def test_the_shipped_profile_is_labelled_burst():
    assert get_device(str(H200)).profile.gemm_clocks == "burst"  # the default: no key in it


def test_tier2_burst_rates_are_derated_and_burst_clocks_restores_them():
    dev = get_device(str(H200))
    sus = dev.sustained_gemm_fraction
    assert sus == pytest.approx(0.82)
    slow, burst = power_limited(dev), power_limited(dev, sustained=False)
    assert slow.profile.clock_fraction == pytest.approx(sus) and burst is dev
    # a hot GEMM and training attention at 0.82 of the measured rates...
    assert gemm_time(8192, 8192, 8192, slow, "bf16") == pytest.approx(
        gemm_time(8192, 8192, 8192, dev, "bf16") / sus, rel=1e-12)  # fmt: skip
    assert attention_time(1e12, 1e8, slow, "bf16", backward=True) == pytest.approx(
        attention_time(1e12, 1e8, dev, "bf16", backward=True) / sus, rel=1e-12)  # fmt: skip
    # ...memory-bound points as measured (HBM has its own clock): a decode GEMM's weight read,
    # a memory-bound op, decode attention
    assert gemm_time(1, 8192, 8192, slow, "bf16") == gemm_time(1, 8192, 8192, dev, "bf16")
    assert memory_time(1e9, slow) == memory_time(1e9, dev)
    assert slow.profile.attention_rate("fwd", "bf16", 1e9, decode=True) == (
        dev.profile.attention_rate("fwd", "bf16", 1e9, decode=True))  # fmt: skip
    t_sus, notes_sus = _step(str(H200), burst=False)
    t_burst, notes_burst = _step(str(H200), burst=True)
    # GEMMs and attention dominate a dense 8B step: slower by nearly 1/0.82, never by more
    assert 1.10 < t_sus / t_burst <= 1 / sus + 1e-9
    assert any(f"{sus:.2f} of the profile's burst rates" in n for n in notes_sus), notes_sus
    assert not any("sustained clock" in n for n in notes_burst)


def test_tier2_sustained_rates_are_not_derated_again(tmp_path):
    p = str(_sustained_copy(tmp_path))
    dev = get_device(p)
    assert dev.profile.gemm_clocks == "sustained"
    assert power_limited(dev) is dev  # no cap below the board power, no sustained derate
    t_sus, notes = _step(p, burst=False)
    t_burst, _ = _step(p, burst=True)
    assert t_sus == t_burst == pytest.approx(_step(str(H200), burst=True)[0], rel=1e-12)
    assert any("measured at the sustained clock" in n for n in notes), notes
    assert not any("0.82" in n for n in notes)


def test_a_power_cap_now_reaches_the_profile_rates():
    # before, tier 2 priced GEMMs at the measured rates whatever the cap
    dev = get_device(str(H200))
    capped = power_limited(dev, 450.0, sustained=False)
    assert capped.profile.clock_fraction == pytest.approx(clock_fraction(dev, 450.0))
    assert capped.profile.clock_fraction < 1.0
    both = power_limited(dev, 450.0)
    assert both.profile.clock_fraction == pytest.approx(clock_fraction(dev, 450.0) * 0.82)


def test_burst_clocks_changes_a_tier2_estimate_on_the_command_line():
    base = ["estimate", "--model", "llama3.1-8b", "--gpu", str(H200), "--gpus", "8",
            "--global-batch", "8", "--seq", "4096", "--json"]  # fmt: skip
    docs = [CliRunner().invoke(app, base + extra) for extra in ([], ["--burst-clocks"])]
    assert all(r.exit_code == 0 for r in docs), docs[0].output
    sus, burst = (json.loads(r.stdout) for r in docs)
    assert sus["step_time_s"] > 1.10 * burst["step_time_s"]


def test_a_profile_file_cannot_set_the_priced_clock(tmp_path):
    doc = make_doc()
    doc["clock_fraction"] = 0.5
    p = _write(tmp_path, doc)
    with pytest.raises(HwtuneInputError, match=r"prof\.yaml\.clock_fraction: got 0\.5"):
        load_device_file(p)
    doc = make_doc(gemm_clocks="sustainable")
    with pytest.raises(HwtuneInputError, match="gemm_clocks"):
        load_device_file(_write(tmp_path, doc))


def _closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_measure_error_is_exactly_one_line():
    # --served-model skips discovery, so the refused connection is met inside the runs' progress
    # bar, which off a terminal used to end with an empty line before the error
    url = f"http://127.0.0.1:{_closed_port()}"
    r = CliRunner().invoke(app, ["serve", "measure", "--url", url, "--served-model", "m",
                                 "--concurrency", "1"])  # fmt: skip
    assert r.exit_code == 2
    assert r.stderr.startswith("error: --url: ")
    assert r.stderr.count("\n") == 1 and r.stderr.endswith("\n"), repr(r.stderr)
    assert r.stdout == ""


# ---- collective alpha-beta fits (item 3) -------------------------------------------------------


def _prof(*pts: tuple[int, float, float], op: str = "all_reduce") -> DeviceProfile:
    return DeviceProfile(collectives=tuple(
        CollectivePoint(op=op, ranks=n, bytes=s, seconds=t) for n, s, t in pts))  # fmt: skip


@pytest.mark.parametrize(
    "pts, words",
    [
        ([(2, 1e6, 1e-3)], "one message size"),  # a single point
        ([(2, 1e6, 1e-3), (2, 1e6, 1.2e-3), (2, 1e6, 0.9e-3)], "one message size"),
        # equal sizes but for a rounding step: a tiny positive determinant fitted 244 us, 1 GB/s
        (
            [(2, 1e6, 1e-3), (2, 1e6 * (1 + 1e-15), 1e-3 * (1 + 3e-16)), (2, 1e6, 1.0000001e-3)],
            "one message size",
        ),
        ([(2, 1e3, 1e-3), (2, 1e6, 1e-4)], "does not grow"),  # faster for more bytes
        ([(2, 1e3, 1e-3), (2, 1e6, 1e-3 + 1e-15)], "latency-bound"),  # flat: it fitted 1e21 B/s
    ],
)
def test_a_degenerate_fit_falls_back_and_says_why(pts, words):
    prof = _prof(*pts)
    assert prof.collective_fit() is None
    assert words in prof.collective_fit_note() and "spec sheet" in prof.collective_fit_note()


def test_a_negative_latency_becomes_a_noted_bandwidth_only_fit():
    beta = 1e9  # points of t = 2 alpha + S / beta with alpha -2 us: the plain fit's alpha < 0
    prof = _prof(*((2, s, 2 * -2e-6 + s / beta) for s in (1e4, 1e5, 1e6, 1e7)))
    a, bw = prof.collective_fit()
    assert a == 0.0 and 0.9 * beta < bw < 1.5 * beta
    assert "negative" in prof.collective_fit_note()


def test_a_plain_fit_has_no_note_and_no_points_no_note():
    prof = _prof(*((2, s, 2 * 5e-6 + s / 1e9) for s in (1e3, 1e5, 1e7)))
    a, bw = prof.collective_fit()
    assert a == pytest.approx(5e-6) and bw == pytest.approx(1e9)
    assert prof.collective_fit_note() == "" and DeviceProfile().collective_fit_note() == ""


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(2, 16), st.floats(1.0, 1e10), st.floats(1e-7, 10.0)),
                min_size=1, max_size=6))  # fmt: skip
def test_a_fit_is_none_or_nonnegative_latency_and_finite_positive_bandwidth(pts):
    prof = _prof(*pts)
    fit = prof.collective_fit()
    if fit is None:  # a fallback always says why
        assert prof.collective_fit_note()
        return
    a, bw = fit
    assert a >= 0.0 and math.isfinite(a)
    assert bw > 0.0 and math.isfinite(bw)
    assert (a == 0.0) or "negative" not in prof.collective_fit_note()


def test_the_estimate_prices_a_degenerate_fit_at_the_spec_sheet_link_and_notes_it(tmp_path):
    doc = make_doc()
    doc["collectives"] = [{"op": "all_reduce", "ranks": 2, "bytes": 1e6, "seconds": 1e-3}] * 2
    p = tmp_path / "one-size.yaml"
    p.write_text(yaml.safe_dump(doc))
    t2 = load_device_file(p)
    plain = t2.model_copy(update={"profile": None})
    assert make_cluster(t2, 2).intra_link() == make_cluster(plain, 2).intra_link()
    est = estimate(SPEC, make_cluster(t2, 2), dp=2, **SPEC_KW)
    assert any("tier 2" in n and "one message size" in n for n in est.notes), est.notes
    good = estimate(SPEC, make_cluster(load_device_file(_write(tmp_path, make_doc())), 2), dp=2,
                    **SPEC_KW)  # fmt: skip
    assert not any("message size" in n for n in good.notes)


def _write(tmp_path, doc, name="prof.yaml"):
    p = tmp_path / name
    p.write_text(yaml.safe_dump(doc))
    return p


# ---- measured points above what the device can run (item 2) ----------------------------------

FAST = {"dtype": "fp32", "m": 1024, "n": 1024, "k": 1024, "batch": 1, "seconds": 0.005}
"""0.429 TFLOP/s against the test device's fp32 peak of 0.15 (2.9x)."""


def _refused(tmp_path, doc, *words):
    p = _write(tmp_path, doc)
    with pytest.raises(HwtuneInputError) as e:
        load_device_file(p)
    line = str(e.value)
    assert "\n" not in line and all(w in line for w in words), line
    return p


def test_a_gemm_faster_than_the_peak_is_refused_by_name(tmp_path):
    doc = make_doc()
    doc["gemm"][1] = FAST
    p = _refused(tmp_path, doc, "prof.yaml.gemm[1]", "0.429 TFLOP/s", "fp32 1024x1024x1024",
                 "at most 1.15 x the fp32 peak of Test CPU (0.15 TFLOP/s)")  # fmt: skip
    r = CliRunner().invoke(app, ["estimate", "--model", "llama3.1-8b", "--gpu", str(p)])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "gemm[1]" in r.stderr


def test_the_margin_lets_a_point_just_above_the_peak_through(tmp_path):
    doc = make_doc()  # 1.10 x the 0.15 TFLOP/s peak: inside the 15% margin
    doc["gemm"][1] = {**FAST, "seconds": 2.0 * 1024**3 / (1.10 * 0.15e12)}
    load_device_file(_write(tmp_path, doc))
    doc["gemm"][1]["seconds"] = 2.0 * 1024**3 / (1.20 * 0.15e12)
    _refused(tmp_path, doc, "gemm[1]")


def test_attention_and_bandwidth_above_the_device_are_refused(tmp_path):
    doc = make_doc()
    doc["attention"][0]["seconds"] = 1e-4  # 2.7 TFLOP/s
    _refused(tmp_path, doc, "prof.yaml.attention[0]", "2.7 TFLOP/s", "fp32 peak")
    doc = make_doc(memory={"copy_bytes_per_s": 5e10, "launch_s": 2e-6})  # 4x 0.012 TB/s
    _refused(tmp_path, doc, "prof.yaml.memory.copy_bytes_per_s", "0.05 TB/s", "(0.012 TB/s)")


def test_peaks_the_bench_measured_are_no_ceiling_for_attention(tmp_path):
    # a CPU's peak is its best measured GEMM (one tiny GEMM when the budget is spent), so
    # attention above it is no sign of a bad timing
    doc = make_doc()
    doc["attention"][0]["seconds"] = 1e-4  # 2.7 TFLOP/s against a 0.15 "peak"
    doc["device"]["sources"] = {"peak_tflops": "best GEMM rate measured by hwtune bench"}
    load_device_file(_write(tmp_path, doc))
    doc["gemm"][1] = FAST  # a GEMM above a measured peak is still refused
    _refused(tmp_path, doc, "gemm[1]")


def test_memory_bound_ops_may_beat_the_memory_bandwidth(tmp_path):
    doc = make_doc()  # an op that fits in a cache: 3e5 bytes in 1e-6 s, 25x the DRAM bandwidth
    doc["elementwise"][0]["seconds"] = 1e-6
    load_device_file(_write(tmp_path, doc))


@pytest.mark.parametrize("t, words", [(0.0, "greater than 0"), (float("inf"), "finite"),
                                      (-1e-3, "greater than 0")])  # fmt: skip
def test_a_non_positive_or_endless_time_is_refused(tmp_path, t, words):
    doc = make_doc()
    doc["gemm"][0]["seconds"] = t
    _refused(tmp_path, doc, "gemm", words)


def test_bench_leaves_implausible_and_untimed_points_out_and_names_them(tmp_path, monkeypatch):
    from hwtune.calibrate import bench as bench_mod
    from hwtune.calibrate.bench import BenchConfig, run_bench, write_profile

    ok = {"dtype": "fp32", "m": 256, "n": 256, "k": 256, "batch": 1, "seconds": 3e-4}
    gemm = [ok, FAST, {**ok, "m": 512, "seconds": 0.0}, {**ok, "m": 128, "seconds": float("nan")}]
    attn = [dict(make_doc()["attention"][0]), {**make_doc()["attention"][0], "seconds": 1e-4}]
    stream = {"copy_bytes_per_s": 5e10, "triad_bytes_per_s": 5e10, "launch_s": 2e-6,
              "array_bytes": 2**26}  # fmt: skip
    seen_peaks = []

    def fields(backend, peaks, memory):  # a device whose figures are a data sheet's
        seen_peaks.append(dict(peaks))
        return {**make_doc()["device"], "sources": {}}

    monkeypatch.setattr(bench_mod, "bench_gemm", lambda *a, **k: [dict(p) for p in gemm])
    monkeypatch.setattr(bench_mod, "bench_stream", lambda *a, **k: dict(stream))
    monkeypatch.setattr(bench_mod, "bench_attention", lambda *a, **k: [dict(p) for p in attn])
    monkeypatch.setattr(bench_mod, "device_fields", fields)
    cfg = BenchConfig(sections=("gemm", "memory", "attention"), budget_s=5.0, threads=1)
    res = run_bench(cfg)
    doc = res.document
    assert doc["gemm"] == [ok] and doc["attention"] == attn[:1] and "memory" not in doc
    for name in ("gemm[1]", "gemm[2]", "gemm[3]", "attention[1]", "memory.copy_bytes_per_s"):
        assert sum(name in w for w in res.warnings) == 1, (name, res.warnings)
    reasons = {s.what.split(" ")[0]: s.reason for s in res.skipped}
    assert reasons["gemm[1]"].startswith("implausible: 0.429 TFLOP/s")
    assert "not a positive finite time" in reasons["gemm[2]"]
    # the device's figures were taken again without the dropped points (a CPU's peak is its
    # best GEMM: 0.43 TFLOP/s would have been that peak)
    assert seen_peaks[-1]["fp32"] == pytest.approx(2.0 * 256**3 / 3e-4)
    assert res.summary()["warnings"] == res.warnings
    p = write_profile(doc, tmp_path / "bench.yaml")
    assert load_device_file(p).profile.gemm_clocks == "burst"  # what it wrote loads


def test_serve_carries_the_collective_fit_note_in_its_tier_2_line(tmp_path):
    # serve prices TP all-reduces from the profile's fit too (`inference_collectives`): its
    # tier-2 line says when the points gave none, as estimate's and compile's do
    doc = make_doc()
    doc["device"]["peak_tflops"] = {"fp32": 0.15, "bf16": 0.3}  # serving runs 16-bit
    doc["collectives"] = [{"op": "all_reduce", "ranks": 2, "bytes": 1e6, "seconds": 1e-3}] * 2
    prof = _write(tmp_path, doc)
    cfg = tmp_path / "tiny.json"
    cfg.write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
        "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 4,
        "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 2048,
    }))  # fmt: skip
    args = ["serve", "--gpu", str(prof), "-m", str(cfg), "--num-requests", "4",
            "--concurrency", "2", "--input-len", "64", "--output-len", "8"]  # fmt: skip
    r = CliRunner().invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    assert "one message size" in json.loads(r.stdout)["tier_note"]
    r = CliRunner().invoke(app, args, env={"COLUMNS": "400"})
    line = next(x for x in r.stdout.splitlines() if "tier 2: measured profile" in x)
    assert "one message size" in line


def test_a_grid_of_cold_points_is_not_scaled_by_the_clock():
    # with no hot point of a dtype the cold (weight-streaming, memory-bound) points are the
    # grid; their time follows the memory clock, not the SM clock (review)
    from hwtune.hardware.profile import GemmPoint

    cold = tuple(GemmPoint(dtype="bf16", m=8, n=n, k=n, batch=1, seconds=2 * n * n / 2e12,
                           cold=True) for n in (1024, 4096))  # fmt: skip
    hot = GemmPoint(dtype="bf16", m=4096, n=4096, k=4096, batch=1, seconds=2 * 4096**3 / 5e14)
    for pts, scales in ((cold, False), ((*cold, hot), True)):
        prof = DeviceProfile(gemm=pts)
        slow = prof.model_copy(update={"clock_fraction": 0.5})
        big = (8192, 8192, 8192, "bf16")
        ratio = prof.gemm_rate(*big) / slow.gemm_rate(*big)
        assert ratio == pytest.approx(2.0 if scales else 1.0, rel=1e-9)


def test_a_sustained_profile_under_a_power_cap_says_the_cap_still_derates(tmp_path):
    # "no further derate" was said beside a cap that does derate (review)
    p = str(_sustained_copy(tmp_path))
    cl = make_cluster(p, 8).model_copy(update={"power_cap_w": 450.0})
    notes = estimate("llama3.1-8b", cl, global_batch=8, seq=4096).notes
    line = next(n for n in notes if "measured at the sustained clock" in n)
    frac = clock_fraction(get_device(p), 450.0)
    assert f"only the power cap's ({frac:.2f} of that clock)" in line
    _, uncapped = _step(p, burst=False)
    assert not any("power cap" in n for n in uncapped if "sustained clock" in n)
