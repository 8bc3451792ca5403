"""A simulated deployment as the serving engine's command: apply what `serve` and `serve plan`
chose.

vLLM (``vllm serve MODEL``; flags are the engine-argument dataclass fields, ``a_b`` as
``--a-b``, booleans with ``--no-`` forms: vLLM's "Engine Arguments" documentation and
``vllm/engine/arg_utils.py``):

- ``--tensor-parallel-size``, ``--pipeline-parallel-size``; ``--data-parallel-size`` for
  attention data parallelism of a MoE model (vLLM's data parallelism runs attention per rank
  and the MoE layers over all ranks);
- experts: without ``--enable-expert-parallel`` vLLM shards every expert over the
  tensor x data parallel ranks (hwtune's ``ep`` 1); with it, it spreads whole experts over all
  of them (``ep`` = those ranks). Any other expert-parallel degree has no vLLM setting;
- ``--max-num-seqs``, ``--max-num-batched-tokens``, ``--gpu-memory-utilization`` (a fraction of
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
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from hwtune.errors import HwtuneInputError
from hwtune.serve.config import Deployment, ReplicaConfig

SERVE_LAUNCH_ENGINES: tuple[str, ...] = ("vllm",)
VLLM_DEFAULT_BLOCK_SIZE = 16
"""vLLM's KV block size unless an attention backend needs another (FlashMLA's 64 for MLA
models): ``--block-size`` is given only for another size, so the backend keeps its choice."""


@dataclass(frozen=True)
class ServeLaunch:
    """One server command per replica (``replicas`` of them, each on ``gpus_per_replica``)."""

    engine: str
    model: str
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    replicas: int
    gpus_per_replica: int

    def command(self) -> str:
        env = [f"{k}={v}" for k, v in self.env]
        return shlex.join([*env, "vllm", "serve", self.model, *self.args])

    def to_dict(self) -> dict[str, object]:
        return {
            "engine": self.engine,
            "model": self.model,
            "args": list(self.args),
            "env": dict(self.env),
            "replicas": self.replicas,
            "gpus_per_replica": self.gpus_per_replica,
            "command": self.command(),
        }


def vllm_refusal(cfg: ReplicaConfig) -> HwtuneInputError | None:
    """Why vLLM cannot run replica ``cfg`` as simulated (the first reason), or None."""
    m = cfg.model
    checks: tuple[tuple[bool, str, object, str], ...] = (
        (cfg.scheduler != "vllm", "scheduler", cfg.scheduler, "vllm (chunked prefill)"),
        (cfg.eager_prefill, "eager_prefill", True,
         "off (vLLM captures CUDA graphs for every step)"),
        (cfg.spec_tokens > 0, "spec_tokens", cfg.spec_tokens,
         "0 (set the speculative method for the model yourself: --speculative-config)"),
        (cfg.kv_dtype == "fp4", "kv_precision", cfg.kv_dtype, "bf16 or fp8 (vLLM's KV formats)"),
        (cfg.adp_balance_timeout_iters > 0, "adp_balance_timeout_iters",
         cfg.adp_balance_timeout_iters, "0 (TensorRT-LLM's attention-DP balancing)"),
        (cfg.batch_wait_timeout_iters > 0, "batch_wait_timeout_iters",
         cfg.batch_wait_timeout_iters, "0 (TensorRT-LLM's batch waiting)"),
        (cfg.frontend_tokens_per_s is not None, "frontend_tokens_per_s",
         cfg.frontend_tokens_per_s, "none (a limit of the server, not a setting)"),
        (cfg.kv_memory_rule != "total", "kv_memory_rule", cfg.kv_memory_rule,
         "total (vLLM's gpu_memory_utilization is a share of the whole device)"),
        (cfg.reserve_to_completion, "reserve_to_completion", True,
         "off (vLLM grows a request's blocks and preempts)"),
        (cfg.dp_attention > 1 and m.moe is None, "dp_attention", cfg.dp_attention,
         "1 for a dense model (serve more --replicas)"),
        (1 < cfg.ep < cfg.stage_gpus, "ep", cfg.ep,
         f"1 or {cfg.stage_gpus} (vLLM spreads experts over all tensor x data parallel ranks "
         "or over none)"),
    )  # fmt: skip
    for bad, field, value, expected in checks:
        if bad:
            return HwtuneInputError(field, value, expected)
    ckpt = m.checkpoint_precision or "bf16"
    if cfg.weight_dtype != ckpt and not (cfg.weight_dtype == "fp8" and ckpt == "bf16"):
        return HwtuneInputError(
            "precision", cfg.weight_dtype,
            f"the checkpoint's {ckpt} (or fp8 from a bf16 checkpoint: --quantization fp8)",
        )  # fmt: skip
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
    a += ["--max-num-seqs", str(cfg.max_num_seqs)]
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


def serve_launch_for(engine: str, dep: Deployment, model: str) -> ServeLaunch:
    """The launch of ``dep`` on ``engine`` (one of `SERVE_LAUNCH_ENGINES`)."""
    if engine == "vllm":
        return vllm_launch(dep, model)
    raise HwtuneInputError("launch", engine, "one of " + ", ".join(SERVE_LAUNCH_ENGINES))


__all__ = [
    "SERVE_LAUNCH_ENGINES",
    "ServeLaunch",
    "serve_launch_for",
    "vllm_launch",
    "vllm_refusal",
]
