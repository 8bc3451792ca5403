"""`hwtune serve --launch trtllm`: what TensorRT-LLM RUNS given the command, against what hwtune
simulates (the names were checked in test_serve_launch_trtllm.py; these are the semantics).

Each fact is read from NVIDIA/TensorRT-LLM, not from hwtune; the source index gives a file's
text by offset, not by line, so each cites the file, the commit and the function it is in:

- ``tensorrt_llm/_torch/pyexecutor/_util.py`` at 0004396 (`TRTLLM_ARGS_COMMIT`):
  ``compute_max_num_sequences`` returns ``max_batch_size * num_micro_batches`` with
  ``num_micro_batches = mapping.pp_size`` under pipeline parallelism, and
  ``create_py_executor_instance`` gives the capacity scheduler ``scheduler_capacity =
  max_batch_size * mapping.pp_size`` requests while ``BindMicroBatchScheduler(max_batch_size,
  max_num_tokens, ...)`` caps each forward at ``max_batch_size``: ``--max_batch_size`` is per
  pipeline micro-batch, the replica holding ``pp`` times as many;
- ``tensorrt_llm/llmapi/llm_args.py`` at 0004396: ``_DEFAULT_PREFILL_CAPTURE_NUM_TOKENS =
  [2**i for i in range(8)] + [i for i in range(256, 3073, 256)]`` (1 ... 128, 256 ... 3072),
  used when ``prefill_capture_num_tokens`` is None (``normalize_prefill_cuda_graph_config``);
- ``tensorrt_llm/_torch/pyexecutor/engine/runners/common.py`` (``get_padding_params``; the
  same test in ``model_engine.py``'s ``_get_padding_params`` of older commits): a step runs a
  prefill CUDA graph only when it has context requests and its token count (the largest
  rank's under attention DP) is at most ``prefill_cuda_graph_num_tokens[-1]``, padded up to
  the next captured size; larger steps run eagerly;
- NVIDIA's "Supported Hardware" page (nvidia.github.io/TensorRT-LLM/supported-hardware.html):
  Blackwell, Hopper, Ada Lovelace and Ampere GPUs;
- ``tensorrt_llm/_torch/pyexecutor/py_executor_creator.py`` (``create_py_executor``, the ``if
  is_mla(config):`` block; the same at bab0f2e and at 000429d): for an MLA model, block reuse
  is switched off unless the SM is 90, 100, 103 or 120, and unless the KV cache is unquantized
  or fp8; chunked prefill is switched off unless the SM is one of those (warnings only).
"""

from __future__ import annotations

import pytest
import yaml
from launch_args import flags

from hwtune.hardware.catalog import get_device
from hwtune.model.catalog import get_model
from hwtune.serve.config import Deployment, ReplicaConfig
from hwtune.serve.launch import trtllm_launch, trtllm_refusal

# llm_args.py @ 0004396, _DEFAULT_PREFILL_CAPTURE_NUM_TOKENS
TRTLLM_DEFAULT_PREFILL_CAPTURE = [2**i for i in range(8)] + list(range(256, 3073, 256))
# SM versions py_executor_creator.py keeps MLA block reuse and chunked prefill on
MLA_REUSE_SMS = {90, 100, 103, 120}
# hwtune's catalog architectures and their SM versions (NVIDIA's CUDA GPU list)
ARCH_SM = {"volta": 70, "ampere": 80, "ada": 89, "hopper": 90, "blackwell": 100,
           "blackwell-ultra": 103}  # fmt: skip


def cfg(model: str = "llama3.1-8b", gpu: str = "h100-sxm-80gb", **kw: object) -> ReplicaConfig:
    """A replica with TensorRT-LLM's preset (`hwtune.serve.engines`)."""
    kw = {"kv_memory_rule": "free", "reserve_to_completion": True, "scheduler": "orca",
          "eager_prefill": True, "all_reduce_kernel": "trtllm", **kw}  # fmt: skip
    return ReplicaConfig(get_model(model), get_device(gpu), **kw)  # type: ignore[arg-type]


def options(c: ReplicaConfig) -> tuple[dict, dict]:
    la = trtllm_launch(Deployment(c), "m")
    ((_, text),) = la.files
    return flags(la.args), yaml.safe_load(text)


@pytest.mark.parametrize(
    ("model", "fields"),
    [
        ("llama3.1-8b", {"pp": 2, "max_num_seqs": 64}),
        ("llama3.1-70b", {"tp": 4, "pp": 2, "max_num_seqs": 256}),
        ("deepseek-v3", {"dp_attention": 8, "ep": 8, "pp": 2, "max_num_seqs": 512}),
    ],
)
def test_pipeline_replica_holds_max_num_seqs_in_all(model: str, fields: dict) -> None:
    # _util.py: the capacity scheduler admits max_batch_size * pp_size requests per rank, each
    # micro-batch forward at most max_batch_size: the replica's total is hwtune's max_num_seqs
    c = cfg(model, "h200-sxm-141gb", **fields)
    f, opts = options(c)
    per_microbatch = int(f["--max_batch_size"])  # type: ignore[arg-type]
    assert per_microbatch * c.pp * c.dp_attention == c.max_num_seqs
    # a decode micro-batch is at most max_batch_size: its CUDA graphs need go no further
    assert opts["cuda_graph_config"]["max_batch_size"] == per_microbatch


def test_pipeline_max_num_seqs_not_a_multiple_refused() -> None:
    c = cfg(pp=2, max_num_seqs=63)
    e = trtllm_refusal(c)
    assert e is not None and e.field == "max_num_seqs"
    c = cfg("deepseek-v3", "h200-sxm-141gb", dp_attention=4, ep=4, pp=2, max_num_seqs=36)
    e = trtllm_refusal(c)  # 36 is a multiple of dp 4, not of dp x pp = 8
    assert e is not None and e.field == "max_num_seqs"


@pytest.mark.parametrize("budget", [512, 2048, 3072, 3073, 4096, 8192, 16384])
def test_prefill_cuda_graphs_cover_every_step_of_the_budget(budget: int) -> None:
    # hwtune without eager_prefill: every step that carries prompt tokens runs a CUDA graph.
    # TensorRT-LLM runs one only for steps of at most the largest captured size.
    _, opts = options(cfg(eager_prefill=False, max_num_batched_tokens=budget))
    assert opts["prefill_cuda_graph_backend"] == "piecewise"
    sizes = opts.get("prefill_capture_num_tokens", TRTLLM_DEFAULT_PREFILL_CAPTURE)
    assert max(sizes) >= budget  # no step of the budget left eager
    assert sizes == sorted(set(sizes)) and all(s <= max(budget, 3072) for s in sizes)
    # padding to the next captured size stays within TensorRT-LLM's own 256-token spacing
    assert all(b - a <= 256 for a, b in zip(sizes, sizes[1:], strict=False) if a >= 256)
    if budget <= max(TRTLLM_DEFAULT_PREFILL_CAPTURE):
        assert "prefill_capture_num_tokens" not in opts  # the default already covers it


def test_prefill_capture_is_per_attention_dp_rank() -> None:
    # get_padding_params compares the largest rank's token count: the per-rank budget
    c = cfg("deepseek-v3", "h200-sxm-141gb", dp_attention=8, ep=8, max_num_seqs=256,
            max_num_batched_tokens=8192, eager_prefill=False)  # fmt: skip
    _, opts = options(c)
    assert max(opts["prefill_capture_num_tokens"]) == 8192


def test_eager_prefill_leaves_prefill_graphs_off() -> None:
    _, opts = options(cfg(eager_prefill=True, max_num_batched_tokens=16384))
    assert "prefill_cuda_graph_backend" not in opts and "prefill_capture_num_tokens" not in opts


@pytest.mark.parametrize("gpu", ["mi300x", "v100-sxm2-32gb"])
def test_gpu_tensorrt_llm_does_not_run_on_refused(gpu: str) -> None:
    dev = get_device(gpu)
    assert dev.vendor != "nvidia" or ARCH_SM[dev.architecture] < 80
    e = trtllm_refusal(cfg(gpu=gpu))
    assert e is not None and e.field == "gpu"


@pytest.mark.parametrize("gpu", ["a100-sxm4-80gb", "l40s", "h100-sxm-80gb", "b200", "b300"])
def test_supported_gpus_launch(gpu: str) -> None:
    assert ARCH_SM[get_device(gpu).architecture] >= 80
    assert trtllm_refusal(cfg(gpu=gpu)) is None


@pytest.mark.parametrize("gpu", ["a100-sxm4-80gb", "l40s", "h200-sxm-141gb", "b200", "b300"])
def test_mla_prefix_caching_and_chunking_where_trtllm_keeps_them(gpu: str) -> None:
    sm = ARCH_SM[get_device(gpu).architecture]
    kept = sm in MLA_REUSE_SMS
    base = {"tp": 8, "ep": 8}
    reuse = cfg("deepseek-v3", gpu, enable_prefix_caching=True, **base)
    e = trtllm_refusal(reuse)
    assert (e is None) is kept, e
    if not kept:
        assert e.field == "prefix_caching"  # TensorRT-LLM would run without block reuse
    chunked = cfg("deepseek-v3", gpu, enable_prefix_caching=False, scheduler="vllm", **base)
    e = trtllm_refusal(chunked)
    assert (e is None) is kept, e
    if not kept:
        assert e.field == "scheduler"  # TensorRT-LLM would prefill whole prompts
    whole = cfg("deepseek-v3", gpu, enable_prefix_caching=False, scheduler="orca", **base)
    assert trtllm_refusal(whole) is None


def test_mla_prefix_caching_with_fp4_kv_refused() -> None:
    # block reuse for MLA only without KV quantization or with fp8
    c = cfg("deepseek-v3", "b200", tp=8, ep=8, kv_dtype="fp4", enable_prefix_caching=True)
    e = trtllm_refusal(c)
    assert e is not None and e.field == "prefix_caching"
    for ok in (c.with_(enable_prefix_caching=False), c.with_(kv_dtype="fp8")):
        assert trtllm_refusal(ok) is None
    # not an MLA model: reuse with an fp4 KV cache is kept
    assert trtllm_refusal(cfg("llama3.1-8b", "b200", kv_dtype="fp4")) is None
