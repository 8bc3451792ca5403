"""Engine presets: how vLLM, SGLang and TensorRT-LLM behave, as the simulator models them.

Three fields of `hwtune.serve.config.ReplicaConfig` describe an engine's behaviour rather than
its limits, and their defaults differ between the engines:

- ``scheduler``: how a step's batch is formed (`hwtune.serve.scheduler`). TensorRT-LLM leaves
  chunked prefill off by default (its LLM API ``enable_chunked_prefill: bool = False``), so a
  prompt is prefilled whole within ``max_num_tokens``: ``orca``. vLLM V1 chunks prompts into
  the running batch (``vllm``). SGLang is simulated with the same ``vllm`` policy: its own
  prefill-first policy (``sglang``) was tried on the published SGLang rows and predicted them
  worse (VALIDATION.md, "SGLang's own scheduling policy on the SGLang rows: tried, not adopted").
- ``eager_prefill``: whether a step that carries prompt tokens runs without CUDA graphs, so that
  it lasts at least the host's kernel launches. TensorRT-LLM's PyTorch backend captures CUDA
  graphs for generation-only batches (its ``cuda_graph_config``) and SGLang for decode batches
  (prefill graphs only with ``--enable-piecewise-cuda-graph``, off by default, in the releases
  the published SGLang rows ran; newer SGLang graphs prefill steps by default, a breakable CUDA
  graph at `hwtune.serve.launch.SGLANG_COMMIT`, off with ``--disable-prefill-cuda-graph``);
  vLLM V1 runs piecewise CUDA graphs through torch.compile for every step.
- ``overlap_schedule``: whether the host forms the next batch while a step runs. On by default
  in TensorRT-LLM's PyTorch backend (``disable_overlap_scheduler: false``) and in SGLang since
  v0.4 (the overlap scheduler); in vLLM from `VLLM_ASYNC_DEFAULT_SINCE` on (``--async-
  scheduling``, opt-in before).

Three more describe the engine's memory and kernels: ``kv_memory_rule`` and
``reserve_to_completion`` (how TensorRT-LLM sizes and admits its KV cache, `memory_fields`) and
``all_reduce_kernel`` (TensorRT-LLM's own all-reduce kernels, or vLLM's custom all-reduce,
which SGLang carries too: `kernel_fields`, `hwtune.cost.inference_collectives`).

These are the assumptions of the published-row validation (`hwtune.serve.published`), so
``hwtune serve --engine E`` simulates E as the track record that ``hwtune serve`` prints was
measured. Limits (``max_num_seqs``, ``max_num_batched_tokens``) are deployment choices and stay
with their own options.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hwtune.errors import HwtuneInputError

SERVING_ENGINES: tuple[str, ...] = ("vllm", "sglang", "trtllm")
"""The engines with a preset (`engine_fields`)."""

VLLM_ASYNC_DEFAULT_SINCE = (0, 14)
"""vLLM's first release that schedules asynchronously by default (``async_scheduling`` None ->
True unless an option is incompatible): vLLM PR #27614, "[Core] Enable async scheduling by
default", merged in the week to 2026-01-02, after v0.13.0. Checked in the wheels: v0.12.0's
``SchedulerConfig.async_scheduling: bool = False`` ("we won't reach here until async scheduling
is enabled by default"), v0.18.0's ``bool | None = None``, resolved to True in
``VllmConfig``."""

EAGER_PREFILL_ENGINES: tuple[str, ...] = ("trtllm", "sglang")
"""Engines whose prompt-carrying steps run without CUDA graphs (see the module docstring)."""

OLDEST_RELEASE: dict[str, tuple[int, int]] = {
    "vllm": (0, 8),
    "sglang": (0, 4),
    "trtllm": (1, 0),
}
"""The first release of each engine that the presets describe; ``--engine NAME@VERSION`` of an
older one is refused rather than simulated as an engine it was not. vLLM 0.8.0 made the V1
engine the default (release notes, 2025-03: "V1 engine is now enabled by default"), whose
always-on chunked prefill and piecewise CUDA graphs the ``vllm`` preset models (V0 chunked only
long prompts by default). SGLang v0.4 introduced the overlap scheduler the preset turns on
(SGLang v0.4 blog, 2024-12-04, "zero-overhead batch scheduler"). TensorRT-LLM's presets
describe its PyTorch backend, the default ``tensorrt_llm.LLM`` by 1.0 (the "PyTorch Backend"
docs page of 1.0.0rc2 imports it from ``tensorrt_llm``; 0.19's from ``tensorrt_llm._torch``,
beside a default that built TensorRT engines, whose scheduling and CUDA graphs the preset does
not describe)."""

_SPEC = re.compile(r"^(?P<name>[a-z]+)(?:@(?P<version>\d+\.\d+\S*))?$")


@dataclass(frozen=True)
class Engine:
    """An engine and, optionally, its release as (major, minor)."""

    name: str
    version: tuple[int, int] | None = None

    def __str__(self) -> str:
        return (
            self.name if self.version is None else f"{self.name}@{'.'.join(map(str, self.version))}"
        )


def version_tuple(version: str | None) -> tuple[int, int] | None:
    """(major, minor) of a release string such as ``0.12.0`` or ``1.0.0rc3``; None when it has
    no two leading numbers (``gpt-oss-dev``, empty)."""
    parts = re.findall(r"\d+", version or "")
    return (int(parts[0]), int(parts[1])) if len(parts) >= 2 else None


def parse_engine(spec: str) -> Engine:
    """``vllm``, ``sglang`` or ``trtllm``, optionally ``@VERSION`` (``vllm@0.12``,
    ``trtllm@1.0.0rc3``); a one-line `HwtuneInputError` naming ``engine`` otherwise."""
    m = _SPEC.match(spec.strip().lower())
    if m is None or m["name"] not in SERVING_ENGINES:
        raise HwtuneInputError(
            "engine", spec, f"one of {', '.join(SERVING_ENGINES)}, optionally @VERSION (vllm@0.12)"
        )
    e = Engine(m["name"], version_tuple(m["version"]))
    oldest = OLDEST_RELEASE[e.name]
    if e.version is not None and e.version < oldest:
        raise HwtuneInputError(
            "engine", spec, f"{e.name} {'.'.join(map(str, oldest))} or later (the release the "
            f"{e.name} preset describes onwards; see hwtune.serve.engines.OLDEST_RELEASE)",
        )  # fmt: skip
    return e


def overlap_by_default(engine: str, version: tuple[int, int] | None = None) -> bool:
    """Whether ``engine`` (at ``version``; None: the latest) forms the next batch while a step
    runs unless told otherwise (see the module docstring)."""
    if engine == "vllm":
        return version is None or version >= VLLM_ASYNC_DEFAULT_SINCE
    return engine in ("sglang", "trtllm")


MEMORY_FIELDS: tuple[str, ...] = ("kv_memory_rule", "reserve_to_completion")
"""The `engine_fields` that size the KV cache and admit requests into it."""

KERNEL_FIELDS: tuple[str, ...] = ("all_reduce_kernel",)
"""The `engine_fields` that name the engine's own kernels."""


def memory_fields(engine: Engine | str) -> dict[str, object]:
    """The engine's KV-cache sizing and admission (`MEMORY_FIELDS` of `engine_fields`)."""
    f = engine_fields(engine)
    return {k: f[k] for k in MEMORY_FIELDS}


def kernel_fields(engine: Engine | str) -> dict[str, object]:
    """The engine's own kernels (`KERNEL_FIELDS` of `engine_fields`)."""
    f = engine_fields(engine)
    return {k: f[k] for k in KERNEL_FIELDS}


def engine_fields(engine: Engine | str) -> dict[str, object]:
    """`ReplicaConfig` fields of an engine's default behaviour: ``scheduler``,
    ``eager_prefill``, ``overlap_schedule``, ``kv_memory_rule``, ``reserve_to_completion`` and
    ``all_reduce_kernel`` (see the module docstring and `ReplicaConfig`)."""
    e = parse_engine(engine) if isinstance(engine, str) else engine
    trt = e.name == "trtllm"
    return {
        "scheduler": "orca" if trt else "vllm",
        "eager_prefill": e.name in EAGER_PREFILL_ENGINES,
        "overlap_schedule": overlap_by_default(e.name, e.version),
        # TensorRT-LLM sizes its KV cache from the memory left after the model (its default
        # free_gpu_memory_fraction is 0.9) and admits with GUARANTEED_NO_EVICT
        "kv_memory_rule": "free" if trt else "total",
        "reserve_to_completion": trt,
        # vLLM's custom all-reduce, which SGLang's sgl-kernel carries too, or TensorRT-LLM's
        "all_reduce_kernel": "trtllm" if trt else "vllm",
    }


__all__ = [
    "EAGER_PREFILL_ENGINES",
    "OLDEST_RELEASE",
    "SERVING_ENGINES",
    "VLLM_ASYNC_DEFAULT_SINCE",
    "Engine",
    "engine_fields",
    "kernel_fields",
    "KERNEL_FIELDS",
    "overlap_by_default",
    "memory_fields",
    "MEMORY_FIELDS",
    "parse_engine",
    "version_tuple",
]
