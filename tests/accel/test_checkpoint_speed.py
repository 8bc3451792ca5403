"""The fast checkpointing planner gives the plans of a straightforward one: `_Units.evaluate`
(index sweep, union-find) and `evaluate_adding` (the greedy's one-more-dropped plans, from the
segments of the plan before) equal a plain set-based re-evaluation, the numpy Pareto filter
equals the pairwise one, and `plan_checkpointing` returns the same plan when both are swapped
for the plain versions; the plan's peak is exact, it fits, recomputation is monotone in the
limit, and the plan does not depend on PYTHONHASHSEED."""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys

import pytest

import hwtune.accel.checkpointing as ck
from hwtune.accel.models import GPT2Config, gpt2, resnet18


def _graphs():
    return {
        "resnet18": resnet18(batch=1, image=64),
        "gpt2": gpt2(seq=32, config=GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab=100)),
    }


def _cost(g):
    # forward "times" that are not whole numbers, so summation order would show
    return {x.name: max(x.macs, x.vector_ops, 1) * 1.3e-9 + 7.1e-7 for x in g.layers}


def _plain_evaluate(u, dropped):
    """The memory model written out: rebuilt = dropped saved units and their ancestors through
    unsaved or dropped units; segments = connected groups of rebuilt units."""
    needed, stack = set(), list(dropped)
    while stack:
        r = stack.pop()
        if r not in needed:
            needed.add(r)
            stack += [p for p in u.preds[r] if p not in u.saved or p in dropped]
    groups: list[set[str]] = []
    for r in needed:
        linked = {r, *(p for p in u.preds[r] if p in needed)}
        hit = [s for s in groups if s & linked]
        for s in hit:
            groups.remove(s)
            linked |= s
        groups.append(linked)
    kept = sum(u.bytes[r] for r in u.saved - dropped)
    seg = max((sum(u.bytes[r] for r in s) for s in groups), default=0)
    return kept + seg, math.fsum(u.cost[r] for r in needed), kept


def _plain_adding(u, dropped, more):
    return [_plain_evaluate(u, dropped | {r}) for r in more]


@pytest.mark.parametrize("name", ["resnet18", "gpt2"])
def test_evaluate_equals_plain_re_evaluation(name):
    g = _graphs()[name]
    u = ck._Units(g, _cost(g))
    rng = random.Random(0)
    saved = sorted(u.saved)
    for _ in range(200):
        p = rng.random()
        d = frozenset(r for r in saved if rng.random() < p)
        assert u._evaluate(d) == _plain_evaluate(u, d)
        assert u._evaluate_generic(d) == _plain_evaluate(u, d)
        more = [r for r in saved if r not in d]
        assert u.evaluate_adding(d, more) == _plain_adding(u, d, more)


def test_numpy_pareto_equals_pairwise():
    rng = random.Random(1)
    for _ in range(40):
        span = rng.choice([3, 20, 1000])
        states = {}
        dims = rng.choice([3, 4])  # (the stage DP's states; with bridges)
        for _ in range(rng.choice([70, 300, 900])):
            key = tuple(float(rng.randint(0, span)) for _ in range(dims))
            states[(*key, rng.randint(0, span) + rng.choice([0.0, 0.25]))] = rng.getrandbits(30)
        assert list(ck._pareto(states).items()) == list(ck._pareto_small(states).items())


def _plans(g, fracs, method="auto"):
    u = ck._Units(g, _cost(g))
    total = sum(u.bytes[r] for r in u.saved)
    return [ck.plan_checkpointing(g, f * total, _cost(g), method) for f in fracs]


FRACS = (1.0, 0.8, 0.6, 0.5, 0.4, 0.3)


@pytest.mark.parametrize("name", ["resnet18", "gpt2"])
def test_plans_equal_plain_planner(name, monkeypatch):
    g = _graphs()[name]
    # (the plain Pareto filter takes seconds on ResNet's thousands of stage states; it is
    # compared with the numpy one above)
    methods, fracs = (
        (("auto",), (0.6, 0.4)) if name == "resnet18" else (("auto", "greedy", "chain"), FRACS)
    )
    fast = {m: [p.to_dict() for p in _plans(g, fracs, m)] for m in methods}
    monkeypatch.setattr(ck._Units, "_evaluate", _plain_evaluate)
    monkeypatch.setattr(ck._Units, "evaluate_adding", _plain_adding)
    if name == "gpt2":
        monkeypatch.setattr(ck, "_pareto", ck._pareto_small)
    plain = {m: [p.to_dict() for p in _plans(g, fracs, m)] for m in methods}
    assert fast == plain


@pytest.mark.parametrize("name", ["resnet18", "gpt2"])
def test_plan_peak_exact_fits_and_monotone(name):
    g = _graphs()[name]
    u = ck._Units(g, _cost(g))
    prev = -math.inf
    for p in _plans(g, FRACS):  # loosest first
        peak, rec, kept = _plain_evaluate(u, p.dropped)
        assert (p.predicted_peak_bytes, p.recompute_cost, p.kept_bytes) == (peak, rec, kept)
        assert p.smallest_peak_bytes <= peak
        if p.feasible:
            assert peak <= p.limit_bytes
            assert p.recompute_cost >= prev  # a tighter limit never recomputes less
            prev = p.recompute_cost


_SCRIPT = """
import json, sys
sys.path.insert(0, {tests!r})
from test_checkpoint_speed import _graphs, _plans
print(json.dumps([p.to_dict() for p in _plans(_graphs()["gpt2"], (0.6, 0.4))]))
"""


def test_plan_does_not_depend_on_hash_seed():
    here = os.path.dirname(os.path.abspath(__file__))
    out = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        r = subprocess.run(
            [sys.executable, "-c", _SCRIPT.format(tests=here)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        out.append(json.loads(r.stdout))
    assert out[0] == out[1]


def test_stage_dp_bounds_resnet_peak_and_never_loses_to_the_old_estimate():
    """ResNet's relu after a residual add rebuilds the add, which reads the block input two
    stages back: the stage DP joins those runs, so its peak is an upper bound on the exact one
    for every plan it keeps; and its plans are never costlier than those of the old estimate
    (runs joined only across adjacent dropped stages), which could be low."""
    g = _graphs()["resnet18"]
    u = ck._Units(g, _cost(g))
    st, keep_b, seg_b, cost = ck._stage_problem(u)
    reach = ck._stage_reach(u, st)
    assert min(reach) == -2
    states = ck._chain_states(keep_b, seg_b, cost, sum(keep_b), [r == -2 for r in reach])

    def dropped(bits):
        return frozenset(
            r for i, s in enumerate(st) if not bits >> i & 1 for r in s if r in u.saved
        )

    for key, bits in states.items():
        assert u.evaluate(dropped(bits))[0] <= key[0] + max(key[1], key[2])
    old = ck._chain_states(keep_b, seg_b, cost, sum(keep_b))
    old_plans = [u.evaluate(dropped(b)) for b in old.values()]
    assert any(u.evaluate(dropped(b))[0] > k[0] + max(k[1], k[2]) for k, b in old.items())
    total = sum(u.bytes[r] for r in u.saved)
    for k in range(21):
        lim = total * (0.2 + 0.04 * k)
        p = ck.plan_checkpointing(g, lim, _cost(g), "chain")
        was = [rec for peak, rec, _ in old_plans if peak <= lim]
        if was:
            assert p.feasible and p.recompute_cost <= min(was)
