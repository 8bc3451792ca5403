"""A simulated deployment as the serving engine's command: apply what `serve` and `serve plan`
chose, on vLLM, SGLang or TensorRT-LLM (`SERVE_LAUNCH_ENGINES`).

vLLM (``vllm serve MODEL``; flags are the engine-argument dataclass fields, ``a_b`` as
``--a-b``, booleans with ``--no-`` forms: vLLM's "Engine Arguments" documentation and
``vllm/engine/arg_utils.py``):

- ``--tensor-parallel-size``, ``--pipeline-parallel-size``; ``--data-parallel-size`` for
  attention data parallelism of a MoE model (vLLM's data parallelism runs attention per rank
  and the MoE layers over all ranks);
- experts: without ``--enable-expert-parallel`` vLLM shards every expert over the
  tensor x data parallel ranks (hwtune's ``ep`` 1); with it, it spreads whole experts over all
  of them (``ep`` = those ranks). Any other expert-parallel degree has no vLLM setting;
- ``--max-num-seqs``, ``--max-num-batched-tokens`` (both per data-parallel rank: "each DP rank
  is deployed as a separate core engine process", vLLM's "Data Parallel Deployment" guide, with
  its own scheduler; hwtune's ``max_num_seqs`` is the replica's, so it is divided by
  ``dp_attention``, which it must be a multiple of, and its token budget is a rank's already),
  ``--gpu-memory-utilization`` (a fraction of
  the whole device, as `ReplicaConfig` ``kv_memory_rule`` "total" reads it), ``--block-size``
  (only for a size other than `VLLM_DEFAULT_BLOCK_SIZE`);
- ``--kv-cache-dtype fp8`` for an fp8 KV cache (``auto``, the default, is the model's dtype);
  ``--quantization fp8`` for fp8 weights from a bf16 checkpoint (online per-tensor fp8); a
  quantized checkpoint loads in its own format with no flag;
- ``--enable-prefix-caching`` / ``--no-enable-prefix-caching``;
- ``--async-scheduling`` / ``--no-async-scheduling`` (vLLM PR #19970, v0.10, 2025-06; on by
  default from v0.14, `hwtune.serve.engines.VLLM_ASYNC_DEFAULT_SINCE`): the overlap scheduler;
- ``VLLM_MXFP4_USE_MARLIN=1`` in the environment for the Marlin MXFP4 kernel.

Refused, with the field that stops it: a scheduler other than vLLM's chunked prefill, eager
prefill steps (vLLM runs CUDA graphs; ``--enforce-eager`` makes every step eager), speculative
decoding (its method depends on the model's draft), a weight format that is neither the
checkpoint's nor fp8 from bf16, an fp4 KV cache, a disaggregated deployment (one command per
pool and a KV connector), TensorRT-LLM's batch waiting and attention-DP balancing, a front-end
limit (a property of the server, not a setting).

SGLang (``python -m sglang.launch_server --model-path MODEL``; flags are the ``ServerArgs``
dataclass fields of ``python/sglang/srt/server_args.py``, ``a_b`` as ``--a-b``, read at commit
`SGLANG_COMMIT`; the line numbers below are not kept, the field and handler names are):

- ``--tp-size`` is every GPU of a pipeline stage (``tp x dp_attention``: with
  ``--enable-dp-attention`` attention runs on ``tp_size / dp_size`` GPUs per data-parallel group,
  ``_handle_data_parallelism`` asserts ``tp_size % dp_size == 0``), ``--pp-size``,
  ``--dp-size`` with ``--enable-dp-attention`` for attention data parallelism (a MoE model);
  ``--ep-size`` for expert parallelism: the experts spread over ``ep_size`` of the stage's GPUs,
  tensor-parallel over ``tp_size / ep_size`` (``_handle_context_parallelism``: ``ep_size *
  moe_dp_size <= tp_size``), as hwtune's ``ep`` over ``tp * dp_attention`` (some MoE kernels
  want ``ep_size`` 1 or ``tp_size``: ``_handle_moe_kernel_config``);
- ``--max-running-requests``: the replica's limit; under attention DP each rank takes
  ``max_running_requests // dp_size`` (``model_executor/pool_configurator.py``; the same split
  in ``_validate_deepep_v2_dispatch_token_budget``), so it must be a multiple of
  ``dp_attention``, and SGLang caps each rank where hwtune caps the replica (the same while the
  ranks' loads are even);
- the token budget: ``--chunked-prefill-size`` (default by GPU memory, 8192 on H100/H200,
  ``_handle_gpu_memory_settings``), which ``_handle_data_parallelism`` divides by ``dp_size``, so
  it is hwtune's per-rank ``max_num_batched_tokens`` x ``dp_attention``; ``--max-prefill-tokens``
  (per rank, default `SGLANG_DEFAULT_MAX_PREFILL_TOKENS`) bounds a prefill batch as well, so it
  is raised to the budget when the budget exceeds it. SGLang's ``PrefillAdder`` takes a step's
  prompt tokens within both (``rem_input_tokens``, ``rem_chunk_tokens``, a prompt past
  ``rem_chunk_tokens`` chunked), and with ``--enable-mixed-chunk`` the running decodes join the
  prefill step and take their tokens out of both budgets (``mixed_with_decode_tokens``): the
  ``vllm`` policy, by which hwtune simulates SGLang (`hwtune.serve.engines`), so it is given for
  ``scheduler`` vllm; ``scheduler`` sglang (prompt-only prefill steps, decodes wait) is SGLang's
  default and gets no flag. (The published SGLang rows, whose errors are the track record, ran
  without mixed chunks as far as the data says, aiconfigurator's generator passing it only from
  2026-01-19, and were still predicted better by the ``vllm`` policy: VALIDATION.md, "SGLang's
  own scheduling policy on the SGLang rows".)
- ``--mem-fraction-static``: "(model weights + KV cache pool) / GPU memory capacity"
  (``_handle_gpu_memory_settings``): activations and CUDA-graph buffers lie outside it, while
  ``gpu_memory_utilization`` under the ``total`` rule covers them (`hwtune.serve.memory`), so
  the fraction given is ``gpu_memory_utilization`` less the simulated activation and workspace
  share of the device: the KV pool SGLang sizes is the simulated one;
- ``--page-size`` for a ``block_size`` other than `hwtune.serve.memory.DEFAULT_BLOCK_SIZE` (the
  field's default; SGLang's default page is 1 token, or the attention backend's, and the
  difference is rounding within a block);
- ``--kv-cache-dtype fp8_e4m3`` for an fp8 KV cache (``auto``, the default, is the model's
  dtype); ``--quantization fp8`` for fp8 weights from a bf16 checkpoint (QUANTIZATION_CHOICES:
  "MOE + linear online quantization"); a quantized checkpoint loads in its own format;
- ``--disable-radix-cache`` for prefix caching off, ``--disable-overlap-schedule`` for overlap
  scheduling off (both on by default);
- ``--disable-prefill-cuda-graph`` for eager prefill steps: at `SGLANG_COMMIT` prefill steps
  run a breakable CUDA graph by default on CUDA (``cuda_graph_config.py``,
  ``default_prefill_backend``). Releases before these per-phase CUDA-graph options have no
  such flag: the older ones (those the published SGLang rows ran) prefill eagerly unless
  ``--enable-piecewise-cuda-graph``, so drop the flag there; in between (``server_args.py``
  around sgl-project/sglang PR #25795, 2026-05) piecewise prefill graphs were on unless
  ``--disable-piecewise-cuda-graph``. The flag is not chosen by ``--engine sglang@VERSION``:
  the release that changed each default is not pinned here.

Refused, with the field that stops it: a scheduler other than those two, speculative decoding,
an fp4 KV cache (SGLang's ``nvfp4`` and ``fp4_mx_block16`` recipes are not what hwtune's fp4
is checked against), a weight format that is neither the checkpoint's nor fp8 from bf16, a
weight-only kernel other than the native one (hwtune's Marlin and Triton MXFP4 kernels are
vLLM's and TensorRT-LLM's), attention DP for a dense model, a ``max_num_seqs`` that is not a
multiple of ``dp_attention``, a disaggregated deployment,
TensorRT-LLM's batch waiting and attention-DP balancing, the ``free`` KV memory rule, reserving
KV to completion, a front-end limit, overlap scheduling with pipeline parallelism (SGLang turns
it off there).

TensorRT-LLM (``trtllm-serve MODEL --backend pytorch ... --extra_llm_api_options FILE``, with
FILE the YAML of LLM API options it writes beside the command; the click options of
``tensorrt_llm/commands/serve.py`` at `TRTLLM_SERVE_COMMIT` and the pydantic fields of
``tensorrt_llm/llmapi/llm_args.py`` at `TRTLLM_ARGS_COMMIT`, the two versions the source index
held; ai-dynamo/aiconfigurator's generator, ``generator/config/backend_templates/trtllm/
extra_engine_args.yaml.j2`` and ``generator/rule_plugin/trtllm.rule`` at
`AICONFIGURATOR_COMMIT`, writes the same keys for the published rows). What each setting makes
the PyTorch executor do was read in its source (``_torch/pyexecutor/``: ``_util.py`` at
`TRTLLM_ARGS_COMMIT`; ``py_executor_creator.py``, ``py_executor.py``, the C++
``batch_manager/capacityScheduler.cpp`` and ``microBatchScheduler.cpp`` and
``llmapi/llm.py`` at the commits the index held, the function named):

- ``--tp_size`` is every GPU of a pipeline stage (``tensor_parallel_size``; aiconfigurator's
  rule sets it to ``moe_tensor_parallel_size x moe_expert_parallel_size``), ``--pp_size``;
  ``enable_attention_dp: true`` for attention data parallelism (a MoE model): every rank runs
  attention alone (NVIDIA Dynamo's TensorRT-LLM guide, "DP Rank Routing": it "sets
  attention_dp_size = tensor_parallel_size"), so hwtune's ``tp`` must be 1 under it (attention
  TP inside a DP group has no TensorRT-LLM setting); ``--ep_size`` (``moe_expert_parallel_size``)
  for a MoE model, the experts' tensor parallelism being the rest of the stage
  (``moe_tp x moe_ep = tp``);
- ``--max_batch_size`` and ``--max_num_tokens`` are per attention-DP rank and per pipeline
  micro-batch. Every rank runs its own executor whose schedulers get both unchanged
  (``create_py_executor_instance``: ``BindMicroBatchScheduler(max_batch_size,
  max_num_tokens, ...)``), and KV sizing profiles a ``max_num_tokens`` step on each rank
  (``KvCacheCreator._create_dummy_context_requests``: the dummy requests fill
  ``max_num_tokens`` and are repeated ``tp_size`` times under attention DP, "each rank gets
  work"; TensorRT-LLM's recipe ``examples/configs/database/deepseek-ai/DeepSeek-R1-0528/B200/
  1k1k_tp8_conc2048.yaml`` at 57b1988 gives 2,048 clients on 8 attention-DP ranks
  ``max_num_tokens: 2112``, a rank's budget). Under pipeline parallelism the capacity scheduler
  admits ``max_batch_size * pp_size`` requests (``scheduler_capacity``;
  ``compute_max_num_sequences``) and each micro-batch's forward at most ``max_batch_size``.
  hwtune's ``max_num_seqs`` is the replica's total, so ``--max_batch_size`` is ``max_num_seqs
  / (dp_attention x pp)`` (refused unless it divides), and ``--max_num_tokens`` is hwtune's
  per-rank budget as it is (`hwtune.serve.scheduler`, ``rank_budget``). The per-micro-batch
  cap is TensorRT-LLM's, not hwtune's (whose micro-batches share the total): the same in a
  steady state, tighter while one micro-batch holds more than its share;
- ``kv_cache_config``: ``free_gpu_memory_fraction`` is ``gpu_memory_utilization`` under the
  ``free`` rule. TensorRT-LLM sizes the pool as ``(total - peak + temporary KV) x fraction``
  (``KvCacheCreator._cal_max_memory``), ``peak`` measured by ``configure_kv_cache_capacity``
  after a warm-up run of ``max_num_tokens`` dummy tokens per rank on an executor whose
  construction already captured the CUDA graphs (``PyExecutor.__init__`` calls
  ``model_engine.warmup``): weights, peak activations, CUDA-graph pools and what lies outside
  torch (NCCL, context). That is the ``free`` rule of `hwtune.serve.memory` (a fraction of
  what weights, the activations of a budget-sized step and the workspace leave); the amounts
  are hwtune's estimates, the rule is the same. ``max_tokens`` is not needed: unset, the pool
  is the fraction's (``max_tokens`` would only lower it). The ``total`` rule has no
  TensorRT-LLM setting and is refused. ``enable_block_reuse`` is prefix caching, ``dtype``
  ``auto`` for the checkpoint's KV format (TensorRT-LLM rejects a literal bf16/fp16,
  aiconfigurator's rule maps them to ``auto``), ``fp8``, or ``nvfp4`` for an fp4 KV cache on a
  GPU with FP4 math; ``tokens_per_block`` for a ``block_size`` other than
  `hwtune.serve.memory.DEFAULT_BLOCK_SIZE` (TensorRT-LLM's own default, 32 tokens, otherwise,
  and 64 for an MLA model with FlashMLA whatever is asked: ``create_py_executor``). The block
  size changes only rounding within a block: the last block of a request, the prefix blocks
  reused (TensorRT-LLM also reuses a partly matching block, ``enable_partial_reuse``), a
  reservation to completion, and a chunk cut short (below);
- ``scheduler_config.capacity_scheduler_policy``: ``GUARANTEED_NO_EVICT`` when KV is reserved
  to completion (``reserve_to_completion``; TensorRT-LLM's default): ``GuaranteedNoEvictScheduler``
  keeps the blocks the running requests still need to finish and admits waiting ones FCFS
  while their blocks to completion fit, stopping at the first that does not, as hwtune's
  ``_reserve``. "Completion" is the request's ``max_tokens``: a client that sets it to the
  output length (benchmark clients with ``ignore_eos``) reserves what hwtune reserves; one that
  leaves it unset reserves up to ``max_seq_len`` (``_deduce_max_tokens``: ``max_seq_len`` less
  the prompt), far more. ``MAX_UTILIZATION`` when blocks grow on demand: when a running request
  cannot get its next block, ``MaxUtilizationScheduler`` pauses the last started request
  (``PyExecutor._pause_requests``: ``LlmRequest.pause`` makes its prompt and generated tokens
  the new prompt, the executor's ``max_input_len`` being unbounded), so it is prefilled again:
  hwtune's preemption by recompute of the most recently admitted request;
- ``enable_chunked_prefill``: false for the ``orca`` scheduler (whole prompts,
  TensorRT-LLM's default, `hwtune.serve.engines`): ``MicroBatchScheduler`` takes the
  generation requests and then whole prompts FCFS while the step stays within
  ``max_num_tokens``, stopping at the first that does not fit, as hwtune's ``orca``. A prompt
  longer than ``max_num_tokens`` differs: hwtune runs it alone in a step, TensorRT-LLM rejects
  the request (``BaseLLM._check_arguments``: "The sum of prompt length ... should not exceed
  max_num_tokens", pytorch backend without chunked prefill). The command does not know the
  prompts; under ``orca`` it serves the simulated workload only when every prompt fits
  ``max_num_tokens``. True for ``vllm``: one step holds the generation requests (one token
  each, within ``max_num_tokens``) and the remaining budget goes to prompt chunks FCFS
  (``setCtxRequestsChunkSize``, ``FIRST_COME_FIRST_SERVED``), one forward for both, as hwtune's
  ``vllm`` policy; a chunk that is cut is rounded down to a multiple of ``tokens_per_block``
  (``chunk_unit_size``), which hwtune does not round;
- ``disable_overlap_scheduler`` is ``not overlap_schedule``. ``cuda_graph_config`` with
  ``enable_padding: true`` and ``max_batch_size`` the per-micro-batch batch limit: its batch
  sizes (``BaseCudaGraphConfig._generate_cuda_graph_batch_sizes``: 1, 2, 4, then multiples of
  8 to 128, then every 64, then the limit) cover every decode-only batch, padded to the next,
  so every one runs a CUDA graph as simulated (the default captures batches up to 128 only).
  Prefill steps run eagerly (``prefill_cuda_graph_backend`` ``disabled``, the default at
  `TRTLLM_ARGS_COMMIT`), which is ``eager_prefill``; without it, ``prefill_cuda_graph_backend:
  piecewise`` (a prototype field at that commit; releases before it have
  ``torch_compile_config.enable_piecewise_cuda_graph`` instead and reject the key). A step runs
  the prefill graph only when its tokens (the largest rank's under attention DP) are at most the
  largest captured size, padded up to the next one (``get_padding_params``), and the default
  sizes (`TRTLLM_DEFAULT_PREFILL_CAPTURE`) end at 3,072: for a larger budget
  ``prefill_capture_num_tokens`` continues them at their 256-token spacing to the per-rank
  budget, so no step is eager that hwtune prices as a graph (the padding, up to 255 tokens, is
  not simulated);
- ``attention_dp_config: {enable_balance: true, timeout_iters: N, batching_wait_iters: 0}`` for
  attention-DP balancing (``adp_balance_timeout_iters`` N, under attention DP):
  ``PyExecutor._balance_adp_requests`` schedules the context requests when every rank has one
  (and a free slot), holds them otherwise, and lets them go after N held steps or when some
  rank has no generation request; ``batching_wait_iters`` 0 adds no wait once every rank has
  one. hwtune's ``_adp_hold`` is that rule over the replica's one queue (the ranks' own queues
  are approximated). ``batch_wait_timeout_iters`` and ``batch_wait_max_tokens_ratio`` for
  batch waiting: ``PyExecutor._waiting_requests`` (only without attention DP and only in a
  step with context and generation requests) holds the step's context requests until their
  whole prompts plus the generation tokens reach ``ratio x max_num_tokens`` or N steps have
  been held; either at 0 means no waiting (``count >= 0`` or ``tokens >= 0`` is always true),
  as in hwtune's ``_batch_wait_hold``. TensorRT-LLM holds a chunked prompt's later chunks
  too, hwtune only new prompts;
- ``moe_config.backend: TRITON`` for the ``triton-mxfp4`` weight-only kernel of a MoE model.

Not modelled by hwtune and left as TensorRT-LLM does them: with block reuse the capacity
scheduler skips, for a step, a new prompt whose first uncached block an earlier prompt of the
same step is computing, to reuse it the step after (``capacityScheduler.cpp``,
``beneficialToSkip``); under attention DP the request queue gives each new request to the rank
with the fewest active tokens, each rank capped at its own limit
(``ExecutorRequestQueue._balance_requests_across_ranks``), where hwtune keeps one queue; with
``enable_prefix_aware_scheduling`` (on by default) the budget counts a prompt's uncached tokens
as hwtune does, which was not read in the source.

Refused, with the field that stops it: a GPU TensorRT-LLM does not run on (NVIDIA's
"Supported Hardware": Ampere, Ada, Hopper and Blackwell; `TRTLLM_ARCHITECTURES`), a scheduler
other than ``orca`` and ``vllm``, speculative decoding (its ``speculative_config`` depends on
the model's draft), a weight format other than the checkpoint's (the PyTorch backend serves a
checkpoint in the format it was quantized to), a KV format ``auto`` cannot give (bf16/fp16
over a quantized checkpoint's KV) or fp4 on a GPU without FP4 math, the Marlin kernel
(hwtune's is vLLM's) and any weight-only kernel other than the native one for a dense model,
attention DP with ``tp`` > 1 or for a dense model, a ``max_num_seqs`` that is not a multiple
of ``dp_attention x pp``, the ``total`` KV memory rule, a disaggregated deployment (a context
and a generation server with ``cache_transceiver_config`` and ``trtllm-serve
disaggregated``), a front-end limit; and what TensorRT-LLM switches off with a warning for an
MLA model (``create_py_executor``, ``if is_mla(config)``, the same at bab0f2e and 000429d):
prefix caching below SM90 (`TRTLLM_MLA_ARCHITECTURES`) or with an fp4 KV cache (MLA blocks
are reused only unquantized or fp8), and chunked prefill (``scheduler`` vllm) below SM90.
``benchmarks/check_trtllm_launch.py`` checks the names and values written against those two
files (VALIDATION.md, "Launch commands").
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from hwtune.errors import HwtuneInputError
from hwtune.serve.config import Deployment, ReplicaConfig

SERVE_LAUNCH_ENGINES: tuple[str, ...] = ("vllm", "sglang", "trtllm")
LAUNCH_PROGRAMS: dict[str, tuple[str, ...]] = {
    "vllm": ("vllm", "serve"),
    "sglang": ("python", "-m", "sglang.launch_server", "--model-path"),
    "trtllm": ("trtllm-serve",),
}
"""The words before the model in each engine's server command."""
VLLM_DEFAULT_BLOCK_SIZE = 16
"""vLLM's KV block size unless an attention backend needs another (FlashMLA's 64 for MLA
models): ``--block-size`` is given only for another size, so the backend keeps its choice."""
SGLANG_COMMIT = "001067fffe33427bee0ed2f007fb7551a1d76b44"
"""The sgl-project/sglang commit whose ``python/sglang/srt/server_args.py`` the SGLang flags were
read from (``cuda_graph_config.py`` at 08d6c0169a565437394948897f762f2bfdeca24a)."""
SGLANG_DEFAULT_MAX_PREFILL_TOKENS = 16384
"""``ServerArgs.max_prefill_tokens``'s default at `SGLANG_COMMIT`."""
SGLANG_SCHEDULERS: tuple[str, ...] = ("vllm", "sglang")
"""The hwtune schedulers SGLang runs: ``vllm`` with ``--enable-mixed-chunk``, ``sglang`` as is."""
TRTLLM_SERVE_COMMIT = "00209af149e7774406881a37283dce303571eb11"
"""The NVIDIA/TensorRT-LLM commit whose ``tensorrt_llm/commands/serve.py`` the ``trtllm-serve``
options were read from."""
TRTLLM_ARGS_COMMIT = "0004396720054fd8e205cbf616f21f0b57c6b412"
"""The NVIDIA/TensorRT-LLM commit whose ``tensorrt_llm/llmapi/llm_args.py`` the LLM API option
names (``TorchLlmArgs`` and its nested configs) were read from."""
AICONFIGURATOR_COMMIT = "095f58a51c4ca8e61b66ec108d86f223f8d559ce"
"""The ai-dynamo/aiconfigurator commit whose TensorRT-LLM generator templates were compared."""
TRTLLM_OPTIONS_FILE = "hwtune-trtllm.yaml"
"""The name of the LLM API options file the TensorRT-LLM command reads."""
TRTLLM_SCHEDULERS: dict[str, bool] = {"orca": False, "vllm": True}
"""The hwtune schedulers TensorRT-LLM runs, with their ``enable_chunked_prefill``."""
TRTLLM_MOE_BACKENDS: dict[str, str] = {"triton-mxfp4": "TRITON"}
"""``moe_config.backend`` for a weight-only kernel other than the native one (``wgmma``: the
default, ``AUTO``)."""
TRTLLM_ARCHITECTURES: tuple[str, ...] = ("ampere", "ada", "hopper", "blackwell", "blackwell-ultra")
"""The NVIDIA architectures (`hwtune.hardware.device.Device.architecture`) TensorRT-LLM runs on:
NVIDIA's "Supported Hardware" page (nvidia.github.io/TensorRT-LLM/supported-hardware.html):
Blackwell, Hopper, Ada Lovelace, Ampere."""
TRTLLM_MLA_ARCHITECTURES: tuple[str, ...] = ("hopper", "blackwell", "blackwell-ultra")
"""Those whose SM (90, 100, 103) is one ``create_py_executor`` keeps block reuse and chunked
prefill on for an MLA model ("can only be enabled on SM90/SM100/SM103/SM120"; SM120 has no
catalog device here)."""
TRTLLM_DEFAULT_PREFILL_CAPTURE: tuple[int, ...] = (
    *(2**i for i in range(8)),
    *range(256, 3073, 256),
)
"""``llm_args.py``'s ``_DEFAULT_PREFILL_CAPTURE_NUM_TOKENS`` at `TRTLLM_ARGS_COMMIT`: the step
sizes (tokens) whose prefill CUDA graphs are captured unless ``prefill_capture_num_tokens``
says otherwise; a larger step runs eagerly."""
TRTLLM_PREFILL_CAPTURE_STEP = 256
"""The spacing of `TRTLLM_DEFAULT_PREFILL_CAPTURE` above 256 tokens, kept when the captured
sizes are extended to a larger budget (a step is padded up to the next captured size)."""


@dataclass(frozen=True)
class ServeLaunch:
    """One server command per replica (``replicas`` of them, each on ``gpus_per_replica``)."""

    engine: str
    model: str
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    replicas: int
    gpus_per_replica: int
    files: tuple[tuple[str, str], ...] = ()
    """Files the command reads, as (name, text), written beside it (TensorRT-LLM's YAML of
    LLM API options); none for vLLM and SGLang."""

    def command(self) -> str:
        env = [f"{k}={v}" for k, v in self.env]
        return shlex.join([*env, *LAUNCH_PROGRAMS[self.engine], self.model, *self.args])

    def to_dict(self) -> dict[str, object]:
        doc: dict[str, object] = {
            "engine": self.engine,
            "model": self.model,
            "args": list(self.args),
            "env": dict(self.env),
            "replicas": self.replicas,
            "gpus_per_replica": self.gpus_per_replica,
            "command": self.command(),
        }
        if self.files:
            doc["files"] = dict(self.files)
        return doc


def _first_refusal(
    cfg: ReplicaConfig,
    checks: tuple[tuple[bool, str, object, str], ...],
    trtllm_knobs: bool = False,
) -> HwtuneInputError | None:
    """The first of an engine's ``checks`` (bad, field, value, expected) that fails, else the
    first of what no engine here has a setting for: a front-end limit (a property of the
    server), attention data parallelism of a dense model (more replicas instead), and a weight
    format the checkpoint does not ship other than fp8 from bf16 (vLLM and SGLang load a
    quantized checkpoint as it is and quantize bf16 to fp8 online with ``--quantization fp8``;
    TensorRT-LLM's checks refuse that one first); and, unless ``trtllm_knobs`` (the engine has
    them), TensorRT-LLM's attention-DP balancing and batch waiting."""
    m = cfg.model
    ckpt = m.checkpoint_precision or "bf16"
    knobs = () if trtllm_knobs else (
        (cfg.adp_balance_timeout_iters > 0, "adp_balance_timeout_iters",
         cfg.adp_balance_timeout_iters, "0 (TensorRT-LLM's attention-DP balancing)"),
        (cfg.batch_wait_timeout_iters > 0, "batch_wait_timeout_iters",
         cfg.batch_wait_timeout_iters, "0 (TensorRT-LLM's batch waiting)"),
    )  # fmt: skip
    common = (
        *knobs,
        (cfg.frontend_tokens_per_s is not None, "frontend_tokens_per_s",
         cfg.frontend_tokens_per_s, "none (a limit of the server, not a setting)"),
        (cfg.dp_attention > 1 and m.moe is None, "dp_attention", cfg.dp_attention,
         "1 for a dense model (serve more --replicas)"),
        (cfg.weight_dtype != ckpt and not (cfg.weight_dtype == "fp8" and ckpt == "bf16"),
         "precision", cfg.weight_dtype,
         f"the checkpoint's {ckpt} (or fp8 from a bf16 checkpoint: --quantization fp8)"),
    )  # fmt: skip
    for bad, field, value, expected in (*checks, *common):
        if bad:
            return HwtuneInputError(field, value, expected)
    return None


def vllm_refusal(cfg: ReplicaConfig) -> HwtuneInputError | None:
    """Why vLLM cannot run replica ``cfg`` as simulated (the first reason), or None."""
    checks: tuple[tuple[bool, str, object, str], ...] = (
        (cfg.scheduler != "vllm", "scheduler", cfg.scheduler, "vllm (chunked prefill)"),
        (cfg.eager_prefill, "eager_prefill", True,
         "off (vLLM captures CUDA graphs for every step)"),
        (cfg.spec_tokens > 0, "spec_tokens", cfg.spec_tokens,
         "0 (set the speculative method for the model yourself: --speculative-config)"),
        (cfg.kv_dtype == "fp4", "kv_precision", cfg.kv_dtype, "bf16 or fp8 (vLLM's KV formats)"),
        (cfg.kv_memory_rule != "total", "kv_memory_rule", cfg.kv_memory_rule,
         "total (vLLM's gpu_memory_utilization is a share of the whole device)"),
        (cfg.reserve_to_completion, "reserve_to_completion", True,
         "off (vLLM grows a request's blocks and preempts)"),
        (1 < cfg.ep < cfg.stage_gpus, "ep", cfg.ep,
         f"1 or {cfg.stage_gpus} (vLLM spreads experts over all tensor x data parallel ranks "
         "or over none)"),
        (cfg.max_num_seqs % cfg.dp_attention != 0, "max_num_seqs", cfg.max_num_seqs,
         f"a multiple of dp_attention = {cfg.dp_attention} (vLLM's --max-num-seqs is per "
         "data-parallel rank)"),
    )  # fmt: skip
    return _first_refusal(cfg, checks)


def vllm_launch(dep: Deployment, model: str) -> ServeLaunch:
    """``dep`` as ``vllm serve`` commands (see the module docstring for each flag); ``model``
    is what to serve (a Hugging Face id or a local directory)."""
    if dep.prefill is not None:
        raise HwtuneInputError(
            "disagg", True, "an aggregated deployment (vLLM's disaggregated prefill needs a KV "
            "connector and a proxy per pool)",
        )  # fmt: skip
    cfg = dep.replica
    refusal = vllm_refusal(cfg)
    if refusal is not None:
        raise refusal
    a = ["--tensor-parallel-size", str(cfg.tp)]
    if cfg.pp > 1:
        a += ["--pipeline-parallel-size", str(cfg.pp)]
    if cfg.dp_attention > 1:
        a += ["--data-parallel-size", str(cfg.dp_attention)]
    if cfg.model.moe is not None and cfg.ep > 1:
        a.append("--enable-expert-parallel")
    ckpt = cfg.model.checkpoint_precision or "bf16"
    if cfg.weight_dtype == "fp8" and ckpt == "bf16":
        a += ["--quantization", "fp8"]
    if cfg.kv_dtype == "fp8":
        a += ["--kv-cache-dtype", "fp8"]
    # per data-parallel rank: each rank is an engine core with its own scheduler (vLLM's "Data
    # Parallel Deployment" guide), like the token budget; hwtune's max_num_seqs is the replica's
    a += ["--max-num-seqs", str(cfg.max_num_seqs // cfg.dp_attention)]
    a += ["--max-num-batched-tokens", str(cfg.max_num_batched_tokens)]
    a += ["--gpu-memory-utilization", f"{cfg.gpu_memory_utilization:g}"]
    if cfg.block_size != VLLM_DEFAULT_BLOCK_SIZE:  # else the attention backend's own choice
        a += ["--block-size", str(cfg.block_size)]
    a.append(
        "--enable-prefix-caching" if cfg.enable_prefix_caching else "--no-enable-prefix-caching"
    )
    a.append("--async-scheduling" if cfg.overlap_schedule else "--no-async-scheduling")
    env = (("VLLM_MXFP4_USE_MARLIN", "1"),) if cfg.weight_only_kernel == "marlin" else ()
    return ServeLaunch("vllm", model, tuple(a), env, dep.replicas, cfg.gpus)


def sglang_refusal(cfg: ReplicaConfig) -> HwtuneInputError | None:
    """Why SGLang cannot run replica ``cfg`` as simulated (the first reason), or None."""
    dp = cfg.dp_attention
    checks: tuple[tuple[bool, str, object, str], ...] = (
        (cfg.scheduler not in SGLANG_SCHEDULERS, "scheduler", cfg.scheduler,
         "vllm (SGLang with --enable-mixed-chunk) or sglang (its default)"),
        (cfg.spec_tokens > 0, "spec_tokens", cfg.spec_tokens,
         "0 (set the speculative method for the model yourself: --speculative-algorithm)"),
        (cfg.kv_dtype == "fp4", "kv_precision", cfg.kv_dtype,
         "bf16 or fp8 (SGLang's fp4 KV recipes are not hwtune's fp4)"),
        (cfg.weight_only_kernel != "wgmma", "weight_only_kernel", cfg.weight_only_kernel,
         "wgmma (the Marlin and Triton MXFP4 kernels here are vLLM's and TensorRT-LLM's)"),
        (cfg.kv_memory_rule != "total", "kv_memory_rule", cfg.kv_memory_rule,
         "total (SGLang's mem_fraction_static is a share of the whole device)"),
        (cfg.reserve_to_completion, "reserve_to_completion", True,
         "off (SGLang grows a request's KV and retracts)"),
        (cfg.pp > 1 and cfg.overlap_schedule, "overlap_schedule", True,
         "off with pp > 1 (SGLang turns its overlap scheduler off under pipeline parallelism: "
         "arg_groups/overrides.py, _pipeline_parallel_overlap_disable)"),
        (cfg.max_num_seqs % dp != 0, "max_num_seqs", cfg.max_num_seqs,
         f"a multiple of dp_attention = {dp} (SGLang gives each attention-DP rank "
         "max_running_requests // dp_size)"),
    )  # fmt: skip
    return _first_refusal(cfg, checks)


def sglang_mem_fraction_static(cfg: ReplicaConfig) -> float:
    """SGLang's ``mem_fraction_static`` for the KV pool simulated under the ``total`` rule:
    ``gpu_memory_utilization`` less the share of the device that `hwtune.serve.memory`
    sets aside for activations (`activation_bytes_per_gpu`) and workspace
    (`WORKSPACE_FIXED_BYTES`), which SGLang keeps outside the fraction ("(model weights + KV
    cache pool) / GPU memory capacity", ``ServerArgs._handle_gpu_memory_settings``)."""
    from hwtune.serve.config import WORKSPACE_FIXED_BYTES
    from hwtune.serve.memory import activation_bytes_per_gpu

    total = cfg.effective_device.memory_bytes
    outside = activation_bytes_per_gpu(cfg) + WORKSPACE_FIXED_BYTES
    return cfg.gpu_memory_utilization - outside / total


def sglang_launch(dep: Deployment, model: str) -> ServeLaunch:
    """``dep`` as ``python -m sglang.launch_server`` commands (see the module docstring for each
    flag); ``model`` is what to serve (a Hugging Face id or a local directory)."""
    if dep.prefill is not None:
        raise HwtuneInputError(
            "disagg", True, "an aggregated deployment (SGLang's disaggregation runs a prefill "
            "and a decode server with --disaggregation-mode and a router)",
        )  # fmt: skip
    cfg = dep.replica
    refusal = sglang_refusal(cfg)
    if refusal is not None:
        raise refusal
    from hwtune.serve.memory import DEFAULT_BLOCK_SIZE

    dp = cfg.dp_attention
    a = ["--tp-size", str(cfg.stage_gpus)]
    if cfg.pp > 1:
        a += ["--pp-size", str(cfg.pp)]
    if dp > 1:
        a += ["--dp-size", str(dp), "--enable-dp-attention"]
    if cfg.model.moe is not None and cfg.ep > 1:
        a += ["--ep-size", str(cfg.ep)]
    ckpt = cfg.model.checkpoint_precision or "bf16"
    if cfg.weight_dtype == "fp8" and ckpt == "bf16":
        a += ["--quantization", "fp8"]
    if cfg.kv_dtype == "fp8":
        a += ["--kv-cache-dtype", "fp8_e4m3"]
    a += ["--max-running-requests", str(cfg.max_num_seqs)]
    budget = cfg.max_num_batched_tokens  # per attention-DP rank, as SGLang applies it
    a += ["--chunked-prefill-size", str(budget * dp)]
    if budget > SGLANG_DEFAULT_MAX_PREFILL_TOKENS:
        a += ["--max-prefill-tokens", str(budget)]
    if cfg.scheduler == "vllm":
        a.append("--enable-mixed-chunk")
    a += ["--mem-fraction-static", f"{sglang_mem_fraction_static(cfg):.4f}"]
    if cfg.block_size != DEFAULT_BLOCK_SIZE:
        a += ["--page-size", str(cfg.block_size)]
    if not cfg.enable_prefix_caching:
        a.append("--disable-radix-cache")
    if not cfg.overlap_schedule:
        a.append("--disable-overlap-schedule")
    if cfg.eager_prefill:
        a.append("--disable-prefill-cuda-graph")
    return ServeLaunch("sglang", model, tuple(a), (), dep.replicas, cfg.gpus)


def _trtllm_kv_dtype(cfg: ReplicaConfig) -> str | None:
    """``kv_cache_config.dtype`` for the simulated KV format, or None where TensorRT-LLM has
    none: ``auto`` for the checkpoint's own (`hwtune.serve.config.kv_format`), ``fp8``, or
    ``nvfp4`` for fp4 on a GPU with FP4 math."""
    from hwtune.serve.config import kv_format

    if cfg.kv_dtype == kv_format(cfg.model, None)[0]:
        return "auto"
    if cfg.kv_dtype == "fp8":
        return "fp8"
    if cfg.kv_dtype == "fp4" and cfg.effective_device.peak_tflops.fp4 is not None:
        return "nvfp4"
    return None


def trtllm_refusal(cfg: ReplicaConfig) -> HwtuneInputError | None:
    """Why TensorRT-LLM cannot run replica ``cfg`` as simulated (the first reason), or None."""
    dp = cfg.dp_attention
    ckpt = cfg.model.checkpoint_precision or "bf16"
    kernel = cfg.weight_only_kernel
    dev = cfg.effective_device
    # create_py_executor turns these off with a warning for an MLA model
    mla = cfg.model.mla is not None
    mla_sm = dev.architecture in TRTLLM_MLA_ARCHITECTURES
    checks: tuple[tuple[bool, str, object, str], ...] = (
        (dev.vendor != "nvidia" or dev.architecture not in TRTLLM_ARCHITECTURES, "gpu",
         dev.name, "an NVIDIA Ampere, Ada, Hopper or Blackwell GPU (TensorRT-LLM's supported "
         "hardware)"),
        (cfg.scheduler not in TRTLLM_SCHEDULERS, "scheduler", cfg.scheduler,
         "orca (TensorRT-LLM's default, whole prompts) or vllm (enable_chunked_prefill)"),
        (mla and cfg.scheduler == "vllm" and not mla_sm, "scheduler", cfg.scheduler,
         f"orca for an MLA model on {dev.name} (TensorRT-LLM turns chunked prefill off for "
         "MLA below SM90)"),
        (mla and cfg.enable_prefix_caching and not mla_sm, "prefix_caching", True,
         f"off for an MLA model on {dev.name} (TensorRT-LLM turns block reuse off for MLA "
         "below SM90)"),
        (mla and cfg.enable_prefix_caching and cfg.kv_dtype == "fp4", "prefix_caching", True,
         "off for an MLA model with an fp4 KV cache (TensorRT-LLM reuses MLA blocks only "
         "unquantized or fp8)"),
        (cfg.spec_tokens > 0, "spec_tokens", cfg.spec_tokens,
         "0 (set speculative_config for the model's draft yourself)"),
        (cfg.weight_dtype != ckpt, "precision", cfg.weight_dtype,
         f"the checkpoint's {ckpt} (TensorRT-LLM's PyTorch backend serves a checkpoint in "
         "the format it was quantized to)"),
        (_trtllm_kv_dtype(cfg) is None, "kv_precision", cfg.kv_dtype,
         "the checkpoint's KV format (kv_cache_config.dtype auto), fp8, or fp4 (nvfp4) on a "
         "GPU with FP4 math"),
        (kernel == "marlin", "weight_only_kernel", kernel,
         "wgmma or triton-mxfp4 (hwtune's Marlin kernel is vLLM's)"),
        (kernel != "wgmma" and cfg.model.moe is None, "weight_only_kernel", kernel,
         "wgmma for a dense model (moe_config.backend picks the MoE kernel only)"),
        (cfg.kv_memory_rule != "free", "kv_memory_rule", cfg.kv_memory_rule,
         "free (TensorRT-LLM's free_gpu_memory_fraction is a share of the memory left after "
         "the model)"),
        (dp > 1 and cfg.tp > 1 and cfg.model.moe is not None, "tp", cfg.tp,
         "1 with dp_attention > 1 (TensorRT-LLM's enable_attention_dp runs attention on each "
         "rank alone)"),
        (cfg.max_num_seqs % (dp * cfg.pp) != 0, "max_num_seqs", cfg.max_num_seqs,
         f"a multiple of dp_attention x pp = {dp * cfg.pp} (TensorRT-LLM's max_batch_size is "
         "per attention-DP rank and per pipeline micro-batch)"),
    )  # fmt: skip
    return _first_refusal(cfg, checks, trtllm_knobs=True)


def _trtllm_batch(cfg: ReplicaConfig) -> int:
    """``--max_batch_size``: hwtune's replica-wide ``max_num_seqs`` per attention-DP rank and per
    pipeline micro-batch (TensorRT-LLM admits ``max_batch_size * pp_size`` per rank)."""
    return cfg.max_num_seqs // (cfg.dp_attention * cfg.pp)


def _trtllm_prefill_capture(cfg: ReplicaConfig) -> list[int] | None:
    """``prefill_capture_num_tokens`` reaching the per-rank budget when
    `TRTLLM_DEFAULT_PREFILL_CAPTURE` stops short of it (None: the default covers every step):
    the default sizes, then every `TRTLLM_PREFILL_CAPTURE_STEP` tokens, then the budget."""
    budget, last = cfg.max_num_batched_tokens, TRTLLM_DEFAULT_PREFILL_CAPTURE[-1]
    if budget <= last:
        return None
    more = range(last + TRTLLM_PREFILL_CAPTURE_STEP, budget, TRTLLM_PREFILL_CAPTURE_STEP)
    return [*TRTLLM_DEFAULT_PREFILL_CAPTURE, *more, budget]


def trtllm_options(cfg: ReplicaConfig) -> dict[str, object]:
    """The LLM API options (``--extra_llm_api_options`` YAML) of replica ``cfg``: see the
    module docstring for each key."""
    from hwtune.serve.memory import DEFAULT_BLOCK_SIZE

    dp = cfg.dp_attention
    batch = _trtllm_batch(cfg)  # per attention-DP rank and pipeline micro-batch
    kv: dict[str, object] = {
        "free_gpu_memory_fraction": cfg.gpu_memory_utilization,
        "enable_block_reuse": cfg.enable_prefix_caching,
        "dtype": _trtllm_kv_dtype(cfg),
    }
    if cfg.block_size != DEFAULT_BLOCK_SIZE:
        kv["tokens_per_block"] = cfg.block_size
    policy = "GUARANTEED_NO_EVICT" if cfg.reserve_to_completion else "MAX_UTILIZATION"
    opts: dict[str, object] = {
        "enable_attention_dp": dp > 1,
        "enable_chunked_prefill": TRTLLM_SCHEDULERS[cfg.scheduler],
        "kv_cache_config": kv,
        "scheduler_config": {"capacity_scheduler_policy": policy},
        "cuda_graph_config": {"enable_padding": True, "max_batch_size": batch},
        "disable_overlap_scheduler": not cfg.overlap_schedule,
    }
    if not cfg.eager_prefill:
        opts["prefill_cuda_graph_backend"] = "piecewise"
        capture = _trtllm_prefill_capture(cfg)
        if capture is not None:
            opts["prefill_capture_num_tokens"] = capture
    if dp > 1 and cfg.adp_balance_timeout_iters > 0:
        opts["attention_dp_config"] = {
            "enable_balance": True,
            "timeout_iters": cfg.adp_balance_timeout_iters,
            "batching_wait_iters": 0,
        }
    if cfg.batch_wait_timeout_iters > 0 or cfg.batch_wait_max_tokens_ratio > 0:
        opts["batch_wait_timeout_iters"] = cfg.batch_wait_timeout_iters
        opts["batch_wait_max_tokens_ratio"] = cfg.batch_wait_max_tokens_ratio
    if cfg.model.moe is not None and cfg.weight_only_kernel in TRTLLM_MOE_BACKENDS:
        opts["moe_config"] = {"backend": TRTLLM_MOE_BACKENDS[cfg.weight_only_kernel]}
    return opts


def trtllm_launch(dep: Deployment, model: str) -> ServeLaunch:
    """``dep`` as ``trtllm-serve`` commands with their LLM API options file (see the module
    docstring for each option); ``model`` is what to serve (a Hugging Face id or a local
    directory)."""
    import yaml

    if dep.prefill is not None:
        raise HwtuneInputError(
            "disagg", True, "an aggregated deployment (TensorRT-LLM's disaggregated serving "
            "runs context and generation servers with cache_transceiver_config behind "
            "trtllm-serve disaggregated)",
        )  # fmt: skip
    cfg = dep.replica
    refusal = trtllm_refusal(cfg)
    if refusal is not None:
        raise refusal
    a = ["--backend", "pytorch", "--tp_size", str(cfg.stage_gpus)]
    if cfg.pp > 1:
        a += ["--pp_size", str(cfg.pp)]
    if cfg.model.moe is not None:
        a += ["--ep_size", str(cfg.ep)]
    a += ["--max_batch_size", str(_trtllm_batch(cfg))]
    a += ["--max_num_tokens", str(cfg.max_num_batched_tokens)]
    a += ["--extra_llm_api_options", TRTLLM_OPTIONS_FILE]
    text = yaml.safe_dump(trtllm_options(cfg), sort_keys=False)
    return ServeLaunch("trtllm", model, tuple(a), (), dep.replicas, cfg.gpus,
                       ((TRTLLM_OPTIONS_FILE, text),))  # fmt: skip


def launch_refusal(engine: str, cfg: ReplicaConfig) -> HwtuneInputError | None:
    """Why ``engine`` (one of `SERVE_LAUNCH_ENGINES`) cannot run replica ``cfg`` as simulated,
    or None (`vllm_refusal`, `sglang_refusal`, `trtllm_refusal`)."""
    if engine == "vllm":
        return vllm_refusal(cfg)
    if engine == "sglang":
        return sglang_refusal(cfg)
    if engine == "trtllm":
        return trtllm_refusal(cfg)
    return HwtuneInputError("launch", engine, "one of " + ", ".join(SERVE_LAUNCH_ENGINES))


def serve_launch_for(engine: str, dep: Deployment, model: str) -> ServeLaunch:
    """The launch of ``dep`` on ``engine`` (one of `SERVE_LAUNCH_ENGINES`)."""
    if engine == "vllm":
        return vllm_launch(dep, model)
    if engine == "sglang":
        return sglang_launch(dep, model)
    if engine == "trtllm":
        return trtllm_launch(dep, model)
    raise HwtuneInputError("launch", engine, "one of " + ", ".join(SERVE_LAUNCH_ENGINES))


__all__ = [
    "AICONFIGURATOR_COMMIT",
    "LAUNCH_PROGRAMS",
    "SERVE_LAUNCH_ENGINES",
    "SGLANG_COMMIT",
    "SGLANG_DEFAULT_MAX_PREFILL_TOKENS",
    "SGLANG_SCHEDULERS",
    "ServeLaunch",
    "launch_refusal",
    "serve_launch_for",
    "sglang_launch",
    "sglang_mem_fraction_static",
    "sglang_refusal",
    "TRTLLM_ARCHITECTURES",
    "TRTLLM_ARGS_COMMIT",
    "TRTLLM_DEFAULT_PREFILL_CAPTURE",
    "TRTLLM_MLA_ARCHITECTURES",
    "TRTLLM_MOE_BACKENDS",
    "TRTLLM_OPTIONS_FILE",
    "TRTLLM_PREFILL_CAPTURE_STEP",
    "TRTLLM_SCHEDULERS",
    "TRTLLM_SERVE_COMMIT",
    "trtllm_launch",
    "trtllm_options",
    "trtllm_refusal",
    "vllm_launch",
    "vllm_refusal",
]
