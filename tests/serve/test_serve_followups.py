"""Follow-ups to the serving CLI: a tier-3 correction records the KV-cache precision,
speculative decoding and the host / front-end options it was fitted with, and is refused where
they differ; `serve plan --ray` at an address nobody answers fails quickly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from hwtune.errors import HwtuneInputError
from hwtune.serve.correction import (
    AffineMap,
    FittedTo,
    ServeCorrection,
    check_applies,
    load_correction,
    save_correction,
)

MODEL = ["--model", "llama3.1-8b", "--gpu", "h100-sxm-80gb"]


def runs_csv(tmp_path: Path) -> Path:
    """Three closed loops of one model (2, 4, 8 clients; 512 in, 32 out)."""
    runs = tmp_path / "runs.csv"
    runs.write_text("concurrency,input_len,output_len,ttft_ms,tpot_ms\n"
                    "2,512,32,40,8\n4,512,32,55,9\n8,512,32,90,11\n")  # fmt: skip
    return runs


def calibrate(tmp_path: Path, *opts: str, name: str = "corr.yaml") -> Path:
    """Fit a correction with ``opts`` through `hwtune serve calibrate`; its file's path."""
    from typer.testing import CliRunner

    from hwtune.cli.main import app

    out = tmp_path / name
    r = CliRunner().invoke(app, ["serve", "calibrate", "--runs", str(runs_csv(tmp_path)),
                                 *MODEL, *opts, "--out", str(out)])  # fmt: skip
    assert r.exit_code == 0, r.output
    return out


def serve_args(corr: Path, *opts: str) -> list[str]:
    return ["serve", *MODEL, "--concurrency", "2", "--input-len", "256", "--output-len", "8",
            "--correction", str(corr), *opts]  # fmt: skip


def ok(args: list[str]) -> dict:
    from typer.testing import CliRunner

    from hwtune.cli.main import app

    r = CliRunner().invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_calibrate_records_kv_precision_spec_decoding_and_host_options(tmp_path):
    """What `serve calibrate` was told lands in the file's ``fitted_to``."""
    f = load_correction(calibrate(tmp_path, "--kv-precision", "fp8", "--spec-tokens", "2",
                                  "--spec-acceptance", "0.7", "--frontend-tokens-per-s", "9000",
                                  "--overlap-schedule", "--host-timeline")).fitted_to  # fmt: skip
    assert f is not None
    assert (f.kv_precision, f.spec_tokens, f.spec_acceptance) == ("fp8", 2, 0.7)
    assert (f.frontend_tokens_per_s, f.overlap_schedule, f.host_timeline) == (9000, True, True)
    assert f.eager_prefill is False
    plain = load_correction(calibrate(tmp_path, name="plain.yaml")).fitted_to
    assert plain is not None and plain.kv_precision == "bf16" and plain.spec_tokens == 0
    assert plain.frontend_tokens_per_s is None and "frontend_tokens_per_s" in plain.recorded()


def test_fp8_kv_correction_is_refused_for_bf16_kv(tmp_path, rejects):
    """Fitted with an FP8 KV cache, applied with BF16: refused by `serve` and `serve plan`,
    naming the KV precision with both values; the same KV precision is taken."""
    corr = calibrate(tmp_path, "--kv-precision", "fp8")
    rejects(serve_args(corr, "--kv-precision", "bf16"), "correction",
            "kv_precision 'fp8', not 'bf16'")  # fmt: skip
    rejects(serve_args(corr), "correction", "kv_precision 'fp8', not 'bf16'")  # the default
    rejects(["serve", "plan", *MODEL, "--no-disagg", "--correction", str(corr)], "correction",
            "kv_precision 'fp8', not 'bf16'")  # fmt: skip
    doc = ok(serve_args(corr, "--kv-precision", "fp8"))
    assert doc["calibrated"]["ttft_s"]["mean"] > 0


def test_spec_decoding_mismatch_is_refused_both_ways(tmp_path, rejects):
    """A correction fitted without speculative decoding is refused with it (and the reverse),
    and one fitted at one acceptance rate is refused at another; each differing field is named
    with both values."""
    plain = calibrate(tmp_path, name="plain.yaml")
    line = rejects(serve_args(plain, "--spec-tokens", "1", "--spec-acceptance", "0.8"),
                   "correction", "spec_tokens 0, not 1", "spec_acceptance 0.0, not 0.8")  # fmt: skip
    assert "kv_precision" not in line and "gpu" not in line  # only what differs
    spec = calibrate(tmp_path, "--spec-tokens", "1", "--spec-acceptance", "0.8", name="spec.yaml")
    rejects(serve_args(spec), "correction", "spec_tokens 1, not 0")
    rejects(serve_args(spec, "--spec-tokens", "1", "--spec-acceptance", "0.5"), "correction",
            "spec_acceptance 0.8, not 0.5")  # fmt: skip
    rejects(["serve", "plan", *MODEL, "--no-disagg", "--correction", str(spec)], "correction",
            "spec_tokens 1, not 0")  # fmt: skip
    ok(serve_args(spec, "--spec-tokens", "1", "--spec-acceptance", "0.8"))


def test_front_end_and_host_options_must_match(tmp_path, rejects):
    """A front-end token limit absent at fitting is refused when applied (None is a recorded
    value: no limit), and so are another limit, eager prefill and the host timeline."""
    plain = calibrate(tmp_path, name="plain.yaml")
    rejects(serve_args(plain, "--frontend-tokens-per-s", "5000"), "correction",
            "frontend_tokens_per_s none, not 5000")  # fmt: skip
    rejects(serve_args(plain, "--eager-prefill"), "correction", "eager_prefill False, not True")
    rejects(serve_args(plain, "--overlap-schedule", "--host-timeline"), "correction",
            "overlap_schedule False, not True", "host_timeline False, not True")  # fmt: skip
    limited = calibrate(tmp_path, "--frontend-tokens-per-s", "9000", name="limited.yaml")
    rejects(serve_args(limited, "--frontend-tokens-per-s", "5000"), "correction",
            "frontend_tokens_per_s 9000")  # fmt: skip
    rejects(serve_args(limited), "correction", "frontend_tokens_per_s 9000", "not none")
    ok(serve_args(limited, "--frontend-tokens-per-s", "9000"))


def test_a_file_without_the_new_fields_is_still_taken(tmp_path, rejects):
    """A correction written before the KV precision, speculative decoding and host options
    were recorded is applied whatever they are now; the fields it does record still count."""
    old = tmp_path / "old.yaml"
    old.write_text("ttft: {scale: 1.5, offset_s: 0.01}\ntpot: {scale: 1.1}\nruns: 3\n"
                   "fitted_to: {model: llama3.1-8b, gpu: h100-sxm-80gb, precision: bf16, "
                   "engine: null, tier: 1}\n")  # fmt: skip
    assert load_correction(old).fitted_to.recorded() == [  # type: ignore[union-attr]
        "model", "gpu", "precision", "engine", "tier"
    ]  # fmt: skip
    ok(serve_args(old, "--kv-precision", "fp8", "--spec-tokens", "2", "--spec-acceptance",
                  "0.6", "--frontend-tokens-per-s", "4000", "--eager-prefill"))  # fmt: skip
    rejects(serve_args(old, "--kv-precision", "fp8", "--precision", "fp8"), "correction",
            "precision 'bf16', not 'fp8'")  # fmt: skip
    older = tmp_path / "older.yaml"  # before fitted_to itself
    older.write_text("ttft: {scale: 1.5}\ntpot: {scale: 1.1}\nruns: 3\n")
    ok(serve_args(older, "--kv-precision", "fp8", "--spec-tokens", "1", "--spec-acceptance", "0.5"))


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_fitted_to_round_trips_through_the_file(tmp_path, suffix):
    """Every recorded field survives writing and reading (YAML as written; JSON as a user may
    convert it), None included, and the read-back description refuses what the original does."""
    fitted = FittedTo(model="llama3.1-8b", gpu="h100-sxm-80gb", precision="fp8",
                      engine="sglang", tier=2, kv_precision="fp8", spec_tokens=3,
                      spec_acceptance=0.85, eager_prefill=True, overlap_schedule=True,
                      host_timeline=False, frontend_tokens_per_s=None,
                      scheduler="sarathi")  # fmt: skip
    corr = ServeCorrection(ttft=AffineMap(scale=1.2, offset_s=0.02), tpot=AffineMap(scale=1.1),
                           runs=4, fitted_to=fitted)  # fmt: skip
    path = tmp_path / f"corr{suffix}"
    save_correction(corr, tmp_path / "corr.yaml")
    if suffix == ".json":
        path.write_text(json.dumps(yaml.safe_load((tmp_path / "corr.yaml").read_text())))
    back = load_correction(path)
    assert back == corr
    assert back.fitted_to is not None
    assert back.fitted_to.recorded() == list(FittedTo.model_fields)
    check_applies(back, fitted)
    for change, named in (({"kv_precision": "bf16"}, "kv_precision 'fp8', not 'bf16'"),
                          ({"spec_tokens": 0, "spec_acceptance": 0.0}, "spec_tokens 3, not 0"),
                          ({"frontend_tokens_per_s": 100.0}, "frontend_tokens_per_s none"),
                          ({"scheduler": "static"}, "scheduler 'sarathi', not 'static'")):  # fmt: skip
        with pytest.raises(HwtuneInputError, match=named):
            check_applies(back, fitted.model_copy(update=change))


@pytest.mark.parametrize(
    ("field", "value"),
    [("spec_tokens", -1), ("spec_acceptance", 1.5), ("frontend_tokens_per_s", 0),
     ("eager_prefill", "often"), ("kv_kind", "fp8")],
)  # fmt: skip
def test_a_bad_recorded_field_is_an_error_naming_it(tmp_path, field, value):
    """A hand-edited ``fitted_to`` with an impossible or unknown field is refused on reading."""
    path = tmp_path / "bad.yaml"
    doc = {"ttft": {"scale": 1.0}, "tpot": {"scale": 1.0}, "runs": 3,
           "fitted_to": {"model": "m", "gpu": "g", "precision": "bf16", "tier": 1, field: value}}  # fmt: skip
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(HwtuneInputError, match=field):
        load_correction(path)


def test_serve_plan_at_a_silent_ray_address_exits_2_quickly(rejects):
    """`serve plan --ray ray://127.0.0.1:PORT` with nothing listening there: one line naming
    --ray, the address and 'reachable' within seconds (Ray alone retries for half a minute or
    more)."""
    import socket
    import time

    pytest.importorskip("ray")
    with socket.socket() as s:  # a port that was free a moment ago
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"ray://127.0.0.1:{port}"
    start = time.monotonic()
    rejects(["serve", "plan", *MODEL, "--max-gpus", "1", "--no-disagg", "--concurrency", "2",
             "--input-len", "128", "--output-len", "4", "--ray", address, "--json"], "--ray",
            f"got '{address}'", "expected a reachable Ray cluster")  # fmt: skip
    assert time.monotonic() - start < 30.0


def test_serve_plan_takes_workers_as_study_does(rejects) -> None:
    """`--workers` (study's name for the same fan-out) is `--processes` on serve plan: the same
    checks apply to it."""
    rejects(["serve", "plan", "--workers", "0"], "processes")
    rejects(["serve", "plan", "--workers", "2", "--ray", "local"], "processes")


def test_a_correction_fitted_under_one_scheduler_is_refused_under_another(tmp_path, rejects):
    """Fitted to runs simulated with vLLM's chunked-prefill scheduling (the default), applied
    to static batches: refused, naming the scheduler with both values."""
    plain = calibrate(tmp_path, name="plain.yaml")
    assert load_correction(plain).fitted_to.scheduler == "vllm"  # type: ignore[union-attr]
    rejects(serve_args(plain, "--scheduler", "static"), "correction",
            "scheduler 'vllm', not 'static'")  # fmt: skip
    ok(serve_args(plain, "--scheduler", "vllm"))
