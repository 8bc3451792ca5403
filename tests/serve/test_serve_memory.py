"""Weights, workspace and KV capacity per GPU; the error when a model does not fit."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from hwtune.errors import HwtuneInputError
from hwtune.hardware.catalog import get_device
from hwtune.model.catalog import get_model
from hwtune.serve.config import ReplicaConfig
from hwtune.serve.memory import replica_memory

GIB = 2**30


def test_llama8b_weights_and_kv_capacity(cfg8b):
    m = replica_memory(cfg8b)
    assert m.weights == pytest.approx(8.03e9 * 2, rel=0.01)  # 8.03B params in bf16
    free = 0.9 * 80 * GIB - m.weights - m.activations - m.fixed
    assert m.kv_tokens == pytest.approx(free / 131072, rel=0.001)
    # fp8 KV doubles the tokens
    assert replica_memory(replace(cfg8b, kv_dtype="fp8")).kv_tokens == pytest.approx(
        2 * m.kv_tokens, rel=0.001
    )


def test_tensor_and_expert_parallel_shard_the_weights():
    h200 = get_device("h200")
    ds = get_model("deepseek-v3")
    m = replica_memory(ReplicaConfig(ds, h200, tp=8, ep=8, weight_dtype="fp8"))
    # 671B fp8 over 8 GPUs ~ 84 GB each (embeddings in bf16 add ~0.2 GB)
    assert m.weights == pytest.approx(671e9 / 8, rel=0.03)


def test_model_that_does_not_fit_says_by_how_much(h100):
    with pytest.raises(HwtuneInputError) as e:
        replica_memory(ReplicaConfig(get_model("llama3.1-70b"), h100))
    msg = str(e.value)
    short = float(re.search(r"short by ([0-9.]+) GiB", msg).group(1))
    need = 70.55e9 * 2 / GIB  # weights alone
    assert need - 72 < short < need - 72 + 6  # plus activations and workspace
    assert "\n" not in msg


def test_bad_layouts_name_the_field(h100):
    with pytest.raises(HwtuneInputError, match="^ep"):
        ReplicaConfig(get_model("llama3.1-8b"), h100, ep=2)
    with pytest.raises(HwtuneInputError, match="^scheduler"):
        ReplicaConfig(get_model("llama3.1-8b"), h100, scheduler="fifo")
    with pytest.raises(HwtuneInputError, match="^tp"):
        ReplicaConfig(get_model("llama3.1-8b"), h100, tp=0)
    with pytest.raises(HwtuneInputError, match="^precision"):
        ReplicaConfig(get_model("llama3.1-8b"), h100, weight_dtype="int3")
