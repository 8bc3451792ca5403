"""`serve plan` searches every layout up to the GPU budget, fewest GPUs first, in batches of
whole GPU counts, and stops after the first batch that holds a layout meeting the SLOs
(`hwtune.serve.plan.candidate_tiers`, `plan`). Before, it simulated the 400 layouts with the
fewest GPUs and silently left out the rest (1,814 layouts of Llama-3.1-8B on 32 GPUs)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from hwtune.errors import HwtuneInputError
from hwtune.hardware.catalog import get_device
from hwtune.model.catalog import get_model
from hwtune.serve.config import Deployment, ReplicaConfig
from hwtune.serve.plan import PREFILL_MAX_NUM_SEQS, SLO, candidate_tiers, candidates, plan
from hwtune.serve.request import closed_loop, fixed_lengths


def _base(model: str = "llama3.1-8b") -> ReplicaConfig:
    return ReplicaConfig(get_model(model), get_device("h100-sxm-80gb"))


def _key(d: Deployment) -> tuple:
    def shape(c: ReplicaConfig | None) -> tuple:
        return () if c is None else (c.tp, c.pp, c.ep, c.max_num_seqs)

    return (shape(d.replica), d.replicas, d.router, shape(d.prefill), d.prefill_replicas)


@settings(max_examples=12, deadline=None)
@given(max_gpus=hs.integers(1, 20), disagg=hs.booleans(),
       model=hs.sampled_from(["llama3.1-8b", "llama3.1-70b", "qwen3-30b-a3b"]))  # fmt: skip
def test_tiers_are_every_layout_by_gpu_count(max_gpus: int, disagg: bool, model: str) -> None:
    base = _base(model)
    tiers = list(candidate_tiers(base, max_gpus, disagg))
    counts = [t[0].gpus for t in tiers]
    assert counts == sorted(set(counts))  # one tier per count, ascending
    assert all(d.gpus == t[0].gpus <= max_gpus for t in tiers for d in t)
    # the same layouts as enumerated directly: every replica shape the plan tries, at every
    # replica count within the budget, and every decode/prefill pool pairing that fits
    got = sorted(_key(d) for t in tiers for d in t)
    shapes = {d.replica for t in tiers for d in t if d.prefill is None}
    want = [Deployment(c, n, "least-tokens") for c in shapes
            for n in range(1, max_gpus // c.gpus + 1)]  # fmt: skip
    if disagg:
        big = [c for c in shapes if c.max_num_seqs == 256 and c.pp == 1]
        for dc in big:
            for pc in big:
                p = replace(pc, max_num_seqs=PREFILL_MAX_NUM_SEQS)
                want += [Deployment(dc, nd, "least-tokens", p, np_)
                         for nd in range(1, max_gpus + 1) for np_ in range(1, max_gpus + 1)
                         if nd * dc.gpus + np_ * pc.gpus <= max_gpus]  # fmt: skip
    assert got == sorted(_key(d) for d in want)


def test_tiers_are_built_lazily() -> None:
    # a million GPUs would be ~10^11 disaggregated pool pairings if built at once
    first = next(candidate_tiers(_base(), 10**6))
    assert {d.gpus for d in first} == {1}


def test_layout_count_past_the_old_cap() -> None:
    # Llama-3.1-8B on H100s, 32 GPUs. Aggregated: TP 1/2/4/8 x PP 1/2 (1-16 GPUs a replica) x
    # 2 sequence limits, each at every replica count that fits: 2 x (32+16+8+4 + 16+8+4+2) =
    # 180. Disaggregated: decode and prefill pools of TP 1/2/4/8 (PP 1, 256 sequences), all
    # pairs (a, b) of pool sizes with a x nd + b x np <= 32, nd, np >= 1: 1,634. The former
    # search simulated the first 400 of these 1,814 and said nothing of the rest.
    pairs = sum(1 for a in (1, 2, 4, 8) for b in (1, 2, 4, 8) for nd in range(1, 33)
                for np_ in range(1, 33) if a * nd + b * np_ <= 32)  # fmt: skip
    assert pairs == 1634
    assert len(candidates(_base(), 32)) == 180 + pairs


def _wl():  # noqa: ANN202
    return closed_loop(16, *fixed_lengths(32, 512, 32))


def test_stops_at_the_fewest_gpus_that_meet_and_misses_none_below() -> None:
    base, wl = _base(), _wl()
    every = plan(base, wl, SLO(), max_gpus=4, disagg=False, processes=1, every_layout=True)
    one_gpu = min(r.ttft_p90_s for r in every if r.gpus == 1)
    assert any(r.gpus > 1 and r.ttft_p90_s < one_gpu for r in every)
    # an SLO no 1-GPU layout meets but a larger one does
    slo = SLO(ttft_p90_s=one_gpu * 0.98)
    full = plan(base, wl, slo, max_gpus=4, disagg=False, processes=1, every_layout=True)
    best = full[0].gpus
    assert full[0].meets and best > 1
    for size in (1, 3):
        got = plan(base, wl, slo, max_gpus=4, disagg=False, processes=1, batch=size)
        assert got[0].gpus == best and got[0].meets
        # every layout on fewer GPUs than the best was simulated (and missed)
        below = [r for r in full if r.gpus < best]
        assert sorted(r.describe() for r in got if r.gpus < best) == sorted(
            r.describe() for r in below
        )
        assert not any(r.meets for r in got if r.gpus < best)
    # with batch 1 the search ends at the best count: nothing larger is simulated
    assert max(r.gpus for r in plan(base, wl, slo, max_gpus=4, disagg=False, processes=1,
                                    batch=1)) == best  # fmt: skip


def test_progress_reaches_every_simulated_layout() -> None:
    seen: list[tuple[int, int]] = []
    got = plan(_base(), _wl(), SLO(ttft_p90_s=100.0), max_gpus=4, disagg=False, processes=1,
               batch=1, progress=lambda d, t: seen.append((d, t)))  # fmt: skip
    assert [d for d, _ in seen] == list(range(1, len(got) + 1))
    assert seen[-1] == (len(got), len(got)) and all(d <= t for d, t in seen)


def test_progress_over_batches_when_nothing_meets() -> None:
    # one batch per GPU count (batch 1): the total grows by each count's layouts, done never
    # falls, and every layout in the budget is simulated before the SLO is refused
    base, seen = _base(), []
    sizes = [len(t) for t in candidate_tiers(base, 3)]
    assert len(sizes) == 3
    with pytest.raises(HwtuneInputError) as e:
        plan(base, _wl(), SLO(ttft_p90_s=1e-6), max_gpus=3, processes=1, batch=1,
             progress=lambda d, t: seen.append((d, t)))  # fmt: skip
    assert e.value.field == "slo"
    totals = sorted({t for _, t in seen})
    assert totals == [sum(sizes[: i + 1]) for i in range(3)]
    assert [d for d, _ in seen] == list(range(1, sum(sizes) + 1))


def test_a_request_past_the_context_is_refused_before_any_layout() -> None:
    seen: list[tuple[int, int]] = []
    wl = closed_loop(1, *fixed_lengths(2, 131000, 100))  # Llama-3.1's context: 131072
    with pytest.raises(HwtuneInputError) as e:
        plan(_base(), wl, SLO(ttft_p90_s=1.0), max_gpus=10**6, processes=1,
             progress=lambda d, t: seen.append((d, t)))  # fmt: skip
    assert e.value.field == "input-len + output-len" and e.value.value == 131100
    assert not seen  # not one layout simulated


@pytest.mark.parametrize("bad", [0, -1, True, 2.5])
def test_batch_must_be_a_positive_count(bad: object) -> None:
    with pytest.raises(HwtuneInputError) as e:
        plan(_base(), _wl(), SLO(), max_gpus=1, disagg=False, processes=1, batch=bad)  # type: ignore[arg-type]
    assert e.value.field == "batch"


def test_cli_says_how_far_it_searched() -> None:
    import json

    from typer.testing import CliRunner

    from hwtune.cli.main import app

    args = ["serve", "plan", "--max-gpus", "256", "--concurrency", "2", "--num-requests", "4",
            "--input-len", "128", "--output-len", "8", "--ttft-p90", "10", "--no-disagg",
            "--processes", "1", "--json"]  # fmt: skip
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    g = doc["searched_gpus"]
    assert doc["max_gpus"] == 256 and 1 <= g < 256
    # every layout on up to that many GPUs was simulated, and no larger one
    assert doc["candidates"] == len(candidates(_base(), g, disagg=False))
    assert doc["best"][0]["gpus"] == 1
