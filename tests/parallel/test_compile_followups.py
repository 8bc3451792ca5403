"""Follow-ups to the compiler review: interleaved needs vpp >= 2, ZeRO-3 all-gathers before a
recompute, ZB-V's activation limit, DualPipe's bubble against DeepSeek-V3's Table 2."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hwtune.errors import HwtuneInputError
from hwtune.parallel import schedules as S
from hwtune.parallel.spec import make_spec


# ---- 1. interleaved needs at least two chunks per rank ----------------------------------------
def test_interleaved_with_one_chunk_is_refused_by_the_spec():
    with pytest.raises(HwtuneInputError) as e:
        make_spec(pp=2, global_batch=4, schedule={"name": "interleaved", "vpp": 1})
    assert e.value.field.endswith("vpp") and e.value.value == 1
    assert "2" in e.value.expected and "interleaved" in e.value.expected
    make_spec(pp=2, global_batch=4, schedule={"name": "interleaved", "vpp": 2})  # accepted


@pytest.mark.parametrize("extra", [["--vpp", "1"], []], ids=["vpp-1", "vpp-default"])
def test_interleaved_with_one_chunk_is_refused_by_the_cli(rejects, extra):
    args = ["compile", "--pp", "2", "--global-batch", "4", "--schedule", "interleaved", *extra]
    rejects(args, "vpp", "1", "interleaved", "at least 2")


def test_interleaved_with_one_chunk_is_refused_from_a_strategy_file(rejects, tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("mesh: {pp: 2}\nglobal_batch: 4\nschedule: {name: interleaved, vpp: 1}\n")
    rejects(["compile", "--strategy", str(f)], "vpp", "1", "interleaved")


# ---- 2. ZeRO-3: the backward's gather precedes the recompute --------------------------------
def _plan(n_gpus: int, **kw):
    from hwtune.hardware.cluster import make_cluster
    from hwtune.model.catalog import get_model
    from hwtune.parallel.compiler import compile_plan

    spec = make_spec(**kw)
    return compile_plan(spec, get_model("llama3.1-8b"), make_cluster("h100-sxm-80gb", n_gpus))


def _gather_services(plan) -> dict[tuple[str, int, int], list[int]]:
    """(role, stage, mb) -> the all-gathers its compute waits on; role F is the forward, role B
    the backward together with its recompute (FSDP gathers once for the forward and once more
    for the backward, the recompute reusing the backward's gather)."""
    from hwtune.parallel.actions import parse_action

    ag = {o.id for o in plan.ops if o.kind == "AG"}
    out: dict[tuple[str, int, int], set[int]] = {}
    for o in plan.ops:
        if o.stream != "compute" or o.kind == "OPT":
            continue
        mine = {d for d, _ in o.deps if d in ag}
        for p in parse_action(o.label).parts:
            role = "F" if p.kind == "F" else "B"
            out.setdefault((role, p.stage, p.mb), set()).update(mine)
    return {k: sorted(v) for k, v in out.items()}


EXPLICIT_R = {0: ["0F0", "0F1", "0R0", "0B0", "0R1", "0B1"]}


@pytest.mark.parametrize(
    ("n", "kw"),
    [
        (2, dict(dp=2, global_batch=4, zero=3, recompute="full")),
        (2, dict(dp=2, global_batch=4, zero=3, recompute="full", schedule={"actions": EXPLICIT_R})),
        (4, dict(dp=2, pp=2, global_batch=8, zero=3, recompute="full")),
        (4, dict(dp=2, pp=2, global_batch=16, zero=3, recompute="full", schedule="dualpipev")),
        (4, dict(dp=2, pp=2, global_batch=16, zero=3, recompute="full", schedule="dualpipe")),
        (4, dict(dp=2, pp=2, global_batch=16, zero=3, recompute="selective", schedule="zbv")),
    ],
    ids=["1f1b-pp1", "explicit-R", "1f1b-pp2", "dualpipev", "dualpipe", "zbv"],
)
def test_zero3_gathers_once_for_forward_once_for_recompute_and_backward(n, kw):
    plan = _plan(n, **kw)
    by_id = {o.id: o for o in plan.ops}
    serv = _gather_services(plan)
    # a pipeline that torch.distributed.pipelining drives keeps a stage gathered from a
    # backward to its next forward (s49: as the runtime's FSDP2 stages do): at most one gather
    # each there, one for the first forward
    pipelined = kw.get("pp", 1) > 1 and kw.get("schedule") != "dualpipe"
    for s in range(len(plan.stage_rank)):
        mbs = {mb for (_, st, mb) in serv if st == s}
        for mb in mbs:
            f, b = serv[("F", s, mb)], serv[("B", s, mb)]
            if pipelined:
                assert len(f) <= 1 and len(b) <= 1, (s, mb, f, b)
                assert not f or f != b
                continue
            # exactly one gather serves the forward and exactly one the backward (+ recompute)
            assert len(f) == 1 and len(b) == 1, (s, mb, f, b)
            assert f != b  # the forward's gather is not reused: ZeRO-3 frees after the forward
        if pipelined:
            assert len(serv[("F", s, min(mbs))]) == 1
    # every gather serves something, and carries the parameters of each chunk it serves: 2 bytes
    # (bf16) per local parameter, once per chunk
    served: dict[int, set[int]] = {}
    for (_, s, _), ids in serv.items():
        for i in ids:
            served.setdefault(i, set()).add(plan.chunk_of[s])
    for o in plan.ops:
        if o.kind == "AG":
            assert o.id in served
            c = [plan.stages[k] for k in served[o.id]]
            if pipelined:  # an overlapped pair gathers only the chunk not already whole
                subsets = [c[:1], c[1:], c] if len(c) == 2 else [c]
                assert any(o.nbytes == pytest.approx(2.0 * sum(x.dense_params + x.expert_params
                                                              for x in cs)) for cs in subsets)  # fmt: skip
                continue
            assert o.nbytes == pytest.approx(2.0 * sum(x.dense_params + x.expert_params for x in c))
    # a separate recompute waits on the backward's gather, as its backward does
    for o in plan.ops:
        if o.kind == "R":
            b = next(
                x for x in plan.ops if x.kind in ("B", "I") and (x.stage, x.mb) == (o.stage, o.mb)
            )
            ags = [d for d, _ in o.deps if by_id[d].kind == "AG"]
            assert ags and ags == [d for d, _ in b.deps if by_id[d].kind == "AG"]


def test_zero3_recompute_gather_does_not_shorten_the_step():
    """The gather before the recompute adds a dependency: the step cannot get faster than the
    same DAG with the recompute free to start before the parameters arrive (the old plan), and a
    recompute split out as R costs what the same recompute folded into the backward costs."""
    from hwtune.parallel.simulator import simulate

    kw = dict(dp=2, global_batch=4, zero=3, recompute="full")
    plan = _plan(2, **kw, schedule={"actions": EXPLICIT_R})
    t = simulate(plan).step_time_s
    by_id = {o.id: o for o in plan.ops}
    for o in plan.ops:  # drop the recompute's gather: the recompute runs without parameters
        if o.kind == "R":
            o.deps = [(d, f) for d, f in o.deps if by_id[d].kind != "AG"]
            o.finish_after = [(d, x) for d, x in o.finish_after if by_id[d].kind != "AG"]
    assert simulate(plan).step_time_s <= t * (1 + 1e-12)
    folded = simulate(_plan(2, **kw)).step_time_s
    assert t >= folded * (1 - 1e-9)
    res = simulate(_plan(2, **kw, schedule={"actions": EXPLICIT_R}))
    end = {sp.op.id: sp.end for sp in res.spans}
    for sp in res.spans:
        if sp.op.kind == "R":
            ag = next(d for d, _ in sp.op.deps if by_id[d].kind == "AG")
            assert sp.end >= end[ag]  # the rerun forward ends after the last layer's gather


# ---- 3. ZB-V stays under its activation limit -----------------------------------------------
def _peak_live(orders) -> dict[int, int]:
    """Per rank, the most micro-batch-chunks whose forward ran and whose W has not (what the
    limit of Qi et al. 2024 bounds)."""
    out = {}
    for r, v in orders.items():
        live = peak = 0
        for a in v:
            for p in a.parts:
                live += (p.kind == "F") - (p.kind in ("W", "B"))
                peak = max(peak, live)
        out[r] = peak
    return out


def _check_complete(orders, p: int, m: int) -> None:
    seen = [(q.kind, q.stage, q.mb) for v in orders.values() for a in v for q in a.parts]
    want = [(k, s, mb) for k in "FIW" for s in range(2 * p) for mb in range(m)]
    assert sorted(seen) == sorted(want)  # every F, I and W once
    for r, v in orders.items():
        pos = {(q.kind, q.stage, q.mb): i for i, a in enumerate(v) for q in a.parts}
        for (k, s, mb), i in pos.items():
            assert S.stage_rank("zbv", p, s) == r
            if k == "W":
                assert pos[("I", s, mb)] < i
            if k == "I":
                assert pos[("F", s, mb)] < i


def test_zbv_unequal_stages_stay_under_the_limit():
    """The case that broke it: p = 2, m = 4, the second chunk of rank 1 (stage 2) twice as slow.
    The greedy rule filled rank 1 with first-chunk forwards while the oldest micro-batch waited
    there for its second chunk; the stall breaker then ran a fifth chunk against a limit of 2p =
    4."""
    orders = S.generate("zbv", 2, 4, 1, lambda s, k: 2.0 if s == 2 else 1.0)
    _check_complete(orders, 2, 4)
    assert max(_peak_live(orders).values()) <= 4


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    p=st.integers(1, 6),
    m=st.integers(1, 16),
    data=st.data(),
)
def test_zbv_never_exceeds_its_activation_limit(p, m, data):
    """For any p, m and stage/kind costs, every order the builder returns keeps each rank's
    in-flight micro-batch-chunks at or under the limit (2p for ZB-V: p micro-batches of a whole
    stage, 1F1B's memory; Qi et al. 2024), and runs every F, I and W once."""
    vals = st.sampled_from([0.25, 0.5, 1.0, 2.0, 3.0])
    table = data.draw(
        st.dictionaries(st.tuples(st.integers(0, 2 * p - 1), st.sampled_from("FIW")), vals)
    )
    orders = S.generate("zbv", p, m, 1, lambda s, k: table.get((s, k), 1.0))
    _check_complete(orders, p, m)
    assert all(v <= 2 * p for v in _peak_live(orders).values())


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(p=st.integers(1, 5), m=st.integers(1, 12), extra=st.integers(0, 8), data=st.data())
def test_greedy_builder_honours_any_limit_it_accepts(p, m, extra, data):
    """The builder under a tighter or looser limit (2 chunks per rank hold one micro-batch)."""
    limit = 2 + extra
    costs = data.draw(st.lists(st.sampled_from([0.5, 1.0, 2.0]), min_size=2 * p, max_size=2 * p))
    stages = [[r, 2 * p - 1 - r] for r in range(p)]
    orders = S._greedy_zero_bubble(p, m, stages, lambda s, k: costs[s], limit)
    _check_complete(orders, p, m)
    assert all(v <= limit for v in _peak_live(orders).values())


def test_greedy_builder_refuses_a_limit_below_one_micro_batch():
    with pytest.raises(HwtuneInputError, match="limit"):
        S._greedy_zero_bubble(2, 4, [[0, 3], [1, 2]], lambda s, k: 1.0, 1)


# ---- 4. DualPipe's bubble against DeepSeek-V3's Table 2 -------------------------------------
def _ideal_costs(plan, f: float, i: float, w: float):
    """Forward f, input gradient i, weight gradient w, full backward i + w per chunk; an
    overlapped pair the sum of its two parts (nothing to overlap: communication, sends,
    recomputation and the optimizer cost 0 s)."""
    from hwtune.parallel.actions import parse_action

    secs = {"F": f, "I": i, "W": w, "B": i + w}
    for o in plan.ops:
        if o.stream != "compute" or o.kind in ("OPT", "R"):
            o.seconds = 0.0
        elif o.kind == "FB":
            o.seconds = sum(secs[q.kind] for q in parse_action(o.label).parts)
        else:
            o.seconds = secs[o.kind]
        o.finish_after = [(d, 0.0) for d, _ in o.finish_after]
    return plan


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(["dualpipe", "dualpipev"]),
    half=st.integers(1, 4),
    extra=st.integers(0, 4),
    f=st.sampled_from([0.5, 1.0, 2.0, 3.0]),
    w_share=st.sampled_from([0.25, 0.5, 1.0]),
)
def test_dualpipe_idle_is_deepseek_v3_table_2(name, half, extra, f, w_share):
    """DeepSeek-V3 technical report (arXiv 2412.19437) Table 2: DualPipe's bubble is
    (PP/2 - 1)(F&B + B - 3W), against 1F1B's (PP - 1)(F + B); F a forward chunk, B a full
    backward chunk, W its weight-gradient part, F&B two overlapped chunks. DualPipeV (the
    deepseek-ai/DualPipe README) is the same schedule cut in half: PP = 2p stages on p devices,
    bubble (PP/2 - 1)(F&B + B - 3W) = (p - 1)(...) in units of its (half-size) chunks.

    Assumptions of this check: nothing to overlap (zero communication), so F&B = F + B, the sum
    of the pair's compute; F = I (the input-gradient part B - W takes a forward's time, the
    slot-counting of Table 2; with F != I these orders idle differently) and W <= F (a W can fill
    at most the forward-sized slot it sits in; for W > F the bubble stays at its W = F value).
    Then the formula is (k)(F + B + B - 3W) = k(3F - W) with k = PP/2 - 1, and every rank idles
    exactly that long: step time - m (F + B) per rank (each rank runs m chunk forwards and
    backwards: DualPipe's two directions carry m/2 each, DualPipeV's two chunks m each, counted
    here as 2m half chunks). The bubble is independent of m (m >= 2p)."""
    from hwtune.parallel.simulator import simulate

    p = 2 * half if name == "dualpipe" else half + 1
    m = 2 * p + (2 * extra if name == "dualpipe" else extra)
    i, w = f, f * w_share
    b = i + w
    plan = _ideal_costs(_plan(p, pp=p, global_batch=m, zero=0, schedule=name), f, i, w)
    res = simulate(plan)
    chunk_ops = m if name == "dualpipe" else 2 * m  # per rank
    k = p / 2 - 1 if name == "dualpipe" else p - 1  # PP/2 - 1 with PP = p or 2p stages
    table_2 = k * ((f + b) + b - 3 * w)
    for r in range(p):
        assert res.busy_s[r] == pytest.approx(chunk_ops * (f + b))
        assert res.step_time_s - res.busy_s[r] == pytest.approx(table_2, abs=1e-9)
    one_f_one_b = (2 * k + 1) * (f + b)  # (PP - 1)(F + B): DualPipe's is always smaller
    assert table_2 < one_f_one_b


def test_the_estimators_strategy_refuses_interleaved_with_one_chunk_too(rejects):
    """The same rule in `Strategy.validate_for` (what `hwtune estimate` and the compiler's base
    strategy check): interleaved with vpp = 1 is not taken as 1F1B."""
    from hwtune.model.catalog import get_model
    from hwtune.train.strategy import Strategy

    st_ = Strategy(pp=2, global_batch=4, schedule="interleaved", vpp=1)
    with pytest.raises(HwtuneInputError) as e:
        st_.validate_for(get_model("llama3.1-8b"), None)
    assert e.value.field == "vpp" and e.value.value == 1 and "interleaved" in e.value.expected
    rejects(["estimate", "--pp", "2", "--gpus", "2", "--global-batch", "4", "--schedule", "interleaved"],
            "vpp", "1", "interleaved")  # fmt: skip
