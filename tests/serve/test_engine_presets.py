"""Engine presets (`hwtune.serve.engines`, ``hwtune serve --engine``): each engine's default
behaviour from its sources, the same behaviour the published-row validation simulates, and the
command line's precedence (explicit options win over the preset)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwtune.errors import HwtuneInputError
from hwtune.serve.config import Deployment
from hwtune.serve.engines import (
    OLDEST_RELEASE,
    SERVING_ENGINES,
    VLLM_ASYNC_DEFAULT_SINCE,
    Engine,
    engine_fields,
    overlap_by_default,
    parse_engine,
    version_tuple,
)
from hwtune.serve.published import load_rows, overlap_schedule
from hwtune.serve.request import closed_loop, fixed_lengths
from hwtune.serve.simulator import simulate


def test_presets_follow_the_engines_sources():
    """TensorRT-LLM: chunked prefill off by default (whole prompts: orca), CUDA graphs for
    generation-only batches (eager prefill), overlap scheduler on. SGLang: decode-only CUDA
    graphs, overlap scheduler on since v0.4. vLLM V1: piecewise CUDA graphs for every step,
    asynchronous scheduling by default from v0.14 (PR #27614, after v0.13.0). All-reduce:
    TensorRT-LLM its own kernels; SGLang's sgl-kernel carries vLLM's custom all-reduce."""
    assert engine_fields("trtllm") == {
        "scheduler": "orca", "eager_prefill": True, "overlap_schedule": True,
        "kv_memory_rule": "free", "reserve_to_completion": True,
        "all_reduce_kernel": "trtllm"}  # fmt: skip
    assert engine_fields("sglang") == {
        "scheduler": "vllm", "eager_prefill": True, "overlap_schedule": True,
        "kv_memory_rule": "total", "reserve_to_completion": False,
        "all_reduce_kernel": "vllm"}  # fmt: skip
    assert engine_fields("vllm@0.13") == {
        "scheduler": "vllm", "eager_prefill": False, "overlap_schedule": False,
        "kv_memory_rule": "total", "reserve_to_completion": False,
        "all_reduce_kernel": "vllm"}  # fmt: skip
    assert engine_fields("vllm@0.14.1")["overlap_schedule"] is True
    assert engine_fields("vllm")["overlap_schedule"] is True  # no version: the latest
    assert VLLM_ASYNC_DEFAULT_SINCE == (0, 14)


@pytest.mark.parametrize(
    ("spec", "engine"),
    [
        ("vllm", Engine("vllm")),
        ("vLLM@0.12", Engine("vllm", (0, 12))),
        ("trtllm@1.0.0rc3", Engine("trtllm", (1, 0))),
        (" sglang@0.5.6.post2 ", Engine("sglang", (0, 5))),
    ],
)
def test_engine_specs_parse(spec, engine):
    assert parse_engine(spec) == engine


@pytest.mark.parametrize("spec", ["tgi", "vllm@", "vllm@latest", "vllm@1", "trt-llm", "", "@0.12"])
def test_a_bad_engine_names_the_field_and_the_forms_accepted(spec):
    with pytest.raises(HwtuneInputError, match="engine") as e:
        parse_engine(spec)
    assert "vllm, sglang, trtllm" in str(e.value) and "\n" not in str(e.value)


@given(st.sampled_from(SERVING_ENGINES), st.integers(0, 99), st.integers(0, 99))
def test_a_spec_prints_back_as_parsed(name, major, minor):
    if (major, minor) < OLDEST_RELEASE[name]:
        with pytest.raises(HwtuneInputError, match="or later"):
            parse_engine(f"{name}@{major}.{minor}")
        return
    e = parse_engine(f"{name}@{major}.{minor}")
    assert e == Engine(name, (major, minor)) and parse_engine(str(e)) == e


@pytest.mark.parametrize(
    ("spec", "oldest"),
    [("vllm@0.7.3", "vllm 0.8"), ("vllm@0.0.1", "vllm 0.8"), ("sglang@0.3.6", "sglang 0.4"),
     ("trtllm@0.21.0", "trtllm 1.0")],
)  # fmt: skip
def test_a_release_older_than_the_preset_is_refused(spec, oldest, rejects):
    # vLLM's V0 engine, SGLang before its overlap scheduler, TensorRT-LLM's TensorRT-engine era
    rejects(["serve", "--engine", spec, "--num-requests", "2"], "engine", spec, oldest)
    for ok in ("vllm@0.8.0", "sglang@0.4", "trtllm@1.0.0rc3"):
        assert parse_engine(ok).version is not None


@given(st.integers(0, 3), st.integers(0, 30))
def test_vllm_overlaps_from_its_default_release_on(major, minor):
    assert overlap_by_default("vllm", (major, minor)) is ((major, minor) >= (0, 14))


def test_the_validation_simulates_each_engine_as_its_preset():
    """Every aggregated published row runs the preset's eager prefill; the rows measured by
    aiconfigurator's harness (fixed lengths) also its overlap scheduling by release (InferenceX's
    vLLM scripts turn asynchronous scheduling on themselves), and every TensorRT-LLM row whole
    prompts: so ``--engine`` and the printed track record describe the same simulator."""
    import csv

    from hwtune.serve.published import default_csv

    raw = {r["id"]: r for r in csv.DictReader(default_csv().open())}
    seen = set()
    for row in load_rows():
        if row.deployment is None or row.mode != "agg":
            continue
        rep = row.deployment.replica
        preset = engine_fields(Engine(row.backend, version_tuple(raw[row.id]["backend_version"])))
        assert rep.eager_prefill is preset["eager_prefill"], row.id
        assert rep.all_reduce_kernel == preset["all_reduce_kernel"], row.id
        if row.backend == "trtllm":
            assert rep.scheduler == preset["scheduler"] == "orca", row.id
        if row.range_ratio == 1.0 and version_tuple(raw[row.id]["backend_version"]):
            assert overlap_schedule(raw[row.id]) is preset["overlap_schedule"], row.id
        seen.add(row.backend)
    assert seen == set(SERVING_ENGINES)


@settings(max_examples=8, deadline=None)
@given(st.integers(64, 4096), st.integers(2, 64))
def test_a_lone_request_waits_longer_on_an_eager_overlapping_engine(llama8b, h100, prompt, out):
    """Eager prefill makes a step last at least its launches and overlap scheduling makes an
    arrival wait one step more: alone on the replica (same batches either way), a request's
    TTFT on the TensorRT-LLM preset is never below vLLM 0.12's (graphs, no overlap)."""
    from hwtune.serve.config import ReplicaConfig

    base = ReplicaConfig(llama8b, h100)
    ttft = {}
    for spec in ("trtllm", "vllm@0.12"):
        cfg = base.with_(**engine_fields(spec))
        p, o = fixed_lengths(1, prompt, out)
        res = simulate(Deployment(cfg), closed_loop(1, p, o))
        ttft[spec] = res.requests[0].ttft
    assert ttft["trtllm"] >= ttft["vllm@0.12"]


def serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hwtune.cli.serve", *args],
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def test_cli_engine_sets_the_behaviour_and_explicit_options_win():
    common = ["--concurrency", "2", "--input-len", "256", "--output-len", "8", "--json"]
    r = serve("--engine", "trtllm", *common)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert (doc["engine"], doc["scheduler"], doc["eager_prefill"], doc["overlap_schedule"]) == (
        "trtllm", "orca", True, True)  # fmt: skip
    assert doc["all_reduce_kernel"] == "trtllm"
    r = serve("--engine", "trtllm", "--scheduler", "vllm", "--no-overlap-schedule", *common)
    doc = json.loads(r.stdout)
    assert (doc["scheduler"], doc["eager_prefill"], doc["overlap_schedule"]) == (
        "vllm",
        True,
        False,
    )
    doc = json.loads(serve(*common).stdout)  # no preset: the generic defaults
    assert (doc["engine"], doc["scheduler"], doc["eager_prefill"], doc["overlap_schedule"]) == (
        None, "vllm", False, False)  # fmt: skip
    assert doc["all_reduce_kernel"] == "vllm"
    assert json.loads(serve("--engine", "sglang", *common).stdout)["all_reduce_kernel"] == "vllm"


def test_cli_bad_engine_is_one_line_and_exit_2():
    r = serve("--engine", "tgi", "--concurrency", "1", "--json")
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "engine" in r.stderr
    assert "Traceback" not in r.stderr
