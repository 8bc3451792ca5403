"""Attention data parallelism prices a step by its busiest rank: a prompt runs whole on one rank
(TensorRT-LLM and SGLang assign each request to one attention-DP rank, vLLM to one data-parallel
engine), so a lone prompt is not split eight ways (`IterationModel.rank_tokens`,
`StepShape.pf_max_*`)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwtune.hardware.catalog import get_device
from hwtune.model.catalog import get_model
from hwtune.serve.config import ReplicaConfig
from hwtune.serve.iteration import IterationModel, StepShape
from hwtune.serve.metrics import per_request
from hwtune.serve.request import Request, closed_loop, fixed_lengths
from hwtune.serve.simulator import simulate


def _dsv3(dp: int) -> ReplicaConfig:
    return ReplicaConfig(get_model("deepseek-v3"), get_device("h200-sxm-141gb"), tp=8 // dp,
                         dp_attention=dp, ep=8, weight_dtype="fp8", kv_dtype="fp8",
                         scheduler="orca")  # fmt: skip


def _shape(chunks: list[int]) -> StepShape:
    """The shape the scheduler builds for fresh prompts of these lengths (one chunk each)."""
    from hwtune.serve.scheduler import Replica

    cfg = _dsv3(8)
    rep = Replica(0, cfg, IterationModel(cfg), 10**6)
    s = StepShape()
    for i, q in enumerate(chunks):
        rep._take(Request(rid=i, arrival=0.0, prompt=q, output=4), q, s)
    return s


def test_the_largest_chunk_is_recorded_whole():
    s = _shape([1000, 8000, 500])
    assert (s.pf_tokens, s.pf_max_q) == (9500, 8000)
    assert s.pf_max_pairs == pytest.approx(8000 * 4000)  # q (c + q/2) with c = 0
    assert s.pf_max_kv == 8000


def test_a_lone_prompt_is_priced_on_one_rank():
    """8,000 tokens as one prompt against eight prompts of 1,000 under 8-way attention DP: the
    same MoE work, but one rank runs all 8,000 tokens' attention projections and its causal
    attention over 8,000 x 4,000 pairs, against 1,000 tokens and 1,000 x 500 pairs per rank
    (64x the pairs). Without attention DP both shapes cost the same in their token-wise part."""
    dp = IterationModel(_dsv3(8))
    lone, spread = _shape([8000]), _shape([1000] * 8)
    assert dp.rank_tokens(lone) == 8000 and dp.rank_tokens(spread) == 1000
    _, pf_lone, _ = dp._attention(lone)
    _, pf_spread, _ = dp._attention(spread)
    assert pf_lone > 30 * pf_spread  # 64x the pairs; the K/V reads scale 8x
    assert dp.step_time(lone) > dp.step_time(spread) + pf_lone - pf_spread - 1e-9
    tp = IterationModel(_dsv3(1))
    assert tp.linear(8000) == tp.linear(lone.tokens, tp.rank_tokens(lone))
    assert tp.rank_tokens(lone) == tp.rank_tokens(spread) == 8000


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 4000), min_size=1, max_size=12))
def test_the_busiest_rank_costs_at_least_an_even_share(chunks):
    """Any mix of prompts: pricing the busiest rank is never cheaper than an even split (the
    old model, recovered by forgetting the largest chunk), and equal when no chunk exceeds the
    even share of tokens."""
    m = IterationModel(_dsv3(8))
    s = _shape(chunks)
    even = replace(s, pf_max_q=0, pf_max_pairs=0.0, pf_max_kv=0.0, pf_max_pairs_w=0.0,
                   pf_max_kv_w=0.0)  # fmt: skip
    assert m.step_time(s) >= m.step_time(even) - 1e-12
    pairs = [c * c / 2 for c in chunks]
    if 8 * max(chunks) <= sum(chunks) and 8 * max(pairs) <= sum(pairs):
        assert m.step_time(s) == pytest.approx(m.step_time(even))


def test_one_client_on_attention_dp_waits_for_its_whole_prompt():
    """One client, 8,000-token prompts, DeepSeek-V3 on eight H200s with 8-way attention DP: the
    TTFT is the prefill step of the whole prompt on one rank, more than twice the step that
    splits it eight ways (the prefill attention alone is 64x the pairs)."""
    cfg = _dsv3(8)
    res = simulate(cfg, closed_loop(1, *fixed_lengths(2, 8000, 2)))
    ttft = float(per_request(res)["ttft"].mean())
    m = IterationModel(cfg)
    s = _shape([8000])
    even = replace(s, pf_max_q=0, pf_max_pairs=0.0, pf_max_kv=0.0, pf_max_pairs_w=0.0,
                   pf_max_kv_w=0.0)  # fmt: skip
    assert ttft == pytest.approx(m.step_time(s), rel=0.02)
    assert ttft > 2 * m.step_time(even)


def _replica(cfg: ReplicaConfig):
    from hwtune.serve.scheduler import Replica

    return Replica(0, cfg, IterationModel(cfg), 10**6)


def _waiting(rep, prompts: list[int]) -> None:
    for i, n in enumerate(prompts):
        r = Request(rid=i, arrival=0.0, prompt=n, output=4)
        r.queued = 0.0
        rep.waiting.append(r)


def test_the_token_budget_is_per_rank():
    """Eight 8,000-token prompts at a budget of 8,192 tokens: eight attention-DP ranks take one
    each in the same step (each rank has its budget), attention TP takes one."""
    dp = _replica(_dsv3(8).with_(max_num_seqs=64))
    _waiting(dp, [8000] * 8)
    batch, s = dp.schedule(0.0)
    assert len(batch) == 8 and s.pf_max_q == 8000 and dp.rank_budget == 8192
    tp = _replica(_dsv3(1).with_(max_num_seqs=64))
    _waiting(tp, [8000] * 8)
    batch, _ = tp.schedule(0.0)
    assert len(batch) == 1


def test_a_chunk_holds_at_most_one_ranks_budget():
    """Chunked prefill under 8-way attention DP: a 20,000-token prompt's first chunk is one
    rank's 8,192 tokens, not the replica's 65,536."""
    rep = _replica(_dsv3(8).with_(scheduler="vllm", max_num_seqs=64))
    _waiting(rep, [20000])
    batch, s = rep.schedule(0.0)
    assert [q for _r, q in batch] == [8192] and s.pf_max_q == 8192
