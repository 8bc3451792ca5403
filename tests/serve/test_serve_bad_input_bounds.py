"""Values the simulation cannot compute or the measurement cannot have are refused where they
are read, in one line naming the option, the trace line or the runs row: burstiness and rates
whose arithmetic underflows, arrivals past what the simulated clock resolves, non-physical
measured latencies, a correction the runs do not determine, booleans and mixed formats in a
trace, an empty listen address, drafts without an acceptance rate or past the bound, the
prefill pool's tp, and wgmma on a GPU without it."""

from __future__ import annotations

import contextlib
import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from hwtune.cli.main import app
from hwtune.errors import HwtuneInputError
from hwtune.serve.correction import fit_affine
from hwtune.serve.measured_runs import load_runs, simulate_run
from hwtune.serve.request import MAX_ARRIVAL_SPAN_S, fixed_lengths, load_trace, open_loop
from hwtune.serve.simulator import simulate
from hwtune.serve.speculative import MAX_DRAFT_TOKENS

RUNS = "concurrency,input_len,output_len,ttft_ms,tpot_ms"
FEW = ["--input-len", "64", "--output-len", "4"]


# --- 1, 2: open-loop arithmetic and the simulated clock ----------------------------------------
@pytest.mark.parametrize("cv", ["1e300", "11", "1e-300"])
def test_burstiness_is_bounded(cv, rejects):
    """1e300 made the gamma shape 1/cv^2 underflow to 0 and divided by it (a traceback); above
    10 the draws miss the rate; below 1e-150 1/cv^2 overflows."""
    rejects(["serve", "--num-requests", "20", "--rate", "5", "--burstiness", cv], "burstiness",
            "coefficient of variation in [1e-150, 10]")  # fmt: skip


def test_near_constant_gaps_are_still_accepted():
    p, o = fixed_lengths(20, 16, 4)
    wl = open_loop(5.0, p, o, cv=1e-4)
    assert np.allclose(np.diff(wl.arrivals), 0.2, rtol=1e-3)


@pytest.mark.parametrize("cv", [1e300, 1e-300, 100.0])
def test_open_loop_refuses_the_cv_too(cv):
    p, o = fixed_lengths(4, 16, 4)
    with pytest.raises(HwtuneInputError, match="cv: got"):
        open_loop(5.0, p, o, cv=cv)


@pytest.mark.parametrize(("rate", "n"), [("1e-300", "20"), ("1e-9", "20")])
def test_a_rate_whose_arrivals_outrun_the_clock_is_refused(rate, n, rejects):
    """At 1e-300 requests/s the arrivals were ~1e300 s apart: a step's time rounded away and
    every TTFT came out 0.0 ms."""
    line = rejects(["serve", "--num-requests", n, "--rate", rate, *FEW], "rate", "at least")
    assert "1e+09 s" in line


def test_rate_above_the_bound_is_refused(rejects):
    rejects(["serve", "--num-requests", "4", "--rate", "1e12", *FEW], "rate", "at most 1e+09")


def test_a_slow_rate_within_the_span_still_runs():
    r = CliRunner().invoke(app, ["serve", "--num-requests", "3", "--rate", "1e-3", *FEW,
                                 "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output


def test_trace_arrival_past_the_span_names_its_line(tmp_path, rejects):
    f = tmp_path / "farr.csv"
    f.write_text("arrival_time,prompt_tokens,output_tokens\n0,100,10\n1e300,100,10\n")
    line = rejects(["serve", "--trace", str(f)], "farr.csv line 3: arrival", "1e300",
                   "after the first arrival")  # fmt: skip
    assert "line 2" in line


def test_trace_at_the_span_keeps_its_step_times(tmp_path, cfg8b):
    """At the bound the clock still resolves a step: the late request's TTFT is the early
    one's (they run alone), not 0."""
    f = tmp_path / "span.csv"
    f.write_text(
        f"arrival_time,prompt_tokens,output_tokens\n0,100,10\n{MAX_ARRIVAL_SPAN_S},100,10\n"
    )
    res = simulate(cfg8b, load_trace(f))
    early, late = sorted(res.requests, key=lambda r: r.arrival)
    assert late.ttft > 0 and math.isclose(late.ttft, early.ttft, rel_tol=1e-4)


# --- 3: measured runs and the fitted correction -------------------------------------------------
@pytest.mark.parametrize(
    ("row", "col", "value"),
    [("8,128,64,1e300,7", "ttft_ms", "1e300"), ("8,128,64,0.0001,7", "ttft_ms", "0.0001"),
     ("8,128,64,30000000,7", "ttft_ms", "30000000"), ("8,128,64,20,inf", "tpot_ms", "inf"),
     ("8,128,64,20,1e-9", "tpot_ms", "1e-9")],
)  # fmt: skip
def test_non_physical_measured_latencies_are_refused(tmp_path, rejects, row, col, value):
    f = tmp_path / "absurd.csv"
    f.write_text(f"{RUNS}\n1,128,64,15,6.5\n{row}\n")
    rejects(["serve", "calibrate", "--runs", str(f)], f"absurd.csv: line 3: {col}", value,
            "6 hours, the benchmark clients' request timeout")  # fmt: skip


@pytest.mark.parametrize(("sim", "meas"), [([1e200, 1.0], [1e-200, 1.0]), ([1e200], [1e-100])])
def test_a_correction_the_runs_do_not_determine_is_refused(sim, meas):
    """Scales that overflow to inf or NaN, or underflow to 0, were a pydantic traceback."""
    with pytest.raises(HwtuneInputError, match="runs that determine a correction"):
        fit_affine(sim, meas)


def test_fewer_requests_than_clients_are_refused(tmp_path, rejects):
    f = tmp_path / "fewreq.csv"
    f.write_text(f"{RUNS},num_requests\n1,128,64,15,6.5,1\n4,128,64,20,6.8,2\n")
    rejects(["serve", "calibrate", "--runs", str(f)], "fewreq.csv: line 3: num_requests", "'2'",
            "at least concurrency (4)")  # fmt: skip
    f.write_text(f"{RUNS},num_requests\n4,128,64,20,6.8,4\n")
    assert load_runs(f)[0].num_requests == 4


def test_measure_refuses_fewer_requests_than_clients(rejects):
    rejects(["serve", "measure", "--url", "http://127.0.0.1:9", "--concurrency", "4,8",
             "--num-requests", "6"], "num-requests", "6", "(8)")  # fmt: skip


def test_simulate_run_reports_progress(cfg8b, tmp_path):
    f = tmp_path / "runs.csv"
    f.write_text(f"{RUNS}\n2,64,4,20,5\n")
    seen: list[tuple[int, int]] = []
    simulate_run(cfg8b, load_runs(f)[0], progress=lambda d, t: seen.append((d, t)))
    assert seen and seen[-1] == (20, 20)


def test_calibrate_shows_each_runs_progress(tmp_path, monkeypatch):
    """A row of 100,000 clients simulated for minutes with nothing on the screen."""
    import hwtune.cli.plan as plan_cli

    labels: list[str] = []
    done: list[tuple[int, int]] = []

    @contextlib.contextmanager
    def bar(label, enabled=True):
        labels.append(label)
        yield lambda d, t: done.append((d, t))

    monkeypatch.setattr(plan_cli, "progress_bar", bar)
    f = tmp_path / "runs.csv"
    f.write_text(f"{RUNS}\n1,64,4,20,5\n2,64,4,25,5.5\n")
    r = CliRunner().invoke(app, ["serve", "calibrate", "--runs", str(f), "--json"])
    assert r.exit_code == 0, r.output
    assert labels == ["runs.csv line 2: requests", "runs.csv line 3: requests"]
    assert (10, 10) in done and (20, 20) in done


# --- 4: trace cells ---------------------------------------------------------------------------
def test_boolean_arrival_is_refused(tmp_path, rejects):
    f = tmp_path / "b.jsonl"
    f.write_text('{"arrival_time": true, "prompt_tokens": 100, "output_tokens": 10}\n')
    rejects(["serve", "--trace", str(f)], "b.jsonl line 1: arrival", "True")


@pytest.mark.parametrize(
    ("rows", "words"),
    [(["0", "2024-01-01T00:00:00"], ("seconds as on line 2", "without a UTC offset")),
     (["2024-01-01T00:00:00Z", "2024-01-01T00:00:01"], ("with a UTC offset as on line 2",)),
     (["2024-01-01T00:00:00", "5"], ("changes it to seconds",))],
)  # fmt: skip
def test_mixed_arrival_formats_name_the_line_that_changes(tmp_path, rejects, rows, words):
    f = tmp_path / "mixed.csv"
    f.write_text("arrival_time,prompt_tokens,output_tokens\n" + "".join(f"{a},100,10\n"
                                                                         for a in rows))  # fmt: skip
    rejects(["serve", "--trace", str(f)], "mixed.csv line 3: arrival", *words)


def test_one_format_per_file_still_reads(tmp_path):
    f = tmp_path / "iso.csv"
    f.write_text("arrival_time,prompt_tokens,output_tokens\n2024-01-01T00:00:00Z,100,10\n"
                 "2024-01-01T00:00:01.5+00:00,100,10\n")  # fmt: skip
    assert load_trace(f).arrivals == (0.0, 1.5)
    f.write_text("arrival_time,prompt_tokens,output_tokens\n2024-01-01T02:00:00.5+02:00,100,10\n"
                 "2024-01-01T00:00:01Z,100,10\n")  # fmt: skip
    assert load_trace(f).arrivals == (0.0, 0.5)  # the offset after fractional seconds is kept


# --- 5: emulate ---------------------------------------------------------------------------------
@pytest.mark.parametrize("host", ["", "  "])
def test_emulate_refuses_an_empty_host(monkeypatch, host):
    """An empty host listened on 0.0.0.0 (every interface). Invoked on the serve app itself,
    as ``python -m hwtune.cli.serve`` runs it."""
    import hwtune.serve.mock_server as ms
    from hwtune.cli.serve import serve_app

    bound: list[str] = []

    class Fake:
        url = "http://fake"

        def __init__(self, *, host, **_):
            bound.append(host)

    monkeypatch.setattr(ms, "MockServer", Fake)
    monkeypatch.setattr(ms, "serve_until_interrupted", lambda srv: None)
    r = CliRunner().invoke(serve_app, ["emulate", "--host", host, "--port", "0"])
    assert r.exit_code == 2 and "host: got" in r.output and r.output.count("\n") == 1, r.output
    assert not bound


# --- 6: speculative decoding --------------------------------------------------------------------
@pytest.mark.parametrize("cmd", [[], ["plan", "--processes", "1", "--max-gpus", "1"]])
def test_draft_tokens_need_an_acceptance_rate(cmd, rejects):
    rejects(["serve", *cmd, "--spec-tokens", "3"], "spec-acceptance", "None", "--spec-tokens 3")


def test_an_explicit_acceptance_of_zero_is_a_what_if():
    r = CliRunner().invoke(app, ["serve", "--spec-tokens", "2", "--spec-acceptance", "0",
                                 "--num-requests", "2", *FEW, "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output


def test_calibrate_needs_it_too(tmp_path, rejects):
    f = tmp_path / "runs.csv"
    f.write_text(f"{RUNS}\n1,64,4,20,5\n")
    rejects(["serve", "calibrate", "--runs", str(f), "--spec-tokens", "2"], "spec-acceptance")


def test_draft_tokens_are_bounded(rejects):
    rejects(["serve", "--spec-tokens", str(MAX_DRAFT_TOKENS + 1), "--spec-acceptance", "0.5"],
            "--spec-tokens", str(MAX_DRAFT_TOKENS + 1), f"at most {MAX_DRAFT_TOKENS}")  # fmt: skip
    r = CliRunner().invoke(app, ["serve", "--spec-tokens", str(MAX_DRAFT_TOKENS),
                                 "--spec-acceptance", "0.5", "--num-requests", "2", *FEW,
                                 "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output


# --- 7, 8: layout options -----------------------------------------------------------------------
def test_prefill_tp_is_named(rejects):
    line = rejects(["serve", "--disagg", "--prefill-tp", "3"], "prefill-tp: got 3")
    assert not line.startswith("error: tp")


def test_the_default_kernel_is_the_gpus_native_path():
    """Left out, the kernel is the GPU's native path, which `wgmma` names on every GPU (the
    kernel choice is priced on Hopper only): an A100 with fp8 (weight-only) weights gives the
    same latencies either way, and as the Marlin kernel, which it also runs."""
    args = ["serve", "--gpu", "a100-sxm-80gb", "--precision", "fp8", "--num-requests", "4", *FEW,
            "--json"]  # fmt: skip
    docs = []
    for extra in ([], ["--weight-only-kernel", "wgmma"], ["--weight-only-kernel", "marlin"]):
        r = CliRunner().invoke(app, [*args, *extra])
        assert r.exit_code == 0, r.output
        docs.append(json.loads(r.output))
    for d in docs[1:]:
        assert d["ttft_s"] == docs[0]["ttft_s"] and d["tpot_s"] == docs[0]["tpot_s"]


def test_valid_open_loops_draw_as_before():
    """The bounds change no valid draw: gamma gaps of shape 1/cv^2 and mean 1/rate."""
    p, o = fixed_lengths(50, 16, 4)
    wl = open_loop(3.0, p, o, seed=7, cv=2.0)
    gaps = np.random.default_rng(7).gamma(0.25, 1.0 / (3.0 * 0.25), size=50)
    gaps[0] = 0.0
    assert wl.arrivals == tuple(float(a) for a in np.cumsum(gaps))
