"""Overlap scheduling (`ReplicaConfig.overlap_schedule`; TensorRT-LLM's
``PyExecutor._executor_loop_overlap``, SGLang's ``event_loop_overlap``, vLLM's
``--async-scheduling``): the engine forms step k+1's batch while step k runs, so a request that
arrives during a step joins the step after next; an idle engine takes it at once."""

from __future__ import annotations

import numpy as np
import pytest

from hwtune.errors import HwtuneInputError
from hwtune.hardware.catalog import get_device
from hwtune.model.catalog import get_model
from hwtune.serve.config import ReplicaConfig
from hwtune.serve.metrics import per_request
from hwtune.serve.request import Request, Workload, closed_loop, open_loop
from hwtune.serve.simulator import simulate


@pytest.fixture(scope="module")
def cfg():
    return ReplicaConfig(get_model("llama3.1-8b"), get_device("h100-sxm-80gb"))


def _new(rid: int, queued: float) -> Request:
    r = Request(rid=rid, arrival=queued, prompt=256, output=8)
    r.queued = queued
    return r


def test_requests_queued_after_the_cutoff_wait_for_the_next_pass(cfg, decoding_replica):
    rep = decoding_replica(cfg, 2)
    rep.waiting.extend([_new(1, 0.010), _new(2, 0.030)])
    batch, _ = rep.schedule(0.040, cutoff=0.020)  # the batch was formed at 0.020
    assert [r.rid for r, _q in batch if r.rid < 1000] == [1]
    assert [r.rid for r in rep.waiting] == [2]
    for r, q in batch:  # the step runs
        r.computed += q
    batch, _ = rep.schedule(0.060, cutoff=0.040)
    assert [r.rid for r, _q in batch if r.computed < r.target] == [2]
    assert not rep.waiting


def test_an_otherwise_empty_step_takes_the_new_requests(cfg, decoding_replica):
    """Nothing decoding and nothing seen: the engine's loop picks the new arrivals up at once
    (an idle engine does not wait a step)."""
    rep = decoding_replica(cfg, 0)
    rep.waiting.append(_new(1, 0.030))
    batch, _ = rep.schedule(0.040, cutoff=0.020)
    assert [r.rid for r, _q in batch] == [1]


def _mean_ttft(c: ReplicaConfig, wl: Workload) -> tuple[float, float]:
    pr = per_request(simulate(c, wl))
    return float(np.mean(pr["ttft"])), float(np.nanmean(pr["tpot"]))


def test_open_loop_arrivals_wait_about_one_decode_step_more(cfg):
    """Poisson arrivals at a light load land in the middle of decode steps: with overlap they
    join one step later, so the mean TTFT grows by about one decode step (TPOT is unchanged to
    within a percent: the steps are the same, only their membership shifts)."""
    wl = open_loop(2.0, np.full(300, 512), np.full(300, 256), seed=3)
    t0, p0 = _mean_ttft(cfg, wl)
    t1, p1 = _mean_ttft(cfg.with_(overlap_schedule=True), wl)
    assert 0.6 * p0 < t1 - t0 < 1.4 * p0, (t0, t1, p0)
    assert p1 == pytest.approx(p0, rel=0.01)


def test_closed_loop_successors_wait_one_decode_step_more(cfg):
    """A closed-loop client sends its next request when its last token is out, so the request
    reaches the engine after the batch formed at that instant: without overlap that batch is the
    next step's and the request joins the one after; with overlap the next step's batch was formed
    a step earlier and the one formed now is the step after next's, so it joins a step later
    still (about one decode step more TTFT; TPOT within a percent)."""
    rng = np.random.default_rng(0)
    p, o = rng.integers(800, 1024, 64), rng.integers(100, 200, 64)
    t0, p0 = _mean_ttft(cfg, closed_loop(4, p, o))
    t1, p1 = _mean_ttft(cfg.with_(overlap_schedule=True), closed_loop(4, p, o))
    assert 0.6 * p0 < t1 - t0 < 1.4 * p0, (t0, t1, p0)
    assert p1 == pytest.approx(p0, rel=0.01)


def test_bad_value_is_refused(cfg):
    with pytest.raises(HwtuneInputError, match="overlap_schedule"):
        cfg.with_(overlap_schedule="yes")


def test_serve_plan_carries_the_overlap_flag():
    """`serve plan` (open loop by default) simulates every layout with the engine's overlap
    scheduler when asked: the same single-GPU layout's p90 TTFT grows, its p90 TPOT does not."""
    import json

    from typer.testing import CliRunner

    from hwtune.cli.main import app

    args = ["serve", "plan", "--max-gpus", "1", "--rate", "2", "--input-len", "512",
            "--output-len", "128", "--num-requests", "120", "--tpot-p90", "1", "--processes", "1",
            "--no-disagg", "--json"]  # fmt: skip
    plain = CliRunner().invoke(app, args)
    ovl = CliRunner().invoke(app, [*args, "--overlap-schedule"])
    assert plain.exit_code == 0 and ovl.exit_code == 0, plain.output + ovl.output
    a, b = json.loads(plain.output)["best"][0], json.loads(ovl.output)["best"][0]
    assert a["layout"] == b["layout"]
    assert b["ttft_p90_s"] > a["ttft_p90_s"]
    assert b["tpot_p90_s"] == pytest.approx(a["tpot_p90_s"], rel=0.02)


@pytest.mark.parametrize("fast", [True, False])
def test_a_finished_requests_slot_frees_for_the_batch_after_next(cfg, fast):
    """Two slots, three clients: the third client's request waits for a slot. With overlap the
    batch that follows a request's last step was formed while that step ran, when the request
    still held its slot, so the waiting request can first join the step after (it starts later
    than the finish); without overlap it joins the step that starts at the finish."""
    from hwtune.serve.request import fixed_lengths

    wl = closed_loop(3, *fixed_lengths(3, 500, 4))
    for overlap in (False, True):
        c = cfg.with_(max_num_seqs=2, overlap_schedule=overlap)
        reqs = sorted(simulate(c, wl, fast=fast).requests, key=lambda r: r.rid)
        first_free = min(r.finish for r in reqs[:2])
        third = reqs[2]
        if overlap:
            assert third.first_scheduled > first_free
        else:
            assert third.first_scheduled == first_free
        assert all(r.finish == r.finish for r in reqs)  # every request completes


def test_an_idle_engine_takes_the_freed_slot_at_once(cfg):
    """One slot, two clients, one request each: after the first finishes nothing runs, so the
    engine's next loop admits the second at the first's finish even under overlap."""
    from hwtune.serve.request import fixed_lengths

    c = cfg.with_(max_num_seqs=1, overlap_schedule=True)
    wl = closed_loop(2, *fixed_lengths(2, 256, 4))
    a, b = sorted(simulate(c, wl).requests, key=lambda r: r.rid)
    assert b.first_scheduled == a.finish
