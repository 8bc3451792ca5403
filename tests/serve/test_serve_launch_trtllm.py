"""`hwtune serve --launch trtllm`: a simulated deployment as the TensorRT-LLM server command.

The option names below are facts read from NVIDIA/TensorRT-LLM (not from hwtune): the click
options of ``tensorrt_llm/commands/serve.py`` at `hwtune.serve.launch.TRTLLM_SERVE_COMMIT`
(00209af) and the pydantic fields of ``tensorrt_llm/llmapi/llm_args.py`` at
`hwtune.serve.launch.TRTLLM_ARGS_COMMIT` (0004396). The source index gives a file's text by
offset, not by line, so each fact cites the file and the class, function or decorator it is
in. Each test sets a `ReplicaConfig` field and checks the option that carries it, or that what
TensorRT-LLM has no setting for is refused with that field's name."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import yaml
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
    trtllm_launch,
    trtllm_refusal,
    vllm_launch,
)

# commands/serve.py, @click.command("serve"): the options a launch may use (each alias listed)
SERVE_OPTIONS = {
    "--backend",  # ChoiceWithAlias(["pytorch", "tensorrt", "_autodeploy"]), default "pytorch"
    "--tensor_parallel_size", "--tp_size",
    "--pipeline_parallel_size", "--pp_size",
    "--moe_expert_parallel_size", "--ep_size",
    "--max_batch_size", "--max_num_tokens",
    "--free_gpu_memory_fraction", "--kv_cache_free_gpu_memory_fraction",
    "--config", "--extra_llm_api_options",  # "Path to a YAML file that overwrites ..."
}  # fmt: skip
# llm_args.py, class BaseLlmArgs and class TorchLlmArgs(BaseLlmArgs): top-level YAML keys
LLM_ARGS_FIELDS = {
    "tensor_parallel_size", "pipeline_parallel_size", "moe_expert_parallel_size",
    "moe_tensor_parallel_size", "enable_attention_dp", "kv_cache_config",
    "enable_chunked_prefill", "scheduler_config", "max_batch_size", "max_num_tokens",
    "cuda_graph_config", "attention_dp_config", "disable_overlap_scheduler", "moe_config",
    "batch_wait_timeout_iters", "batch_wait_max_tokens_ratio", "prefill_cuda_graph_backend",
    "prefill_capture_num_tokens",
}  # fmt: skip
NESTED_FIELDS = {
    # class KvCacheConfig
    "kv_cache_config": {"enable_block_reuse", "free_gpu_memory_fraction", "dtype",
                        "tokens_per_block", "max_tokens", "max_gpu_total_bytes"},
    # class SchedulerConfig
    "scheduler_config": {"capacity_scheduler_policy", "context_chunking_policy"},
    # class BaseCudaGraphConfig / DecodeCudaGraphConfig (CudaGraphConfig = DecodeCudaGraphConfig)
    "cuda_graph_config": {"batch_sizes", "max_batch_size", "enable_padding"},
    # class AttentionDpConfig
    "attention_dp_config": {"enable_balance", "timeout_iters", "batching_wait_iters"},
    # class MoeConfig
    "moe_config": {"backend", "max_num_tokens"},
}  # fmt: skip
# class CapacitySchedulerPolicy(StrEnum)
CAPACITY_POLICIES = {"MAX_UTILIZATION", "GUARANTEED_NO_EVICT", "STATIC_BATCH"}
# class MoeConfig, backend: Literal[...]
MOE_BACKENDS = {"AUTO", "CUTLASS", "CUTEDSL", "TRTLLM", "DEEPGEMM", "DENSEGEMM", "VANILLA",
                "TRITON", "MARLIN", "MEGAMOE_DEEPGEMM", "MEGAMOE_CUTEDSL"}  # fmt: skip
# class KvCacheConfig, validate_dtype: "auto", "fp8", "fp8_ds_mla", "nvfp4" (or a torch dtype,
# which aiconfigurator's generator/rule_plugin/trtllm.rule maps to "auto": rejected in use)
KV_DTYPES = {"auto", "fp8", "fp8_ds_mla", "nvfp4"}
# class PrefillCudaGraphBackend(StrEnum)
PREFILL_GRAPH_BACKENDS = {"disabled", "piecewise", "breakable"}


def cfg(model: str = "llama3.1-8b", gpu: str = "h100-sxm-80gb", **kw: object) -> ReplicaConfig:
    """A replica with TensorRT-LLM's memory rules (`hwtune.serve.engines`: free, reserve)."""
    kw = {"kv_memory_rule": "free", "reserve_to_completion": True, "scheduler": "orca",
          "all_reduce_kernel": "trtllm", **kw}  # fmt: skip
    return ReplicaConfig(get_model(model), get_device(gpu), **kw)  # type: ignore[arg-type]


def options(c: ReplicaConfig, replicas: int = 1) -> tuple[dict, dict]:
    """The command's flags and its options file read back with yaml.safe_load."""
    la = trtllm_launch(Deployment(c, replicas=replicas), "m")
    f = flags(la.args)
    ((name, text),) = la.files
    assert f["--extra_llm_api_options"] == name
    return f, yaml.safe_load(text)


def check_names(f: dict, opts: dict) -> None:
    """Every flag a trtllm-serve option, every YAML key and enum value an LLM API one."""
    assert set(f) <= SERVE_OPTIONS, set(f) - SERVE_OPTIONS
    assert set(opts) <= LLM_ARGS_FIELDS, set(opts) - LLM_ARGS_FIELDS
    for key, sub in opts.items():
        if key in NESTED_FIELDS:
            assert set(sub) <= NESTED_FIELDS[key], (key, set(sub) - NESTED_FIELDS[key])
    assert opts["scheduler_config"]["capacity_scheduler_policy"] in CAPACITY_POLICIES
    assert opts["kv_cache_config"]["dtype"] in KV_DTYPES
    if "moe_config" in opts:
        assert opts["moe_config"]["backend"] in MOE_BACKENDS
    if "prefill_cuda_graph_backend" in opts:
        assert opts["prefill_cuda_graph_backend"] in PREFILL_GRAPH_BACKENDS
    assert f["--backend"] == "pytorch"


@pytest.mark.parametrize("util", [0.5, 0.85, 0.9, 0.95])
def test_free_rule_fraction_is_trtllm_free_fraction(util: float) -> None:
    # KvCacheConfig.free_gpu_memory_fraction: "the fraction of GPU memory ... allocated for the
    # KV cache" of what is free after the model, which is the simulated "free" rule's fraction
    f, opts = options(cfg(gpu_memory_utilization=util))
    check_names(f, opts)
    assert opts["kv_cache_config"]["free_gpu_memory_fraction"] == util


@pytest.mark.parametrize(
    ("reserve", "policy"), [(True, "GUARANTEED_NO_EVICT"), (False, "MAX_UTILIZATION")]
)
def test_reserving_to_completion_is_guaranteed_no_evict(reserve: bool, policy: str) -> None:
    # capacityScheduler: GUARANTEED_NO_EVICT admits with the blocks to completion;
    # MAX_UTILIZATION grows them and pauses requests when the cache is full
    _, opts = options(cfg(reserve_to_completion=reserve))
    assert opts["scheduler_config"]["capacity_scheduler_policy"] == policy


def test_limits_switches_and_schedulers() -> None:
    f, opts = options(cfg(max_num_seqs=64, max_num_batched_tokens=4096,
                          enable_prefix_caching=False, overlap_schedule=True,
                          eager_prefill=True))  # fmt: skip
    check_names(f, opts)
    assert (f["--tp_size"], f["--max_batch_size"], f["--max_num_tokens"]) == ("1", "64", "4096")
    assert "--pp_size" not in f and "--ep_size" not in f  # dense, one stage
    assert opts["enable_chunked_prefill"] is False  # orca: TensorRT-LLM's default
    assert opts["kv_cache_config"]["enable_block_reuse"] is False
    assert opts["disable_overlap_scheduler"] is False
    assert "prefill_cuda_graph_backend" not in opts  # eager prefill: the default "disabled"
    assert opts["enable_attention_dp"] is False and "attention_dp_config" not in opts
    # every decode-only batch up to the limit runs a CUDA graph (default captures up to 128)
    assert opts["cuda_graph_config"] == {"enable_padding": True, "max_batch_size": 64}
    assert "tokens_per_block" not in opts["kv_cache_config"]  # block size not chosen
    _, opts = options(cfg(scheduler="vllm", overlap_schedule=False, eager_prefill=False,
                          block_size=64))  # fmt: skip
    assert opts["enable_chunked_prefill"] is True
    assert opts["disable_overlap_scheduler"] is True
    assert opts["prefill_cuda_graph_backend"] == "piecewise"
    assert opts["kv_cache_config"]["tokens_per_block"] == 64


def test_attention_data_parallel_with_balancing() -> None:
    # TensorRT-LLM's DeepSeek recipes: --tp_size 8 --ep_size 8 with enable_attention_dp, each
    # rank scheduling max_batch_size requests of its own; attention_dp_config as
    # ReplicaConfig's docstring gives TensorRT-LLM's balancing
    c = cfg("deepseek-v3", "h200-sxm-141gb", tp=1, dp_attention=8, ep=8, max_num_seqs=256,
            max_num_batched_tokens=8192, adp_balance_timeout_iters=60)  # fmt: skip
    f, opts = options(c, replicas=2)
    check_names(f, opts)
    assert (f["--tp_size"], f["--ep_size"]) == ("8", "8")
    assert f["--max_batch_size"] == "32"  # 256 over 8 ranks
    assert f["--max_num_tokens"] == "8192"  # per rank, as simulated
    assert opts["enable_attention_dp"] is True
    assert opts["attention_dp_config"] == {"enable_balance": True, "timeout_iters": 60,
                                           "batching_wait_iters": 0}  # fmt: skip
    assert opts["cuda_graph_config"]["max_batch_size"] == 32
    assert opts["kv_cache_config"]["dtype"] == "auto"  # the fp8 checkpoint's own KV format
    la = trtllm_launch(Deployment(c, replicas=2), "deepseek-ai/DeepSeek-V3")
    assert (la.replicas, la.gpus_per_replica) == (2, 8)


@pytest.mark.parametrize("ep", [1, 2, 8])
def test_expert_parallel_any_divisor(ep: int) -> None:
    # moe_tp_size x moe_ep_size = tp_size (aiconfigurator's trtllm.rule): --ep_size alone fixes it
    f, opts = options(cfg("mixtral-8x7b", tp=8, ep=ep))
    check_names(f, opts)
    assert (f["--tp_size"], f["--ep_size"]) == ("8", str(ep))


def test_batch_waiting() -> None:
    # TorchLlmArgs.batch_wait_timeout_iters / batch_wait_max_tokens_ratio (x max_num_tokens)
    _, opts = options(cfg(batch_wait_timeout_iters=4, batch_wait_max_tokens_ratio=0.75))
    assert (opts["batch_wait_timeout_iters"], opts["batch_wait_max_tokens_ratio"]) == (4, 0.75)
    _, opts = options(cfg())
    assert "batch_wait_timeout_iters" not in opts  # 0: TensorRT-LLM's default


def test_kv_formats_and_moe_kernel() -> None:
    _, opts = options(cfg(kv_dtype="fp8"))
    assert opts["kv_cache_config"]["dtype"] == "fp8"
    _, opts = options(cfg(gpu="b200", kv_dtype="fp4"))  # Blackwell: FP4 math
    assert opts["kv_cache_config"]["dtype"] == "nvfp4"
    # gpt-oss's MXFP4 experts on Hopper with TensorRT-LLM's TRITON MoE backend
    f, opts = options(cfg("gpt-oss-120b", weight_only_kernel="triton-mxfp4"))
    check_names(f, opts)
    assert opts["moe_config"] == {"backend": "TRITON"}
    _, opts = options(cfg("gpt-oss-120b"))
    assert "moe_config" not in opts  # wgmma: TensorRT-LLM's AUTO choice


@pytest.mark.parametrize(
    ("model", "gpu", "fields", "field"),
    [
        ("llama3.1-8b", "h100-sxm-80gb", {"scheduler": "sarathi"}, "scheduler"),
        ("llama3.1-8b", "h100-sxm-80gb", {"scheduler": "sglang"}, "scheduler"),
        ("llama3.1-8b", "h100-sxm-80gb", {"spec_tokens": 2, "spec_acceptance": 0.7},
         "spec_tokens"),
        ("llama3.1-8b", "h100-sxm-80gb", {"weight_dtype": "fp8"}, "precision"),
        ("deepseek-v3", "h200-sxm-141gb", {"tp": 8, "weight_dtype": "bf16"}, "precision"),
        ("llama3.1-8b", "h100-sxm-80gb", {"kv_dtype": "fp4"}, "kv_precision"),  # no FP4 math
        ("llama3.1-8b", "h100-sxm-80gb", {"kv_dtype": "fp16"}, "kv_precision"),
        ("gpt-oss-120b", "h100-sxm-80gb", {"weight_only_kernel": "marlin"},
         "weight_only_kernel"),
        ("llama3.1-8b", "h100-sxm-80gb", {"weight_only_kernel": "triton-mxfp4"},
         "weight_only_kernel"),
        ("llama3.1-8b", "h100-sxm-80gb", {"kv_memory_rule": "total"}, "kv_memory_rule"),
        ("llama3.1-8b", "h100-sxm-80gb", {"all_reduce_kernel": "vllm"}, "all_reduce_kernel"),
        ("mixtral-8x7b", "h100-sxm-80gb", {"tp": 2, "dp_attention": 2}, "tp"),
        ("mixtral-8x7b", "h100-sxm-80gb", {"dp_attention": 2, "max_num_seqs": 5},
         "max_num_seqs"),
        ("llama3.1-8b", "h100-sxm-80gb", {"dp_attention": 2}, "dp_attention"),
        ("llama3.1-8b", "h100-sxm-80gb", {"frontend_tokens_per_s": 9000.0},
         "frontend_tokens_per_s"),
    ],
)  # fmt: skip
def test_refusals(model: str, gpu: str, fields: dict, field: str) -> None:
    c = cfg(model, gpu, **fields)
    e = trtllm_refusal(c)
    assert e is not None and e.field == field
    with pytest.raises(HwtuneInputError) as info:
        trtllm_launch(Deployment(c), "m")
    assert info.value.field == field


def test_no_refusal_for_what_trtllm_runs() -> None:
    # TensorRT-LLM's own knobs, refused by vLLM and SGLang, are expressed here
    for c in (cfg(), cfg(batch_wait_timeout_iters=8, batch_wait_max_tokens_ratio=0.5),
              cfg(reserve_to_completion=False, overlap_schedule=True, eager_prefill=True),
              cfg(pp=2, overlap_schedule=True), cfg(scheduler="vllm"),
              cfg("deepseek-v3", "h200-sxm-141gb", dp_attention=8, ep=8,
                  adp_balance_timeout_iters=20),
              cfg("gpt-oss-120b", weight_only_kernel="triton-mxfp4")):  # fmt: skip
        assert trtllm_refusal(c) is None


def test_disaggregation_refused() -> None:
    c = cfg()
    with pytest.raises(HwtuneInputError) as info:
        trtllm_launch(Deployment(c, prefill=replace(c)), "m")
    assert info.value.field == "disagg"


def test_vllm_and_sglang_launches_carry_no_files() -> None:
    c = ReplicaConfig(get_model("llama3.1-8b"), get_device("h100-sxm-80gb"))
    for launch in (vllm_launch, sglang_launch):
        doc = launch(Deployment(c), "m").to_dict()
        # every launch document has `files` (empty here), so scripts read any of them alike
        assert doc["files"] == {} and launch(Deployment(c), "m").files == ()


@settings(max_examples=40, deadline=None)
@given(
    model=hs.sampled_from(["llama3.1-8b", "mixtral-8x7b", "deepseek-v3"]),
    tp=hs.sampled_from([1, 2, 4, 8]),
    dp=hs.sampled_from([1, 2, 4, 8]),
    pp=hs.sampled_from([1, 2]),
    expert=hs.booleans(),
    seqs=hs.integers(1, 1024),
    tokens=hs.integers(256, 65536),
    util=hs.floats(0.3, 0.98),
    reserve=hs.booleans(),
    scheduler=hs.sampled_from(["orca", "vllm", "sarathi"]),
    overlap=hs.booleans(),
    eager=hs.booleans(),
    prefix=hs.booleans(),
    balance=hs.integers(0, 100),
    wait=hs.integers(0, 16),
    kv=hs.sampled_from([None, "fp8", "fp4", "bf16"]),
)
def test_launch_reads_back_as_simulated(
    model: str, tp: int, dp: int, pp: int, expert: bool, seqs: int, tokens: int, util: float,
    reserve: bool, scheduler: str, overlap: bool, eager: bool, prefix: bool, balance: int,
    wait: int, kv: str | None,
) -> None:  # fmt: skip
    try:
        c = cfg(model, "h200-sxm-141gb", tp=tp, dp_attention=dp, pp=pp,
                ep=tp * dp if expert else 1, max_num_seqs=seqs, max_num_batched_tokens=tokens,
                gpu_memory_utilization=util, reserve_to_completion=reserve,
                scheduler=scheduler, overlap_schedule=overlap, eager_prefill=eager,
                enable_prefix_caching=prefix, adp_balance_timeout_iters=balance,
                batch_wait_timeout_iters=wait, kv_dtype=kv)  # fmt: skip
    except HwtuneInputError:
        return  # not a replica hwtune simulates
    refusal = trtllm_refusal(c)
    if refusal is not None:  # refused with a field of ReplicaConfig, and the launch agrees
        with pytest.raises(HwtuneInputError) as info:
            trtllm_launch(Deployment(c), "m")
        assert info.value.field == refusal.field
        return
    f, opts = options(c)
    check_names(f, opts)
    assert int(f["--tp_size"]) * int(f.get("--pp_size") or 1) == c.gpus  # type: ignore[arg-type]
    assert int(f["--max_batch_size"]) * dp * pp == seqs  # type: ignore[arg-type]
    assert int(f["--max_num_tokens"]) == tokens  # type: ignore[arg-type]
    assert ("--ep_size" in f) == (c.model.moe is not None)
    kvc = opts["kv_cache_config"]
    assert kvc["free_gpu_memory_fraction"] == util and kvc["enable_block_reuse"] is prefix
    assert (opts["scheduler_config"]["capacity_scheduler_policy"] == "GUARANTEED_NO_EVICT") is (
        reserve
    )
    assert opts["enable_chunked_prefill"] is (scheduler == "vllm")
    assert opts["disable_overlap_scheduler"] is (not overlap)
    assert ("prefill_cuda_graph_backend" in opts) is (not eager)
    assert opts["enable_attention_dp"] is (dp > 1)
    assert ("attention_dp_config" in opts) is (dp > 1 and balance > 0)
    assert opts.get("batch_wait_timeout_iters", 0) == wait


@settings(max_examples=12, deadline=None)
@given(
    model=hs.sampled_from(["llama3.1-8b", "mixtral-8x7b", "gpt-oss-120b", "llama3.1-70b"]),
    gpus=hs.sampled_from([1, 2, 4, 8]),
    overlap=hs.booleans(),
    reserve=hs.booleans(),
)
def test_plan_searches_only_what_trtllm_runs(
    model: str, gpus: int, overlap: bool, reserve: bool
) -> None:
    from hwtune.serve.plan import candidates

    base = cfg(model, "h200-sxm-141gb", overlap_schedule=overlap, eager_prefill=True,
               reserve_to_completion=reserve)  # fmt: skip
    if trtllm_refusal(base) is not None:
        return
    for dep in candidates(base, gpus, disagg=False, keep=lambda c: trtllm_refusal(c) is None):
        assert trtllm_refusal(dep.replica) is None
        serve_launch_for("trtllm", dep, "m")  # launches without a refusal


def test_cli_serve_launch_json_and_text() -> None:
    args = ["serve", "-m", "mixtral-8x7b", "--tp", "4", "--ep", "2", "--concurrency", "4",
            "--input-len", "256", "--output-len", "16", "--num-requests", "8", "--launch",
            "trtllm"]  # fmt: skip
    res = CliRunner().invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["engine"] == "trtllm"  # --launch trtllm simulates TensorRT-LLM's preset
    la = doc["launch"]
    assert la["command"].startswith("trtllm-serve mistralai/Mixtral-8x7B-v0.1 --backend pytorch")
    f = flags(tuple(la["args"]))
    assert (f["--tp_size"], f["--ep_size"]) == ("4", "2")
    opts = yaml.safe_load(la["files"][f["--extra_llm_api_options"]])
    check_names(f, opts)
    # TensorRT-LLM's preset as simulated: free rule at 0.9, no eviction, whole prompts,
    # overlap scheduling, eager prefill
    assert opts["kv_cache_config"]["free_gpu_memory_fraction"] == 0.9
    assert opts["scheduler_config"]["capacity_scheduler_policy"] == "GUARANTEED_NO_EVICT"
    assert opts["enable_chunked_prefill"] is False and opts["disable_overlap_scheduler"] is False
    assert "prefill_cuda_graph_backend" not in opts
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert f["--extra_llm_api_options"] + ":" in res.output
    assert "capacity_scheduler_policy: GUARANTEED_NO_EVICT" in res.output


PLAN = ["serve", "plan", "--ttft-p90", "2", "--tpot-p90", "0.05", "--rate", "4",
        "--num-requests", "60", "--max-gpus", "2", "--processes", "1", "--top", "50",
        "--json"]  # fmt: skip


def test_cli_serve_plan_launch_is_the_first_layout() -> None:
    res = CliRunner().invoke(app, [*PLAN, "--launch", "trtllm"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["engine"] == "trtllm"
    best = doc["best"][0]
    assert not best["disaggregated"]
    f = flags(tuple(doc["launch"]["args"]))
    assert int(f["--tp_size"]) == best["tp"]  # type: ignore[arg-type]
    assert int(f["--max_batch_size"]) == best["max_num_seqs"]  # type: ignore[arg-type]
    assert doc["launch"]["replicas"] == best["replicas"]


@pytest.mark.parametrize(
    ("args", "field", "words"),
    [
        (["--engine", "vllm"], "--engine", ["vllm", "trtllm"]),
        (["--scheduler", "sarathi"], "--scheduler", ["sarathi", "orca"]),
        (["--dp-attention", "2", "--tp", "2"], "--dp-attention", ["dense"]),
        (["-m", "mixtral-8x7b", "--tp", "2", "--dp-attention", "2"], "--tp", ["attention"]),
        (["--kv-precision", "fp4"], "--kv-precision", ["fp4"]),
        (["--precision", "fp8"], "--precision", ["fp8", "bf16"]),
        (["--spec-tokens", "2", "--spec-acceptance", "0.8"], "--spec-tokens", ["2"]),
        (["--frontend-tokens-per-s", "5000"], "--frontend-tokens-per-s", ["5000"]),
    ],
)  # fmt: skip
def test_cli_refusals(rejects, args: list[str], field: str, words: list[str]) -> None:  # noqa: ANN001
    base = ["serve", "--concurrency", "2", "--num-requests", "4", "--input-len", "64",
            "--output-len", "4"]  # fmt: skip
    rejects([*base, *args, "--launch", "trtllm"], field, *words)


def test_cli_serve_plan_refuses_before_searching(rejects) -> None:  # noqa: ANN001
    rejects([*PLAN, "--launch", "trtllm", "--scheduler", "sarathi"], "--scheduler", "sarathi")
