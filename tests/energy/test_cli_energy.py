"""`hwtune energy`: one JSON document with --json; bad input exits 2 with one line naming the
field and no traceback. Run as `python -m hwtune.cli.energy`, which is `hwtune energy` (the
module runs the root app)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from energy_fakes import write


def energy(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hwtune.cli.energy", *args],
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def test_optimize_json_and_plot(tmp_path):
    pytest.importorskip("matplotlib")  # the optional 'plot' extra
    png = tmp_path / "f.png"
    r = energy("optimize", "--cap", "20", "--batch", "64", "--plot", str(png), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["best"]["power_w"] <= 20.0
    assert doc["speedup_vs_frequency_only"] >= 1.0
    assert doc["source"].startswith("profile")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_optimize_json_without_plot():
    r = energy("optimize", "--cap", "20", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["best"]["power_w"] <= 20.0


def test_optimize_from_measured_points(tmp_path):
    rows = ["batch,frequency_hz,step_time_s,power_w,utilization,mem_utilization"]
    for b in (1, 8, 64):
        for f in (306e6, 918e6):
            t = 0.03 + 0.013 + 0.005 * b + (0.004 + 0.0065 * b) * 1300.5e6 / f
            busy = t - 0.03
            u, um = busy / t, (0.013 + 0.005 * b) / t
            r = f / 1300.5e6
            p = 8 + 36 * u * r * max(0.6, r) ** 2 + 6.6 * um
            rows.append(f"{b},{f},{t},{p},{u},{um}")
    pts = write(tmp_path / "p.csv", "\n".join(rows) + "\n")
    r = energy("optimize", "--points", str(pts), "--cap", "20", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["source"] == "fitted"
    assert doc["power_model"]["static_w"] == pytest.approx(8.0, abs=0.01)


def test_tune_pipeline_step_and_profiles_json():
    r = energy("tune", "--cap", "20", "--steps", "150", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["phase"] == "run" and doc["max_consecutive_over_cap"] <= 1
    r = energy("pipeline", "--json")
    assert r.returncode == 0 and 0 < json.loads(r.stdout)["saved_fraction"] < 0.3
    r = energy("step", "--json", "--gpus", "8", "--seq", "4096")
    assert r.returncode == 0 and json.loads(r.stdout)["energy_per_token_j"] > 0
    r = energy("profiles", "--json")
    assert "jetson-orin-nano-8gb" in json.loads(r.stdout)


def test_measure_replay_trace(tmp_path):
    f = write(tmp_path / "t.csv", "time_s,power_w\n0,10\n10,30\n")
    r = energy("measure", "--backend", "replay", "--trace", str(f), "--seconds", "5", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["energy_j"] == pytest.approx(75.0)  # 10 -> 20 W ramp over 5 s


@pytest.mark.parametrize(
    "args, field",
    [
        (("optimize", "--cap", "5"), "power cap"),
        (("optimize", "--batches", "8,x"), "batches"),
        (("optimize", "--profile", "orin-nanoo"), "profile"),
        (("optimize", "--objective", "speed"), "objective"),
        (("measure", "--backend", "rapl", "--root", "/nonexistent"), "/nonexistent"),
        (("measure", "--backend", "tpu"), "backend"),
        (("pipeline", "--stage-ms", "10-20"), "stage-ms"),
        (("tune", "--steps", "0"), "steps"),
    ],
)
def test_bad_input_exits_2_with_one_line(args, field):
    r = energy(*args)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0]
    assert r.stdout == ""
