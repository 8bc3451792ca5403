"""`hwtune serve --launch vllm`: a simulated deployment as the `vllm serve` command that runs it.

Flag names: vLLM's engine arguments (its "Engine Arguments" documentation; ``--async-scheduling``
since vLLM PR #19970). Each test sets a `ReplicaConfig` field and checks the flag that carries it,
or that what vLLM has no setting for is refused with that field's name."""

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
from hwtune.model.catalog import get_model, hf_repo
from hwtune.serve.config import Deployment, ReplicaConfig
from hwtune.serve.launch import vllm_launch, vllm_refusal


def cfg(model: str = "llama3.1-8b", **kw: object) -> ReplicaConfig:
    return ReplicaConfig(get_model(model), get_device("h100-sxm-80gb"), **kw)  # type: ignore[arg-type]


def test_limits_and_memory() -> None:
    c = cfg(max_num_seqs=64, max_num_batched_tokens=4096, gpu_memory_utilization=0.85,
            enable_prefix_caching=False, overlap_schedule=True)  # fmt: skip
    la = vllm_launch(Deployment(c), "meta-llama/Llama-3.1-8B")
    f = flags(la.args)
    assert f["--max-num-seqs"] == "64" and f["--max-num-batched-tokens"] == "4096"
    assert f["--gpu-memory-utilization"] == "0.85"
    assert "--no-enable-prefix-caching" in f and "--enable-prefix-caching" not in f
    assert "--async-scheduling" in f
    assert "--block-size" not in f  # vLLM's default 16: the backend keeps its choice
    assert la.command().startswith("vllm serve meta-llama/Llama-3.1-8B --tensor-parallel-size 1")
    f = flags(vllm_launch(Deployment(cfg(block_size=32)), "m").args)
    assert f["--block-size"] == "32" and "--no-async-scheduling" in f


@pytest.mark.parametrize(("ep", "expert_flag"), [(1, False), (8, True)])
def test_expert_parallel(ep: int, expert_flag: bool) -> None:
    # vLLM: experts sharded over all TP x DP ranks, or with --enable-expert-parallel spread whole
    # over them
    c = cfg("mixtral-8x7b", tp=8, ep=ep)
    assert ("--enable-expert-parallel" in vllm_launch(Deployment(c), "m").args) == expert_flag


def test_attention_data_parallel() -> None:
    c = cfg("deepseek-v3", tp=2, dp_attention=4, ep=8, weight_dtype="fp8")
    f = flags(vllm_launch(Deployment(c), "m").args)
    assert f["--tensor-parallel-size"] == "2" and f["--data-parallel-size"] == "4"
    assert "--enable-expert-parallel" in f
    assert vllm_launch(Deployment(c), "m").gpus_per_replica == 8


def test_precisions() -> None:
    f = flags(vllm_launch(Deployment(cfg(weight_dtype="fp8", kv_dtype="fp8")), "m").args)
    assert f["--quantization"] == "fp8" and f["--kv-cache-dtype"] == "fp8"
    # an fp8 checkpoint loads as it is
    f = flags(vllm_launch(Deployment(cfg("deepseek-v3", tp=8, ep=8)), "m").args)
    assert "--quantization" not in f
    assert "--kv-cache-dtype" not in f  # bf16 KV: vLLM's auto


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"scheduler": "orca"}, "scheduler"),
        ({"eager_prefill": True}, "eager_prefill"),
        ({"spec_tokens": 2, "spec_acceptance": 0.7}, "spec_tokens"),
        ({"kv_dtype": "fp4"}, "kv_precision"),
        ({"kv_memory_rule": "free"}, "kv_memory_rule"),
        ({"all_reduce_kernel": "trtllm"}, "all_reduce_kernel"),
        ({"reserve_to_completion": True}, "reserve_to_completion"),
        ({"batch_wait_timeout_iters": 4}, "batch_wait_timeout_iters"),
        ({"frontend_tokens_per_s": 9000.0}, "frontend_tokens_per_s"),
        ({"weight_dtype": "fp4"}, "precision"),
        ({"tp": 2, "dp_attention": 2}, "dp_attention"),
        # vLLM's SchedulerConfig._verify_args: max_num_batched_tokens >= max_num_seqs
        ({"max_num_seqs": 512, "max_num_batched_tokens": 511}, "max_num_batched_tokens"),
    ],
)
def test_refusals(fields: dict, field: str) -> None:
    c = cfg(**fields)
    e = vllm_refusal(c)
    assert e is not None and e.field == field
    with pytest.raises(HwtuneInputError):
        vllm_launch(Deployment(c), "m")


def test_partial_expert_parallel_and_disaggregation_refused() -> None:
    with pytest.raises(HwtuneInputError) as info:
        vllm_launch(Deployment(cfg("mixtral-8x7b", tp=8, ep=4)), "m")
    assert info.value.field == "ep"
    c = cfg()
    with pytest.raises(HwtuneInputError) as info:
        vllm_launch(Deployment(c, prefill=replace(c)), "m")
    assert info.value.field == "disagg"


@settings(max_examples=50, deadline=None)
@given(
    tp=hs.sampled_from([1, 2, 4, 8]),
    pp=hs.sampled_from([1, 2]),
    expert=hs.booleans(),
    seqs=hs.integers(1, 1024),
    tokens=hs.integers(1024, 65536),  # at least seqs: vLLM refuses a smaller budget
    util=hs.floats(0.5, 0.98),
    replicas=hs.integers(1, 4),
)
def test_each_setting_once_with_its_value(
    tp: int, pp: int, expert: bool, seqs: int, tokens: int, util: float, replicas: int
) -> None:
    c = cfg("mixtral-8x7b", tp=tp, pp=pp, ep=tp if expert else 1, max_num_seqs=seqs,
            max_num_batched_tokens=tokens, gpu_memory_utilization=util)  # fmt: skip
    la = vllm_launch(Deployment(c, replicas=replicas), "m")
    f = flags(la.args)
    assert int(f["--tensor-parallel-size"]) == tp  # type: ignore[arg-type]
    assert int(f.get("--pipeline-parallel-size") or 1) == pp
    assert int(f["--max-num-seqs"]) == seqs and int(f["--max-num-batched-tokens"]) == tokens  # type: ignore[arg-type]
    assert abs(float(f["--gpu-memory-utilization"]) - util) < 1e-5  # type: ignore[arg-type]
    assert (la.replicas, la.gpus_per_replica) == (replicas, tp * pp)


def test_hf_repo_from_the_catalog_config() -> None:
    # the catalog's configs/ORG--NAME.json files are those repositories' config.json
    assert hf_repo("deepseek-v3") == "deepseek-ai/DeepSeek-V3"
    assert hf_repo("mixtral-8x7b") == "mistralai/Mixtral-8x7B-v0.1"


def test_cli_serve_launch_json() -> None:
    res = CliRunner().invoke(app, [
        "serve", "-m", "mixtral-8x7b", "--tp", "4", "--ep", "4", "--concurrency", "4",
        "--input-len", "256", "--output-len", "16", "--num-requests", "8", "--launch", "vllm",
        "--json"])  # fmt: skip
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["engine"] == "vllm"  # --launch vllm simulates vLLM's behaviour
    assert doc["launch"]["model"] == "mistralai/Mixtral-8x7B-v0.1"
    assert "--enable-expert-parallel" in doc["launch"]["args"]


def test_cli_serve_plan_launch_is_the_first_layout() -> None:
    res = CliRunner().invoke(app, [
        "serve", "plan", "--ttft-p90", "2", "--tpot-p90", "0.05", "--rate", "4",
        "--num-requests", "60", "--max-gpus", "2", "--processes", "1", "--launch", "vllm",
        "--json"])  # fmt: skip
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    best = doc["best"][0]
    assert not best["disaggregated"]
    f = flags(tuple(doc["launch"]["args"]))
    assert int(f["--tensor-parallel-size"]) == best["tp"]  # type: ignore[arg-type]
    assert int(f["--max-num-seqs"]) == best["max_num_seqs"]  # type: ignore[arg-type]
    assert doc["launch"]["replicas"] == best["replicas"]


@pytest.mark.parametrize(
    ("args", "field", "words"),
    [
        (["--engine", "sglang"], "--engine", ["sglang", "vllm"]),
        (["--scheduler", "orca"], "--scheduler", ["orca"]),
        (["--tp", "8", "-m", "mixtral-8x7b", "--ep", "2"], "--ep", ["1 or 8"]),
    ],
)
def test_cli_refusals(rejects, args: list[str], field: str, words: list[str]) -> None:  # noqa: ANN001
    base = ["serve", "--concurrency", "2", "--num-requests", "4", "--input-len", "64",
            "--output-len", "4"]  # fmt: skip
    rejects([*base, *args, "--launch", "vllm"], field, *words)


def test_cli_unknown_engine(rejects) -> None:  # noqa: ANN001
    rejects(["serve", "--launch", "tgi"], "--launch", "tgi", "vllm", "sglang", "trtllm")


def test_max_model_len_only_where_the_cache_cannot_hold_the_context() -> None:
    from hwtune.serve.memory import replica_memory

    # an H100 holds ~440k tokens of Llama-3.1-8B's KV: its 131072 context fits, no flag
    assert "--max-model-len" not in flags(vllm_launch(Deployment(cfg()), "m").args)
    # an RTX 4090 holds ~30k after 15 GiB of weights: vLLM would refuse to start with 131072
    small = ReplicaConfig(get_model("llama3.1-8b"), get_device("rtx-4090"))
    n = int(flags(vllm_launch(Deployment(small), "m").args)["--max-model-len"])  # type: ignore[arg-type]
    held = replica_memory(small).kv_tokens
    assert n % 1024 == 0 and held - 1024 < n <= held < 131072
