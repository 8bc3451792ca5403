"""Decode attention against NVIDIA's published per-op timings of a serving engine's own kernels.

Source: ai-dynamo/aiconfigurator (Apache-2.0), ``systems/data/h200_sxm/attention/sglang/0.5.9/
generation_attention_perf.parquet`` (GQA, FlashAttention-3) and ``systems/data/h200_sxm/mla/
sglang/0.5.9/generation_mla_perf.parquet`` (MLA), H200, bf16 KV cache: microseconds per layer for
``batch`` sequences of ``context`` cached tokens each. The shapes are Llama-3.1-70B and
DeepSeek-V3 at tensor parallelism 8 (8 query heads / 1 KV head; 16 MLA heads).
"""

from __future__ import annotations

import statistics

import pytest

from hwtune.cost.compute import KERNEL_OVERHEAD_S
from hwtune.cost.kv_cache import DECODE_ATTENTION_KERNELS, attention_shape, decode_attention_time
from hwtune.hardware.catalog import get_device
from hwtune.model.catalog import get_model

# (model, batch, context, measured us)
PUBLISHED = [
    ("llama3.1-70b", 1, 1024, 15.6),
    ("llama3.1-70b", 1, 4096, 16.4),
    ("llama3.1-70b", 1, 16384, 20.2),
    ("llama3.1-70b", 16, 1024, 16.4),
    ("llama3.1-70b", 16, 4096, 21.5),
    ("llama3.1-70b", 16, 16384, 46.5),
    ("llama3.1-70b", 64, 1024, 20.7),
    ("llama3.1-70b", 64, 4096, 47.8),
    ("llama3.1-70b", 64, 16384, 164.5),
    ("deepseek-v3", 4, 1024, 17.9),
    ("deepseek-v3", 4, 4096, 21.7),
    ("deepseek-v3", 64, 1024, 38.6),
    ("deepseek-v3", 64, 4096, 91.3),
]


def _predicted_us(model: str, batch: int, context: int) -> float:
    shape = attention_shape(get_model(model), "full", 8)
    return (
        decode_attention_time(shape, batch, batch * context, get_device("h200-sxm"), "bf16") * 1e6
    )


@pytest.mark.parametrize(("model", "batch", "context", "measured"), PUBLISHED)
def test_decode_attention_within_35_percent_of_the_engine_kernel(model, batch, context, measured):
    assert _predicted_us(model, batch, context) == pytest.approx(measured, rel=0.35)


def test_decode_attention_median_error_over_the_published_points():
    errors = [abs(_predicted_us(m, b, c) / t - 1.0) for m, b, c, t in PUBLISHED]
    assert statistics.median(errors) <= 0.20


def test_small_decode_attention_is_its_kernel_launches():
    # one sequence of 1,024 tokens reads ~0.5 MB per layer: the launches are most of the time,
    # and a single launch would leave the op at a third of the measured 15.6 us
    t = _predicted_us("llama3.1-70b", 1, 1024)
    launches = DECODE_ATTENTION_KERNELS * KERNEL_OVERHEAD_S * 1e6
    assert launches / t > 0.9
    assert (t - launches + KERNEL_OVERHEAD_S * 1e6) / 15.6 < 0.35
