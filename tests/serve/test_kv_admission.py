"""TensorRT-LLM's KV-cache sizing and admission (`ReplicaConfig.kv_memory_rule`,
``reserve_to_completion``): its ``free_gpu_memory_fraction`` is a fraction of the memory the
model leaves, and GUARANTEED_NO_EVICT admits a request only with blocks for its whole prompt and
output, so it never preempts; vLLM and SGLang size from the device's memory and grow on
demand."""

from __future__ import annotations

import pytest

from hwtune.hardware.catalog import get_device
from hwtune.model.catalog import get_model
from hwtune.serve.config import ReplicaConfig
from hwtune.serve.iteration import IterationModel
from hwtune.serve.memory import (
    WORKSPACE_FIXED_BYTES,
    activation_bytes_per_gpu,
    replica_memory,
    weight_bytes_per_gpu,
)
from hwtune.serve.request import Request
from hwtune.serve.scheduler import Replica


def _cfg(**kw) -> ReplicaConfig:
    return ReplicaConfig(get_model("llama3.1-70b"), get_device("h200-sxm-141gb"),
                         weight_dtype="fp8", kv_dtype="fp8", **kw)  # fmt: skip


def test_free_rule_takes_a_fraction_of_what_the_model_leaves():
    """Llama-3.1-70B fp8 on one H200: 0.9 of the ~55 GiB left after weights, activations and
    workspace, against 0.9 of 141 GB minus them."""
    free = _cfg(kv_memory_rule="free", gpu_memory_utilization=0.9)
    total = _cfg()
    dev = free.effective_device
    rest = (dev.memory_bytes - weight_bytes_per_gpu(free) - activation_bytes_per_gpu(free)
            - WORKSPACE_FIXED_BYTES)  # fmt: skip
    m = replica_memory(free)
    assert m.kv_bytes == pytest.approx(0.9 * rest, rel=1e-9)
    assert m.kv_bytes > replica_memory(total).kv_bytes  # 0.9 x rest > 0.9 x total - the model
    assert replica_memory(_cfg(kv_memory_rule="free", gpu_memory_utilization=0.45)).kv_bytes == (
        pytest.approx(0.45 * rest, rel=1e-9))  # fmt: skip


def test_bad_rule_is_refused():
    from hwtune.errors import HwtuneInputError

    with pytest.raises(HwtuneInputError, match="kv_memory_rule"):
        _cfg(kv_memory_rule="half")


def _replica(cfg: ReplicaConfig, blocks: int) -> Replica:
    return Replica(0, cfg, IterationModel(cfg), blocks)


def _req(rid: int, prompt: int, output: int) -> Request:
    r = Request(rid=rid, arrival=0.0, prompt=prompt, output=output)
    r.queued = 0.0
    return r


def test_no_evict_admission_reserves_prompt_and_output():
    """Blocks of 16 tokens, 100 in all. Two requests of 512 + 512 tokens: reserving to
    completion takes 64 blocks each, so only one is admitted (the second would need 128); on
    demand both start (32 blocks each for their prompts)."""
    for reserve, admitted, used in ((True, 1, 64), (False, 2, 64)):
        rep = _replica(_cfg(scheduler="orca", reserve_to_completion=reserve), 100)
        rep.waiting.extend([_req(0, 512, 512), _req(1, 512, 512)])
        batch, _ = rep.schedule(0.0)
        assert len(batch) == admitted
        assert rep.blocks.used_blocks == used


def test_reserved_requests_never_preempt():
    """With everything reserved up front, decoding to the last token allocates nothing more."""
    rep = _replica(_cfg(scheduler="orca", reserve_to_completion=True), 100)
    rep.waiting.append(_req(0, 500, 300))
    batch, _ = rep.schedule(0.0)
    used = rep.blocks.used_blocks
    assert used == -(-800 // 16)
    for r, q in batch:
        r.computed += q
    for _ in range(299):
        batch, _ = rep.schedule(0.0)
        for r, q in batch:
            r.computed += q
            r.target = r.computed
    assert rep.blocks.used_blocks == used and rep.preemptions == 0


def test_published_trt_rows_use_their_scripts_fraction():
    from hwtune.serve.published import TRT_FREE_GPU_MEMORY_FRACTION, load_rows

    rows = [r for r in load_rows() if r.deployment is not None and r.backend == "trtllm"]
    seen = {}
    for r in rows:
        rep = r.deployment.replica
        assert rep.kv_memory_rule == "free" and rep.reserve_to_completion
        seen.setdefault((r.mode, "gpt-oss" in r.model, r.range_ratio < 1),
                        rep.gpu_memory_utilization)  # fmt: skip
    f = TRT_FREE_GPU_MEMORY_FRACTION
    assert seen[("agg", True, True)] == f["gpt-oss"] == 0.85
    assert seen[("agg", False, False)] == f["harness"] == 0.7
    assert seen[("disagg", False, True)] == f["default"] == 0.9
    others = [r for r in load_rows() if r.deployment is not None and r.backend != "trtllm"]
    assert all(r.deployment.replica.kv_memory_rule == "total" for r in others)
