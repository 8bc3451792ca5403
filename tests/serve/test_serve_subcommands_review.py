"""Review of `hwtune serve calibrate|measure|emulate|plan` and `serve --correction`: bad input
gets one line naming the field, the value and what was expected (exit code 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hwtune.serve.endpoint_bench import CSV_COLUMNS
from hwtune.serve.measured_runs import KNOWN, load_runs

HEADER = "concurrency,input_len,output_len,ttft_ms,tpot_ms"


def _csv(tmp_path: Path, text: str, name: str = "runs.csv") -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_runs_columns_are_those_measure_writes() -> None:
    assert set(KNOWN) == set(CSV_COLUMNS)


def test_calibrate_row_with_more_cells_than_header(tmp_path, rejects) -> None:
    f = _csv(tmp_path, HEADER + "\n1,1024,128,30,8,99\n8,1024,128,60,9\n")
    rejects(["serve", "calibrate", "--runs", f], "line 2", "99", "at most 5 cells")


def test_calibrate_unknown_column(tmp_path, rejects) -> None:
    f = _csv(tmp_path, HEADER + ",tpp\n1,1024,128,30,8,4\n8,1024,128,60,9,4\n")
    rejects(["serve", "calibrate", "--runs", f], "header", "tpp", "unknown")


def test_calibrate_repeated_column(tmp_path, rejects) -> None:
    f = _csv(tmp_path, HEADER + ",tp,tp\n1,1024,128,30,8,1,4\n")
    rejects(["serve", "calibrate", "--runs", f], "header", "tp repeated")


@pytest.mark.parametrize("second", ["1,1024,128,30,8", "1,1024,128,35,9"])
def test_calibrate_repeated_configuration(tmp_path, rejects, second: str) -> None:
    f = _csv(tmp_path, HEADER + "\n1,1024,128,30,8\n" + second + "\n")
    rejects(["serve", "calibrate", "--runs", f], "line 3", second, "line 2", "one row per")


def test_runs_other_layouts_and_recorded_columns_still_read(tmp_path) -> None:
    f = _csv(tmp_path, HEADER + ",tp,ttft_p90_ms\n1,1024,128,30,8,1,40\n1,1024,128,30,8,2,40\n")
    assert [r.tp for r in load_runs(f)] == [1, 2]


def test_calibrate_run_the_deployment_cannot_serve_names_its_line(tmp_path, rejects) -> None:
    f = _csv(tmp_path, HEADER + ",tp\n1,1024,128,30,8,1\n\n8,1024,128,60,9,3\n")
    rejects(["serve", "calibrate", "--runs", f], "runs.csv: line 4: tp", "3")


def test_runs_line_numbers_count_blank_lines(tmp_path, rejects) -> None:
    f = _csv(tmp_path, HEADER + "\n1,1024,128,30,8\n\n\n8,1024,128,0,9\n")
    rejects(["serve", "calibrate", "--runs", f], "runs.csv: line 5: ttft_ms", "0")


@pytest.fixture(scope="module")
def correction_file(tmp_path_factory) -> Path:
    from typer.testing import CliRunner

    from hwtune.cli.main import app

    d = tmp_path_factory.mktemp("corr")
    runs = d / "runs.csv"
    runs.write_text(HEADER + "\n1,1024,128,30,8\n8,1024,128,60,9\n32,1024,128,150,12\n")
    out = d / "corr.yaml"
    r = CliRunner().invoke(app, ["serve", "calibrate", "--runs", str(runs), "--out", str(out)])
    assert r.exit_code == 0, r.output
    return out


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("  scale: ", "  scale: .inf #", "ttft.scale"),
        ("  offset_s: ", "  offset_s: .inf #", "ttft.offset_s"),
        ("loo_ttft_error: ", "loo_ttft_error: .inf #", "loo_ttft_error"),
    ],
)
def test_correction_infinite_value(
    tmp_path, rejects, correction_file: Path, old: str, new: str, field: str
) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(correction_file.read_text().replace(old, new, 1))
    args = ["serve", "--concurrency", "8", "--input-len", "1024", "--output-len", "128"]
    rejects([*args, "--correction", str(f)], field, "inf", "finite")


def test_emulate_infinite_time_scale(rejects) -> None:
    rejects(["serve", "emulate", "--port", "0", "--time-scale", "inf"], "--time-scale", "inf")


@pytest.mark.parametrize("host", ["999.1.1.1", "192.0.2.77"])
def test_emulate_bad_host_names_host_not_port(rejects, host: str) -> None:
    line = rejects(["serve", "emulate", "--port", "0", "--host", host], "host", host)
    assert "port" not in line


def test_emulate_port_in_use(rejects) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = str(s.getsockname()[1])
        rejects(["serve", "emulate", "--port", port], "port", port, "free port")


def test_empty_served_model(rejects) -> None:
    rejects(["serve", "emulate", "--port", "0", "--served-model", ""], "served-model", "''")
    rejects(["serve", "measure", "--url", "http://127.0.0.1:9", "--served-model", " "],
            "served-model", "' '")  # fmt: skip


@pytest.fixture
def mock_url():
    import threading

    from hwtune.serve.mock_server import MockServer

    srv = MockServer(base=0.001, itl=0.0005)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv.url
    srv.shutdown()
    srv.server_close()


SMALL = ["--concurrency", "1", "--num-requests", "2", "--input-len", "8", "--output-len", "4"]


@pytest.mark.parametrize(
    ("args", "field", "words"),
    [
        (["--range-ratio", "nan"], "range-ratio", ["nan", "(0, 1]"]),
        (["--concurrency", "2,2"], "concurrency", ["2,2", "repeated"]),
        (["--input-len", "8,16,8"], "input-len", ["8,16,8", "repeated"]),
        (["--num-requests", "0"], "--num-requests", ["0", "positive"]),
        (["--warmup", "-1"], "warmup", ["-1"]),
        (["--append"], "append", ["--out"]),
        (["--seed", "-2"], "seed", ["-2"]),
    ],
)
def test_measure_bad_options_refused_before_the_server(
    rejects, args: list[str], field: str, words: list[str]
) -> None:
    # port 9 (discard) is closed here: the options are checked before any connection
    rejects(["serve", "measure", "--url", "http://127.0.0.1:9", *args], field, *words)


def test_measure_append_refuses_a_configuration_already_in_the_file(
    tmp_path, rejects, mock_url: str
) -> None:
    from typer.testing import CliRunner

    from hwtune.cli.main import app

    out = tmp_path / "runs.csv"
    args = ["serve", "measure", "--url", mock_url, *SMALL, "--out", str(out)]
    assert CliRunner().invoke(app, args).exit_code == 0
    rejects([*args, "--append"], "out", str(out), "C=1 in=8 out=4", "line 2")
    more = [*args, "--append", "--concurrency", "2"]
    assert CliRunner().invoke(app, more).exit_code == 0
    assert [r.concurrency for r in load_runs(out)] == [1, 2]


def test_measure_discovery_of_a_silent_server_fails_quickly(monkeypatch, rejects) -> None:
    import socket
    import time

    from hwtune.serve import endpoint_bench as eb

    monkeypatch.setattr(eb, "DISCOVERY_TIMEOUT_S", 0.5)
    with socket.socket() as s:  # accepts connections (the backlog) and never answers
        s.bind(("127.0.0.1", 0))
        s.listen()
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
        t0 = time.perf_counter()
        rejects(["serve", "measure", "--url", url], "url", url, "reachable")
        assert time.perf_counter() - t0 < 5


@pytest.mark.parametrize("slo", ["--ttft-p90", "--tpot-p90", "--e2e-p90"])
def test_plan_infinite_slo(rejects, slo: str) -> None:
    args = ["serve", "plan", "--max-gpus", "1", "--concurrency", "2", "--input-len", "64"]
    rejects([*args, "--output-len", "8", slo, "inf"], "_p90_s", "inf", "finite")


@pytest.mark.parametrize("as_json", [False, True])
def test_measure_progress_bar_only_without_json(mock_url: str, as_json: bool) -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "TTY_COMPATIBLE": "1"}  # rich draws as on a terminal
    args = ["serve", "measure", "--url", mock_url, *SMALL, "--output-len", "40"]
    code = "from hwtune.cli.main import app; app()"
    r = subprocess.run([sys.executable, "-c", code, *args, *(["--json"] if as_json else [])],
                       capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert ("C=1 in=8 out=40" in r.stderr) is not as_json, r.stderr


def test_emulate_router_with_one_replica(rejects) -> None:
    rejects(["serve", "emulate", "--port", "0", "--router", "least-tokens"], "router",
            "least-tokens", "--replicas")  # fmt: skip
    rejects(["serve", "emulate", "--port", "0", "--replicas", "2", "--router", "nope"],
            "router", "nope")  # fmt: skip


@pytest.mark.parametrize("key", ["prompt", "max_tokens", "stream", "model"])
def test_measure_extra_body_cannot_replace_what_the_run_records(rejects, key: str) -> None:
    body = '{"' + key + '": null}'
    rejects(["serve", "measure", "--url", "http://127.0.0.1:9", "--extra-body", body],
            "extra-body", key)  # fmt: skip


def test_correction_refused_for_disaggregated(rejects, correction_file: Path) -> None:
    c = str(correction_file)
    rejects(["serve", "--disagg", "--rate", "2", "--input-len", "64", "--output-len", "8",
             "--correction", c], "correction", c, "aggregated")  # fmt: skip
    rejects(["serve", "plan", "--max-gpus", "1", "--concurrency", "2", "--input-len", "64",
             "--output-len", "8", "--ttft-p90", "1", "--correction", c], "disagg", "--no-disagg")  # fmt: skip


def test_plan_api_refuses_a_correction_for_disaggregated_layouts(correction_file: Path) -> None:
    from hwtune.errors import HwtuneInputError
    from hwtune.hardware.catalog import get_device
    from hwtune.model.catalog import get_model
    from hwtune.serve.config import ReplicaConfig
    from hwtune.serve.correction import load_correction
    from hwtune.serve.plan import SLO, plan
    from hwtune.serve.request import closed_loop, fixed_lengths

    base = ReplicaConfig(get_model("llama3.1-8b"), get_device("h100-sxm-80gb"))
    wl = closed_loop(2, *fixed_lengths(4, 64, 8))
    with pytest.raises(HwtuneInputError, match="no-disagg"):
        plan(base, wl, SLO(ttft_p90_s=1.0), max_gpus=1, disagg=True, processes=1,
             correction=load_correction(correction_file))  # fmt: skip


def test_serve_router_with_one_replica_is_refused(rejects):
    """`serve --router` beside a single replica (and no prefill pool) would route nothing."""
    rejects(["serve", "--router", "least-tokens", "--num-requests", "4"], "router", "--replicas")
