"""`hwtune serve --launch sglang`: a simulated deployment as the SGLang server command.

Flag names and semantics: SGLang's ``ServerArgs`` (``python/sglang/srt/server_args.py`` at
`hwtune.serve.launch.SGLANG_COMMIT`): ``--tp-size`` counts every GPU of a stage, under
``--enable-dp-attention`` ``chunked_prefill_size`` is divided by ``dp_size``
(``_handle_data_parallelism``), ``max_prefill_tokens`` defaults to 16384, and
``mem_fraction_static`` is "(model weights + KV cache pool) / GPU memory capacity". Each test
sets a `ReplicaConfig` field and checks the flag that carries it, or that what SGLang has no
setting for is refused with that field's name."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs
from launch_args import flags
from typer.testing import CliRunner

from hwtune.cli.main import app
from hwtune.errors import HwtuneInputError
from hwtune.hardware.catalog import get_device
from hwtune.model.catalog import get_model
from hwtune.serve.config import Deployment, ReplicaConfig
from hwtune.serve.launch import (
    serve_launch_for,
    sglang_launch,
    sglang_mem_fraction_static,
    sglang_refusal,
)
from hwtune.serve.memory import replica_memory

PROGRAM = "python -m sglang.launch_server --model-path"


def cfg(model: str = "llama3.1-8b", gpu: str = "h100-sxm-80gb", **kw: object) -> ReplicaConfig:
    return ReplicaConfig(get_model(model), get_device(gpu), **kw)  # type: ignore[arg-type]


def test_limits_scheduler_and_switches() -> None:
    c = cfg(max_num_seqs=64, max_num_batched_tokens=4096, gpu_memory_utilization=0.85,
            enable_prefix_caching=False, overlap_schedule=True, scheduler="vllm",
            eager_prefill=False)  # fmt: skip
    la = sglang_launch(Deployment(c), "meta-llama/Llama-3.1-8B")
    f = flags(la.args)
    assert f["--tp-size"] == "1" and f["--max-running-requests"] == "64"
    assert f["--chunked-prefill-size"] == "4096"
    assert "--max-prefill-tokens" not in f  # 4096 is within SGLang's default 16384
    assert "--enable-mixed-chunk" in f  # decodes share the step's budget, as simulated
    assert "--disable-radix-cache" in f
    assert "--disable-overlap-schedule" not in f  # SGLang's default overlap scheduler
    assert "--disable-prefill-cuda-graph" not in f
    assert "--page-size" not in f  # block size not chosen: SGLang keeps its own page
    assert la.engine == "sglang" and la.env == ()
    assert la.command().startswith(f"{PROGRAM} meta-llama/Llama-3.1-8B --tp-size 1 ")
    f = flags(sglang_launch(Deployment(cfg(block_size=32, scheduler="sglang",
                                           eager_prefill=True)), "m").args)  # fmt: skip
    assert f["--page-size"] == "32"
    assert "--disable-overlap-schedule" in f  # overlap_schedule defaults to False
    assert "--disable-prefill-cuda-graph" in f
    assert "--enable-mixed-chunk" not in f and "--disable-radix-cache" not in f


def test_budget_above_the_max_prefill_default() -> None:
    # InferenceX's SGLang DeepSeek-R1 script: --chunked-prefill-size 32768 --max-prefill-tokens
    # 32768 (hwtune.serve.published.inferencex_engine_limits): both carry a 32768-token budget
    f = flags(sglang_launch(Deployment(cfg(max_num_batched_tokens=32768)), "m").args)
    assert f["--chunked-prefill-size"] == "32768" and f["--max-prefill-tokens"] == "32768"
    f = flags(sglang_launch(Deployment(cfg(max_num_batched_tokens=16384)), "m").args)
    assert "--max-prefill-tokens" not in f  # equal to SGLang's default: it does not bind


def test_attention_data_parallel() -> None:
    # SGLang's DeepSeek recipe: --tp 8 --dp 8 --enable-dp-attention on one 8-GPU node, each
    # rank taking chunked_prefill_size // dp_size tokens a step
    c = cfg("deepseek-v3", "h200-sxm-141gb", tp=1, dp_attention=8, ep=8,
            max_num_batched_tokens=8192, max_num_seqs=256)  # fmt: skip
    la = sglang_launch(Deployment(c), "deepseek-ai/DeepSeek-V3")
    f = flags(la.args)
    assert f["--tp-size"] == "8" and f["--dp-size"] == "8" and "--enable-dp-attention" in f
    assert f["--ep-size"] == "8"
    assert f["--chunked-prefill-size"] == "65536"  # 8192 per rank x 8 ranks
    assert "--max-prefill-tokens" not in f  # per rank: 8192
    assert f["--max-running-requests"] == "256"  # 32 per rank
    assert "--quantization" not in f  # the fp8 checkpoint loads as it is
    assert la.gpus_per_replica == 8
    f = flags(sglang_launch(Deployment(replace(c, tp=2, dp_attention=4)), "m").args)
    assert (f["--tp-size"], f["--dp-size"]) == ("8", "4")  # attention TP 2 in each group


@pytest.mark.parametrize("ep", [1, 2, 8])
def test_expert_parallel_any_divisor(ep: int) -> None:
    # SGLang: experts over ep_size ranks, tensor-parallel over tp_size / ep_size
    f = flags(sglang_launch(Deployment(cfg("mixtral-8x7b", tp=8, ep=ep)), "m").args)
    assert f["--tp-size"] == "8"
    assert f.get("--ep-size") == (str(ep) if ep > 1 else None)


def test_precisions() -> None:
    f = flags(sglang_launch(Deployment(cfg(weight_dtype="fp8", kv_dtype="fp8")), "m").args)
    assert f["--quantization"] == "fp8" and f["--kv-cache-dtype"] == "fp8_e4m3"
    f = flags(sglang_launch(Deployment(cfg()), "m").args)
    assert "--quantization" not in f and "--kv-cache-dtype" not in f  # bf16: SGLang's auto


@pytest.mark.parametrize(
    ("model", "gpu", "kw"),
    [
        ("llama3.1-8b", "h100-sxm-80gb", {"gpu_memory_utilization": 0.9}),
        ("llama3.1-70b", "h200-sxm-141gb", {"tp": 4, "max_num_batched_tokens": 16384}),
        ("mixtral-8x7b", "h100-sxm-80gb", {"tp": 2, "dp_attention": 2, "ep": 4}),
    ],
)
def test_mem_fraction_static_sizes_the_simulated_kv_pool(model: str, gpu: str, kw: dict) -> None:
    # SGLang's KV pool is mem_fraction_static x the device less the weights; the simulator's
    # KV pool (hwtune.serve.memory) is what the "total" rule leaves after weights, activations
    # and workspace: the fraction given makes them the same
    c = cfg(model, gpu, **kw)
    mem = replica_memory(c)
    frac = sglang_mem_fraction_static(c)
    total = c.effective_device.memory_bytes
    assert 0 < frac < c.gpu_memory_utilization
    assert abs((frac * total - mem.weights) - mem.kv_bytes) < 1e-6 * total
    f = flags(sglang_launch(Deployment(c), "m").args)
    assert abs(float(f["--mem-fraction-static"]) - frac) <= 5e-5  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("model", "fields", "field"),
    [
        ("llama3.1-8b", {"scheduler": "orca"}, "scheduler"),
        ("llama3.1-8b", {"scheduler": "sarathi"}, "scheduler"),
        ("llama3.1-8b", {"spec_tokens": 2, "spec_acceptance": 0.7}, "spec_tokens"),
        ("llama3.1-8b", {"kv_dtype": "fp4"}, "kv_precision"),
        ("llama3.1-8b", {"weight_only_kernel": "marlin"}, "weight_only_kernel"),
        ("llama3.1-8b", {"kv_memory_rule": "free"}, "kv_memory_rule"),
        ("llama3.1-8b", {"all_reduce_kernel": "trtllm"}, "all_reduce_kernel"),
        ("llama3.1-8b", {"reserve_to_completion": True}, "reserve_to_completion"),
        ("llama3.1-8b", {"batch_wait_timeout_iters": 4}, "batch_wait_timeout_iters"),
        ("llama3.1-8b", {"frontend_tokens_per_s": 9000.0}, "frontend_tokens_per_s"),
        ("llama3.1-8b", {"weight_dtype": "fp4"}, "precision"),
        ("llama3.1-8b", {"tp": 2, "dp_attention": 2}, "dp_attention"),
        ("mixtral-8x7b", {"tp": 2, "dp_attention": 2, "max_num_seqs": 5}, "max_num_seqs"),
        ("deepseek-v3", {"tp": 1, "dp_attention": 8, "ep": 8,
                         "adp_balance_timeout_iters": 60}, "adp_balance_timeout_iters"),
        # SGLang turns its overlap scheduler off under pipeline parallelism
        ("llama3.1-8b", {"pp": 2, "overlap_schedule": True}, "overlap_schedule"),
    ],
)  # fmt: skip
def test_refusals(model: str, fields: dict, field: str) -> None:
    c = cfg(model, **fields)
    e = sglang_refusal(c)
    assert e is not None and e.field == field
    with pytest.raises(HwtuneInputError) as info:
        sglang_launch(Deployment(c), "m")
    assert info.value.field == field


def test_no_refusal_for_what_sglang_runs() -> None:
    for c in (cfg(), cfg(scheduler="sglang", eager_prefill=True, overlap_schedule=True),
              cfg(pp=2, overlap_schedule=False),
              cfg("mixtral-8x7b", tp=2, dp_attention=2, ep=2, max_num_seqs=6)):  # fmt: skip
        assert sglang_refusal(c) is None


def test_disaggregation_refused() -> None:
    c = cfg()
    with pytest.raises(HwtuneInputError) as info:
        sglang_launch(Deployment(c, prefill=replace(c)), "m")
    assert info.value.field == "disagg"
    with pytest.raises(HwtuneInputError) as info:
        serve_launch_for("tgi", Deployment(c), "m")
    assert info.value.field == "launch"


@settings(max_examples=40, deadline=None)
@given(
    tp=hs.sampled_from([1, 2, 4]),
    dp=hs.sampled_from([1, 2]),
    pp=hs.sampled_from([1, 2]),
    expert=hs.booleans(),
    per_rank_seqs=hs.integers(1, 512),
    tokens=hs.integers(256, 65536),
    util=hs.floats(0.5, 0.98),
    replicas=hs.integers(1, 4),
)
def test_each_setting_once_with_its_value(
    tp: int, dp: int, pp: int, expert: bool, per_rank_seqs: int, tokens: int, util: float,
    replicas: int,
) -> None:  # fmt: skip
    seqs = per_rank_seqs * dp
    c = cfg("mixtral-8x7b", tp=tp, dp_attention=dp, pp=pp, ep=tp * dp if expert else 1,
            max_num_seqs=seqs, max_num_batched_tokens=tokens,
            gpu_memory_utilization=util)  # fmt: skip
    la = sglang_launch(Deployment(c, replicas=replicas), "m")
    f = flags(la.args)  # each flag at most once
    assert int(f["--tp-size"]) == tp * dp  # type: ignore[arg-type]
    assert int(f.get("--pp-size") or 1) == pp
    assert int(f.get("--dp-size") or 1) == dp and ("--enable-dp-attention" in f) == (dp > 1)
    assert int(f.get("--ep-size") or 1) == (tp * dp if expert else 1)
    assert int(f["--max-running-requests"]) == seqs  # type: ignore[arg-type]
    assert int(f["--chunked-prefill-size"]) == tokens * dp  # type: ignore[arg-type]
    assert int(f.get("--max-prefill-tokens") or 16384) == max(tokens, 16384)
    assert 0 < float(f["--mem-fraction-static"]) < util  # type: ignore[arg-type]
    assert (la.replicas, la.gpus_per_replica) == (replicas, tp * dp * pp)
    assert la.command().startswith(f"{PROGRAM} m ")


def test_cli_serve_launch_json() -> None:
    res = CliRunner().invoke(app, [
        "serve", "-m", "mixtral-8x7b", "--tp", "4", "--ep", "2", "--concurrency", "4",
        "--input-len", "256", "--output-len", "16", "--num-requests", "8", "--launch", "sglang",
        "--json"])  # fmt: skip
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["engine"] == "sglang"  # --launch sglang simulates SGLang's behaviour
    la = doc["launch"]
    assert la["engine"] == "sglang" and la["model"] == "mistralai/Mixtral-8x7B-v0.1"
    assert la["command"].startswith(f"{PROGRAM} mistralai/Mixtral-8x7B-v0.1 --tp-size 4 ")
    f = flags(tuple(la["args"]))
    assert f["--ep-size"] == "2"
    # SGLang's preset as simulated: eager prefill, overlap scheduling, the vllm policy
    assert "--disable-prefill-cuda-graph" in f and "--enable-mixed-chunk" in f
    assert "--disable-overlap-schedule" not in f


def test_cli_serve_plan_launch_is_the_first_layout() -> None:
    res = CliRunner().invoke(app, [
        "serve", "plan", "--ttft-p90", "2", "--tpot-p90", "0.05", "--rate", "4",
        "--num-requests", "60", "--max-gpus", "2", "--processes", "1", "--launch", "sglang",
        "--json"])  # fmt: skip
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["engine"] == "sglang"
    best = doc["best"][0]
    assert not best["disaggregated"]
    f = flags(tuple(doc["launch"]["args"]))
    assert int(f["--tp-size"]) == best["tp"]  # type: ignore[arg-type]
    assert int(f["--max-running-requests"]) == best["max_num_seqs"]  # type: ignore[arg-type]
    assert doc["launch"]["replicas"] == best["replicas"]


PLAN = ["serve", "plan", "--ttft-p90", "2", "--tpot-p90", "0.05", "--rate", "4",
        "--num-requests", "60", "--max-gpus", "2", "--processes", "1", "--top", "50",
        "--every-layout", "--json"]  # fmt: skip


def test_cli_serve_plan_searches_what_sglang_runs() -> None:
    # SGLang's preset overlaps scheduling, which SGLang turns off under pipeline parallelism:
    # --launch sglang leaves the pipeline-parallel layouts out of the search
    docs = {}
    for extra in (["--engine", "sglang"], ["--launch", "sglang"]):
        res = CliRunner().invoke(app, [*PLAN, *extra])
        assert res.exit_code == 0, res.output
        docs[extra[0]] = json.loads(res.output)
    searched, launched = docs["--engine"], docs["--launch"]
    assert any(b["pp"] == 2 for b in searched["best"])
    assert all(b["pp"] == 1 for b in launched["best"])
    assert launched["candidates"] < searched["candidates"]


def test_plan_candidates_keep() -> None:
    from hwtune.serve.plan import candidates

    base = cfg(overlap_schedule=True)
    every = candidates(base, 2, disagg=False)
    kept = candidates(base, 2, disagg=False, keep=lambda c: sglang_refusal(c) is None)
    assert {d.replica.pp for d in every} == {1, 2}
    assert {d.replica.pp for d in kept} == {1}
    assert kept == [d for d in every if d.replica.pp == 1]


def test_cli_serve_plan_refuses_before_searching(rejects) -> None:  # noqa: ANN001
    rejects([*PLAN, "--launch", "sglang", "--scheduler", "orca"], "--scheduler", "orca")


@pytest.mark.parametrize(
    ("args", "field", "words"),
    [
        (["--engine", "vllm"], "--engine", ["vllm", "sglang"]),
        (["--pp", "2", "--overlap-schedule"], "--overlap-schedule", ["pp > 1"]),
        (["--scheduler", "orca"], "--scheduler", ["orca", "enable-mixed-chunk"]),
        (["--dp-attention", "2", "--tp", "2"], "--dp-attention", ["dense"]),
        (["-m", "mixtral-8x7b", "--tp", "2", "--dp-attention", "2", "--max-num-seqs", "5"],
         "--max-num-seqs", ["5", "multiple"]),
        (["--kv-precision", "fp4"], "--kv-precision", ["fp4"]),
    ],
)  # fmt: skip
def test_cli_refusals(rejects, args: list[str], field: str, words: list[str]) -> None:  # noqa: ANN001
    base = ["serve", "--concurrency", "2", "--num-requests", "4", "--input-len", "64",
            "--output-len", "4"]  # fmt: skip
    rejects([*base, *args, "--launch", "sglang"], field, *words)
