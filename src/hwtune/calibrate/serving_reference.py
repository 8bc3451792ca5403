"""A reference for the serving simulator: prefill and decode iteration times of a Hugging Face
`transformers` Llama-architecture model with random weights, measured on this machine.

The model is `transformers.LlamaForCausalLM` built from a `LlamaConfig` (no download): RMSNorm
pre-norm blocks, rotary positions, grouped-query attention through torch's
`scaled_dot_product_attention`, a SwiGLU MLP and an untied LM head (Touvron et al. 2023,
"Llama 2", §2.1). It runs in fp32 under ``torch.inference_mode``, on one torch thread (as
`hwtune bench --threads 1` measures the device), so the process CPU time is the time the step
would take alone on a shared machine (`hwtune.calibrate.harness.resolve_clock`). On a GPU
(``device="cuda"``, `LLAMA31_8B`: Llama-3.1-8B's shapes in bf16) steps are timed by wall clock
with the device synchronized around each, and also by their CUDA kernel time (the PyTorch
profiler), the time a CUDA-graph engine's step takes without host work; decode there attends as
a paged engine does (`register_engine_attention`).

What is timed is what one engine step of the serving simulator (`hwtune.serve.iteration`) runs:

- prefill: ``b`` prompts of ``s`` tokens in one forward with an empty cache, logits for the last
  position only (``logits_to_keep=1``; serving engines run the LM head on sampled rows only);
- decode: one new token for each of ``b`` sequences whose KV cache holds ``c`` tokens. The cache
  is a `transformers.StaticCache` of exactly ``c + 1`` positions: the step writes its token's
  keys and values in place (``index_copy_``) and attends over the ``c + 1`` cached keys, as a
  paged serving engine does (vLLM's ``reshape_and_cache`` writes one slot per token; Kwon et al.,
  SOSP'23, §4). The default `DynamicCache` instead concatenates (``torch.cat``) each layer's
  whole K and V with the new token every step, a copy of the full cache that no serving engine
  makes (7.6 of the 26.3 ms of a batch-8, 1024-token decode step on the CPU of VALIDATION.md)
  and that the simulator rightly does not price. After each timed step the cache's length is
  set back to ``c``, so every step sees the same context.

The process keeps the memory it frees (`keep_freed_memory`), as a serving engine does: glibc's
default ``malloc`` hands large freed blocks back to the kernel, so each eager op's fresh output
tensor is a fresh mapping whose pages fault in and are zeroed on first touch (22,500 minor
faults and ~50 ms of system time in a batch-4 x 256 prefill on the CPU of VALIDATION.md: 285 ms
with them, 240 ms without). Engines do not pay that: vLLM preallocates on GPUs, and its CPU
backend's documentation says "We highly recommend to use TCMalloc for high performance memory
allocation and better cache locality" (vLLM docs, CPU installation, "Performance tips"), as
``torch.backends.xeon.run_cpu`` preloads jemalloc/TCMalloc; here ``mallopt`` raises glibc's
mmap and trim thresholds to 1 GiB, the in-process equivalent.

Each shape gets ``warmup`` untimed runs and the median of ``reps`` timed runs. Run it as
``python -m hwtune.calibrate.serving_reference --batch 4 --context 512 --json``;
`model_spec` gives the `ModelSpec` the simulator uses for the same model.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import inspect
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch

from hwtune.calibrate.harness import resolve_clock
from hwtune.hardware.device import Device
from hwtune.model.spec import ModelSpec
from hwtune.serve.config import ReplicaConfig
from hwtune.serve.iteration import IterationModel, StepShape
from hwtune.serve.profile import CalibrationProfile


def cache_argument(model: torch.nn.Module) -> str:
    """The name of ``model.forward``'s KV-cache argument: ``cache`` in newer transformers
    (``past_key_values`` is deprecated there), ``past_key_values`` before."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


@dataclass(frozen=True)
class LlamaRefConfig:
    """Shapes of the reference Llama model (Hugging Face ``LlamaConfig`` fields)."""

    hidden: int = 512
    layers: int = 4
    heads: int = 8
    kv_heads: int = 2
    intermediate: int = 1536
    vocab: int = 8192
    max_position: int = 4096
    seed: int = 0
    dtype: str = "fp32"  # fp32 (the CPU reference) or bf16 (a GPU)
    engine_attention: bool = False  # decode attends without a mask, GQA in the kernel

    def hf_config(self) -> Any:
        from transformers import LlamaConfig

        attn = register_engine_attention() if self.engine_attention else "sdpa"
        return LlamaConfig(
            hidden_size=self.hidden, num_hidden_layers=self.layers,
            num_attention_heads=self.heads, num_key_value_heads=self.kv_heads,
            intermediate_size=self.intermediate, vocab_size=self.vocab,
            max_position_embeddings=self.max_position, tie_word_embeddings=False,
            attn_implementation=attn, torch_dtype=TORCH_DTYPES[self.dtype][1],
        )  # fmt: skip


ENGINE_ATTENTION = "hwtune_engine_sdpa"


def register_engine_attention() -> str:
    """Register (once) and name a `transformers` attention function that runs a decode step's
    attention as a paged serving kernel does: the one new query over every cached key, no mask,
    the KV heads shared by their query heads inside the kernel (SDPA ``enable_gqa``).

    With a `StaticCache`, `transformers` builds an explicit mask for every decode step (it
    refuses SDPA's mask-free path for compileable caches at one query), and a masked SDPA call
    repeats each KV head for its query heads first (``repeat_kv``): a copy of the whole cache
    per layer and step, 4x the KV bytes for Llama-3.1-8B's 32/8 heads, which no paged kernel
    makes (vLLM's paged attention reads each KV block once per KV head; Kwon et al., SOSP'23,
    §4.1). The reference's cache holds exactly the context plus the new token, so the mask
    allows every key and dropping it changes nothing but the kernel (tested). Prefill (an
    empty cache, as many keys as queries) already takes SDPA's causal, mask-free path."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    def engine_sdpa(module: Any, query: Any, key: Any, value: Any, attention_mask: Any,
                    **kwargs: Any) -> Any:  # fmt: skip
        if query.shape[2] == 1:
            attention_mask = None
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)

    AttentionInterface.register(ENGINE_ATTENTION, engine_sdpa)
    AttentionMaskInterface.register(ENGINE_ATTENTION, sdpa_mask)
    return ENGINE_ATTENTION


TORCH_DTYPES: dict[str, tuple[torch.dtype, str]] = {
    "fp32": (torch.float32, "float32"),
    "bf16": (torch.bfloat16, "bfloat16"),
}

LLAMA31_8B = LlamaRefConfig(hidden=4096, layers=32, heads=32, kv_heads=8, intermediate=14336,
                            vocab=128256, max_position=16384, dtype="bf16",
                            engine_attention=True)  # fmt: skip
"""Llama-3.1-8B's shapes (its Hugging Face config.json: hidden 4096, 32 layers, 32 query and
8 KV heads, MLP 14336, vocabulary 128256, untied head), the GPU reference model."""


def model_spec(cfg: LlamaRefConfig) -> ModelSpec:
    """The `ModelSpec` of the reference model, read from its Hugging Face config."""
    from hwtune.model.hf_config import load_hf_config

    return load_hf_config(cfg.hf_config().to_dict(), name=f"ref-llama-L{cfg.layers}-h{cfg.hidden}")


def build_model(cfg: LlamaRefConfig, device: str = "cpu") -> torch.nn.Module:
    """``LlamaForCausalLM`` with random weights (seeded), in ``cfg.dtype``, eval mode, built
    directly on ``device`` (an 8B model is initialised on the GPU in a second, not on the
    host in minutes)."""
    from transformers import LlamaForCausalLM

    dt = TORCH_DTYPES[cfg.dtype][0]
    torch.manual_seed(cfg.seed)
    before = torch.get_default_dtype()
    torch.set_default_dtype(dt)
    try:
        with torch.device(device):
            model = LlamaForCausalLM(cfg.hf_config())
    finally:
        torch.set_default_dtype(before)
    return model.to(device=device, dtype=dt).eval()


@dataclass
class ServingMeasurement:
    """Measured seconds of one step shape; ``median_s`` by ``clock``."""

    phase: str  # prefill | decode
    batch: int
    tokens: int  # prompt length (prefill) or cached context (decode)
    clock: str
    median_s: float
    wall_median_s: float
    cpu_median_s: float
    reps_s: list[float] = field(default_factory=list)
    kernel_s: float | None = None  # GPU: the step's CUDA kernel time (profiler), no host time

    def to_dict(self) -> dict:
        return asdict(self)


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc <malloc.h> mallopt parameters
KEEP_BYTES = 2**30


def keep_freed_memory() -> bool:
    """Make this process's ``malloc`` keep freed memory for reuse (blocks up to 1 GiB from the
    heap, the heap never trimmed): glibc ``mallopt``. True when applied; False elsewhere (not
    glibc), where the allocator is left as it is."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        ok = libc.mallopt(M_TRIM_THRESHOLD, KEEP_BYTES) and libc.mallopt(M_MMAP_THRESHOLD,
                                                                           KEEP_BYTES)  # fmt: skip
    except (OSError, AttributeError):
        return False
    return bool(ok)


def step_shape(phase: str, batch: int, n: int) -> StepShape:
    """The simulator's `StepShape` of one measured step (as `serve.scheduler` builds it):
    ``batch`` whole prompts of ``n`` tokens, or ``batch`` decodes after ``n`` cached tokens."""
    if phase == "prefill":
        pairs = batch * n * (n / 2.0)
        return StepShape(tokens=batch * n, seqs=batch, sampled=batch, pf_pairs=pairs,
                         pf_kv=batch * n, pf_tokens=batch * n, pf_pairs_w=pairs,
                         pf_kv_w=batch * n)  # fmt: skip
    ctx = batch * (n + 1)  # the new token's key is read too (scheduler: ctx = computed + 1)
    return StepShape(tokens=batch, seqs=batch, sampled=batch, dec_n=batch, dec_ctx=ctx,
                     dec_ctx_w=ctx)  # fmt: skip


class ServingReference:
    """One model, timed at several step shapes (``threads`` torch threads; 1 by default).
    ``keep_memory``: `keep_freed_memory` first (process-wide; see the module docstring)."""

    def __init__(
        self,
        cfg: LlamaRefConfig | None = None,
        threads: int = 1,
        warmup: int = 2,
        reps: int = 5,
        clock: str = "auto",
        keep_memory: bool = True,
        device: str = "cpu",
    ) -> None:
        if device not in ("cpu", "cuda"):
            raise ValueError(f"device {device!r}: expected cpu or cuda")
        if device == "cuda" and not torch.cuda.is_available():
            raise ValueError("device 'cuda': torch sees no GPU")
        self.device = device
        self.kept_memory = keep_freed_memory() if keep_memory else False
        self.cfg = cfg or LlamaRefConfig()
        torch.set_num_threads(threads)
        self.clock = resolve_clock(clock, device, threads)
        self.warmup, self.reps = warmup, reps
        self.model = build_model(self.cfg, device)
        self.gen = torch.Generator().manual_seed(self.cfg.seed + 1)

    def _ids(self, b: int, s: int) -> torch.Tensor:
        return torch.randint(0, self.cfg.vocab, (b, s), generator=self.gen).to(self.device)

    def _sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()

    def _time(self, fn: Any, after: Any = None) -> tuple[list[float], list[float]]:
        walls, cpus = [], []
        for i in range(self.warmup + self.reps):
            self._sync()
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            self._sync()
            w, c = time.perf_counter() - t0, time.process_time() - c0
            if after is not None:
                after()
            if i >= self.warmup:
                walls.append(w)
                cpus.append(c)
        return walls, cpus

    def _kernel_time(self, fn: Any, after: Any = None, n: int = 3) -> float | None:
        """Seconds of GPU kernels (and copies) per call of ``fn``, from the PyTorch profiler:
        the device time of ``n`` calls of ``fn`` + ``after`` minus that of ``n`` calls of
        ``after`` alone, over ``n``. No host time, no launch gaps: what a step costs when the
        engine's host work is hidden (CUDA graphs, an asynchronous scheduler). None on a CPU."""
        if self.device != "cuda":
            return None
        from torch.profiler import ProfilerActivity, profile

        def busy(f: Any) -> float:
            self._sync()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(n):
                    f()
                self._sync()
            return sum(e.self_device_time_total for e in prof.key_averages()) * 1e-6

        try:
            both = busy(lambda: (fn(), after() if after is not None else None))
            rest = busy(after) if after is not None else 0.0
        except (RuntimeError, AttributeError) as e:  # a profiler that cannot run here
            print(f"kernel time not measured: {type(e).__name__}: {e}", file=sys.stderr)
            return None
        return max(0.0, both - rest) / n

    def _result(
        self,
        phase: str,
        b: int,
        n: int,
        walls: list,
        cpus: list,
        kernel_s: float | None = None,
    ) -> ServingMeasurement:
        reps = cpus if self.clock == "cpu" else walls
        return ServingMeasurement(
            phase=phase, batch=b, tokens=n, clock=self.clock, median_s=statistics.median(reps),
            wall_median_s=statistics.median(walls), cpu_median_s=statistics.median(cpus),
            reps_s=reps, kernel_s=kernel_s,
        )  # fmt: skip

    @torch.inference_mode()
    def prefill(self, batch: int, prompt: int) -> ServingMeasurement:
        """Seconds of one prefill step: ``batch`` prompts of ``prompt`` tokens, empty cache."""
        ids = self._ids(batch, prompt)

        def step() -> None:
            self.model(input_ids=ids, use_cache=True, logits_to_keep=1)

        walls, cpus = self._time(step)
        return self._result("prefill", batch, prompt, walls, cpus, self._kernel_time(step))

    @torch.inference_mode()
    def decode(self, batch: int, context: int) -> ServingMeasurement:
        """Seconds of one decode step: ``batch`` sequences, ``context`` cached tokens each."""
        from transformers import StaticCache

        key = cache_argument(self.model)
        cache = StaticCache(config=self.model.config, max_cache_len=context + 1)
        self.model(input_ids=self._ids(batch, context), use_cache=True, logits_to_keep=1,
                   **{key: cache})  # fmt: skip
        if int(cache.get_seq_length()) != context:
            raise RuntimeError(f"the static cache holds {cache.get_seq_length()} tokens, "
                               f"expected {context}")  # fmt: skip
        nxt = self._ids(batch, 1)
        pos = torch.full((batch, 1), context, dtype=torch.long, device=self.device)

        def step() -> None:
            self.model(input_ids=nxt, position_ids=pos, use_cache=True, logits_to_keep=1,
                       **{key: cache})  # fmt: skip

        def reset() -> None:  # back to ``context`` cached tokens: the next step rewrites the slot
            for layer in cache.layers:
                layer.cumulative_length.fill_(context)

        walls, cpus = self._time(step, after=reset)
        kern = self._kernel_time(step, after=reset)
        if int(cache.get_seq_length()) != context:  # every timed step saw ``context`` tokens
            raise RuntimeError("the static cache was not reset between steps")
        return self._result("decode", batch, context, walls, cpus, kern)

    def engine_overhead(
        self, device: Device | None = None, batch: int = 8, context: int = 16
    ) -> CalibrationProfile:
        """The host time of this engine (eager `transformers` + PyTorch) per decode step, as a
        serve calibration profile (`hwtune.serve.profile`): an engine step with nothing to do.

        It times decode steps of a model with this one's depth, attention heads and code path
        but negligible widths (head dim 8, MLP width = hidden, vocabulary 64, ``context``
        cached tokens): what remains is the Python and dispatch work of ~55 torch ops per layer
        (RMSNorm as ~7 ops, rotary as ~14, separate q/k/v and gate/up projections, mask and cache
        bookkeeping) that a step of the real model pays on top of its kernels, serially on the
        same core. With ``device``, the time the serve iteration model already gives those tiny
        kernels on it (measured GEMM and elementwise points include their launch) is taken off,
        so nothing is counted twice. Per iteration: the step at batch 1; per sequence: the
        slope to ``batch``. Measured, not fitted to the real model's step times (those depend on
        its widths; this does not)."""
        c = self.cfg
        tiny = replace(c, hidden=8 * c.heads, intermediate=8 * c.heads, vocab=64,
                       max_position=max(c.max_position, context + 2))  # fmt: skip
        eng = ServingReference(tiny, threads=torch.get_num_threads(), warmup=self.warmup,
                               reps=max(self.reps, 9), clock=self.clock,
                               keep_memory=self.kept_memory, device=self.device)  # fmt: skip
        one, many = eng.decode(1, context).median_s, eng.decode(batch, context).median_s
        note = "measured"
        if device is not None:
            none = CalibrationProfile(host_overhead_per_iteration_s=0.0,
                                      host_overhead_per_sequence_s=0.0)  # fmt: skip
            it = IterationModel(ReplicaConfig(model=model_spec(tiny), device=device,
                                              profile=none), dtype=c.dtype)  # fmt: skip
            k1 = it.step_time(step_shape("decode", 1, context))
            kb = it.step_time(step_shape("decode", batch, context))
            one, many = one - k1, many - kb
            note = f"measured minus the tiny model's kernels on {device.name} ({k1 * 1e3:.3f} ms)"
        return CalibrationProfile(
            # the device measured on: `serve --profile` refuses the overheads on another one
            device=None if device is None else device.name,
            host_overhead_per_iteration_s=max(0.0, one),
            host_overhead_per_sequence_s=max(0.0, (many - one) / (batch - 1)),
            fused_elementwise=False,
            source=f"hwtune.calibrate.serving_reference.engine_overhead: transformers "
            f"{_transformers_version()} eager, {c.layers} layers, {c.heads} heads, "
            f"{eng.clock} clock; {note}",
        )


def _transformers_version() -> str:
    import transformers

    return transformers.__version__


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="hwtune serving reference (HF Llama, random weights)")
    d = LlamaRefConfig()
    for f in ("hidden", "layers", "heads", "kv_heads", "intermediate", "vocab"):
        ap.add_argument("--" + f.replace("_", "-"), type=int, default=getattr(d, f))
    ap.add_argument("--phase", choices=("prefill", "decode"), default="decode")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--context", type=int, default=512, help="prompt length or cached context")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--clock", default="auto", choices=("auto", "wall", "cpu"))
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--engine", action="store_true",
                    help="print the engine's serve profile (YAML for hwtune serve --profile) "
                    "instead of timing a step")  # fmt: skip
    ap.add_argument("--gpu", default=None,
                    help="with --engine: the device (hwtune bench profile) whose kernel times "
                    "are taken off the engine step")  # fmt: skip
    a = ap.parse_args(argv)
    cfg = LlamaRefConfig(hidden=a.hidden, layers=a.layers, heads=a.heads, kv_heads=a.kv_heads,
                         intermediate=a.intermediate, vocab=a.vocab)  # fmt: skip
    ref = ServingReference(cfg, warmup=a.warmup, reps=a.reps, clock=a.clock)
    if a.engine:
        import yaml

        from hwtune.hardware.device import load_device_file

        dev = load_device_file(a.gpu) if a.gpu else None
        prof = ref.engine_overhead(dev)
        print(yaml.safe_dump(prof.model_dump(exclude_none=True), sort_keys=False), end="")
        return 0
    m = getattr(ref, a.phase)(a.batch, a.context)
    if a.json:
        print(json.dumps(m.to_dict(), indent=1))
    else:
        print(f"{a.phase} b{a.batch} {'s' if a.phase == 'prefill' else 'c'}{a.context}: "
              f"median {m.median_s * 1e3:.2f} ms ({m.clock} clock; wall "
              f"{m.wall_median_s * 1e3:.2f} ms)")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
