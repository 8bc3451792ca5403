"""All-reduce as inference engines run it inside one NVLink domain: the custom one-shot and
two-shot kernels of vLLM (``csrc/custom_all_reduce.cuh``, which SGLang's ``sgl-kernel`` carries
too) and TensorRT-LLM (``customAllReduceKernels``), which replace NCCL's ring for the small and
middle-sized messages of serving — alpha-beta costs in the notation of
`hwtune.cost.collectives`.

- One-shot: every rank reads the whole buffer from each of its n−1 peers over NVLink (peer-to-peer
  loads through NVSwitch) and reduces locally: α + (n−1)·S/β.
- Two-shot: a reduce-scatter then an all-gather, each one step over all peers:
  2·α + 2·(n−1)/n·S/β (the ring's bandwidth term with two latency steps instead of 2(n−1)).

Engines pick the faster per message size (vLLM: one-shot below 256 KB on 8 GPUs) and hand
large messages to NCCL (`hwtune.cost.collectives.all_reduce_time`; the minimum of the three is
taken here), without NVLink SHARP: vLLM turns off the cuMem allocator NCCL's NVLS needs
(``NCCL_CUMEM_ENABLE=0`` in ``vllm/env_override.py``, for NVIDIA/nccl #1234's memory cost under
CUDA graphs). Across scale-up domains they fall back to NCCL.

α and β are not NCCL's. The kernels' peer loads run on the SMs the kernel was given and reach
`CUSTOM_ALL_REDUCE_BW_FRACTION` of the NVLink figure (NCCL's ring, copy-engine-free as well,
reaches ~0.80: `hwtune.hardware.cluster.Cluster`), and α is the kernel in a CUDA graph with its
flag synchronization, `CUSTOM_ALL_REDUCE_LATENCY_S` per engine: vLLM's kernels meet at a barrier
before and after the reduction, TensorRT-LLM's Lamport one-shot polls the data buffer itself.
Both figures are read off NVIDIA's per-op measurements of each engine's own all-reduce on H200
and H100 SXM (ai-dynamo/aiconfigurator ``systems/data/<gpu>/comm/<engine>/<version>/
custom_allreduce_perf.parquet``, CUDA-graph rows, bf16; kept in
``benchmarks/data/aiconfigurator_allreduce.csv``; VALIDATION.md, "Engine all-reduce against
NVIDIA's per-op measurements"). With a measured device profile (tier 2) the link of its own
all-reduce fit is used instead, as before; a serve profile's measured NVLink bus bandwidth
scales the kernels' bandwidth as it scales NCCL's ring. The constants were read on Hopper (NVLink
4) and are applied to every device; on other generations they are an assumption.
"""

from __future__ import annotations

from hwtune.cost.collectives import all_reduce_time
from hwtune.errors import HwtuneInputError
from hwtune.hardware.cluster import Cluster, GroupSpan, Link

CUSTOM_ALL_REDUCE_BW_FRACTION = 0.55
"""Fraction of the scale-up (NVLink) bandwidth per GPU that the engines' custom all-reduce
kernels move data at. Fitted to aiconfigurator's H200 tables (vLLM 0.14.0, SGLang 0.5.9,
TensorRT-LLM 1.2.0rc5; 2, 4 and 8 GPUs, 1 KB-256 MB): the 4-16 MB messages of a 4- or 8-GPU
group reach a bus bandwidth of 140-260 GB/s (mostly 190-260) of NVLink 4's 450 GB/s, where the old
0.80 (NCCL's ring) made the 256 KB-16 MB messages 1.2-4x too fast (median 1.45x)."""

CUSTOM_ALL_REDUCE_LATENCY_S: dict[str, float] = {"vllm": 4.5e-6, "trtllm": 3.25e-6}
"""One step of the custom kernels inside a CUDA graph (launch, synchronization, reduction of a
tiny buffer), seconds, by kernel family: vLLM's (also SGLang's) measured 4.2-5.3 us on 2-8 GPUs
at 1-16 KB (one 7.0 us outlier at 256 B), TensorRT-LLM 1.2.0rc5's 3.0-3.9 us up to 8 KB (its
AUTO strategy jumps to 7-10 us at 16-64 KB on some group sizes) (aiconfigurator's H200 and
H100 tables; see the module docstring). A two-shot call pays it twice."""

_DEFAULT_INTRA_EFFICIENCY = float(Cluster.model_fields["intra_efficiency"].default)
"""NCCL's ring share of NVLink that `CUSTOM_ALL_REDUCE_BW_FRACTION` was read beside."""

ALL_REDUCE_KERNELS: tuple[str, ...] = tuple(CUSTOM_ALL_REDUCE_LATENCY_S)
"""The kernel families `serving_all_reduce_time` knows (`ReplicaConfig.all_reduce_kernel`)."""


def custom_all_reduce_link(cluster: Cluster, kernel: str = "vllm") -> Link:
    """(β, α) of the custom kernels of ``kernel`` on ``cluster``'s scale-up link; with a
    measured all-reduce in the device profile, that fit's link (tier 2)."""
    if kernel not in CUSTOM_ALL_REDUCE_LATENCY_S:
        raise HwtuneInputError(
            "all_reduce_kernel", kernel, "one of " + ", ".join(ALL_REDUCE_KERNELS)
        )
    ring = cluster.intra_link()
    prof = cluster.device.profile
    if prof is not None and prof.collective_fit("all_reduce") is not None:
        return ring
    # NCCL's ring link, scaled from its efficiency to the kernels': a serve profile's measured
    # NVLink bus bandwidth (``intra_busbw_gbps``, the cluster's intra_efficiency) moves both
    bw = ring.bandwidth * CUSTOM_ALL_REDUCE_BW_FRACTION / _DEFAULT_INTRA_EFFICIENCY
    return Link(bw, CUSTOM_ALL_REDUCE_LATENCY_S[kernel])


def serving_all_reduce_time(
    nbytes: float, span: GroupSpan, cluster: Cluster, kernel: str = "vllm"
) -> float:
    """The fastest of one-shot, two-shot (one domain only) and NCCL for ``nbytes``; ``kernel``:
    whose custom kernels ("vllm" for vLLM and SGLang, "trtllm")."""
    link = custom_all_reduce_link(cluster, kernel)
    n = span.size
    if n <= 1 or nbytes <= 0:
        return 0.0
    nccl = all_reduce_time(nbytes, span, cluster, nvls=False)
    if span.domains > 1:
        return nccl
    one = link.latency + (n - 1) * nbytes / link.bandwidth
    two = 2.0 * link.latency + 2.0 * (n - 1) * nbytes / (n * link.bandwidth)
    return min(one, two, nccl)


TRTLLM_FUSED_NORM_MAX_TOKENS = 128
"""Above two GPUs, the most tokens for which TensorRT-LLM's AUTO all-reduce keeps a requested
residual-add + RMSNorm fusion in its own (min-latency one- or two-shot) kernel; larger
messages go to NCCL followed by a separate residual-RMSNorm kernel (``allreduceOp.cpp``
strategy heuristic of NVIDIA/TensorRT-LLM PR #5432, mid-2025, env
``ALLREDUCE_AUTO_HEURISTIC_MIN_LATENCY_THRESHOLD_TOKEN_NUM``; on up to two GPUs it always
fuses). Later releases moved to a lookup table by hidden size and tokens (on Hopper, hidden
4096: up to 512 tokens on 4 GPUs, 64 on 8); the heuristic of the 1.0 releases is kept."""


def trtllm_ar_workspace_bytes(tp: int) -> float:
    """TensorRT-LLM's custom all-reduce workspace: messages above it go to NCCL, 16 MB on up
    to two GPUs, 8 MB above (``customAllReduceUtils.h``, ``getMaxRequiredWorkspaceSize``)."""
    return 16e6 if tp <= 2 else 8e6


def trtllm_norm_in_all_reduce(tokens: int, hidden: int, tp: int, act_bytes: float) -> bool:
    """Whether TensorRT-LLM's all-reduce of ``tokens`` rows of width ``hidden`` over ``tp``
    GPUs runs the requested residual add and RMSNorm in its own kernel (within the workspace,
    `trtllm_ar_workspace_bytes`, and above two GPUs at most `TRTLLM_FUSED_NORM_MAX_TOKENS`)."""
    if tp <= 1 or tokens * hidden * act_bytes > trtllm_ar_workspace_bytes(tp):
        return False
    return tp <= 2 or tokens <= TRTLLM_FUSED_NORM_MAX_TOKENS


__all__ = [
    "ALL_REDUCE_KERNELS",
    "TRTLLM_FUSED_NORM_MAX_TOKENS",
    "CUSTOM_ALL_REDUCE_BW_FRACTION",
    "CUSTOM_ALL_REDUCE_LATENCY_S",
    "custom_all_reduce_link",
    "serving_all_reduce_time",
    "trtllm_ar_workspace_bytes",
    "trtllm_norm_in_all_reduce",
]
