"""Time of one engine step (iteration) of a replica: a batch of prefill chunks and decode tokens.

A step runs every layer once over all scheduled tokens (Yu et al. OSDI'22 "Orca", §3.2 selective
batching: token-wise ops on the concatenated tokens, attention per sequence). Its time is

  sum over layer kinds (n_layers x [projection/FFN GEMMs at T tokens + norms + collectives
                                    + prefill attention over the chunks + decode attention over
                                    the cached contexts])
  + embedding + LM head and sampling on the sampled rows + pipeline hand-offs + host overhead.

On an engine whose prompt-carrying steps run without CUDA graphs (``ReplicaConfig.eager_prefill``:
TensorRT-LLM's PyTorch backend, SGLang) such a step lasts at least the host's launch time of its
kernels, `kernels_per_forward` x `hwtune.serve.config.HOST_PER_KERNEL_S` (the GPU runs behind
the host: max(GPU forward, launches)); decode steps replay CUDA graphs and keep the GPU time.

Token-wise costs depend only on T (and the MoE routing it implies), so they are computed once per
T on a grid and interpolated (tile quantization makes them step-like; the grid is exact up to 256
tokens, then 16- and 64-token steps). Attention costs are linear in the batch's pair and context
sums and are evaluated per step from `hwtune.cost.kv_cache`. GEMMs, memory ops and collectives
are `hwtune.cost` functions; the ops come from `hwtune.model.lowering` (attention projections,
dense FFN, norms), except the inference-specific expert layout below.

MoE at inference (vLLM/SGLang fused MoE; DeepSeek-V3 report §3.4): each of the E/ep local
experts is sharded over moe_tp GPUs and processes the tokens routed to it. With T tokens and
top-k of E uniform routing, E * (1 - (1 - k/E)^T) distinct experts are hit (the expected count
of occupied bins), each with T*k/that rows, and only their weights are read (decode-size MoE is
bound by expert weight reads). Tokens cross GPUs by all-to-all only when attention is data
parallel (each rank holds its own requests); under attention TP every rank already holds every
token, so expert parallelism needs no dispatch and its partial sums are all-reduced like
tensor-parallel experts (TensorRT-LLM fused MoE: all-to-all requires ``enable_attention_dp``).

Full-precision serving (``IterationModel(cfg, dtype="fp32")``, e.g. a model served in fp32 on a
CPU, where `ReplicaConfig`'s precisions are 16 bits and below): every GEMM, activation, KV entry
and attention kernel is costed in ``dtype`` through the same `hwtune.cost` functions, so a Device
with a measured profile (`hwtune bench`) is used at its measured ``dtype`` curves (tier 2).
Decode attention in that mode is the roofline of `hwtune.cost.kv_cache.decode_attention_time` at
``dtype``'s peak (the 16-bit path does not read the profile's decode curves either).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hwtune.cost.collectives import (
    all_gather_time,
    all_to_all_time,
    reduce_scatter_time,
    send_recv_time,
)
from hwtune.cost.compute import (
    KERNEL_OVERHEAD_S,
    attention_time,
    dtype_bytes,
    gemm_time,
    memory_time,
    stored_bytes,
)
from hwtune.cost.inference_collectives import serving_all_reduce_time, trtllm_norm_in_all_reduce
from hwtune.cost.kv_cache import (
    AttentionShape,
    attention_shape,
    decode_attention_time,
    prefill_attention_time,
)
from hwtune.cost.quantized_gemm import serving_gemm_time
from hwtune.model.lowering import Shard, add_norm_ops, attention_ops, ffn_ops, layer_classes
from hwtune.serve.config import HOST_PER_KERNEL_S, ReplicaConfig
from hwtune.serve.profile import elementwise_fused

ACT_BYTES = 2.0  # activations and collectives in 16 bits

MOE_LAUNCHES = 6
"""Kernels an MoE layer's routed experts launch as `IterationModel._moe` prices them: the
router GEMM, the two grouped expert GEMMs, the activation, permute and unpermute."""

TRTLLM_AR_NORM_FUSION: dict[str, int] = {"llama": 4096, "qwen3_moe": 0, "deepseek_v3": 0,
                                         "gpt_oss": 0}  # fmt: skip
"""Model families (Hugging Face ``model_type``) whose TensorRT-LLM decoder layers request the
all-reduce + residual + RMSNorm fusion, with the hidden size they need to exceed:
``_torch/models/modeling_llama.py`` only above 4096 ("Disable fusion for small models due to
accuracy issues"), ``modeling_qwen3_moe.py``, ``modeling_deepseekv3.py`` (its MoE layers) and
``modeling_gpt_oss.py`` at any width. Other families (Mixtral, dense Qwen3, Qwen3-Next) do not
request it."""

TRITON_MOE_LAUNCHES: dict[str, int] = {"ep": 14, "tp": 11}
"""Kernels one MoE layer launches in a forward of TensorRT-LLM's TRITON MoE backend
(``weight_only_kernel`` ``triton-mxfp4``: gpt-oss on Hopper), by whether its experts are
expert-parallel (``ep``) or tensor-parallel (``tp``), read from its code (``_torch/modules/
fused_moe/fused_moe_triton.py`` on the triton_kernels v3.5.1 it vendors): the router GEMM,
``topk``, the rank's expert remap, clear and compaction (expert parallelism only), the
expert histogram, the routing memset and index computation, the input padding to a multiple
of 128 (a fill and a copy), the two ``matmul_ogs`` (gather, bias and SwiGLU in the first's
epilogue), the top-k combine (``_reduce_grouped``), and the copy that makes the padded output
contiguous for the all-reduce. The Triton build of the 1.0-1.1 releases (commit f3067cd) fused
the scatter into the second GEMM with more launches (about 2 more); not confirmed, so the
vendored code's count is taken. Beyond `MOE_LAUNCHES` each costs the host its launch in an
eager forward and the GPU at least `hwtune.cost.compute.KERNEL_OVERHEAD_S` in every step
(`IterationModel._moe`)."""


@dataclass(slots=True)
class StepShape:
    """What one step processes (sums over the batch, before attention-DP splitting).

    ``tokens``: new tokens in all; ``sampled``: rows that produce a token (decodes and prompts
    whose last chunk runs); ``pf_pairs``: sum of q*(c + q/2) over prefill chunks (q new tokens
    after c cached); ``pf_kv``: sum of (c + q); ``pf_tokens``: sum of q; ``dec_n``: decode
    sequences; ``dec_ctx``: their cached tokens in all; ``*_w``: the same capped at the model's
    attention window (sliding/chunked layers), equal to the uncapped sums for models without;
    ``draft_rows``: sequences that sample a token this step (decodes and prompts whose last
    chunk runs), the rows the draft module extends under speculative decoding.
    ``pf_max_q``, ``pf_max_pairs(_w)``, ``pf_max_kv(_w)``: the largest prefill chunk's new
    tokens, pairs and keys. Under attention data parallelism a chunk runs whole on one rank,
    so the busiest rank holds at least it (`IterationModel.rank_tokens`).
    """

    tokens: int = 0
    seqs: int = 0
    sampled: int = 0
    pf_pairs: float = 0.0
    pf_kv: float = 0.0
    pf_tokens: int = 0
    pf_pairs_w: float = 0.0
    pf_kv_w: float = 0.0
    dec_n: int = 0
    dec_ctx: float = 0.0
    dec_ctx_w: float = 0.0
    draft_rows: int = 0
    pf_max_q: int = 0
    pf_max_pairs: float = 0.0
    pf_max_pairs_w: float = 0.0
    pf_max_kv: float = 0.0
    pf_max_kv_w: float = 0.0


BREAKDOWN_KEYS = ("gemm", "memory", "communication", "attention_prefill", "attention_decode",
                  "lm_head", "draft", "pipeline", "host")  # fmt: skip


def _grid_points(t: int) -> tuple[int, int]:
    """The grid points around ``t``: exact below 256, 16-token steps to 2048, then 64."""
    if t <= 256:
        return t, t
    step = 16 if t <= 2048 else 64
    lo = (t // step) * step
    return lo, lo + step


def expected_max_binomial(n: int, p: float, copies: int) -> float:
    """E[max of ``copies`` independent Binomial(n, p) draws]: the tail sum
    sum_{x=0}^{n-1} (1 - F(x)^copies) of the maximum, whose CDF is F^copies (order statistics of
    i.i.d. draws). ``copies`` 1 gives the mean n p."""
    if copies < 1 or n < 0 or not 0.0 <= p <= 1.0:
        raise ValueError(f"expected n >= 0, 0 <= p <= 1, copies >= 1; got {n}, {p}, {copies}")
    if copies == 1 or p == 0.0 or p == 1.0:
        return n * p
    lp, lq, lc = math.log(p), math.log1p(-p), math.lgamma(n + 1)
    cdf = total = 0.0
    for x in range(n):
        cdf += math.exp(lc - math.lgamma(x + 1) - math.lgamma(n - x + 1) + x * lp + (n - x) * lq)
        total += 1.0 - min(1.0, cdf) ** copies
    return total


def expert_load(tokens: int, experts: int, top_k: int, ep: int) -> tuple[int, int]:
    """(experts on the busiest EP rank, rows per expert) for ``tokens`` tokens routed uniformly.
    Each expert is hit with probability p = 1 - (1 - k/E)^t (a token misses it with probability
    1 - k/E), so E p distinct experts in expectation, t k / (E p) rows each. A step lasts as long
    as its slowest rank (REFERENCES.md, "MoE load imbalance": balanced random routing leaves the
    busiest rank above the mean), so the rank count is the expected maximum over the ``ep``
    ranks of the experts hit among each rank's E/ep (`expected_max_binomial`, hits taken as
    independent; a seeded simulation of top-k routing agrees within 2%,
    tests/serve/test_moe_busiest_rank.py, as do NVIDIA's TensorRT-LLM timings of DeepSeek-V3's
    and Qwen3-235B's layers, VALIDATION.md): at one decode token of DeepSeek-V3 on EP 8, 2.5
    experts on the busiest rank where the mean is 1; all E/ep once every expert is hit. ``ep``
    1 is the mean, E p. Rounded up with a 1e-9 tolerance: at large t the expected hits fall short
    by rounding alone, and one row more would cost a whole GEMM tile."""
    hit_p = 1.0 - (1.0 - top_k / experts) ** tokens
    hit = experts * hit_p
    per_rank = -(-experts // ep)
    busiest = hit if ep == 1 else expected_max_binomial(per_rank, hit_p, ep)
    local = max(1, math.ceil(busiest - 1e-9))
    rows = max(1, math.ceil(tokens * top_k / hit - 1e-9))
    return local, rows


def permute_bytes(tokens: int, top_k: int, d_model: int, act_bytes: float, ep: int) -> float:
    """Bytes one GPU moves permuting tokens to its experts and back (read and write of each of
    its (token, expert) slots, twice): all ``tokens`` x ``top_k`` slots under tensor-parallel
    experts (``ep`` 1, every rank runs a slice of every expert), a 1/``ep`` share under expert
    parallelism."""
    return 4.0 * act_bytes * tokens * top_k * d_model / ep


class IterationModel:
    """Step times of one replica (tier 1: catalog device; tier 2: with a calibration profile)."""

    def __init__(self, cfg: ReplicaConfig, dtype: str | None = None) -> None:
        """``dtype``: cost everything in this format instead of the 16-bit serving defaults
        (see the module docstring); None: weights in ``cfg.weight_dtype``, KV in ``cfg.kv_dtype``,
        activations and collectives in 16 bits."""
        self.cfg = cfg
        self.dtype = dtype
        self.act = dtype_bytes(dtype) if dtype else ACT_BYTES
        self.dev = cfg.effective_device
        self.math = dtype or self.dev.sixteen_bit_dtype  # fp16 on Volta
        self.kvd = dtype or cfg.kv_dtype
        self.spec = cfg.model
        self.cluster = cfg.cluster()
        self.window = self.spec.sliding_window or self.spec.attention_chunk_size
        self.classes = [
            (ltype, moe, len(idx), attention_shape(self.spec, ltype, cfg.tp))
            for (ltype, moe), idx in layer_classes(self.spec).items()
        ]
        self._lin: dict[int, tuple[float, float, float]] = {}
        self._lin_exact: dict[int, tuple[float, float, float]] = {}  # off the grid (`linear`)
        self._head: dict[int, float] = {}
        # TensorRT-LLM's decoder layers of the families in `TRTLLM_AR_NORM_FUSION` ask their
        # tensor-parallel all-reduces to run the residual add and RMSNorm when attention is
        # not data parallel, inside one NVLink domain (across nodes the all-reduce is NCCL's)
        # and, as modelled, without pipeline parallelism (Qwen3-MoE drops its post-MoE fusion
        # there, Llama4 both); whether the kernel honours it depends on the step's tokens
        # (`_norms_in_all_reduce`)
        self.ar_norm_fusion = (
            cfg.all_reduce_kernel == "trtllm"
            and cfg.tp > 1
            and cfg.dp_attention == 1
            and cfg.pp == 1
            and self.cluster.span(cfg.tp, 1).domains == 1
            and self.spec.d_model > TRTLLM_AR_NORM_FUSION.get(self.spec.family, math.inf)
        )
        self.host = cfg.iteration_overhead_s
        self.host_seq = cfg.sequence_overhead_s
        per = HOST_PER_KERNEL_S if cfg.eager_prefill else 0.0
        self.launch_floor = self.kernels_per_forward() * per
        self._launch_floor_fused = self.kernels_per_forward(norms_in_all_reduce=True) * per

    def _norms_in_all_reduce(self, ta: int) -> bool:
        """Whether a step whose busiest rank holds ``ta`` tokens runs its norms inside the
        all-reduces (`hwtune.model.lowering.add_norm_ops`; TensorRT-LLM's strategy choice,
        `hwtune.cost.inference_collectives.trtllm_norm_in_all_reduce`)."""
        return self.ar_norm_fusion and trtllm_norm_in_all_reduce(
            ta, self.spec.d_model, self.cfg.tp, self.act
        )

    def _moe_launches(self) -> int:
        """Kernels of one MoE layer's routed experts (`MOE_LAUNCHES`, `TRITON_MOE_LAUNCHES`)."""
        if self.cfg.weight_only_kernel == "triton-mxfp4":
            return TRITON_MOE_LAUNCHES["ep" if self.cfg.ep > 1 else "tp"]
        return MOE_LAUNCHES

    def kernels_per_forward(self, norms_in_all_reduce: bool = False) -> int:
        """Kernels one forward launches across all layers, as this model prices them: each
        weight GEMM and memory op (with its kernel count), the attention kernel, the TP
        collectives, and per MoE layer the router, the two grouped expert GEMMs, the expert
        activation, permute and unpermute (TensorRT-LLM's TRITON MoE: its own launches,
        `TRITON_MOE_LAUNCHES`), and the shared expert's GEMMs and activation;
        ``norms_in_all_reduce``: the norms ride in the all-reduces (no kernels of their own)."""
        cfg, spec = self.cfg, self.spec
        fuse = norms_in_all_reduce and self.ar_norm_fusion
        sh = Shard(tokens=1, seq=1, tp=cfg.tp, act_bytes=self.act,
                   fused=elementwise_fused(cfg.profile))  # fmt: skip
        total = 0
        for ltype, moe, n, _shape in self.classes:
            ops = list(attention_ops(spec, ltype, sh))
            ops += add_norm_ops(spec, sh, fuse)
            if not moe:
                ops += ffn_ops(spec, False, sh)
            k = sum(o.kernels if o.kind == "memory" else 1 for o in ops)
            if moe and spec.moe is not None:
                k += self._moe_launches() + (3 if spec.moe.shared_width else 0)
            if cfg.tp > 1 or cfg.dp_attention > 1:
                k += 2  # the layer's two collectives (attention output, FFN/MoE output)
            total += n * k
        return total

    # --- token-wise part -----------------------------------------------------------------
    def _linear_exact(self, t: int, ta: int | None = None) -> tuple[float, float, float]:
        """(GEMM, memory-op, collective) seconds of all layers for a step of ``t`` tokens, of
        which the busiest attention-DP rank holds ``ta`` (default: an even share)."""
        cfg, spec, dev = self.cfg, self.spec, self.dev
        if ta is None:
            ta = self.even_share(t)
        sh = Shard(tokens=ta, seq=ta, tp=cfg.tp, act_bytes=self.act,
                   fused=elementwise_fused(cfg.profile))  # fmt: skip
        g_tot = m_tot = c_tot = 0.0
        tp_span = self.cluster.span(cfg.tp, 1)
        hbytes = self.act * spec.d_model
        for ltype, moe, n, _shape in self.classes:
            ops = [o for o in attention_ops(spec, ltype, sh) if o.kind != "attention"]
            ops += add_norm_ops(spec, sh, self._norms_in_all_reduce(ta))
            if not moe:
                ops += ffn_ops(spec, False, sh)
            g = sum(self._gemm(o.m, o.n, o.k, o.batch) for o in ops if o.kind == "gemm")
            m = sum(memory_time(o.bytes, dev, o.kernels) for o in ops if o.kind == "memory")
            # the attention block's all-reduce; a dense FFN block ends with a second one
            ar = (
                serving_all_reduce_time(ta * hbytes, tp_span, self.cluster, cfg.all_reduce_kernel)
                if cfg.tp > 1
                else 0.0
            )
            c = ar
            if moe:
                eg, em, ec = self._moe(t, ta)
                g, m, c = g + eg, m + em, c + ec
            else:
                c += ar
            g_tot += n * g
            m_tot += n * m
            c_tot += n * c
        return g_tot, m_tot, c_tot

    def _gemm(self, m: int, n: int, k: int, batch: int = 1, expert: bool = False) -> float:
        """A weight GEMM: in ``dtype`` when set, else with weights in ``cfg.weight_dtype``; a
        non-``expert`` GEMM of a checkpoint that quantizes only its experts
        (`ModelSpec.quantized_weights`) runs in bf16."""
        if self.dtype:
            return gemm_time(m, n, k, self.dev, self.dtype, batch)
        if not expert and self.spec.quantized_weights == "experts":
            return gemm_time(m, n, k, self.dev, self.dev.sixteen_bit_dtype, batch)
        return serving_gemm_time(m, n, k, self.dev, self.cfg.weight_dtype, batch,
                                 self.cfg.weight_only_kernel,
                                 self.cfg.weight_group_size)  # fmt: skip

    def _moe(self, t: int, ta: int) -> tuple[float, float, float]:
        """(GEMM, memory, collective) seconds of one MoE layer for ``t`` tokens of the stage."""
        cfg, spec, dev = self.cfg, self.spec, self.dev
        moe = spec.moe
        assert moe is not None
        E, k, h, fe = moe.n_routed_experts, moe.top_k, spec.d_model, moe.expert_ffn_hidden
        up = 2 if spec.gated else 1
        local, rows = expert_load(t, E, k, cfg.ep)
        width = max(1, fe // cfg.moe_tp)
        e = self.act
        g = gemm_time(ta, E, h, dev, self.math)  # router
        g += self._gemm(rows, up * width, h, local, expert=True)
        g += self._gemm(rows, h, width, local, expert=True)
        m = memory_time(e * rows * local * width * (up + 1), dev)  # activation
        # permute/unpermute: read and write every (token, expert) slot of the rank's experts, all
        # t k of them under tensor-parallel experts (ep 1), a 1/ep share under expert parallelism
        m += memory_time(permute_bytes(t, k, h, e, cfg.ep), dev, kernels=2)
        # an engine's MoE that launches more small kernels than these six (routing, index
        # computation, padding, combine): each at least a kernel's fixed cost
        m += (self._moe_launches() - MOE_LAUNCHES) * KERNEL_OVERHEAD_S
        if moe.shared_width:
            sw = max(1, moe.shared_width // cfg.tp)
            g += self._gemm(ta, up * sw, h)
            g += self._gemm(ta, h, sw)
            m += memory_time(e * ta * sw * (up + 1), dev)
        c = 0.0
        hbytes = e * h
        stage = self.cluster.span(cfg.stage_gpus, 1)
        if cfg.ep > 1 and cfg.dp_attention > 1:
            # dispatch and combine: each GPU sends the k copies of its token share
            # (REFERENCES.md, Collectives: ~b*s*k*h bytes per rank per all-to-all)
            per_rank = ta / cfg.tp * k * hbytes
            c += 2.0 * all_to_all_time(per_rank, stage, self.cluster)
        elif cfg.dp_attention > 1:
            # gather the stage's tokens for the tensor-parallel experts, scatter the sums back
            c += all_gather_time(t * hbytes, stage, self.cluster)
            c += reduce_scatter_time(t * hbytes, stage, self.cluster)
        elif cfg.tp > 1:
            # tensor-parallel experts, or expert-parallel ones under attention TP: every rank holds
            # all the stage's tokens, runs its expert shard on them and the partial sums are
            # all-reduced (TensorRT-LLM's fused MoE uses its all-to-all only with attention DP,
            # `enable_alltoall`; otherwise `reducescatter_or_allreduce`)
            c += serving_all_reduce_time(
                ta * hbytes, self.cluster.span(cfg.tp, 1), self.cluster, cfg.all_reduce_kernel
            )
        return g, m, c

    def even_share(self, t: int) -> int:
        """One attention-DP rank's share of ``t`` tokens spread evenly (at least 1)."""
        return max(1, -(-t // self.cfg.dp_attention))

    def rank_tokens(self, s: StepShape) -> int:
        """Tokens on the busiest attention-DP rank: an even share of the step's tokens, or the
        largest prefill chunk when it is bigger (a prompt is not split across ranks: TensorRT-LLM
        and SGLang assign each request to one attention-DP rank, vLLM to one data-parallel
        engine). The lower bound on the busiest rank of any assignment; equal to the even share
        without attention DP."""
        even = self.even_share(s.tokens)
        return max(even, s.pf_max_q)

    def linear(self, t: int, ta: int | None = None) -> tuple[float, float, float]:
        """Token-wise seconds for ``t`` tokens, from the grid (interpolated between points);
        ``ta`` the busiest attention-DP rank's tokens when above an even share (then both are
        rounded up to their grid points, no interpolation)."""
        d = self.cfg.dp_attention
        if ta is not None and d > 1 and ta > -(-t // d):
            tk, ak = _grid_points(t)[1], _grid_points(ta)[1]
            key = -(tk * 1_000_003 + ak)  # negative: apart from the even-share grid
            v = self._lin.get(key)
            if v is None:
                v = self._lin[key] = self._linear_exact(tk, min(ak, tk))
            return v
        lo, hi = _grid_points(t)
        if hi != lo and self._norms_in_all_reduce(lo) != self._norms_in_all_reduce(hi):
            # TensorRT-LLM's fusion flips inside the interval: no interpolation across it
            v = self._lin_exact.get(t)
            if v is None:
                v = self._lin_exact[t] = self._linear_exact(t)
            return v
        a = self._lin.get(lo)
        if a is None:
            a = self._lin[lo] = self._linear_exact(lo)
        if hi == lo:
            return a
        b = self._lin.get(hi)
        if b is None:
            b = self._lin[hi] = self._linear_exact(hi)
        f = (t - lo) / (hi - lo)
        return (a[0] + f * (b[0] - a[0]), a[1] + f * (b[1] - a[1]), a[2] + f * (b[2] - a[2]))

    def head(self, rows: int, tokens: int, ta: int | None = None) -> float:
        """Embedding of ``tokens`` tokens plus LM head and sampling of ``rows`` rows (the LM head
        runs only on the rows that sample; vocabulary-parallel over tp, 16-bit); ``ta`` the
        busiest attention-DP rank's tokens (default: an even share)."""
        cfg = self.cfg
        if ta is None:
            ta = self.even_share(tokens)
        key = (rows * 1_000_003 + tokens) * 1_000_003 + ta
        v = self._head.get(key)
        if v is None:
            spec, dev = self.spec, self.dev
            r = self.even_share(rows) if rows else 0
            vocab = -(-spec.vocab // cfg.tp)
            v = memory_time(2 * self.act * ta * spec.d_model, dev)
            if r:
                v += gemm_time(r, vocab, spec.d_model, dev, self.math)
                v += memory_time(3 * 4.0 * r * vocab, dev, kernels=3)  # softmax/top-p in fp32
            if len(self._head) < 200_000:
                self._head[key] = v
        return v

    # --- one step ----------------------------------------------------------------------------
    def step_time(self, s: StepShape, lead: float = 0.0) -> float:
        """Seconds of one step (the latency of its batch through all pipeline stages). A step
        with prompt tokens on an eager-prefill engine lasts at least ``launch_floor``, less
        ``lead``: how long before the GPU reached the step the host began launching it (an
        overlap scheduler launches step k+1 while step k runs; `hwtune.serve.simulator`)."""
        g, m, c = self.linear(s.tokens, self.rank_tokens(s))
        layers = g + m + c + self._attention(s)[0]
        t = layers + self._rest(s) + self._draft(s, layers)
        return t + self._launch_wait(s, t, lead)

    def launch_time(self, s: StepShape) -> float:
        """Host seconds to launch the step's kernels: ``launch_floor`` for a step with prompt
        tokens on an eager-prefill engine (fewer kernels when its norms ride in the
        all-reduces), 0 for one replayed from a CUDA graph."""
        if not s.pf_tokens:
            return 0.0
        if self._norms_in_all_reduce(self.rank_tokens(s)):
            return self._launch_floor_fused
        return self.launch_floor

    def _draft(self, s: StepShape, layers: float) -> float:
        """Seconds of the draft module in a step under speculative decoding (0 without): one
        decoder layer of the model's shape (DeepSeek MTP module, EAGLE head; TensorRT-LLM's MTP
        Eagle path reuses one MTP layer k times) run first over all the step's tokens (the
        accepted tokens of each decode and the prompt tokens, whose keys it caches), then k - 1
        times over one row per sampling sequence, each pass followed by the shared LM head on
        those rows. A layer is priced as the model's average layer at the same token count
        (``layers``: the step's seconds in all the model's layers)."""
        k = self.cfg.spec_tokens
        if not k or not s.tokens:
            return 0.0
        n_layers = self.spec.n_layers
        t = layers / n_layers
        rows = s.draft_rows
        if rows:
            gr, mr, cr = self.linear(rows)
            one = StepShape(tokens=rows, seqs=rows, sampled=rows, dec_n=s.dec_n,
                            dec_ctx=s.dec_ctx, dec_ctx_w=s.dec_ctx_w)  # fmt: skip
            att = self._attention(one, queries=1)[2] if s.dec_n else 0.0
            t += (k - 1) * (gr + mr + cr + att) / n_layers
            t += k * self.head(rows, rows)
        return t

    def _launch_wait(self, s: StepShape, t: float, lead: float = 0.0) -> float:
        """Seconds the GPU waits on the host's kernel launches (eager prefill steps only), the
        launches having begun ``lead`` seconds before the GPU reached the step."""
        floor = self.launch_time(s)
        if not floor:
            return 0.0
        return max(0.0, floor - lead - (t - self.host - self.host_seq * s.seqs))

    def _rest(self, s: StepShape) -> float:
        cfg = self.cfg
        ta = self.rank_tokens(s)
        t = self.head(s.sampled, s.tokens, ta)
        if cfg.pp > 1:
            cross = cfg.stage_gpus >= self.cluster.domain
            t += (cfg.pp - 1) * send_recv_time(self.act * ta * self.spec.d_model, cross,
                                               self.cluster)  # fmt: skip
        return t + self.host + self.host_seq * s.seqs

    def _attention(self, s: StepShape, queries: int | None = None) -> tuple[float, float, float]:
        """(total, prefill, decode) attention seconds over all layers; each decoding sequence
        puts ``queries`` rows through it (default: the replica's, `ReplicaConfig.decode_queries`)."""
        cfg, dev, kvd = self.cfg, self.dev, self.kvd
        q = cfg.decode_queries if queries is None else queries
        d = cfg.dp_attention
        pf = dc = 0.0
        for _lt, _moe, n, shape in self.classes:
            win = shape.window is not None
            if s.pf_tokens:
                # the busiest rank: an even share, or at least the largest chunk (one rank's)
                pairs = max((s.pf_pairs_w if win else s.pf_pairs) / d,
                            s.pf_max_pairs_w if win else s.pf_max_pairs)  # fmt: skip
                kv = max((s.pf_kv_w if win else s.pf_kv) / d,
                         s.pf_max_kv_w if win else s.pf_max_kv)  # fmt: skip
                new = max(s.pf_tokens / d, s.pf_max_q)
                if self.dtype and shape.kind != "linear":
                    pf += n * self._prefill_attention(shape, pairs, kv, new)
                else:
                    pf += n * prefill_attention_time(shape, pairs, kv, new, dev, kvd)
            if s.dec_n:
                ctx = (s.dec_ctx_w if win else s.dec_ctx) / d
                dc += n * decode_attention_time(shape, -(-s.dec_n // d), ctx, dev, kvd, q,
                                                self.math)  # fmt: skip
        return pf + dc, pf, dc

    def _prefill_attention(
        self, shape: AttentionShape, pairs: float, kv: float, new: float
    ) -> float:
        """`kv_cache.prefill_attention_time` with K/V, Q and O in ``dtype``, at its rate."""
        if pairs <= 0:
            return 0.0
        fpk = shape.flops_per_key
        io = kv * shape.kv_elems_per_token * stored_bytes(self.kvd) + self.act * new * fpk / 2.0
        return attention_time(pairs * fpk, io, self.dev, self.math, backward=False)

    def breakdown(self, s: StepShape) -> dict[str, float]:
        """The step's seconds by kind (for traces); sums to `step_time`."""
        ta = self.rank_tokens(s)
        g, m, c = self.linear(s.tokens, ta)
        _, pf, dc = self._attention(s)
        head = self.head(s.sampled, s.tokens, ta)
        host = self.host + self.host_seq * s.seqs
        pipe = self._rest(s) - head - host
        draft = self._draft(s, g + m + c + pf + dc)
        host += self._launch_wait(s, g + m + c + pf + dc + self._rest(s) + draft)
        return {"gemm": g, "memory": m, "communication": c, "attention_prefill": pf,
                "attention_decode": dc, "lm_head": head, "draft": draft, "pipeline": pipe,
                "host": host}  # fmt: skip
