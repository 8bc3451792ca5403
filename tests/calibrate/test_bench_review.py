"""Review checks of `hwtune bench` profiles: fitted quantities on synthetic data with known
answers, and bad profiles refused with one line naming the field, the value and what was
expected."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from calib_profile_data import make_doc
from hypothesis import given, settings
from hypothesis import strategies as st

from hwtune.calibrate.gemm import best_rates
from hwtune.hardware.profile import DeviceProfile


def _write(tmp_path: Path, doc: dict) -> str:
    p = tmp_path / "prof.yaml"
    p.write_text(yaml.safe_dump(doc))
    return str(p)


ESTIMATE = ["estimate", "-m", "llama3.1-8b", "--gpus", "1", "--gpu"]


@pytest.mark.parametrize(
    ("section", "key", "value", "words"),
    [
        ("gemm", "seconds", float("inf"), ("inf", "finite")),
        ("gemm", "dtype", "fp99", ("fp99", "fp32")),
        ("memory", "copy_bytes_per_s", float("inf"), ("inf", "finite")),
        ("collectives", "seconds", float("inf"), ("inf", "finite")),
    ],
)
def test_non_finite_or_unknown_dtype_profile_values(
    tmp_path: Path, section: str, key: str, value: object, words: tuple[str, ...], rejects
):
    """An infinite time or rate, or a GEMM of a dtype bench never measures, was accepted and
    silently ignored or used (estimate ran with exit 0)."""
    doc = make_doc()
    if section == "memory":
        doc["memory"] = {"copy_bytes_per_s": 1e10, "launch_s": 5e-6}
        doc["memory"][key] = value
        field = f"memory.{key}"
    else:
        if not doc.get(section):
            doc[section] = [{"op": "all_reduce", "ranks": 2, "bytes": 1024.0, "seconds": 1e-4}]
        doc[section][0][key] = value
        field = f"{section}.0.{key}"
    rejects([*ESTIMATE, _write(tmp_path, doc)], field, *words)


# ---- fitted quantities on synthetic data with known answers ------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    launch=st.floats(1e-7, 1e-4),
    bw=st.floats(1e8, 1e13),
    query=st.floats(1.0, 2.0**30),
)
def test_elementwise_time_recovers_launch_plus_bytes_over_bandwidth(launch, bw, query):
    """Points generated from t = launch + S / bw give back t at any size from the smallest
    measured one down, and between the points (the line is exact there). Below the smallest
    size the time used to scale proportionally to zero, under the launch cost."""
    sizes = [2.0**15 * 4**i for i in range(6)]
    prof = DeviceProfile(
        elementwise=[{"op": "add", "bytes": s, "seconds": launch + s / bw} for s in sizes]
    )
    q = min(query, sizes[-1])
    assert prof.elementwise_time(q) == pytest.approx(launch + q / bw, rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(alpha=st.floats(1e-7, 1e-3), beta=st.floats(1e8, 1e12), ranks=st.integers(2, 16))
def test_collective_fit_recovers_alpha_and_beta(alpha, beta, ranks):
    """The ring all-reduce t = 2(n-1) alpha + 2 (n-1)/n S / beta (Thakur et al. 2005) fitted to
    points generated from it returns alpha and beta."""
    pts = []
    for i in range(8):
        s = 1024.0 * 8**i
        t = 2 * (ranks - 1) * alpha + 2 * (ranks - 1) / ranks * s / beta
        pts.append({"op": "all_reduce", "ranks": ranks, "bytes": s, "seconds": t})
    a, b = DeviceProfile(collectives=pts).collective_fit("all_reduce")
    assert a == pytest.approx(alpha, rel=1e-6) and b == pytest.approx(beta, rel=1e-6)


def test_gemm_table_from_a_known_peak_and_overhead():
    """A GEMM table generated from t = 2mnk / peak + overhead: the best rate (a CPU profile's
    peak) approaches the peak from below at the largest shape, and every measured shape's rate
    is given back exactly."""
    peak, overhead = 2.0e11, 5e-6
    rows = []
    for e in range(5, 13):
        n = 2**e
        rows.append({"dtype": "fp32", "m": n, "n": n, "k": n, "batch": 1,
                     "seconds": 2.0 * n**3 / peak + overhead})  # fmt: skip
    best = best_rates(rows)["fp32"]
    n = 4096
    assert best == pytest.approx(2.0 * n**3 / (2.0 * n**3 / peak + overhead), rel=1e-12)
    assert 0.999 * peak < best < peak
    prof = DeviceProfile(gemm=rows)
    for r in rows:
        want = 2.0 * r["m"] * r["n"] * r["k"] / r["seconds"]
        assert prof.gemm_rate(r["m"], r["n"], r["k"], "fp32") == pytest.approx(want, rel=1e-12)


def test_device_profile_given_to_serve_profile(tmp_path: Path, rejects):
    """A `hwtune bench` device profile passed to `serve --profile` (which takes a serve
    profile) printed its whole device block as the bad value; now it says where it goes."""
    p = _write(tmp_path, make_doc())
    rejects(
        ["serve", "--model", "llama3.1-8b", "--gpu", "h200", "--profile", p,
         "--concurrency", "1", "--input-len", "16", "--output-len", "2", "--num-requests", "2"],
        "profile", p, "hwtune bench", "--gpu",
    )  # fmt: skip


def test_serve_profile_of_another_device(tmp_path: Path, rejects):
    """A serve profile measured on an H100 was applied to --gpu h200 without a word (the
    profile module's docstring said its device is checked against --gpu)."""
    p = tmp_path / "sp.yaml"
    p.write_text("device: h100\ngemm_efficiency: 0.7\n")
    args = ["serve", "--model", "llama3.1-8b", "--profile", str(p), "--concurrency", "1",
            "--input-len", "16", "--output-len", "2", "--num-requests", "2"]  # fmt: skip
    rejects([*args, "--gpu", "h200"], "profile.device", "h100", "h200")
    from typer.testing import CliRunner

    from hwtune.cli.main import app

    assert CliRunner().invoke(app, [*args, "--gpu", "h100-sxm-80gb"]).exit_code == 0


def test_threads_and_ranks_beyond_the_cpus(rejects):
    """--threads 999 / --ranks 999 on a CPU ran (999 torch threads time-sliced on the usable
    CPUs, or 999 gloo processes); refused before anything is measured."""
    from hwtune.calibrate.harness import cpu_count

    n = str(cpu_count() + 1)
    rejects(["bench", "--threads", n], "threads", n, "usable CPUs")
    rejects(["bench", "--device", "cpu", "--ranks", n], "ranks", n, "usable CPUs")
