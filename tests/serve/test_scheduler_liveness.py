"""Cases a randomized search of the simulator found (2026-12-01): a livelock with pipeline
stages, a request stranded by its draft tokens, the fast path running past requests that step
by step would join, the prefix-cache query count, and step labels under speculation."""

from __future__ import annotations

import math

import pytest

from hwtune.errors import HwtuneInputError
from hwtune.serve.config import Deployment, ReplicaConfig
from hwtune.serve.memory import replica_memory
from hwtune.serve.metrics import summarize
from hwtune.serve.request import Workload
from hwtune.serve.simulator import simulate


def _with_blocks(cfg: ReplicaConfig, n: int) -> ReplicaConfig:
    """``cfg`` with the memory fraction that leaves exactly ``n`` KV blocks (bisection)."""
    lo, hi = 0.01, 1.0
    for _ in range(80):
        mid = (lo + hi) / 2
        try:
            b = replica_memory(cfg.with_(gpu_memory_utilization=mid)).kv_blocks
        except HwtuneInputError:
            b = -1
        lo, hi = (mid, hi) if b < n else (lo, mid)
    out = cfg.with_(gpu_memory_utilization=hi)
    assert replica_memory(out).kv_blocks == n
    return out


def _same(a, b) -> None:
    assert a.n_steps == b.n_steps
    for x, y in zip(a.requests, b.requests, strict=True):
        assert x.first_scheduled == pytest.approx(y.first_scheduled, rel=1e-12, abs=1e-12)
        assert x.first_token == pytest.approx(y.first_token, rel=1e-12, abs=1e-12)
        assert x.finish == pytest.approx(y.finish, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("pp", [2, 4])
@pytest.mark.parametrize("policy", ["vllm", "sarathi"])
def test_two_prompts_that_do_not_fit_together_finish_with_pipeline_stages(llama8b, h100, pp,
                                                                          policy):  # fmt: skip
    """264- and 278-token prompts on 18 blocks of 16 (288 tokens): either fits, not both. With
    pp > 1 the other prompt's chunk is in flight when one needs blocks; preempting itself then,
    the two took turns forever. Waiting for the in-flight step instead, both finish, with at
    most the one preemption pp = 1 needs."""
    base = ReplicaConfig(llama8b, h100, scheduler=policy, max_num_batched_tokens=100,
                         enable_prefix_caching=False)  # fmt: skip
    wl = Workload((264, 278), (1, 1), "closed", 2)
    one = simulate(_with_blocks(base, 18), wl)
    res = simulate(_with_blocks(base.with_(pp=pp), 18), wl, max_sim_time=5.0)
    assert len(res.requests) == 2
    assert res.preemptions <= max(1, one.preemptions)


def test_draft_tokens_count_against_the_cache(llama8b, h100):
    """A verification step holds its drafts' KV: prompt 250 + output 6 fits 256 tokens, but not
    with 3 draft tokens (259), which stranded the request under some policies. It is refused
    up front, naming the sum."""
    base = ReplicaConfig(llama8b, h100, enable_prefix_caching=False)
    simulate(_with_blocks(base, 16), Workload((250,), (6,), "closed", 1))
    spec = _with_blocks(base.with_(spec_tokens=3, spec_acceptance=0.5, scheduler="static"), 16)
    with pytest.raises(HwtuneInputError, match=r"spec-tokens: got 259; expected at most 256"):
        simulate(spec, Workload((250,), (6,), "closed", 1))
    res = simulate(spec, Workload((250,), (3,), "closed", 1))
    assert len(res.requests) == 1


@pytest.mark.parametrize("policy", ["static", "vllm"])
def test_fast_path_admits_hand_offs_as_step_by_step(cfg8b, policy):
    """A disaggregated decode worker admits a hand-off whenever a slot and blocks are free,
    whatever its policy (and its token budget): the fast path must not decode past one."""
    dec = cfg8b.with_(scheduler=policy)
    if policy == "vllm":
        dec = dec.with_(max_num_batched_tokens=2)
    dep = Deployment(dec, 1, prefill=cfg8b, prefill_replicas=1)
    wl = Workload((1, 1, 1), (37, 30, 1), "trace", arrivals=(0.1, 0.1, 0.16))
    _same(simulate(dep, wl, fast=True), simulate(dep, wl, fast=False))


@pytest.mark.parametrize("policy", ["prefill-first", "sglang", "vllm"])
def test_fast_path_lets_a_prompt_in_when_decodes_fill_the_budget(cfg8b, policy):
    """Four decodes fill a 4-token budget; these policies but vllm run a prompt in a step of its
    own with the whole budget, so the prompt arriving at 0.1 s starts at the next step, fast
    or not."""
    cfg = cfg8b.with_(scheduler=policy, max_num_batched_tokens=4, enable_prefix_caching=False)
    wl = Workload((1,) * 5, (200, 200, 200, 200, 5), "trace", arrivals=(0, 0, 0, 0, 0.1))
    fast, slow = simulate(cfg, wl, fast=True), simulate(cfg, wl, fast=False)
    _same(fast, slow)
    if policy != "vllm":
        assert fast.requests[4].first_scheduled < 0.11


def test_fast_path_sizes_a_chunk_by_the_rank_budget(h100):
    """Attention DP: a chunk is capped at the per-rank budget (32 / 2 ranks), so a queued prompt
    fits into fewer free blocks than the whole budget's chunk would need."""
    from hwtune.model.catalog import get_model

    cfg = _with_blocks(ReplicaConfig(get_model("olmoe-1b-7b"), h100, dp_attention=2, ep=2,
                                     max_num_batched_tokens=32, enable_prefix_caching=False),
                       25)  # fmt: skip
    wl = Workload((700, 100), (90, 3), "trace", arrivals=(0.0, 0.0579))
    _same(simulate(cfg, wl, fast=True), simulate(cfg, wl, fast=False))


def test_a_prompt_is_looked_up_once_however_long_it_waits(cfg8b):
    """Prefix-cache statistics count a prompt's tokens once per admission: four unique
    500-token prompts on a 640-token cache run one at a time (the others wait for KV room, step
    after step) and query 2,000 tokens, not 2,000 plus every retry; with a 480-token prefix
    shared by the first two, the second hits 480 of the 2,000."""
    cfg = _with_blocks(cfg8b, 40)
    wl = Workload((500,) * 4, (20,) * 4, "trace", arrivals=(0.0,) * 4)
    res = simulate(cfg, wl)
    assert res.preemptions == 0
    assert res.prefix_query_tokens == 2000 and res.prefix_hit_tokens == 0
    shared = Workload((500,) * 4, (20,) * 4, "trace", arrivals=(0.0,) * 4,
                      prefix_groups=(0, 0, -1, -1), prefix_lens=(480, 480, 0, 0))  # fmt: skip
    assert summarize(simulate(cfg, shared))["prefix_hit_rate"] == pytest.approx(480 / 2000)


def test_speculative_decode_steps_are_not_labelled_prefills(cfg8b):
    cfg = cfg8b.with_(spec_tokens=2, spec_acceptance=0.5)
    res = simulate(cfg, Workload((100,), (5,), "closed", 1), record_steps=True)
    assert (res.steps[0].prefills, res.steps[0].decodes) == (1, 0)
    assert all((s.prefills, s.decodes) == (0, 1) for s in res.steps[1:])
    assert math.isclose(sum(1 for s in res.steps if s.decodes), len(res.steps) - 1)
