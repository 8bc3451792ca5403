"""The event loop, schedulers and metrics: invariants, single-request physics, policies."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwtune.serve.config import Deployment
from hwtune.serve.iteration import StepShape
from hwtune.serve.metrics import summarize
from hwtune.serve.request import Workload, closed_loop, fixed_lengths, open_loop
from hwtune.serve.simulator import iteration_model, simulate


def _one(cfg, prompt, output):
    return simulate(cfg, Workload((prompt,), (output,), "closed", 1))


def test_single_request_times_are_its_steps(cfg8b):
    """Alone on the replica: TTFT is one prefill step, TPOT the mean of its decode steps."""
    res = _one(cfg8b, 1000, 11)
    r = res.requests[0]
    m = iteration_model(cfg8b)
    pre = m.step_time(StepShape(tokens=1000, seqs=1, sampled=1, pf_pairs=1000 * 500,
                                pf_kv=1000, pf_tokens=1000, pf_pairs_w=1000 * 500, pf_kv_w=1000))  # fmt: skip
    assert r.ttft == pytest.approx(pre, rel=1e-9)
    dec = [m.step_time(StepShape(tokens=1, seqs=1, sampled=1, dec_n=1, dec_ctx=c, dec_ctx_w=c))
           for c in range(1001, 1011)]  # fmt: skip
    assert r.tpot == pytest.approx(sum(dec) / 10, rel=1e-9)
    assert r.e2e == pytest.approx(pre + sum(dec), rel=1e-9)


def test_batch_one_decode_is_bounded_by_weight_reads(cfg8b):
    """Decoding one token reads every weight once: at least bytes / bandwidth (16 GB / 3.35
    TB/s = 4.8 ms for Llama-3.1-8B bf16), and with realistic efficiency well under 2x that."""
    res = _one(cfg8b, 128, 64)
    floor = 8.03e9 * 2 / cfg8b.device.memory_bandwidth_si
    assert floor < res.requests[0].tpot < 2 * floor


def test_fp8_weights_speed_up_decode(cfg8b):
    t16 = _one(cfg8b, 128, 64).requests[0].tpot
    t8 = _one(replace(cfg8b, weight_dtype="fp8"), 128, 64).requests[0].tpot
    assert 0.45 * t16 < t8 < 0.75 * t16


def test_tensor_parallel_cuts_decode_time(h100):
    from hwtune.model.catalog import get_model
    from hwtune.serve.config import ReplicaConfig

    base = ReplicaConfig(get_model("llama3.1-70b"), h100, tp=4)
    t4 = _one(base, 512, 32).requests[0].tpot
    t8 = _one(replace(base, tp=8), 512, 32).requests[0].tpot
    assert 0.5 * t4 < t8 < 0.85 * t4  # less than linear: all-reduces and launch overheads


def _invariants(res, wl, cfg):
    assert len(res.requests) == len(wl)
    for r in res.requests:
        assert r.generated == r.output  # conservation of output tokens
        assert r.arrival <= r.first_scheduled <= r.first_token <= r.finish
        assert r.ttft <= r.e2e
        assert r.blocks == []
    assert np.all(res.kv_util <= 1.0 + 1e-12)
    s = summarize(res)
    assert s["throughput_tokens_per_s"]["output"] * (s["simulated_s"] - 0) >= 0
    assert sum(r.output for r in res.requests) == sum(wl.outputs)
    return s


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(1, 40),
    conc=st.integers(1, 12),
    prompt=st.integers(1, 3000),
    output=st.integers(1, 300),
    sched=st.sampled_from(["vllm", "sarathi", "orca", "prefill-first", "sglang", "static"]),
    block=st.sampled_from([8, 16, 32]),
    util=st.sampled_from([0.9, 0.255]),
)
def test_invariants_hold_for_any_small_workload(cfg8b, n, conc, prompt, output, sched, block, util):
    # a whole-prompt policy refuses prompts over its budget (test_whole_prompts.py)
    budget = 3072 if sched in ("orca", "prefill-first") else 2048
    cfg = replace(cfg8b, scheduler=sched, block_size=block, gpu_memory_utilization=util,
                  max_num_batched_tokens=budget)  # fmt: skip
    p, o = fixed_lengths(n, prompt, output)
    wl = closed_loop(conc, p, o)
    res = simulate(cfg, wl)
    _invariants(res, wl, cfg)


def test_kv_pressure_preempts_and_still_finishes(cfg8b):
    cfg = replace(cfg8b, gpu_memory_utilization=0.24)  # ~1.4 GiB of KV: ~11k tokens for 12 x 1900
    p, o = fixed_lengths(24, 1500, 400)
    wl = closed_loop(12, p, o)
    res = simulate(cfg, wl)
    s = _invariants(res, wl, cfg)
    assert s["preemptions"] > 0
    assert s["kv_utilization"]["max"] > 0.9


def test_deterministic_with_a_seed(cfg8b):
    from hwtune.serve.request import sharegpt_like_lengths

    p, o = sharegpt_like_lengths(300, seed=3)
    a = summarize(simulate(cfg8b, open_loop(8.0, p, o, seed=3)))
    b = summarize(simulate(cfg8b, open_loop(8.0, p, o, seed=3)))
    c = summarize(simulate(cfg8b, open_loop(8.0, p, o, seed=4)))
    for d in (a, b, c):
        d.pop("wall_s")
    assert a == b
    assert a != c


@pytest.mark.parametrize(
    "frontend,overlap,open_rate",
    [(None, False, None), (1000.0, False, None), (None, True, None), (None, True, 8.0)],
)
def test_fast_forward_equals_step_by_step(cfg8b, frontend, overlap, open_rate):
    """Also with a front end that the decode stretches outrun (`test_frontend.py`), and with
    overlap scheduling, whose open-loop arrivals land inside decode stretches."""
    cfg = cfg8b.with_(frontend_tokens_per_s=frontend, overlap_schedule=overlap)
    p, o = fixed_lengths(40, 700, 200)
    wl = closed_loop(16, p, o) if open_rate is None else open_loop(open_rate, p, o, seed=5)
    a = simulate(cfg, wl, fast=True)
    b = simulate(cfg, wl, fast=False)
    assert a.n_steps == b.n_steps
    for x, y in zip(a.requests, b.requests, strict=True):
        assert x.first_token == pytest.approx(y.first_token, rel=1e-12, abs=1e-12)
        assert x.finish == pytest.approx(y.finish, rel=1e-12, abs=1e-12)
    sa, sb = summarize(a), summarize(b)
    for k in ("mean", "p50", "p90", "p99"):
        assert sa["itl_s"][k] == pytest.approx(sb["itl_s"][k], rel=1e-9)


def test_prefix_caching_hit_rate_matches_the_shared_fraction(cfg8b):
    """1000-token prompts sharing a 640-token prefix in 2 groups: after each group's first
    request, every lookup hits the 40 full shared blocks (640 tokens of 1000)."""
    n = 200
    p, o = fixed_lengths(n, 1000, 8)
    wl = closed_loop(4, p, o, prefix_len=640, prefix_groups=2, seed=1)
    s = summarize(simulate(cfg8b, wl))
    expect = (n - 2) * 640 / (n * 1000)
    assert s["prefix_hit_rate"] == pytest.approx(expect, abs=0.02)
    off = summarize(simulate(replace(cfg8b, enable_prefix_caching=False), wl))
    assert off["prefix_hit_rate"] == 0.0
    assert s["ttft_s"]["mean"] < off["ttft_s"]["mean"]


def test_stall_free_batching_bounds_inter_token_gaps(cfg8b):
    """Sarathi-Serve's claim (Agrawal et al. OSDI'24, Fig. 1): with long prompts arriving while
    others decode, iteration-level batching of whole prompts (Orca) stalls decodes for a whole
    prefill; chunking to a small budget keeps the worst gaps short."""
    p, o = fixed_lengths(60, 6000, 200)
    wl = open_loop(2.0, p, o, seed=0)
    orca = summarize(simulate(replace(cfg8b, scheduler="orca"), wl))
    sara = summarize(simulate(replace(cfg8b, scheduler="sarathi", chunk_size=512), wl))
    assert sara["itl_s"]["p99"] < 0.6 * orca["itl_s"]["p99"]


def test_static_batching_waits_for_the_whole_batch(cfg8b):
    p, o = fixed_lengths(64, 256, 128)
    o = o.copy()
    o[::2] = 16  # short and long requests mixed
    wl = open_loop(20.0, p, o, seed=1)
    cont = summarize(simulate(cfg8b, wl))
    stat = summarize(simulate(replace(cfg8b, scheduler="static"), wl))
    assert stat["ttft_s"]["mean"] > cont["ttft_s"]["mean"]


def test_least_outstanding_tokens_routing_balances_skew(cfg8b):
    """Alternating long and short requests: round-robin sends every long one to replica 0;
    least-outstanding-tokens spreads them."""
    n = 40
    p = np.array([4000 if i % 2 == 0 else 100 for i in range(n)])
    o = np.array([400 if i % 2 == 0 else 20 for i in range(n)])
    wl = open_loop(6.0, p, o, seed=2)
    rr = summarize(simulate(Deployment(cfg8b, 2, "round-robin"), wl))
    lt = summarize(simulate(Deployment(cfg8b, 2, "least-tokens"), wl))
    assert lt["e2e_s"]["p90"] < rr["e2e_s"]["p90"]
    assert rr["gpus"] == lt["gpus"] == 2


def test_disaggregation_adds_transfer_and_removes_interference(cfg8b):
    p, o = fixed_lengths(60, 3000, 100)
    wl = closed_loop(16, p, o)
    agg = simulate(Deployment(cfg8b, 2), wl)
    dis = simulate(Deployment(cfg8b, 1, prefill=cfg8b, prefill_replicas=1), wl)
    sa, sd = summarize(agg), summarize(dis)
    _invariants(dis, wl, cfg8b)
    # decode steps never carry a prompt: the worst inter-token gap is a decode step
    assert sd["itl_s"]["p99"] < sa["itl_s"]["p99"]
    # the KV of a 3000-token prompt (384 MB) crosses a 400 Gb/s NIC in > 5 ms
    kv = 3000 * 131072
    assert all(r.ttft > kv / 50e9 for r in dis.requests)


def test_disaggregated_first_token_waits_for_a_decode_slot(cfg8b):
    """TensorRT-LLM admits a generation-only request (and pulls its KV) only when it fits the
    decode worker, and the client's first token comes from the decode worker: with one decode
    slot, the second of two simultaneous requests gets its first token only after the first
    request has finished, and the prefill replica holds its KV cache until then."""
    dec = replace(cfg8b, max_num_seqs=1)
    p, o = fixed_lengths(2, 1000, 50)
    res = simulate(Deployment(dec, 1, prefill=cfg8b, prefill_replicas=1), closed_loop(2, p, o))
    _invariants(res, closed_loop(2, p, o), dec)
    a, b = sorted(res.requests, key=lambda r: r.first_token)
    assert b.first_token >= a.finish
    # the first request: its prefill step, the KV pull (>= alpha of the NIC), then its token
    pre = iteration_model(cfg8b).step_time(StepShape(
        tokens=1000, seqs=1, sampled=1, pf_pairs=1000 * 500, pf_kv=1000, pf_tokens=1000,
        pf_pairs_w=1000 * 500, pf_kv_w=1000))  # fmt: skip
    assert a.ttft > pre
    assert a.ttft < pre + 0.01  # 131 MB over a 400 Gb/s NIC: a few ms


@settings(max_examples=15, deadline=None)
@given(
    n=st.integers(1, 30),
    conc=st.integers(1, 10),
    prompt=st.integers(1, 2000),
    output=st.integers(1, 120),
    sched=st.sampled_from(["vllm", "orca", "static"]),
    seqs=st.integers(1, 6),
    pools=st.tuples(st.integers(1, 2), st.integers(1, 3)),
)
def test_disaggregated_invariants_hold(cfg8b, n, conc, prompt, output, sched, seqs, pools):
    dec = replace(cfg8b, scheduler=sched, max_num_seqs=seqs)
    p, o = fixed_lengths(n, prompt, output)
    wl = closed_loop(conc, p, o)
    res = simulate(Deployment(dec, pools[1], prefill=cfg8b, prefill_replicas=pools[0]), wl)
    _invariants(res, wl, dec)
    assert all(r.handoff is None for r in res.requests)


def test_disaggregated_first_token_is_at_a_decode_step_start(cfg8b):
    """The prefill's token is returned just before the first decode step that runs the request
    (``_handle_first_token_response``): every first token coincides with a decode step's start,
    and the request's first inter-token gap is that whole step."""
    p, o = fixed_lengths(12, 700, 30)
    wl = closed_loop(6, p, o)
    res = simulate(Deployment(cfg8b, 1, prefill=cfg8b, prefill_replicas=1), wl, record_steps=True)
    starts = {s.start for s in res.steps if s.role == "decode"}
    assert all(r.first_token in starts for r in res.requests)


def test_pipeline_parallel_runs_batches_in_flight(h100):
    from hwtune.model.catalog import get_model
    from hwtune.serve.config import ReplicaConfig

    cfg = ReplicaConfig(get_model("llama3.1-8b"), h100, pp=2)
    p, o = fixed_lengths(64, 512, 64)
    wl = closed_loop(32, p, o)
    res = simulate(cfg, wl)
    _invariants(res, wl, cfg)
    one = summarize(simulate(replace(cfg, pp=1), wl))
    assert summarize(res)["requests_per_s"] > 0.5 * one["requests_per_s"]


def test_tpot_definition():
    from hwtune.serve.request import Request

    r = Request(0, 1.0, 10, 5)
    r.first_token, r.finish = 1.5, 2.5
    assert r.tpot == pytest.approx((2.5 - 1.0 - 0.5) / 4)
    assert math.isnan(Request(1, 0.0, 10, 1).tpot)
