"""`ReplicaConfig`: one serving replica (model, device, layout, precision, engine limits) and the
deployment around it (replicas, routing, disaggregation)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from hwtune.cost.compute import dtype_bytes
from hwtune.cost.inference_collectives import ALL_REDUCE_KERNELS
from hwtune.cost.quantized_gemm import NO_FLOAT_WEIGHT_ARCHITECTURES, WEIGHT_ONLY_KERNELS
from hwtune.errors import HwtuneInputError
from hwtune.hardware.cluster import MAX_GPUS, Cluster, make_cluster
from hwtune.hardware.device import Device
from hwtune.model.spec import ModelSpec
from hwtune.serve.profile import CalibrationProfile
from hwtune.serve.speculative import expected_tokens_per_step

SCHEDULERS: tuple[str, ...] = ("vllm", "sarathi", "orca", "static", "prefill-first", "sglang")
ROUTERS: tuple[str, ...] = ("round-robin", "least-tokens")
PRECISIONS: tuple[str, ...] = ("bf16", "fp16", "fp8", "fp4", "int4")
"""Serving weight formats. int4 is weight-only (W4A16: GPTQ, AWQ, compressed-tensors int4;
`hwtune.cost.quantized_gemm.WEIGHT_ONLY_FORMATS`): 4-bit weights plus group scales, bf16 math."""
KV_PRECISIONS: tuple[str, ...] = ("bf16", "fp16", "fp8", "fp4")
"""KV-cache formats: the weight formats less int4, which the engines modelled here (vLLM,
SGLang, TensorRT-LLM) do not offer for the KV cache (their ``kv_cache_dtype`` choices are
auto/bf16/fp16, fp8 variants and, TensorRT-LLM on Blackwell, nvfp4)."""


def sixteen_bit_format(
    device: Device | None, requested: str | None = None, field: str = "precision"
) -> str:
    """The 16-bit format a ``device`` serves: bf16, or fp16 where it has no bf16 math (Volta).
    vLLM resolves ``--dtype auto`` of a bf16 checkpoint to fp16 there and refuses an explicit
    bfloat16 ("Bfloat16 is only supported on GPUs with compute capability of at least 8.0",
    its platform dtype check), so an explicit bf16 ``requested`` is refused naming ``field``."""
    has_bf16 = device is None or device.sixteen_bit_dtype == "bf16"
    if requested == "bf16" and not has_bf16:
        assert device is not None
        raise HwtuneInputError(field, "bf16", device.no_bf16_expectation())
    return "bf16" if has_bf16 else "fp16"


def weight_format(
    model: ModelSpec, requested: str | None, device: Device | None = None
) -> tuple[str, str]:
    """The weight format to serve ``model`` in and where it came from: ``requested`` when given
    ("option"), else the format its checkpoint ships (`ModelSpec.checkpoint_precision`, read
    from config.json's ``quantization_config``: "checkpoint"), else bf16 ("default"), or fp16
    on a ``device`` without bf16 math (`sixteen_bit_format`; `ReplicaConfig` refuses bf16 there).

    Serving engines load a quantized checkpoint in its own format unless told otherwise (vLLM
    and SGLang take ``--quantization`` from the config's ``quantization_config``; TensorRT-LLM's
    PyTorch backend reads it from the checkpoint too), so the checkpoint's format is what a
    plain ``vllm serve deepseek-ai/DeepSeek-V3`` runs. A checkpoint quantized to a format that
    is none of `PRECISIONS` (`ModelSpec.checkpoint_quantization`: GPTQ 3-bit, bitsandbytes, ...)
    is refused unless a format is ``requested``: its engine would load it in that format, and
    bf16 in its place would misstate its weight memory and traffic."""
    if requested is not None:  # checked by ReplicaConfig (bf16 where there is none)
        return requested, "option"
    if model.checkpoint_precision is not None:
        return model.checkpoint_precision, "checkpoint"
    if model.checkpoint_quantization is not None:
        raise HwtuneInputError(
            "model.quantization_config",
            model.checkpoint_quantization,
            "a weight format hwtune simulates (fp8, mxfp4/nvfp4, 4-bit gptq/awq/W4A16); pass "
            "--precision (weight_dtype) with one of " + ", ".join(PRECISIONS) + " to serve "
            "this checkpoint as that format",
        )
    return sixteen_bit_format(device, None, "precision"), "default"


def kv_format(
    model: ModelSpec, requested: str | None, device: Device | None = None
) -> tuple[str, str]:
    """The KV-cache format to serve ``model`` with and where it came from, as `weight_format`
    does for the weights: ``requested`` when given ("option"), else the KV format its
    checkpoint is quantized for (`ModelSpec.checkpoint_kv_precision`: ModelOpt
    ``kv_cache_quant_algo`` FP8/NVFP4, compressed-tensors ``kv_cache_scheme`` fp8:
    "checkpoint"; TensorRT-LLM's ``KvCacheConfig(dtype="auto")`` inherits it), else bf16
    ("default"; fp16 on a ``device`` without bf16 math)."""
    if requested is not None:
        return requested, "option"
    if model.checkpoint_kv_precision is not None:
        return model.checkpoint_kv_precision, "checkpoint"
    return sixteen_bit_format(device, None, "kv_precision"), "default"


HOST_OVERHEAD_PER_ITERATION_S = 2.0e-4
"""Engine time per step that does not overlap the GPU (scheduling, input preparation, output
processing), seconds. vLLM v0.5.3 spent most of an 8B decode step on the CPU (vLLM blog,
"vLLM v0.6.0: 2.7x Throughput Improvement and 5x Latency Reduction", 2024-09-05: HTTP server
33%, scheduling 29% of execution time); since then multi-step/async scheduling (vLLM v0.6, V1),
SGLang's overlap scheduler (SGLang v0.4 blog, 2024-12-04, "zero-overhead batch scheduler") and
TensorRT-LLM's C++ runtime hide nearly all of it behind the GPU step: a few hundred microseconds
remain exposed per step. Tier-2 profiles replace it with a measurement."""

HOST_OVERHEAD_PER_SEQUENCE_S = 5.0e-6
"""Exposed per-sequence engine work per step (sampling bookkeeping, detokenization, stop
checks), seconds: a few microseconds of Python/C++ per sequence (same sources as above)."""

HOST_PER_KERNEL_S = 82.64e-3 / 1202
"""Host time to launch one kernel of an eager (non-CUDA-graph) forward in a Python serving
engine, seconds. A forward whose kernels are launched one by one from Python takes at least the
time to launch them (the GPU runs behind the host: step >= launches x this), which is what a
prefill step of TensorRT-LLM's PyTorch backend (CUDA graphs only for generation-only batches)
or SGLang (decode CUDA graphs; prefill eager unless ``--enable-piecewise-cuda-graph``) costs
when its GPU work is small. Source: SGLang PR #12160 (2025-10), DeepSeek-V3, a prefill of one
new token: "forward cost 82.64 ms" eager, 23.10 ms with a prefill CUDA graph, and "prefill
latency is similar when new_tokens < 100"; 82.64 ms over the 1,202 kernels the iteration
model launches for DeepSeek-V3 at TP 8 (`IterationModel.kernels_per_forward`, residual adds in
the norms: `hwtune.model.lowering.add_norm_ops`; 1,324 and 62 us before) is 69 us per
kernel (the engine's own kernels are more, each cheaper; the product is what is measured, and
a test holds the two together). Tier 2 (a serve profile) replaces the engine's host costs with measurements."""

WORKSPACE_FIXED_BYTES = 1.5 * 2**30
"""Memory per GPU outside weights, KV and activations: CUDA context, cuBLAS/NCCL workspaces and
CUDA-graph pools (vLLM docs, "Conserving Memory": the non-torch memory and CUDA graphs take
on the order of 1-2 GiB per GPU)."""


@dataclass(frozen=True)
class ReplicaConfig:
    """One model instance on ``tp * pp * dp_attention`` GPUs.

    ``dp_attention`` > 1 is SGLang/TensorRT-LLM attention data parallelism (for MLA models):
    attention runs data-parallel over ``dp_attention`` groups of ``tp`` GPUs while the MoE layers
    run over all ``tp * dp_attention`` GPUs of a stage, expert-parallel over ``ep`` and tensor-
    parallel over the rest. ``weight_dtype`` is the weight format (fp8 W8A8 GEMMs; fp4 weight-only
    on GPUs without FP4 math; int4 weight-only everywhere; 4-bit weights with their group scales,
    `weight_group_size`); ``kv_dtype`` that of the KV cache; either left None is the
    checkpoint's format, else bf16 (`weight_format`, `kv_format`: what the CLI resolves);
    ``weight_only_kernel`` the kernel family of weight-only GEMMs
    (`hwtune.cost.quantized_gemm.WEIGHT_ONLY_KERNELS`: the native ``wgmma`` path, or
    ``marlin``, e.g. vLLM with ``VLLM_MXFP4_USE_MARLIN=1``);
    ``all_reduce_kernel``: whose custom all-reduce kernels the tensor-parallel all-reduces run
    (`hwtune.cost.inference_collectives.ALL_REDUCE_KERNELS`: "vllm", which SGLang carries too,
    or "trtllm"; they differ in their fixed cost per call);
    ``eager_prefill``: steps with prompt tokens run without CUDA graphs, so they last at least
    the host's launch time of their kernels (`HOST_PER_KERNEL_S`; TensorRT-LLM's PyTorch backend
    and SGLang by default; vLLM V1 captures piecewise CUDA graphs and compiles, so False);
    ``adp_balance_timeout_iters`` > 0: TensorRT-LLM's attention-DP balancing
    (``attention_dp_config: enable_balance: true, timeout_iters: N, batching_wait_iters: 0``):
    while every attention-DP rank is decoding, new prompts wait until there is one for every
    rank or N steps have passed (`hwtune.serve.scheduler.Replica`);
    ``batch_wait_timeout_iters`` and ``batch_wait_max_tokens_ratio``: TensorRT-LLM's batch
    waiting (LLM API options of the same names; not under attention DP): while requests are
    decoding, the prompts a step would take are held back until their tokens plus the decode
    tokens reach ratio x ``max_num_batched_tokens`` or the engine has held them N steps;
    0 turns it off (`hwtune.serve.scheduler.Replica`);
    ``kv_memory_rule``: how ``gpu_memory_utilization`` sizes the KV cache: "total", a fraction
    of the device's memory, from which weights, activations and workspace are taken (vLLM's
    ``gpu_memory_utilization``, SGLang's ``mem_fraction_static``), or "free", a fraction of what
    is left after them (TensorRT-LLM's ``free_gpu_memory_fraction``, `KvCacheCreator
    ._cal_max_memory`); ``reserve_to_completion``: admission reserves KV blocks for a request's
    prompt and all its output tokens, so nothing is ever preempted (TensorRT-LLM's default
    capacity policy, GUARANTEED_NO_EVICT: ``capacityScheduler.cpp``'s no-evict scheduler with
    ``getRemainingBlocksToCompletion``); off, blocks grow on demand and a full cache preempts
    (vLLM, SGLang);
    ``overlap_schedule``: the engine forms step k+1's batch while step k runs on the GPU
    (TensorRT-LLM's PyTorch executor unless ``disable_overlap_scheduler``, SGLang's default
    overlap scheduler, vLLM with ``--async-scheduling``), so a request that arrives during a step
    joins the step after next; an idle engine takes it at once (`hwtune.serve.scheduler.Replica`);
    ``host_timeline`` (with ``overlap_schedule``, ``pp`` = 1): the host as its own timeline
    beside the GPU's (`hwtune.serve.simulator`, "Host timeline"): it launches step k+1 while
    step k runs and sends step k's tokens only after that launch, so an eager prefill step
    after a decode ends earlier and a step followed by an eager one delivers later;
    ``spec_tokens`` > 0: speculative decoding with that many draft tokens per step, each accepted
    with probability ``spec_acceptance`` given the ones before it (`hwtune.serve.speculative`);
    the draft module is one decoder layer of the model's own shape (DeepSeek MTP, EAGLE);
    ``frontend_tokens_per_s``: the output tokens per second the replica's front end (the API
    server's detokenizing and streaming process) can deliver, None for no limit: every step's
    tokens pass through it first in, first out, and the client sees a token only when it is
    through (`hwtune.serve.simulator`, "Front end");
    ``max_model_len``: the longest request (prompt plus output tokens) the engine accepts, None
    for the model's context (`ModelSpec.max_context`): vLLM's ``--max-model-len``, SGLang's
    ``--context-length``, TensorRT-LLM's ``max_seq_len``. Engines refuse a longer request, and
    a value above the model's context unless an override is set in the environment (vLLM
    ``_get_and_verify_max_len``: "User-specified max_model_len ... is greater than the derived
    max_model_len", unless ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1``; SGLang likewise unless
    ``SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1``), which hwtune refuses too.
    """

    model: ModelSpec
    device: Device
    tp: int = 1
    pp: int = 1
    ep: int = 1
    dp_attention: int = 1
    weight_dtype: str | None = None
    kv_dtype: str | None = None
    gpu_memory_utilization: float = 0.9
    block_size: int = 16
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    scheduler: str = "vllm"
    chunk_size: int = 512
    enable_prefix_caching: bool = True
    host_overhead_s: float = HOST_OVERHEAD_PER_ITERATION_S
    host_overhead_per_seq_s: float = HOST_OVERHEAD_PER_SEQUENCE_S
    nic_gbps: float | None = None
    weight_only_kernel: str = "wgmma"
    all_reduce_kernel: str = "vllm"
    eager_prefill: bool = False
    adp_balance_timeout_iters: int = 0
    batch_wait_timeout_iters: int = 0
    batch_wait_max_tokens_ratio: float = 0.0
    overlap_schedule: bool = False
    host_timeline: bool = False
    spec_tokens: int = 0
    spec_acceptance: float = 0.0
    frontend_tokens_per_s: float | None = None
    kv_memory_rule: str = "total"
    reserve_to_completion: bool = False
    max_model_len: int | None = None
    profile: CalibrationProfile | None = field(default=None, compare=True)

    def __post_init__(self) -> None:
        # None: the checkpoint's format, else bf16 (fp16 on a GPU without bf16 math), as the
        # CLI resolves --precision and --kv-precision (`weight_format`, `kv_format`); a value
        # given is kept as it is
        if self.weight_dtype is None:
            object.__setattr__(
                self, "weight_dtype", weight_format(self.model, None, self.device)[0]
            )
        if self.kv_dtype is None:
            object.__setattr__(self, "kv_dtype", kv_format(self.model, None, self.device)[0])
        for name in ("tp", "pp", "ep", "dp_attention", "block_size", "max_num_batched_tokens",
                     "max_num_seqs", "chunk_size"):  # fmt: skip
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise HwtuneInputError(name, v, "a positive integer")
        if self.weight_dtype not in PRECISIONS:
            raise HwtuneInputError(
                "precision", self.weight_dtype, "one of " + ", ".join(PRECISIONS)
            )
        runs = NO_FLOAT_WEIGHT_ARCHITECTURES.get(self.device.architecture)
        if self.weight_dtype in ("fp8", "fp4") and runs is not None:
            raise HwtuneInputError(
                "precision", self.weight_dtype,
                f"a weight format {self.device.name} ({self.device.architecture}) runs: {runs}",
            )  # fmt: skip
        sixteen_bit_format(self.device, self.weight_dtype, "precision")  # no bf16 on Volta
        sixteen_bit_format(self.device, self.kv_dtype, "kv_precision")
        if self.kv_dtype not in KV_PRECISIONS:
            raise HwtuneInputError("kv_precision", self.kv_dtype,
                                   "one of " + ", ".join(KV_PRECISIONS)
                                   + (" (int4 is a weight-only format)"
                                      if self.kv_dtype == "int4" else ""))  # fmt: skip
        if self.scheduler not in SCHEDULERS:
            raise HwtuneInputError("scheduler", self.scheduler, "one of " + ", ".join(SCHEDULERS))
        if not 0 < self.gpu_memory_utilization <= 1:
            raise HwtuneInputError(
                "gpu_memory_utilization", self.gpu_memory_utilization, "a fraction in (0, 1]"
            )
        if self.kv_memory_rule not in ("total", "free"):
            raise HwtuneInputError("kv_memory_rule", self.kv_memory_rule, "total or free")
        heads, kv = self.model.n_heads, self.model.kv_heads
        if heads % self.tp or (kv % self.tp and self.tp % kv):
            raise HwtuneInputError(
                "tp", self.tp, f"a divisor of n_heads={heads} that divides or is a multiple of "
                f"n_kv_heads={kv} ({self.model.name})",
            )  # fmt: skip
        if self.ep > 1 and self.model.moe is None:
            raise HwtuneInputError("ep", self.ep, f"1 ({self.model.name} has no experts)")
        if self.stage_gpus % self.ep:
            raise HwtuneInputError(
                "ep", self.ep, f"a divisor of tp * dp_attention = {self.stage_gpus}"
            )
        if self.pp > self.model.n_layers:
            raise HwtuneInputError("pp", self.pp, f"at most n_layers = {self.model.n_layers}")
        if self.model.moe is not None and self.model.moe.n_routed_experts % self.ep:
            raise HwtuneInputError(
                "ep", self.ep, f"a divisor of n_routed_experts = {self.model.moe.n_routed_experts}"
            )
        dtype_bytes(self.weight_dtype)  # a known format
        if (
            not isinstance(self.adp_balance_timeout_iters, int)
            or self.adp_balance_timeout_iters < 0
        ):
            raise HwtuneInputError("adp_balance_timeout_iters", self.adp_balance_timeout_iters,
                                   "a non-negative integer (0: no balancing)")  # fmt: skip
        if not isinstance(self.overlap_schedule, bool):
            raise HwtuneInputError("overlap_schedule", self.overlap_schedule, "true or false")
        if not isinstance(self.host_timeline, bool):
            raise HwtuneInputError("host_timeline", self.host_timeline, "true or false")
        if self.host_timeline and not (self.overlap_schedule and self.pp == 1):
            raise HwtuneInputError("host_timeline", self.host_timeline,
                                   "false unless overlap_schedule is on and pp = 1 (the host "
                                   "runs ahead of the GPU only under an overlap scheduler)")  # fmt: skip
        w = self.batch_wait_timeout_iters
        if isinstance(w, bool) or not isinstance(w, int) or w < 0:
            raise HwtuneInputError("batch_wait_timeout_iters", w,
                                   "a non-negative integer (0: no batch waiting)")  # fmt: skip
        r = self.batch_wait_max_tokens_ratio
        if isinstance(r, bool) or not isinstance(r, int | float) or not 0 <= r <= 1:
            raise HwtuneInputError("batch_wait_max_tokens_ratio", r,
                                   "a fraction of max_num_batched_tokens in [0, 1]")  # fmt: skip
        expected_tokens_per_step(self.spec_tokens, self.spec_acceptance)  # valid inputs
        if self.spec_acceptance and not self.spec_tokens:
            raise HwtuneInputError("spec_acceptance", self.spec_acceptance,
                                   "0 without draft tokens (set spec_tokens > 0)")  # fmt: skip
        f = self.frontend_tokens_per_s
        if f is not None and (isinstance(f, bool) or not isinstance(f, int | float)
                              or not 0 < f < math.inf):  # fmt: skip
            raise HwtuneInputError("frontend_tokens_per_s", f,
                                   "a positive finite number of output tokens per second, or "
                                   "None (no front-end limit)")  # fmt: skip
        self._check_max_model_len()
        if self.all_reduce_kernel not in ALL_REDUCE_KERNELS:
            raise HwtuneInputError("all_reduce_kernel", self.all_reduce_kernel,
                                   "one of " + ", ".join(ALL_REDUCE_KERNELS))  # fmt: skip
        if self.weight_only_kernel not in WEIGHT_ONLY_KERNELS:
            raise HwtuneInputError("weight_only_kernel", self.weight_only_kernel,
                                   "one of " + ", ".join(WEIGHT_ONLY_KERNELS))  # fmt: skip

    def _check_max_model_len(self) -> None:
        n, m = self.max_model_len, self.model
        if n is None:
            return
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise HwtuneInputError("max_model_len", n, "a positive integer of tokens (leave "
                                   "it unset for the model's context)")  # fmt: skip
        if m.max_position and n > m.max_position:
            raise HwtuneInputError("max_model_len", n, f"at most {m.max_position} tokens, the "
                                   f"rows of {m.name}'s learned position table")  # fmt: skip
        if m.max_context and n > m.max_context:
            raise HwtuneInputError("max_model_len", n, f"at most {m.max_context} tokens, "
                                   f"{m.name}'s context length (engines refuse a longer one "
                                   "without an override in the environment)")  # fmt: skip

    # --- derived ----------------------------------------------------------------------------
    @property
    def context_limit(self) -> int | None:
        """The longest request (prompt plus output tokens) the replica serves: ``max_model_len``,
        else the model's context (`ModelSpec.max_context`), else None (no limit known)."""
        return self.max_model_len or self.model.max_context

    @property
    def stage_gpus(self) -> int:
        """GPUs of one pipeline stage: tp * dp_attention (= moe_tp * ep)."""
        return self.tp * self.dp_attention

    @property
    def gpus(self) -> int:
        return self.stage_gpus * self.pp

    @property
    def moe_tp(self) -> int:
        """Tensor parallelism inside each expert: the stage's GPUs left after expert parallelism."""
        return self.stage_gpus // self.ep

    @property
    def weight_group_size(self) -> int | None:
        """Weights per scale of the served weights: the checkpoint's
        (`ModelSpec.weight_group_size`) when they are served in the format the checkpoint
        ships (`ModelSpec.checkpoint_precision`), else None (the format's default,
        `hwtune.cost.quantized_gemm.INT4_GROUP_SIZE` / `FP4_GROUP_SIZE`): gpt-oss's MXFP4 block
        of 32 says nothing about the groups of an int4 quantization of it."""
        m = self.model
        return m.weight_group_size if self.weight_dtype == m.checkpoint_precision else None

    @property
    def effective_device(self) -> Device:
        """The catalog device (tier 1) or the device with a profile's measurements (tier 2)."""
        return self.profile.apply_device(self.device) if self.profile else self.device

    @property
    def iteration_overhead_s(self) -> float:
        p = self.profile
        if p is not None and p.host_overhead_per_iteration_s is not None:
            return p.host_overhead_per_iteration_s
        return self.host_overhead_s

    @property
    def sequence_overhead_s(self) -> float:
        p = self.profile
        if p is not None and p.host_overhead_per_sequence_s is not None:
            return p.host_overhead_per_sequence_s
        return self.host_overhead_per_seq_s

    def cluster(self) -> Cluster:
        """The GPUs of this replica as a cluster (catalog system preset for the network)."""
        cl = make_cluster(self.effective_device, self.gpus, nic_gbps=self.nic_gbps)
        return self.profile.apply_cluster(cl) if self.profile else cl

    @property
    def tokens_per_step(self) -> float:
        """Expected tokens a decoding sequence gains per step (1 without speculative decoding)."""
        return expected_tokens_per_step(self.spec_tokens, self.spec_acceptance)

    @property
    def decode_queries(self) -> int:
        """Query rows a decoding sequence puts through the model per step: its last token and
        the drafts to verify."""
        return 1 + self.spec_tokens

    def token_budget(self) -> int:
        """Tokens one step may process: Sarathi's chunk size, or max_num_batched_tokens."""
        if self.scheduler == "sarathi":
            return min(self.chunk_size, self.max_num_batched_tokens)
        return self.max_num_batched_tokens

    def with_(self, **kw: object) -> ReplicaConfig:
        return replace(self, **kw)


@dataclass(frozen=True)
class Deployment:
    """Replicas behind a router; with ``prefill`` set, a disaggregated deployment whose
    ``prefill`` pool runs prompts and hands the KV cache to the ``replica`` (decode) pool."""

    replica: ReplicaConfig
    replicas: int = 1
    router: str = "round-robin"
    prefill: ReplicaConfig | None = None
    prefill_replicas: int = 1

    def __post_init__(self) -> None:
        if self.router not in ROUTERS:
            raise HwtuneInputError("router", self.router, "one of " + ", ".join(ROUTERS))
        if self.replicas < 1:
            raise HwtuneInputError("replicas", self.replicas, "a positive integer")
        if self.prefill is not None and self.prefill_replicas < 1:
            raise HwtuneInputError("prefill_replicas", self.prefill_replicas, "a positive integer")
        if self.gpus > MAX_GPUS:  # each replica is simulated: 1e20 replicas never finished
            raise HwtuneInputError("replicas", self.replicas, f"a deployment of at most "
                                   f"{MAX_GPUS:,} GPUs (this one has {self.gpus:,})")  # fmt: skip

    @property
    def gpus(self) -> int:
        n = self.replica.gpus * self.replicas
        if self.prefill is not None:
            n += self.prefill.gpus * self.prefill_replicas
        return n
