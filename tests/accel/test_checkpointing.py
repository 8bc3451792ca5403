"""Checkpointing: the chain DP is exact (brute force), memory never below the kept tensors,
memory traded for recomputation."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwtune.accel.architecture import load_accelerator
from hwtune.accel.checkpointing import _Units, chain_optimal, plan_checkpointing
from hwtune.accel.evaluate import evaluate
from hwtune.accel.models import GPT2Config, gpt2, resnet18
from hwtune.accel.workload import Graph, conv2d, vector
from hwtune.errors import HwtuneInputError


def _brute(keep, seg, cost, limit):
    best = None
    for bits in itertools.product([0, 1], repeat=len(keep)):
        kept = sum(k for k, b in zip(keep, bits, strict=True) if b)
        runs, cur = [], 0.0
        for s, b in zip(seg, bits, strict=True):
            if b:
                runs.append(cur)
                cur = 0.0
            else:
                cur += s
        runs.append(cur)
        peak = kept + max(runs)
        rec = sum(c for c, b in zip(cost, bits, strict=True) if not b)
        if peak <= limit and (best is None or rec < best):
            best = rec
    return best


@settings(max_examples=60, deadline=None)
@given(
    data=st.lists(st.tuples(st.integers(1, 50), st.integers(0, 30), st.integers(1, 20)), min_size=1, max_size=9),
    frac=st.floats(0.1, 1.2),
)  # fmt: skip
def test_chain_dp_is_exact(data, frac):
    keep = [float(a) for a, _, _ in data]
    seg = [float(a + b) for a, b, _ in data]
    cost = [float(c) for _, _, c in data]
    limit = frac * sum(keep)
    plan = chain_optimal(keep, seg, cost, limit)
    want = _brute(keep, seg, cost, limit)
    if want is None:
        assert not plan.feasible
    else:
        assert plan.feasible and plan.recompute == pytest.approx(want)
        assert plan.peak <= limit
    assert plan.peak >= sum(k for k, b in zip(keep, plan.keep, strict=True) if b)


def _chain(n: int) -> Graph:
    g = Graph("chain")
    x = g.tensor("x", (2, 8, 16, 16), "input", 2)
    for i in range(n):
        x = conv2d(g, f"c{i}", x, 8, 3, 1, 1)
        x = vector(g, f"r{i}", "relu", (x,))
    vector(g, "loss", "loss", (x,), (1,))
    return g


def test_chain_graph_uses_exact_dp_and_monotone():
    g = _chain(6)
    u = _Units(g, {})
    total = sum(u.bytes[r] for r in u.saved)
    prev = -1.0
    for frac in (1.0, 0.8, 0.6, 0.45):
        p = plan_checkpointing(g, frac * total)
        assert p.method == "chain-dp"
        if p.feasible:
            assert p.recompute_cost >= prev
            prev = p.recompute_cost
            assert p.predicted_peak_bytes <= frac * total


@pytest.mark.parametrize(
    "g",
    [resnet18(batch=2, image=96), gpt2(seq=64, config=GPT2Config(n_layer=2))],
    ids=["resnet18", "gpt2"],
)
def test_memory_never_below_kept_and_trades_recompute(g):
    acc = load_accelerator("edge-hetero")
    u = _Units(g, {})
    total = sum(u.bytes[r] for r in u.saved)
    full = evaluate(g, acc)
    for frac in (0.7, 0.5):
        ev = evaluate(g, acc, activation_limit_bytes=frac * total)
        p = ev.plan
        kept = sum(u.bytes[r] for r in p.kept)
        assert p.kept_bytes == kept
        assert p.predicted_peak_bytes >= kept
        r = ev.result
        # the schedule holds every kept tensor through backward, next to weights and states
        assert r.peak_bytes["shared"] + r.peak_bytes["dram"] >= kept
        if p.dropped:
            assert r.recompute_macs > 0 or all(u.g.producer()[d].macs == 0 for d in p.dropped)
            assert r.latency_s >= full.result.latency_s * (1 - 1e-9)


def test_bad_limit():
    with pytest.raises(HwtuneInputError, match="memory_limit"):
        plan_checkpointing(_chain(2), 0)
