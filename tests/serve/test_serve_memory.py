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


@pytest.mark.parametrize(
    ("limits", "field"),
    [({"max_num_seqs": 10**8}, "max_num_seqs"), ({"max_num_batched_tokens": 10**8},
                                                  "max_num_batched_tokens")],
)  # fmt: skip
def test_a_batch_limit_whose_activations_crowd_out_the_cache_is_named(h100, limits, field):
    # Llama-3.1-8B's 15 GiB of weights fit an H100; 10^8 sampled rows of fp32 logits (4 bytes
    # x 2 x 128256 vocab each, ~96 TB) or a 10^8-token step's hidden states do not, and the
    # limit, not the model, is what to change
    cfg = ReplicaConfig(get_model("llama3.1-8b"), h100, **limits)
    with pytest.raises(HwtuneInputError, match=f"^{field}: got 100000000") as e:
        replica_memory(cfg)
    short = float(re.search(r"short by ([0-9.]+) GiB", str(e.value)).group(1))
    if field == "max_num_seqs":
        logits = 4 * 2 * 10**8 * 128256 / GIB
        assert logits - 72 < short < logits  # the weights' 15 GiB fit beside what is left


def test_bad_layouts_name_the_field(h100):
    with pytest.raises(HwtuneInputError, match="^ep"):
        ReplicaConfig(get_model("llama3.1-8b"), h100, ep=2)
    with pytest.raises(HwtuneInputError, match="^scheduler"):
        ReplicaConfig(get_model("llama3.1-8b"), h100, scheduler="fifo")
    with pytest.raises(HwtuneInputError, match="^tp"):
        ReplicaConfig(get_model("llama3.1-8b"), h100, tp=0)
    with pytest.raises(HwtuneInputError, match="^precision"):
        ReplicaConfig(get_model("llama3.1-8b"), h100, weight_dtype="int3")


def test_per_sequence_state_is_blamed_on_max_num_seqs():
    # Qwen3.5's linear-attention layers keep a fixed state per sequence: 4096 sequences of it
    # crowd out the KV cache on 8 H200s that hold the fp8 weights easily
    cfg = ReplicaConfig(get_model("qwen3.5-397b-a17b"), get_device("h200"), tp=8, ep=8,
                        weight_dtype="fp8", max_num_seqs=4096)  # fmt: skip
    with pytest.raises(HwtuneInputError, match="^max_num_seqs: got 4096") as e:
        replica_memory(cfg)
    assert "per-sequence state" in str(e.value)
    replica_memory(replace(cfg, max_num_seqs=256))  # fits


def test_sarathi_chunk_size_is_the_limit_named(h100):
    cfg = ReplicaConfig(get_model("llama3.1-8b"), h100, scheduler="sarathi",
                        chunk_size=10**6, max_num_batched_tokens=2 * 10**6)  # fmt: skip
    with pytest.raises(HwtuneInputError, match="^chunk_size: got 1000000"):
        replica_memory(cfg)


def test_serve_plan_names_the_limit_not_the_gpus(rejects):
    # llama3.1-8b fits one RTX 4090 at the default budget; a 65536-token step's activations do not
    rejects(["serve", "plan", "--model", "llama3.1-8b", "--gpu", "rtx-4090", "--max-gpus", "1",
             "--max-num-batched-tokens", "65536", "--rate", "1", "--num-requests", "10"],
            "--max-num-batched-tokens", "65536")  # fmt: skip
