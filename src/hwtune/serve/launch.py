"""A simulated deployment as the serving engine's command: apply what `serve` and `serve plan`
chose, on vLLM, SGLang or TensorRT-LLM (`SERVE_LAUNCH_ENGINES`); a disaggregated deployment as
its prefill and decode servers and the router in front (`DISAGG_LAUNCH_ENGINES`,
`DisaggLaunch`).

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
- ``--max-model-len``: the replica's own (``serve --max-model-len``; refused when one rank's
  simulated KV cache cannot hold a request that long, as vLLM refuses to start), else only when
  the simulated KV cache holds fewer tokens than the model's context (`vllm_max_model_len`:
  vLLM would not start otherwise);
- ``--async-scheduling`` / ``--no-async-scheduling`` (vLLM PR #19970, v0.10, 2025-06; on by
  default from v0.14, `hwtune.serve.engines.VLLM_ASYNC_DEFAULT_SINCE`): the overlap scheduler;
- ``VLLM_MXFP4_USE_MARLIN=1`` in the environment for the Marlin MXFP4 kernel.

Refused, with the field that stops it: a scheduler other than vLLM's chunked prefill, eager
prefill steps (vLLM runs CUDA graphs; ``--enforce-eager`` makes every step eager), speculative
decoding (its method depends on the model's draft), a weight format that is neither the
checkpoint's nor fp8 from bf16, an fp4 KV cache, a disaggregated deployment (one command per
pool and a KV connector: `vllm_disagg_launch` below), TensorRT-LLM's batch waiting and
attention-DP balancing, a front-end limit (a property of the server, not a setting).

vLLM, disaggregated (`vllm_disagg_launch`; what `vllm_launch` refuses): a prefill server per
prefill replica and a decode server per decode replica, each ``vllm serve`` with the flags above
for its own pool's replica, and the proxy of vLLM's NixlConnector guide
(``docs/features/nixl_connector_usage.md`` at `VLLM_NIXL_DOCS_COMMIT`) in front:

- ``--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":...}'`` (``kv_producer``
  on the prefill servers, ``kv_consumer`` on the decode ones; the guide: the NixlConnector
  does not act on the role, the proxy decides): NIXL over UCX moves the KV cache over the
  scale-out network, as simulated (``UCX_NET_DEVICES`` / ``VLLM_NIXL_SIDE_CHANNEL_HOST`` name
  the NICs and each server's address when the servers are on different machines);
- ``python tests/v1/kv_connector/nixl_integration/toy_proxy_server.py`` (from a vLLM checkout;
  at `VLLM_PROXY_COMMIT`) with ``--prefiller-hosts``/``--prefiller-ports`` and
  ``--decoder-hosts``/``--decoder-ports``, one per server (``PREFILL_i``/``DECODE_i`` for the
  hosts they run on): it sends each request to the next prefill server (round robin) with
  ``max_tokens`` 1, then to the next decode server with the prefill's ``kv_transfer_params``,
  so it picks the decode server when the prefill has finished, as hwtune's round-robin router
  does; it has no other policy, so ``least-tokens`` is refused while a pool has more than one
  server;
- the pools may differ in TP (``nixl_connector_compatibility.md``: "tensor-parallel-size
  (heterogeneous TP ...)" may differ); the KV cache dtype must be the same on both, and a
  prefill block size larger than the decode one is not paired: both refused;
- a ``--max-model-len`` of the user's (``serve --max-model-len``) goes to both pools, and a pool
  whose rank's KV cache cannot hold it is refused, the prefill pool included: vLLM's startup
  check (``check_enough_kv_cache_memory``) runs whatever the server's KV role. Without one, each
  pool's is lowered to its own cache's capacity as above; the simulation refuses a prompt
  longer than the prefill cache either way.

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
  the release that changed each default is not pinned here;
- ``--context-length`` for the replica's own ``max_model_len`` (``serve --max-model-len``).

Refused, with the field that stops it: a scheduler other than those two, speculative decoding,
an fp4 KV cache (SGLang's ``nvfp4`` and ``fp4_mx_block16`` recipes are not what hwtune's fp4
is checked against), a weight format that is neither the checkpoint's nor fp8 from bf16, a
weight-only kernel other than the native one (hwtune's Marlin and Triton MXFP4 kernels are
vLLM's and TensorRT-LLM's), attention DP for a dense model, a ``max_num_seqs`` that is not a
multiple of ``dp_attention``, a disaggregated deployment (`sglang_disagg_launch` writes it),
TensorRT-LLM's batch waiting and attention-DP balancing, the ``free`` KV memory rule, reserving
KV to completion, a front-end limit, overlap scheduling with pipeline parallelism (SGLang turns
it off there).

SGLang, disaggregated (`sglang_disagg_launch`; a `Deployment` with ``prefill``): a prefill
server per prefill replica and a decode server per decode replica, each with the flags above
for its own pool's replica (the prefill pool's ``prefill`` `ReplicaConfig`, the decode pool's
``replica``: its TP/DP/EP degrees, ``--max-running-requests``, token budget, memory fraction),
and ``python -m sglang_router.launch_router --pd-disaggregation`` in front (SGLang's
``docs/advanced_features/pd_disaggregation.md`` at 08edc506b2da77e7fa8a6a3a1ec7a704241703d4,
the router's ``router_args.py`` at `SGLANG_ROUTER_COMMIT`):

- ``--disaggregation-mode prefill`` / ``decode`` (``ServerArgs`` at `SGLANG_COMMIT`, "PD
  disaggregation" fields); ``--disaggregation-transfer-backend mooncake``, SGLang's default,
  which moves the KV cache over RDMA: the scale-out network over which the simulator sends
  each prefill GPU's shard (`hwtune.serve.simulator`); the InfiniBand devices are detected
  (``--disaggregation-ib-device`` to name them). The two pools may differ in TP: at
  `SGLANG_COMMIT` there is no ``--disaggregation-decode-tp`` to set;
- the prefill server's ``--disaggregation-bootstrap-port`` (its default, 8998) is given to the
  router with each prefill URL (``--prefill URL PORT``: without it the router assumes none,
  ``_parse_prefill_urls``); ``--decode URL`` per decode server; the URLs name the servers
  ``PREFILL_i`` / ``DECODE_i`` on SGLang's default port, for the hosts they run on;
- ``--disaggregation-decode-extra-slots 0``: a request whose KV is in transfer then holds one of
  the decode server's ``max_running_requests`` slots, as the simulated decode replica admits a
  hand-off into a sequence slot before pulling its cache (SGLang's default adds 2x the batch
  of spare slots for batches of 32 or fewer per worker);
- the router's ``--policy round_robin`` (prefill and decode alike) for hwtune's ``round-robin``
  router. SGLang's router picks the decode server when the request arrives, hwtune's when the
  prefill finishes: the same rotation, in a possibly different order. Its other policies
  (random, power_of_two, cache_aware) are not hwtune's ``least-tokens``, which is refused while
  a pool has more than one server (with one each, no policy is given); ``serve plan --launch
  sglang`` searches disaggregated layouts with the round-robin router
  (`disagg_plan_router`);
- ``--enable-mixed-chunk`` is left out (no step of a prefill or decode server has both prompt
  and decode tokens); the decode server runs a chunk cache whatever the radix flag
  (``arg_groups/pd_disaggregation_hook.py`` at `SGLANG_PD_HOOK_COMMIT`: "KV cache is forced as
  chunk cache for decode server"), as the simulated decode replica never looks a prompt up.

Not simulated, so not set: the router's own admission limit (``--max-concurrent-requests``,
256 by default, with a queue of 100): raise it above the clients you send; SGLang's decode
server reserves ``--num-reserved-decode-tokens`` (512) per running request when it admits.
Refused, with the field: whatever either pool's replica is refused for above (the message
names the pool), and ``router`` ``least-tokens`` with more than one server in a pool.

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
  per-rank budget as it is (`hwtune.serve.scheduler`, ``rank_budget``); ``--max_seq_len``
  for the replica's own ``max_model_len`` (``serve --max-model-len``). The per-micro-batch
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

TensorRT-LLM, disaggregated (`trtllm_disagg_launch`; what `trtllm_launch` refuses): a context
server per prefill replica and a generation server per decode replica, each ``trtllm-serve``
with the flags and options above for its own pool's replica (its own options file,
`TRTLLM_POOL_FILES`, on its pool's port, `TRTLLM_POOL_PORTS`), and ``trtllm-serve
disaggregated -c`` `TRTLLM_DISAGG_FILE` in front (the ``disaggregated`` click command of
``serve.py`` at `TRTLLM_SERVE_COMMIT`; ``examples/disaggregated/README.md`` as the index holds
it, 013971245ed5ddb230f1917dd8ccce711a17280f):

- ``cache_transceiver_config: {backend: DEFAULT}`` in both pools' options (``TorchLlmArgs``
  at `TRTLLM_ARGS_COMMIT`: ``CacheTransceiverConfig.backend`` one of DEFAULT, UCX, NIXL,
  MOONCAKE, MPI; DEFAULT is NIXL unless a legacy ``TRTLLM_USE_*_KVCACHE`` variable names
  another): the KV cache goes over the scale-out network, as simulated.
  ``max_tokens_in_buffer`` is left unset (hwtune simulates no transfer buffer);
- the disaggregated server's YAML (``extract_disagg_cfg`` / ``extract_ctx_gen_cfgs`` of
  ``disagg_utils.py`` at `TRTLLM_DISAGG_UTILS_COMMIT`): ``hostname``, ``port``,
  ``context_servers`` and ``generation_servers`` each with ``num_instances`` and ``urls``
  (``host:port``, one per instance; here ``CTX_i`` / ``GEN_i`` for the hosts the servers run
  on), and ``router: {type: round_robin}`` for hwtune's ``round-robin`` router
  (``create_router`` of ``serve/router.py`` at `TRTLLM_ROUTER_COMMIT`: round_robin,
  load_balancing, kv_cache_aware, conversation). In its default ``context_first`` schedule
  the disaggregated server picks the generation server after the context server has answered
  (``serve/openai_disagg_service.py`` as the index holds it,
  319f5114a2744b322286be6be2721f782e7eee8a), as hwtune routes a hand-off when the prefill
  ends;
- each pool keeps its own ``disable_overlap_scheduler`` as simulated (the README's example
  turns the overlap scheduler off on its context servers; hwtune's ``overlap_schedule`` of the
  prefill pool says which).

Not simulated, so not set: the disaggregated server's request timeout (``-r``, 180 s by
default): raise it for runs whose requests take longer. Refused, with the field: whatever
either pool's replica is refused for above (the message names the pool), and ``router``
``least-tokens`` with more than one server in a pool (``load_balancing`` counts requests, or
with ``use_tokens`` the prompt tokens of context requests and none of a generation request's:
``get_request_num_tokens`` refuses ``generation_only`` requests).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Collection
from dataclasses import dataclass

from hwtune.errors import HwtuneInputError
from hwtune.serve.config import Deployment, ReplicaConfig, sixteen_bit_format

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

    @property
    def gpus(self) -> int:
        """GPUs of all the replicas together."""
        return self.replicas * self.gpus_per_replica

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
            "gpus": self.gpus,
            "command": self.command(),
            "files": dict(self.files),  # empty for vLLM and SGLang: every launch has the key
        }
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
    # an unquantized checkpoint loads in the GPU's 16-bit format (fp16 on Volta: --dtype auto)
    ckpt = m.checkpoint_precision or sixteen_bit_format(cfg.device)
    knobs = () if trtllm_knobs else (
        (cfg.adp_balance_timeout_iters > 0, "adp_balance_timeout_iters",
         cfg.adp_balance_timeout_iters, "0 (TensorRT-LLM's attention-DP balancing)"),
        (cfg.batch_wait_timeout_iters > 0, "batch_wait_timeout_iters",
         cfg.batch_wait_timeout_iters, "0 (TensorRT-LLM's batch waiting)"),
    )  # fmt: skip
    common = (
        # a checkpoint in a format none of hwtune's precisions is (3-bit GPTQ, bitsandbytes):
        # its engine loads it as that format whatever --precision says, or refuses the flag
        (m.checkpoint_quantization is not None, "model.quantization_config",
         m.checkpoint_quantization, "a checkpoint in a format the launch runs as simulated "
         "(16-bit, fp8, fp4 or 4-bit int4 weights)"),
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
        (cfg.all_reduce_kernel != "vllm", "all_reduce_kernel", cfg.all_reduce_kernel,
         "vllm (vLLM runs its own custom all-reduce)"),
        (cfg.reserve_to_completion, "reserve_to_completion", True,
         "off (vLLM grows a request's blocks and preempts)"),
        (1 < cfg.ep < cfg.stage_gpus, "ep", cfg.ep,
         f"1 or {cfg.stage_gpus} (vLLM spreads experts over all tensor x data parallel ranks "
         "or over none)"),
        (cfg.max_num_seqs % cfg.dp_attention != 0, "max_num_seqs", cfg.max_num_seqs,
         f"a multiple of dp_attention = {cfg.dp_attention} (vLLM's --max-num-seqs is per "
         "data-parallel rank)"),
        (cfg.max_num_batched_tokens < cfg.max_num_seqs // cfg.dp_attention,
         "max_num_batched_tokens", cfg.max_num_batched_tokens,
         f"at least --max-num-seqs per data-parallel rank = {cfg.max_num_seqs // cfg.dp_attention}"
         " (vLLM's SchedulerConfig refuses a smaller token budget at startup)"),
    )  # fmt: skip
    refusal = _first_refusal(cfg, checks)
    if refusal is not None or cfg.max_model_len is None:
        return refusal
    kv = _rank_kv_tokens(cfg)  # last: it sizes the replica's memory
    if kv is not None and kv < cfg.max_model_len:
        return HwtuneInputError(
            "max_model_len", cfg.max_model_len,
            f"at most {kv} tokens, what one rank's KV cache holds as simulated (vLLM refuses to "
            "start when the cache cannot hold one request of max_model_len tokens: "
            "check_enough_kv_cache_memory)",
        )  # fmt: skip
    return None


VLLM_MAX_MODEL_LEN_STEP = 1024
"""``--max-model-len`` is set to the simulated KV capacity rounded down to a multiple of this
(`vllm_max_model_len`), a margin for the capacity being an estimate."""


def vllm_max_model_len(cfg: ReplicaConfig) -> int | None:
    """``--max-model-len`` for replica ``cfg`` when one data-parallel rank's KV cache, as
    simulated, holds fewer tokens than the model's context (`ModelSpec.max_context`), else
    None (vLLM's own, from config.json). vLLM V1 refuses to start when the cache cannot hold
    one request of ``max_model_len`` tokens ("To serve at least one request with the model's
    max seq len (N), X GiB KV cache is needed, which is larger than the available KV cache
    memory", ``check_enough_kv_cache_memory`` in ``vllm/v1/core/kv_cache_utils.py``): Llama-3.1
    -8B's 131072 on an RTX 4090 is one such case. The simulation refuses longer requests
    anyway (`hwtune.serve.simulator`), so the launch keeps what it simulated. A replica's own
    ``max_model_len`` (``serve --max-model-len``) is passed as it is."""
    if cfg.max_model_len is not None:  # `vllm_refusal` refuses it where the cache is smaller
        return cfg.max_model_len
    context = cfg.model.max_context
    tokens = _rank_kv_tokens(cfg)
    if context is None or tokens is None or tokens >= context:
        return None
    return max(VLLM_MAX_MODEL_LEN_STEP, tokens // VLLM_MAX_MODEL_LEN_STEP * VLLM_MAX_MODEL_LEN_STEP)


def _rank_kv_tokens(cfg: ReplicaConfig) -> int | None:
    """Tokens one data-parallel rank's KV cache holds as simulated, None where the layout has
    no KV cache at all (`serve` refuses it before a launch is asked for)."""
    from hwtune.serve.memory import replica_memory

    try:
        return replica_memory(cfg).kv_tokens
    except HwtuneInputError:
        return None


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
    max_len = vllm_max_model_len(cfg)
    if max_len is not None:
        a += ["--max-model-len", str(max_len)]
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
        (cfg.all_reduce_kernel != "vllm", "all_reduce_kernel", cfg.all_reduce_kernel,
         "vllm (SGLang's sgl-kernel carries vLLM's custom all-reduce)"),
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
    if cfg.max_model_len is not None:
        a += ["--context-length", str(cfg.max_model_len)]
    return ServeLaunch("sglang", model, tuple(a), (), dep.replicas, cfg.gpus)


def _trtllm_kv_dtype(cfg: ReplicaConfig) -> str | None:
    """``kv_cache_config.dtype`` for the simulated KV format, or None where TensorRT-LLM has
    none: ``auto`` for the checkpoint's own (`hwtune.serve.config.kv_format`), ``fp8``, or
    ``nvfp4`` for fp4 on a GPU with FP4 math."""
    from hwtune.serve.config import kv_format

    if cfg.kv_dtype == kv_format(cfg.model, None, cfg.device)[0]:
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
        (cfg.all_reduce_kernel != "trtllm", "all_reduce_kernel", cfg.all_reduce_kernel,
         "trtllm (TensorRT-LLM runs its own all-reduce kernels)"),
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
    if cfg.max_model_len is not None:
        a += ["--max_seq_len", str(cfg.max_model_len)]
    a += ["--extra_llm_api_options", TRTLLM_OPTIONS_FILE]
    text = yaml.safe_dump(trtllm_options(cfg), sort_keys=False)
    return ServeLaunch("trtllm", model, tuple(a), (), dep.replicas, cfg.gpus,
                       ((TRTLLM_OPTIONS_FILE, text),))  # fmt: skip


SGLANG_PD_HOOK_COMMIT = "00e1106f4ab55cfb7dceeba2dfbc04b0cc40bb6f"
"""The sgl-project/sglang commit whose ``python/sglang/srt/arg_groups/pd_disaggregation_hook.py``
(what ``--disaggregation-mode`` does to the other arguments) was read; the source index holds it
at no commit nearer `SGLANG_COMMIT`."""
SGLANG_ROUTER_COMMIT = "083d601378d0baaef6191e7f2d40fb70d06518af"
"""The sgl-project/sglang commit whose ``sgl-router/py_src/sglang_router/router_args.py`` (the
``sglang_router.launch_router`` options) was read."""
SGLANG_ROUTER_PROGRAM: tuple[str, ...] = ("python", "-m", "sglang_router.launch_router")
SGLANG_TRANSFER_BACKEND = "mooncake"
"""``--disaggregation-transfer-backend``: SGLang's default, over RDMA (``mooncake_tcp`` forces
TCP), the scale-out network the simulator sends the KV cache over."""
SGLANG_PORT = 30000
"""SGLang's default server port (``ServerArgs.port``), in the router's worker URLs."""
SGLANG_BOOTSTRAP_PORT = 8998
"""``ServerArgs.disaggregation_bootstrap_port``'s default: the prefill server's bootstrap port,
which the router must be told (``--prefill URL`` alone means none: ``_parse_prefill_urls``)."""
SGLANG_ROUTER_POLICIES: dict[str, str] = {"round-robin": "round_robin"}
"""The router's ``--policy`` for each hwtune router it has (its choices: random, round_robin,
cache_aware, power_of_two)."""


@dataclass(frozen=True)
class DisaggLaunch:
    """A disaggregated deployment's commands: the prefill pool's server (``prefill.replicas``
    of it), the decode pool's (``decode.replicas``), and the router in front of both, with the
    files the router reads (TensorRT-LLM's disaggregated-server YAML)."""

    engine: str
    model: str
    prefill: ServeLaunch
    decode: ServeLaunch
    router: tuple[str, ...]
    """The router's whole command line (program and arguments)."""
    files: tuple[tuple[str, str], ...] = ()

    def router_command(self) -> str:
        return shlex.join(self.router)

    def to_dict(self) -> dict[str, object]:
        doc: dict[str, object] = {
            "engine": self.engine,
            "model": self.model,
            "disaggregated": True,
            "gpus": self.prefill.gpus + self.decode.gpus,
            "prefill": self.prefill.to_dict(),
            "decode": self.decode.to_dict(),
            "router": {
                "args": list(self.router),
                "env": {},
                "replicas": 1,
                "gpus_per_replica": 0,
                "gpus": 0,
                "command": self.router_command(),
                "files": dict(self.files),
            },
            # every file of the deployment, as `launch.files` of an aggregated one: the pools'
            # options files beside the router's (each part also lists its own)
            "files": {**dict(self.prefill.files), **dict(self.decode.files), **dict(self.files)},
        }
        return doc


def _pool_refusal(refusal: HwtuneInputError | None, pool: str) -> HwtuneInputError | None:
    """An engine's refusal of one pool's replica, saying which pool (the prefill pool's ``tp``
    is ``prefill_tp``, as `serve --prefill-tp` sets it)."""
    if refusal is None:
        return None
    field = "prefill_tp" if pool == "prefill" and refusal.field == "tp" else refusal.field
    return HwtuneInputError(field, refusal.value, f"{refusal.expected} (the {pool} pool)")


def _disagg_refusal(
    dep: Deployment,
    replica_refusal: Callable[[ReplicaConfig], HwtuneInputError | None],
    routers: Collection[str],
    router_expected: str,
    pair: Callable[[ReplicaConfig, ReplicaConfig], HwtuneInputError | None] | None = None,
) -> HwtuneInputError | None:
    """The first reason an engine cannot run the disaggregated deployment ``dep`` as
    simulated, or None: not disaggregated; either pool's replica (``replica_refusal``, the
    message naming the pool); what the engine cannot pair between the prefill and the decode
    replica (``pair``); a router outside ``routers`` while a pool has more than one server to
    choose from (``router_expected`` says what the engine's router does instead)."""
    pre = dep.prefill
    if pre is None:
        return HwtuneInputError("disagg", False, "a disaggregated deployment (--disagg)")
    for cfg, pool in ((pre, "prefill"), (dep.replica, "decode")):
        refusal = _pool_refusal(replica_refusal(cfg), pool)
        if refusal is not None:
            return refusal
    refusal = pair(pre, dep.replica) if pair is not None else None
    if refusal is not None:
        return refusal
    if dep.router not in routers and max(dep.replicas, dep.prefill_replicas) > 1:
        return HwtuneInputError(
            "router", dep.router, f"round-robin, or one replica in each pool ({router_expected})"
        )
    return None


def sglang_disagg_refusal(dep: Deployment) -> HwtuneInputError | None:
    """Why SGLang cannot run the disaggregated deployment ``dep`` as simulated (the first
    reason), or None: either pool's replica (`sglang_refusal`), or a router policy its router
    has no equivalent of while a pool has more than one server to choose from."""
    return _disagg_refusal(
        dep, sglang_refusal, SGLANG_ROUTER_POLICIES, "SGLang's router has round_robin; its "
        "power_of_two samples two servers and cache_aware balances only past a threshold, "
        "neither the least outstanding tokens",
    )  # fmt: skip


def _sglang_pool(cfg: ReplicaConfig, replicas: int, model: str, mode: str) -> ServeLaunch:
    """One pool's server command: the aggregated flags of ``cfg`` (`sglang_launch`) with
    ``--disaggregation-mode``; ``--enable-mixed-chunk`` is dropped (no step of either pool has
    both prompt and decode tokens)."""
    agg = sglang_launch(Deployment(cfg, replicas), model)
    a = [x for x in agg.args if x != "--enable-mixed-chunk"]
    a += ["--disaggregation-mode", mode,
          "--disaggregation-transfer-backend", SGLANG_TRANSFER_BACKEND,
          "--host", "0.0.0.0"]  # fmt: skip
    if mode == "prefill":
        a += ["--disaggregation-bootstrap-port", str(SGLANG_BOOTSTRAP_PORT)]
    else:  # a request in transfer holds one of the max_running_requests slots, as simulated
        a += ["--disaggregation-decode-extra-slots", "0"]
    return ServeLaunch("sglang", model, tuple(a), agg.env, replicas, cfg.gpus)


def sglang_disagg_launch(dep: Deployment, model: str) -> DisaggLaunch:
    """The disaggregated deployment ``dep`` as SGLang's prefill and decode servers
    (``--disaggregation-mode``, each pool with its own replica's flags) and
    ``sglang_router.launch_router --pd-disaggregation`` in front (see the module docstring).
    The router's worker URLs name the servers ``PREFILL_i`` and ``DECODE_i``: the hosts they
    run on."""
    refusal = sglang_disagg_refusal(dep)
    if refusal is not None:
        raise refusal
    assert dep.prefill is not None
    pre = _sglang_pool(dep.prefill, dep.prefill_replicas, model, "prefill")
    dec = _sglang_pool(dep.replica, dep.replicas, model, "decode")
    r = [*SGLANG_ROUTER_PROGRAM, "--pd-disaggregation"]
    for i in range(1, dep.prefill_replicas + 1):
        r += ["--prefill", f"http://PREFILL_{i}:{SGLANG_PORT}", str(SGLANG_BOOTSTRAP_PORT)]
    for i in range(1, dep.replicas + 1):
        r += ["--decode", f"http://DECODE_{i}:{SGLANG_PORT}"]
    if dep.router in SGLANG_ROUTER_POLICIES:
        r += ["--policy", SGLANG_ROUTER_POLICIES[dep.router]]
    r += ["--host", "0.0.0.0", "--port", "8000"]
    return DisaggLaunch("sglang", model, pre, dec, tuple(r))


TRTLLM_DISAGG_UTILS_COMMIT = "0228a71223416496ff056a157936bad2e42c762f"
"""The NVIDIA/TensorRT-LLM commit whose ``tensorrt_llm/llmapi/disagg_utils.py`` (how
``trtllm-serve disaggregated -c FILE`` reads ``context_servers`` / ``generation_servers``) was
read."""
TRTLLM_ROUTER_COMMIT = "00895e31dc5f9865c6bdfd2dd0508a9d6d964e9d"
"""The NVIDIA/TensorRT-LLM commit whose ``tensorrt_llm/serve/router.py`` (``create_router``'s
router types) was read."""
TRTLLM_DISAGG_FILE = "hwtune-trtllm-disagg.yaml"
"""The disaggregated server's configuration (``trtllm-serve disaggregated -c``)."""
TRTLLM_POOL_FILES: dict[str, str] = {
    "context": "hwtune-trtllm-ctx.yaml",
    "generation": "hwtune-trtllm-gen.yaml",
}
"""Each pool's LLM API options file (``--extra_llm_api_options``)."""
TRTLLM_POOL_PORTS: dict[str, int] = {"context": 8001, "generation": 8002}
"""The port of each pool's servers (the disaggregated server takes ``trtllm-serve``'s default,
8000)."""
TRTLLM_CACHE_TRANSCEIVER_BACKEND = "DEFAULT"
"""``cache_transceiver_config.backend``: ``DEFAULT`` is NIXL unless a legacy environment
variable names another (``CacheTransceiverConfig._resolve_default_backend``)."""
TRTLLM_ROUTERS: dict[str, str] = {"round-robin": "round_robin"}
"""The disaggregated server's router ``type`` for each hwtune router it has."""


def trtllm_disagg_refusal(dep: Deployment) -> HwtuneInputError | None:
    """Why TensorRT-LLM cannot run the disaggregated deployment ``dep`` as simulated (the first
    reason), or None: either pool's replica (`trtllm_refusal`), or a router it has no
    equivalent of while a pool has more than one server."""
    return _disagg_refusal(
        dep, trtllm_refusal, TRTLLM_ROUTERS, "TensorRT-LLM's load_balancing router counts "
        "requests, or with use_tokens the prompt tokens of context requests only, not the "
        "outstanding tokens",
    )  # fmt: skip


def _trtllm_pool(cfg: ReplicaConfig, replicas: int, model: str, pool: str) -> ServeLaunch:
    """One pool's ``trtllm-serve`` command and options file: the aggregated ones of ``cfg``
    (`trtllm_launch`, `trtllm_options`) with ``cache_transceiver_config``, on the pool's port."""
    import yaml

    agg = trtllm_launch(Deployment(cfg, replicas), model)
    name = TRTLLM_POOL_FILES[pool]
    a = list(agg.args)
    a[a.index("--extra_llm_api_options") + 1] = name
    a += ["--host", "0.0.0.0", "--port", str(TRTLLM_POOL_PORTS[pool])]
    opts = trtllm_options(cfg)
    opts["cache_transceiver_config"] = {"backend": TRTLLM_CACHE_TRANSCEIVER_BACKEND}
    text = yaml.safe_dump(opts, sort_keys=False)
    return ServeLaunch("trtllm", model, tuple(a), agg.env, replicas, cfg.gpus, ((name, text),))


def trtllm_disagg_launch(dep: Deployment, model: str) -> DisaggLaunch:
    """The disaggregated deployment ``dep`` as TensorRT-LLM's context and generation servers
    (``trtllm-serve`` with ``cache_transceiver_config``, each pool with its own replica's
    options) and ``trtllm-serve disaggregated -c`` in front (see the module docstring). The
    servers are named ``CTX_i`` and ``GEN_i`` in its configuration: the hosts they run on."""
    import yaml

    refusal = trtllm_disagg_refusal(dep)
    if refusal is not None:
        raise refusal
    assert dep.prefill is not None
    ctx = _trtllm_pool(dep.prefill, dep.prefill_replicas, model, "context")
    gen = _trtllm_pool(dep.replica, dep.replicas, model, "generation")
    doc: dict[str, object] = {"hostname": "0.0.0.0", "port": 8000}
    for key, host, n, pool in (("context_servers", "CTX", dep.prefill_replicas, "context"),
                               ("generation_servers", "GEN", dep.replicas, "generation")):  # fmt: skip
        port = TRTLLM_POOL_PORTS[pool]
        servers: dict[str, object] = {
            "num_instances": n,
            "urls": [f"{host}_{i}:{port}" for i in range(1, n + 1)],
        }
        if dep.router in TRTLLM_ROUTERS:
            servers["router"] = {"type": TRTLLM_ROUTERS[dep.router]}
        doc[key] = servers
    text = yaml.safe_dump(doc, sort_keys=False)
    router = ("trtllm-serve", "disaggregated", "-c", TRTLLM_DISAGG_FILE)
    return DisaggLaunch("trtllm", model, ctx, gen, router, ((TRTLLM_DISAGG_FILE, text),))


VLLM_NIXL_DOCS_COMMIT = "026c83f974fcee0e1887060ebdcc53dc427bacfc"
"""The vllm-project/vllm commit whose ``docs/features/nixl_connector_usage.md`` was read
(``nixl_connector_compatibility.md`` at 0a5110ef53c5d0d86ac19464bad6e7b9a9c44dbc)."""
VLLM_PROXY_COMMIT = "030ea52effcb05071543c8c42b8f0145e94cee43"
"""The vllm-project/vllm commit whose ``tests/v1/kv_connector/nixl_integration/
toy_proxy_server.py`` (the proxy the NixlConnector guide runs) was read."""
VLLM_PROXY_SCRIPT = "tests/v1/kv_connector/nixl_integration/toy_proxy_server.py"
"""The proxy, a script of vLLM's source tree (run from a checkout of the release served)."""
VLLM_POOL_PORTS: dict[str, int] = {"prefill": 8100, "decode": 8200}
"""The port of each pool's servers (the NixlConnector guide's)."""
VLLM_KV_ROLES: dict[str, str] = {"prefill": "kv_producer", "decode": "kv_consumer"}


def vllm_disagg_refusal(dep: Deployment) -> HwtuneInputError | None:
    """Why vLLM cannot run the disaggregated deployment ``dep`` as simulated (the first
    reason), or None: either pool's replica (`vllm_refusal`), KV formats or block sizes the
    NixlConnector does not pair, or a router the proxy does not have while a pool has more
    than one server."""
    return _disagg_refusal(dep, vllm_refusal, ("round-robin",),
                           "vLLM's proxy cycles through each pool's servers", _nixl_pair)  # fmt: skip


def _nixl_pair(pre: ReplicaConfig, dec: ReplicaConfig) -> HwtuneInputError | None:
    """What vLLM's NixlConnector cannot pair between a prefill and a decode replica."""
    if pre.kv_dtype != dec.kv_dtype:
        return HwtuneInputError("kv_precision", pre.kv_dtype, f"the decode pool's "
                                f"{dec.kv_dtype} (the NixlConnector's handshake requires the "
                                "same KV cache dtype on both sides)")  # fmt: skip
    if pre.block_size > dec.block_size:
        return HwtuneInputError("block_size", pre.block_size, f"at most the decode pool's "
                                f"{dec.block_size} (the NixlConnector pairs a prefill block "
                                "size only below or equal to the decode one)")  # fmt: skip
    return None


def _vllm_pool(cfg: ReplicaConfig, replicas: int, model: str, pool: str) -> ServeLaunch:
    """One pool's ``vllm serve`` command: the aggregated flags of ``cfg`` (`vllm_launch`) with
    its port and ``--kv-transfer-config`` for the NixlConnector."""
    import json

    agg = vllm_launch(Deployment(cfg, replicas), model)
    kv = {"kv_connector": "NixlConnector", "kv_role": VLLM_KV_ROLES[pool]}
    a = [*agg.args, "--host", "0.0.0.0", "--port", str(VLLM_POOL_PORTS[pool]),
         "--kv-transfer-config", json.dumps(kv, separators=(",", ":"))]  # fmt: skip
    return ServeLaunch("vllm", model, tuple(a), agg.env, replicas, cfg.gpus)


def vllm_disagg_launch(dep: Deployment, model: str) -> DisaggLaunch:
    """The disaggregated deployment ``dep`` as vLLM's prefill and decode servers (``vllm serve``
    with the NixlConnector, each pool with its own replica's flags) and the proxy of vLLM's
    NixlConnector guide in front (see the module docstring). The proxy names the servers
    ``PREFILL_i`` and ``DECODE_i``: the hosts they run on."""
    refusal = vllm_disagg_refusal(dep)
    if refusal is not None:
        raise refusal
    assert dep.prefill is not None
    pre = _vllm_pool(dep.prefill, dep.prefill_replicas, model, "prefill")
    dec = _vllm_pool(dep.replica, dep.replicas, model, "decode")
    r = ["python", VLLM_PROXY_SCRIPT, "--host", "0.0.0.0", "--port", "8000"]
    for flag, host, n, pool in (("prefiller", "PREFILL", dep.prefill_replicas, "prefill"),
                                ("decoder", "DECODE", dep.replicas, "decode")):  # fmt: skip
        r += [f"--{flag}-hosts", *(f"{host}_{i}" for i in range(1, n + 1))]
        r += [f"--{flag}-ports", *([str(VLLM_POOL_PORTS[pool])] * n)]
    return DisaggLaunch("vllm", model, pre, dec, tuple(r))


DISAGG_LAUNCH_ENGINES: tuple[str, ...] = ("sglang", "trtllm", "vllm")
"""The engines whose disaggregated deployments hwtune writes (`disagg_launch_refusal`)."""


DISAGG_HOSTS: dict[str, tuple[str, str]] = {
    "vllm": ("PREFILL", "DECODE"),
    "sglang": ("PREFILL", "DECODE"),
    "trtllm": ("CTX", "GEN"),
}
"""The placeholders, numbered from 1, for the hosts of the prefill and decode servers in a
disaggregated router's command or file (to be replaced with the machines they run on)."""


def launch_instructions(doc: dict[str, object], router: str) -> str:
    """What to run where, how many times, and what to replace, for a launch document
    (`ServeLaunch.to_dict` or `DisaggLaunch.to_dict`) behind ``router``: the ``note`` of every
    launch document, as the training launches have."""
    files = "; write each file under the command beside it, in its working directory"
    if not doc.get("disaggregated"):
        n, g = doc["replicas"], doc["gpus_per_replica"]
        gpus = f"{g} GPU" + ("s" if g != 1 else "")
        if n == 1:
            return f"run it once, on {gpus}" + (files if doc["files"] else "")
        return (f"run it {n} times, each copy on its own {gpus}, with a {router} load balancer "
                "in front, as simulated (separate servers do not balance among themselves)"
                + (files if doc["files"] else ""))  # fmt: skip
    pre, dec = DISAGG_HOSTS[str(doc["engine"])]
    pool = {k: doc[k] for k in ("prefill", "decode")}
    np_, nd = (int(v["replicas"]) for v in pool.values())  # type: ignore[index]
    proxy = (
        " from the root of a vLLM source checkout (its NixlConnector example proxy)"
        if doc["engine"] == "vllm"
        else ""
    )

    def times(n: int) -> str:
        return "once" if n == 1 else f"{n} times"

    def hosts(name: str, n: int) -> str:
        return f"{name}_1" if n == 1 else f"{name}_1..{name}_{n}"

    return (f"run the prefill server {times(np_)} and the decode server {times(nd)}, each copy "
            f"on its own GPUs and host (copies sharing a host need other ports), then the "
            f"router once{proxy}; replace {hosts(pre, np_)} and {hosts(dec, nd)} with the hosts "
            f"of the prefill and decode servers"
            + (files if doc["files"] else ""))  # fmt: skip


def disagg_plan_router(engine: str) -> str:
    """The router of the disaggregated layouts ``serve plan --launch ENGINE`` searches: the
    planner's ``least-tokens`` where the engine's router has it, else ``round-robin`` (none of
    `DISAGG_LAUNCH_ENGINES` has it)."""
    return "round-robin" if engine in DISAGG_LAUNCH_ENGINES else "least-tokens"


def disagg_launch_refusal(engine: str, dep: Deployment) -> HwtuneInputError | None:
    """Why ``engine`` cannot run deployment ``dep`` as simulated, or None: `launch_refusal` of
    its replica when aggregated; when disaggregated, the engine's own check of both pools and
    the router (`sglang_disagg_refusal`, `trtllm_disagg_refusal`, `vllm_disagg_refusal`), or
    the engine has no disaggregated launch here."""
    if dep.prefill is None:
        return launch_refusal(engine, dep.replica)
    if engine == "sglang":
        return sglang_disagg_refusal(dep)
    if engine == "trtllm":
        return trtllm_disagg_refusal(dep)
    if engine == "vllm":
        return vllm_disagg_refusal(dep)
    return HwtuneInputError("launch", engine, "one of " + ", ".join(SERVE_LAUNCH_ENGINES))


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


def serve_launch_for(engine: str, dep: Deployment, model: str) -> ServeLaunch | DisaggLaunch:
    """The launch of ``dep`` on ``engine`` (one of `SERVE_LAUNCH_ENGINES`): a `DisaggLaunch`
    for a disaggregated deployment on an engine of `DISAGG_LAUNCH_ENGINES`."""
    if dep.prefill is not None and engine == "sglang":
        return sglang_disagg_launch(dep, model)
    if dep.prefill is not None and engine == "trtllm":
        return trtllm_disagg_launch(dep, model)
    if dep.prefill is not None and engine == "vllm":
        return vllm_disagg_launch(dep, model)
    if engine == "vllm":
        return vllm_launch(dep, model)
    if engine == "sglang":
        return sglang_launch(dep, model)
    if engine == "trtllm":
        return trtllm_launch(dep, model)
    raise HwtuneInputError("launch", engine, "one of " + ", ".join(SERVE_LAUNCH_ENGINES))


__all__ = [
    "AICONFIGURATOR_COMMIT",
    "DISAGG_HOSTS",
    "DISAGG_LAUNCH_ENGINES",
    "DisaggLaunch",
    "launch_instructions",
    "disagg_launch_refusal",
    "disagg_plan_router",
    "LAUNCH_PROGRAMS",
    "SERVE_LAUNCH_ENGINES",
    "SGLANG_COMMIT",
    "SGLANG_BOOTSTRAP_PORT",
    "SGLANG_DEFAULT_MAX_PREFILL_TOKENS",
    "SGLANG_PD_HOOK_COMMIT",
    "SGLANG_ROUTER_COMMIT",
    "SGLANG_ROUTER_POLICIES",
    "SGLANG_SCHEDULERS",
    "ServeLaunch",
    "launch_refusal",
    "serve_launch_for",
    "sglang_disagg_launch",
    "sglang_disagg_refusal",
    "sglang_launch",
    "sglang_mem_fraction_static",
    "sglang_refusal",
    "TRTLLM_ARCHITECTURES",
    "TRTLLM_ARGS_COMMIT",
    "TRTLLM_CACHE_TRANSCEIVER_BACKEND",
    "TRTLLM_DEFAULT_PREFILL_CAPTURE",
    "TRTLLM_DISAGG_FILE",
    "TRTLLM_DISAGG_UTILS_COMMIT",
    "TRTLLM_MLA_ARCHITECTURES",
    "TRTLLM_MOE_BACKENDS",
    "TRTLLM_OPTIONS_FILE",
    "TRTLLM_POOL_FILES",
    "TRTLLM_POOL_PORTS",
    "TRTLLM_PREFILL_CAPTURE_STEP",
    "TRTLLM_ROUTERS",
    "TRTLLM_ROUTER_COMMIT",
    "TRTLLM_SCHEDULERS",
    "TRTLLM_SERVE_COMMIT",
    "trtllm_disagg_launch",
    "trtllm_disagg_refusal",
    "trtllm_launch",
    "trtllm_options",
    "trtllm_refusal",
    "VLLM_KV_ROLES",
    "VLLM_NIXL_DOCS_COMMIT",
    "VLLM_POOL_PORTS",
    "VLLM_PROXY_COMMIT",
    "VLLM_PROXY_SCRIPT",
    "vllm_disagg_launch",
    "vllm_disagg_refusal",
    "vllm_launch",
    "vllm_refusal",
]
