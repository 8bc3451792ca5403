"""All-reduce as inference engines run it inside one NVLink domain: the custom one-shot and
two-shot kernels of vLLM (``csrc/custom_all_reduce.cuh``) and TensorRT-LLM
(``customAllReduceKernels``), which replace NCCL's ring for the small, latency-bound messages of
decode (a few KB per layer) — alpha-beta costs in the notation of `hwtune.cost.collectives`.

- One-shot: every rank reads the whole buffer from each of its n−1 peers over NVLink (peer-to-peer
  loads through NVSwitch) and reduces locally: one synchronization step, α + (n−1)·S/β.
- Two-shot: a reduce-scatter then an all-gather, each one step over all peers:
  2·α + 2·(n−1)/n·S/β (the ring's bandwidth term with two latency steps instead of 2(n−1)).

Engines pick the faster per message size (vLLM: one-shot below 256 KB on 8 GPUs); across
scale-up domains they fall back to NCCL (`hwtune.cost.collectives.all_reduce_time`), without
NVLink SHARP: vLLM turns off the cuMem allocator NCCL's NVLS needs (``NCCL_CUMEM_ENABLE=0`` in
``vllm/env_override.py``, for NVIDIA/nccl #1234's memory cost under CUDA graphs).
"""

from __future__ import annotations

from hwtune.cost.collectives import all_reduce_time
from hwtune.hardware.cluster import Cluster, GroupSpan


def serving_all_reduce_time(nbytes: float, span: GroupSpan, cluster: Cluster) -> float:
    """The fastest of one-shot, two-shot (one domain only) and NCCL for ``nbytes``."""
    n = span.size
    if n <= 1 or nbytes <= 0:
        return 0.0
    nccl = all_reduce_time(nbytes, span, cluster, nvls=False)
    if span.domains > 1:
        return nccl
    link = cluster.intra_link()
    one = link.latency + (n - 1) * nbytes / link.bandwidth
    two = 2.0 * link.latency + 2.0 * (n - 1) * nbytes / (n * link.bandwidth)
    return min(one, two, nccl)


__all__ = ["serving_all_reduce_time"]
