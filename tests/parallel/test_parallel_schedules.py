"""Per-rank orders generated from the papers: each stage runs each micro-batch's forward and
backward exactly once on its rank, warm-up counts as in Narayanan et al. SC'21, DualPipe's eight
phases (DeepSeek-V3 §3.2.1)."""

from __future__ import annotations

from collections import Counter

import pytest

from hwtune.parallel import schedules as S
from hwtune.parallel.actions import format_orders, parse_action


def _counts(orders, name, pp):
    c = Counter()
    for r, v in orders.items():
        for a in v:
            for p in a.parts:
                assert S.stage_rank(name, pp, p.stage) == r
                c[(p.kind, p.stage, p.mb)] += 1
    return c


@pytest.mark.parametrize(
    ("name", "pp", "m", "v"),
    [("gpipe", 4, 8, 1), ("1f1b", 4, 8, 1), ("1f1b", 3, 7, 1), ("interleaved", 4, 8, 2),
     ("interleaved", 2, 4, 3), ("zb-h1", 4, 8, 1), ("zbv", 4, 8, 1), ("dualpipe", 4, 8, 1),
     ("dualpipe", 8, 20, 1), ("dualpipev", 4, 8, 1), ("dualpipev", 3, 9, 1)],
)  # fmt: skip
def test_every_forward_and_backward_once(name, pp, m, v):
    orders = S.generate(name, pp, m, v)
    c = _counts(orders, name, pp)
    assert all(k == 1 for k in c.values())
    nst = S.n_stages(name, pp, v)
    for s in range(nst):
        mbs = range(m) if name != "dualpipe" else (range(m // 2) if s < pp else range(m // 2, m))
        for mb in mbs:
            assert c[("F", s, mb)] == 1
            assert c[("B", s, mb)] + c[("I", s, mb)] == 1
            assert c[("I", s, mb)] == c[("W", s, mb)]


def test_1f1b_warmup_is_p_minus_r_minus_1():
    orders = S.generate("1f1b", 4, 8)
    for r, v in orders.items():
        first_b = next(i for i, a in enumerate(v) if a.kind == "B")
        assert first_b == (4 - r - 1) + 1  # warm-up forwards, then one more forward


def test_interleaved_warmup_megatron():
    p, v, m = 4, 2, 8
    orders = S.generate("interleaved", p, m, v)
    for r, acts in orders.items():
        first_b = next(i for i, a in enumerate(acts) if a.kind == "B")
        assert first_b == min((p - r - 1) * 2 + (v - 1) * p, m * v) + 1
        assert acts[0].stage == r and acts[p].stage == p + r  # chunk 1 after p forwards


def test_dualpipe_has_overlapped_pairs_and_zero_bubble_w():
    orders = S.generate("dualpipe", 8, 16)
    pairs = sum(1 for v in orders.values() for a in v if a.sub)
    ws = sum(1 for v in orders.values() for a in v if a.kind == "W")
    assert pairs > 0 and ws > 0
    assert str(orders[0][0]) == "0F0"


def test_action_text_round_trip():
    for text in ("2F0", "13I7", "0W11", "(0F4;3B1)OVERLAP_F_B", "1SEND_F3"):
        assert str(parse_action(text)) == text
    assert "rank 1" in format_orders(S.generate("1f1b", 2, 2))
