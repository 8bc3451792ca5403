"""Pipeline schedules: step time, bubble, and activations in flight on the busiest stage.

``f``, ``b``, ``w`` are one pipeline rank's forward, full backward, and weight-gradient part of
the backward for one micro-batch through all of that rank's layers (all its virtual chunks);
``m`` micro-batches per step, ``p`` pipeline ranks, ``v`` chunks per rank.

Sources (REFERENCES.md, *Pipeline schedules*):
- GPipe: Huang et al. 2019; bubble (p-1)(F+B), m micro-batches in flight.
- 1F1B: Narayanan et al. SC'21 §2.2.1 (PipeDream-Flush); bubble (p-1)(F+B), p in flight.
- Interleaved 1F1B: Narayanan et al. SC'21 §2.2.2; bubble (p-1)(F+B)/v; in-flight activations
  p (1 + (p-1)/(p v)) (Korthikanti et al. 2022 §4.2.3).
- ZB-H1: Qi et al. ICLR'24 "Zero Bubble Pipeline Parallelism" §3: bubble (p-1)(F+B-2W), p in flight.
- ZB-V: Qi et al. 2024 "Pipeline Parallelism with Controllable Memory" (V-shape, 2 chunks per
  rank): the ZB-H1 bubble over half-size chunks, p in flight.
- DualPipe / DualPipeV: DeepSeek-V3 report §3.2.1 Table 2 and deepseek-ai/DualPipe README:
  bubble (p/2-1)(F&B + B - 3W) with F&B an overlapped forward+backward pair (= F + B when
  nothing overlaps), 2x parameters (DualPipe) and PP+1 stage activations in flight, PP the
  number of stages: DualPipe p+1 micro-batches of its L/p layers; DualPipeV (2p stages of L/(2p)
  layers on p ranks, the README's "based on the same number of PP stages") 2p+1 half-rank
  chunks, i.e. p + 1/2 micro-batches of the rank's layers (``dualpipev.py``: 2(p-1) + 2 warm-up
  forwards on rank 0, and one more allocated by the first overlapped F&B before its B frees).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

MAX_MICRO_BATCHES = 1 << 16
"""The most micro-batches per pipeline step a schedule is built or simulated for: 65,536, far
above what training runs use (a global batch of thousands of sequences over dp ranks leaves
tens to hundreds per rank). The schedules here are closed forms, but the compiled plans
(`hwtune compile`) and the energy pipeline planner walk every micro-batch (100,000 took the
latter 47 s on 2 cores), so a typo such as 1e20 would run for ever."""


@dataclass(frozen=True, slots=True)
class PipelineTime:
    total: float  # seconds for all micro-batches through the busiest rank, bubble included
    bubble: float


def pipeline_time(
    schedule: str, p: int, m: int, v: int, f: float, b: float, w: float
) -> PipelineTime:
    """Step compute time of a pipeline rank under ``schedule``."""
    steady = m * (f + b)
    if p <= 1:
        return PipelineTime(steady, 0.0)
    if schedule in ("gpipe", "1f1b"):
        bubble = (p - 1) * (f + b)
    elif schedule == "interleaved":
        bubble = (p - 1) * (f + b) / v
    elif schedule == "zb-h1":
        bubble = (p - 1) * max(0.0, f + b - 2 * w)
    elif schedule == "zbv":
        # two half-size chunks per rank: the ZB-H1 bubble of chunks of half the work
        bubble = (p - 1) * max(0.0, f + b - 2 * w) / 2
    elif schedule == "dualpipe":
        # DualPipe over p ranks: each rank holds 2 stages of L/p layers; f, b are per stage here
        bubble = max(0, p // 2 - 1) * max(0.0, (f + b) + b - 3 * w)
    elif schedule == "dualpipev":
        # DualPipeV: 2p stages over p ranks; per-stage times are half of the rank's f, b, w
        bubble = max(0, p - 1) * max(0.0, (f + b) + b - 3 * w) / 2
    else:
        raise ValueError(schedule)
    return PipelineTime(steady + bubble, bubble)


def in_flight(schedule: str, p: int, m: int, v: int) -> float:
    """Micro-batches whose activations (of all the rank's layers) the first rank holds at peak.
    The estimator walks the interleaved schedule chunk by chunk (`interleaved_peak`); its
    closed form here is Korthikanti's, which that walk equals for equal chunks (the tests
    hold the walk to it)."""
    if p <= 1:
        return 1.0
    if schedule == "gpipe":
        return float(m)
    if schedule == "interleaved":
        return min(float(m), p * (1 + (p - 1) / (p * v)))
    if schedule == "dualpipe":
        return min(float(m), p + 1.0)
    if schedule == "dualpipev":
        return min(float(m), p + 0.5)
    return float(min(m, p))


@functools.lru_cache(maxsize=4096)
def interleaved_peak(p: int, v: int, m: int, rank: int, chunk_bytes: tuple[float, ...]) -> float:
    """Peak activation bytes pipeline rank ``rank`` holds under Megatron-Core's interleaved
    1F1B, ``chunk_bytes[c]`` being what its chunk ``c`` keeps for one micro-batch.

    The order of Megatron-Core's ``forward_backward_pipelining_with_interleaving``
    (``pipeline_parallel/schedules.py``, micro-batch groups of ``p``, its default
    ``microbatch_group_size_per_vp_stage``): the k-th forward runs chunk ``(k mod pv) // p``, the
    k-th backward chunk ``v - 1 - (k mod pv) // p``; rank r first runs
    ``(p - r - 1) 2 + (v - 1) p`` warm-up forwards (all ``m v`` when ``m = p``), then one forward
    and one backward in turn. The peak is taken after each forward. With equal chunks it is
    Korthikanti et al. 2022 §4.2.3's ``p (1 + (p - 1)/(p v))`` micro-batches on rank 0
    (`in_flight`); with unequal ones (Megatron's ``--account-for-embedding-in-pipeline-split``,
    a remainder of layers) it is where the larger chunks are held, which that formula cannot
    see. The pattern repeats every ``p v`` forwards once the warm-up is over, so the walk stops
    two periods after it."""
    total = m * v
    warm = total if m == p else min(total, (p - rank - 1) * 2 + (v - 1) * p)

    def fwd_chunk(k: int) -> int:
        return (k % (p * v)) // p

    def bwd_chunk(k: int) -> int:
        return v - 1 - (k % (p * v)) // p

    held = sum(chunk_bytes[fwd_chunk(k)] for k in range(warm))
    peak = held
    for k in range(min(total - warm, 2 * p * v + 1)):
        held += chunk_bytes[fwd_chunk(warm + k)]
        peak = max(peak, held)
        held -= chunk_bytes[bwd_chunk(k)]
    return peak


def param_copies(schedule: str) -> int:
    """Copies of a stage's parameters each rank holds (DualPipe keeps both directions)."""
    return 2 if schedule == "dualpipe" else 1


def p2p_boundaries(schedule: str, v: int) -> int:
    """Stage boundaries each micro-batch crosses per rank in each direction (interleaving
    and V-shapes cross a boundary per chunk)."""
    if schedule == "interleaved":
        return v
    if schedule in ("zbv", "dualpipev"):
        return 2
    return 1
