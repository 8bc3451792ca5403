"""serve plan leaves out layouts with more replicas than a smaller layout's simulation used
(`hwtune.serve.plan.ReplicaSaturation`): they must simulate alike, and the search's answers
(best layout, best achievable percentiles) must be those of simulating every layout."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from hwtune.errors import HwtuneInputError
from hwtune.hardware.catalog import get_device
from hwtune.model.catalog import get_model
from hwtune.serve.config import Deployment, ReplicaConfig
from hwtune.serve.metrics import per_request
from hwtune.serve.plan import (
    SLO,
    ReplicaSaturation,
    _evaluate,
    _pool_splits,
    candidate_tiers,
    candidates,
    plan,
)
from hwtune.serve.request import closed_loop, fixed_lengths, open_loop
from hwtune.serve.simulator import simulate


def _base(seqs: int = 16) -> ReplicaConfig:
    return ReplicaConfig(get_model("llama3.1-8b"), get_device("h100-sxm-80gb"), max_num_seqs=seqs)


def _latencies(dep: Deployment, wl) -> list[tuple[float, float]]:  # noqa: ANN001
    res = simulate(dep, wl)
    pr = per_request(res)
    rid = [r.rid for r in res.requests]
    return sorted(zip(rid, pr["ttft"].tolist(), pr["e2e"].tolist(), strict=True)), res


@settings(max_examples=25, deadline=None)
@given(
    clients=hs.integers(1, 4), rate=hs.sampled_from([None, 2.0, 40.0]),
    router=hs.sampled_from(["least-tokens", "round-robin"]), disagg=hs.booleans(),
    n=hs.integers(1, 3), more=hs.integers(1, 3), seed=hs.integers(0, 5),
)  # fmt: skip
def test_a_pool_with_an_unused_replica_simulates_alike_with_more(
    clients: int, rate: float | None, router: str, disagg: bool, n: int, more: int, seed: int
) -> None:
    lengths = fixed_lengths(6, 300, 20)
    wl = closed_loop(clients, *lengths) if rate is None else open_loop(rate, *lengths, seed=seed)
    base = _base()
    pre = replace(base, max_num_seqs=4) if disagg else None
    dep = Deployment(base, n, router, pre, n)
    got, res = _latencies(dep, wl)
    assert 1 <= res.replicas_used <= n
    assert (0 if not disagg else 1) <= res.prefill_replicas_used <= (n if disagg else 0)
    if rate is None and router == "least-tokens" and not disagg:
        # the lowest-numbered idle replica: never more replicas busy than clients
        assert res.replicas_used <= clients
    du = res.replicas_used < n
    pu = disagg and res.prefill_replicas_used < n
    if du:
        bigger = Deployment(base, n + more, router, pre, n)
        assert _latencies(bigger, wl)[0] == got
    if pu:
        bigger = Deployment(base, n, router, pre, n + more)
        assert _latencies(bigger, wl)[0] == got
    if du and pu:
        bigger = Deployment(base, n + more, router, pre, n + more)
        assert _latencies(bigger, wl)[0] == got


@pytest.mark.parametrize("router", ["least-tokens", "round-robin"])
def test_one_client_leaves_both_pools_replicas_unused(router: str) -> None:
    # one client at a time: one replica of each pool would do, so three route as one
    base = _base()
    wl = closed_loop(1, *fixed_lengths(4, 300, 20))
    dep = Deployment(base, 3, router, replace(base, max_num_seqs=4), 3)
    got, res = _latencies(dep, wl)
    if router == "least-tokens":
        assert (res.replicas_used, res.prefill_replicas_used) == (1, 1)
        one = Deployment(base, 1, router, replace(base, max_num_seqs=4), 1)
        assert _latencies(one, wl)[0] == got
    else:  # in turn: four requests over three replicas
        assert (res.replicas_used, res.prefill_replicas_used) == (3, 3)


def test_pool_splits_count_every_pairing() -> None:
    for g in range(1, 40):
        for dg in (1, 2, 4, 8):
            for pg in (1, 2, 4, 8):
                want = sum(1 for nd in range(1, g + 1) for np_ in range(1, g + 1)
                           if nd * dg + np_ * pg == g)  # fmt: skip
                assert _pool_splits(g, dg, pg) == want


def _every(base: ReplicaConfig, wl, max_gpus: int, slo: SLO, disagg: bool = True) -> list:  # noqa: ANN001
    return [_evaluate((d, wl, slo, None, False)) for d in candidates(base, max_gpus, disagg)]


def test_impossible_slo_best_values_are_those_of_every_layout() -> None:
    # two clients: layouts past two or three replicas a pool route alike, so most of the 258
    # layouts on up to 12 GPUs are left out, yet the best achievable values must be the minima
    # over all of them, each simulated
    base = ReplicaConfig(get_model("llama3.1-8b"), get_device("h100-sxm-80gb"))
    wl = closed_loop(2, *fixed_lengths(6, 512, 32))
    every = _every(base, wl, 12, SLO())
    sat, seen = ReplicaSaturation(), []
    with pytest.raises(HwtuneInputError) as e:
        plan(base, wl, SLO(ttft_p90_s=1e-6), max_gpus=12, processes=1, batch=1,
             saturation=sat, progress=lambda d, t: seen.append(d))  # fmt: skip
    # TP 1/2/4/8 x PP 1/2 (1-16 GPUs a replica) x 2 sequence limits at every replica count, and
    # every decode/prefill pool pair of TP 1/2/4/8 with a x nd + b x np <= 12
    agg = 2 * sum(12 // (t * p) for t in (1, 2, 4, 8) for p in (1, 2))
    pairs = sum(1 for a in (1, 2, 4, 8) for b in (1, 2, 4, 8) for nd in range(1, 13)
                for np_ in range(1, 13) if a * nd + b * np_ <= 12)  # fmt: skip
    assert len(every) == agg + pairs
    assert sat.skipped > 100 and seen[-1] + sat.skipped == len(every)
    msg = str(e.value)
    best_ttft = min(r.ttft_p90_s for r in every)
    best_tpot = min(r.tpot_p90_s for r in every)
    best_e2e = min(r.e2e_p90_s for r in every)
    assert f"best achievable p90 TTFT {best_ttft:.3f} s" in msg
    assert f"best p90 TPOT {best_tpot * 1e3:.1f} ms" in msg
    assert f"best p90 E2E {best_e2e:.3f} s" in msg
    assert f"{sat.skipped} layouts with more replicas" in msg


def test_skipped_layouts_match_the_layout_that_covers_them() -> None:
    base = ReplicaConfig(get_model("llama3.1-8b"), get_device("h100-sxm-80gb"))
    wl = closed_loop(2, *fixed_lengths(6, 512, 32))
    every = {r.describe(): r for r in _every(base, wl, 10, SLO())}
    sat = ReplicaSaturation()
    simulated = set()
    for tier in candidate_tiers(base, 10, saturation=sat):
        for d in tier:
            r = _evaluate((d, wl, SLO(), None, False))
            simulated.add(r.describe())
            sat.note(r)
    skipped = set(every) - simulated
    assert len(skipped) == sat.skipped > 0
    for name in skipped:  # each is some simulated layout's twin, on more GPUs
        r = every[name]
        twins = [every[s] for s in simulated if (every[s].ttft_p90_s, every[s].tpot_p90_s,
                 every[s].e2e_p90_s) == (r.ttft_p90_s, r.tpot_p90_s, r.e2e_p90_s)]  # fmt: skip
        assert twins and min(t.gpus for t in twins) < r.gpus


def test_best_layout_is_that_of_every_layout() -> None:
    base = ReplicaConfig(get_model("llama3.1-8b"), get_device("h100-sxm-80gb"))
    wl = closed_loop(3, *fixed_lengths(9, 2048, 16))
    every = _every(base, wl, 8, SLO())
    # a TTFT target only layouts on several GPUs meet
    slo = SLO(ttft_p90_s=sorted(r.ttft_p90_s for r in every)[5])
    ok = [r for r in _every(base, wl, 8, slo) if r.meets]
    want = min(ok, key=lambda r: (r.gpus, -r.throughput_tokens_per_s))
    got = plan(base, wl, slo, max_gpus=8, processes=1, batch=1)
    assert got[0].meets and got[0].gpus == want.gpus
    assert math.isclose(got[0].throughput_tokens_per_s, want.throughput_tokens_per_s)


def test_cli_counts_the_layouts_left_out(rejects) -> None:  # noqa: ANN001
    import json

    from typer.testing import CliRunner

    from hwtune.cli.main import app

    common = ["serve", "plan", "--concurrency", "1", "--num-requests", "2", "--input-len", "128",
              "--output-len", "8", "--processes", "1", "--no-disagg"]  # fmt: skip
    # one client: past one replica of a shape everything routes alike, and nothing meets 1 us;
    # the first batch of 400 layouts ends well below 512 GPUs, the later ones are left out
    rejects(common + ["--max-gpus", "512", "--ttft-p90", "1e-6"], "slo", "run alike",
            "best achievable p90 TTFT")  # fmt: skip
    # batches of 400: one batch holds all 16 GPU counts' layouts, so none is known to be alike
    # before it runs
    r = CliRunner().invoke(app, common + ["--max-gpus", "16", "--ttft-p90", "10", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["skipped_alike"] == 0 and doc["max_layouts"] == 10_000
    rejects(common + ["--max-layouts", "0"], "--max-layouts", "0", "a positive integer")


def test_max_layouts_stops_between_batches_and_says_where() -> None:
    base = ReplicaConfig(get_model("llama3.1-8b"), get_device("h100-sxm-80gb"))
    wl = closed_loop(16, *fixed_lengths(16, 256, 8))
    seen: list[int] = []
    with pytest.raises(HwtuneInputError) as e:
        plan(base, wl, SLO(ttft_p90_s=1e-6), max_gpus=16, processes=1, batch=5, max_layouts=10,
             disagg=False, progress=lambda d, t: seen.append(d))  # fmt: skip
    msg = str(e.value)
    done = seen[-1]
    assert 10 <= done < len(candidates(base, 16, disagg=False))
    # whole GPU counts: every layout on up to the count it names was simulated, none beyond
    stop = int(msg.split("the search stopped at ")[1].split(" GPUs")[0])
    assert stop < 16 and f"after {done} layouts (max_layouts 10)" in msg
    assert done == len(candidates(base, stop, disagg=False))
    every = _every(base, wl, stop, SLO(), disagg=False)
    assert f"best achievable p90 TTFT {min(r.ttft_p90_s for r in every):.3f} s" in msg
    assert f"on {stop} GPUs can meet" in msg


def test_max_layouts_counts_only_what_it_left_out_below_the_stop() -> None:
    # two clients: past two or three replicas a shape routes alike; the count of layouts left
    # out is of those up to the GPU count the search stopped at, not of the next tier's
    base = ReplicaConfig(get_model("llama3.1-8b"), get_device("h100-sxm-80gb"))
    wl = closed_loop(2, *fixed_lengths(4, 256, 8))
    sat, seen = ReplicaSaturation(), []
    with pytest.raises(HwtuneInputError) as e:
        plan(base, wl, SLO(ttft_p90_s=1e-6), max_gpus=64, processes=1, batch=5, max_layouts=30,
             disagg=False, saturation=sat, progress=lambda d, t: seen.append(d))  # fmt: skip
    stop = int(str(e.value).split("the search stopped at ")[1].split(" GPUs")[0])
    assert stop < 64 and sat.skipped > 0
    assert seen[-1] + sat.skipped == len(candidates(base, stop, disagg=False))


@pytest.mark.parametrize("bad", [0, -3, True, 2.5])
def test_max_layouts_must_be_a_positive_count(bad: object) -> None:
    base = ReplicaConfig(get_model("llama3.1-8b"), get_device("h100-sxm-80gb"))
    with pytest.raises(HwtuneInputError) as e:
        plan(base, closed_loop(1, *fixed_lengths(1, 16, 4)), SLO(), max_layouts=bad)  # type: ignore[arg-type]
    assert e.value.field == "max_layouts"
