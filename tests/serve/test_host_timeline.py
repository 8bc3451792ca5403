"""The host as its own timeline under an overlap scheduler (`ReplicaConfig.host_timeline`).

TensorRT-LLM's ``PyExecutor._executor_loop_overlap`` (and SGLang's ``event_loop_overlap``)
schedule and launch step k+1, then wait for step k and send its tokens. So (i) an eager prefill
step's kernel launches start while the step before still runs on the GPU, and (ii) a step's
tokens leave only once the next step is launched: a whole launch floor late when that next step
is an eager prefill. The expected values below follow from that loop order alone."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwtune.errors import HwtuneInputError
from hwtune.serve.iteration import IterationModel
from hwtune.serve.metrics import per_request
from hwtune.serve.request import closed_loop
from hwtune.serve.simulator import simulate


@pytest.fixture(scope="module")
def eager(cfg8b):
    """Llama-3.1-8B on one H100, eager prefill under an overlap scheduler, one 256-token
    prompt per step (so a burst of two prompts takes two eager steps, each bound by the
    host's launches: ~22 ms of launches against a few ms of GPU work)."""
    return cfg8b.with_(eager_prefill=True, overlap_schedule=True, scheduler="orca",
                       max_num_batched_tokens=300, enable_prefix_caching=False)  # fmt: skip


def _two_prompts(cfg):
    res = simulate(cfg, closed_loop(2, np.full(2, 256), np.full(2, 32)), record_steps=True)
    return sorted(res.requests, key=lambda r: r.rid), res.steps


def test_a_prompt_followed_by_an_eager_step_waits_for_its_launch(eager):
    """Two prompts at once: A runs in step 1, B in step 2 (eager, with A's first decode). A's
    first token goes out only when step 2 is launched: the host launched step 1 from 0 to
    the floor F, step 2 from F to 2F, so at 2F; B's, followed by a CUDA-graph decode, when
    its step ends, as without the host timeline (to within the per-step host overhead, which
    step 2's early launches hide)."""
    model = IterationModel(eager)
    floor = model.launch_floor
    (a0, b0), steps0 = _two_prompts(eager)
    (a1, b1), steps1 = _two_prompts(eager.with_(host_timeline=True))
    first = steps0[0]
    assert first.prefills == 1 and steps0[1].prefills == 1
    assert model.step_time(first.shape, math.inf) < first.duration  # launch-bound
    assert steps1[0].duration == pytest.approx(first.duration)
    assert a0.first_token == pytest.approx(first.duration)
    assert a1.first_token == pytest.approx(2 * floor)
    assert a1.first_token > a0.first_token + 0.9 * floor
    assert b1.first_token == pytest.approx(steps1[0].duration + steps1[1].duration)
    assert b1.first_token == pytest.approx(b0.first_token, abs=1e-3)  # to the host overhead


def test_an_eager_step_after_a_decode_starts_its_launches_early(eager):
    """A prompt that joins while another request decodes: its eager step's launches began when
    the decode step before it began on the GPU (the host launched that decode and then waited
    for the step before it), so it lasts the floor less that decode step, never less than its
    GPU time."""
    cfg = eager.with_(host_timeline=True)
    model = IterationModel(cfg)
    res = simulate(cfg, closed_loop(2, np.array([256, 256, 200]), np.array([64, 4, 8])),
                   record_steps=True)  # fmt: skip
    seen = 0
    for prev, s in zip(res.steps, res.steps[1:], strict=False):
        if s.prefills and not prev.prefills and math.isclose(prev.start + prev.duration, s.start):
            assert s.duration == pytest.approx(model.step_time(s.shape, prev.duration))
            assert s.duration < model.step_time(s.shape)
            assert s.duration >= model.step_time(s.shape, math.inf)
            seen += 1
    assert seen >= 1


@settings(max_examples=25, deadline=None)
@given(
    clients=st.integers(1, 6),
    prompt=st.integers(64, 2048),
    output=st.integers(2, 40),
)
def test_steps_stay_between_gpu_time_and_the_launch_floor(cfg8b, clients, prompt, output):
    """Whatever the load, a step lasts at least its GPU time and at most what it lasts when the
    host starts its launches with the GPU; each request gets all its tokens, in order, none
    before the first step has ended."""
    cfg = cfg8b.with_(eager_prefill=True, overlap_schedule=True, host_timeline=True)
    model = IterationModel(cfg)
    n = clients * 3
    res = simulate(cfg, closed_loop(clients, np.full(n, prompt), np.full(n, output)),
                   record_steps=True, record_tokens=True)  # fmt: skip
    for s in res.steps:
        assert model.step_time(s.shape, math.inf) - 1e-12 <= s.duration
        assert s.duration <= model.step_time(s.shape) + 1e-12
    ends = sorted(s.start + s.duration for s in res.steps)
    for r in res.requests:
        assert len(r.token_times) == r.output
        assert all(b >= a for a, b in zip(r.token_times, r.token_times[1:], strict=False))
        assert r.first_token >= ends[0] - 1e-12
    pr = per_request(res)
    assert np.all(pr["ttft"] > 0)


def test_off_by_default_and_needs_an_overlap_scheduler(cfg8b):
    assert cfg8b.host_timeline is False
    with pytest.raises(HwtuneInputError, match="host_timeline"):
        cfg8b.with_(host_timeline=True)  # no overlap scheduler
    with pytest.raises(HwtuneInputError, match="host_timeline"):
        cfg8b.with_(overlap_schedule=True, host_timeline="yes")


def test_cli_flag_delays_first_tokens_before_eager_steps():
    """`hwtune serve --host-timeline`: a burst of prompts taking one eager step each has its
    mean TTFT raised (every prompt but the last waits for the next one's launches); without an
    overlap scheduler the flag is refused with exit code 2."""
    import json

    from typer.testing import CliRunner

    from hwtune.cli.main import app

    args = ["serve", "--model", "llama3.1-8b", "--gpu", "h100-sxm", "--concurrency", "8",
            "--input-len", "256", "--output-len", "16", "--num-requests", "8",
            "--max-num-batched-tokens", "300", "--scheduler", "orca", "--eager-prefill",
            "--overlap-schedule", "--json"]  # fmt: skip
    plain = CliRunner().invoke(app, args)
    host = CliRunner().invoke(app, [*args, "--host-timeline"])
    assert plain.exit_code == 0 and host.exit_code == 0, plain.output + host.output
    a, b = json.loads(plain.output), json.loads(host.output)
    # eight eager steps of about one floor F each: TTFTs F, 2F, ..., 8F without the host
    # timeline; with it each but the last goes out one launch later: 2F, ..., 8F, 8F
    assert b["ttft_s"]["mean"] / a["ttft_s"]["mean"] == pytest.approx(43 / 36, rel=0.03)
    bad = CliRunner().invoke(app, ["serve", "--model", "llama3.1-8b", "--gpu", "h100-sxm",
                                   "--num-requests", "4", "--host-timeline"])  # fmt: skip
    assert bad.exit_code == 2
    assert "--host-timeline" in bad.output and "Traceback" not in bad.output


def test_a_request_taken_only_because_nothing_else_could_run_is_launched_on_arrival(eager):
    """B arrives during A's last decode step, after the host began forming the next batch, which
    finds nothing to run: the host sends A's last token when its step ends, then forms a batch
    with B and launches it. So B's eager step takes the whole floor from there (its launches
    cannot have begun before B arrived) and A's last token is not held back by them."""
    from hwtune.serve.request import Workload

    cfg = eager.with_(host_timeline=True)
    model = IterationModel(cfg)

    def run(arrive_b: float):
        wl = Workload((256, 256), (4, 2), "open", 0, (0.0, arrive_b))
        return simulate(cfg, wl, record_steps=True, record_tokens=True)

    alone = run(1.0)  # B long after A: A's steps on their own
    last = [s for s in alone.steps if s.start < 0.5][-1]
    res = run(last.start + 0.5 * last.duration)
    a, _b = sorted(res.requests, key=lambda r: r.rid)
    assert a.finish == pytest.approx(last.start + last.duration)
    b_step = next(s for s in res.steps if s.start > last.start and s.prefills)
    assert b_step.start == pytest.approx(a.finish)
    assert b_step.duration == pytest.approx(model.step_time(b_step.shape))


def test_a_prefill_worker_hands_a_prompt_over_once_the_next_step_is_launched(eager, cfg8b):
    """Disaggregated: two prompts at once on one prefill worker that takes one per eager step.
    The worker hands A over when it would send A's token, after launching B's step (at 2F, the
    first test above), not when A's step ends (about F); B, with nothing launched after it, at
    its step's end (to within the host overhead). A's decode worker is idle, so its first
    token moves by as much."""
    from hwtune.serve.config import Deployment

    def run(pre):
        dep = Deployment(cfg8b, prefill=pre)
        res = simulate(dep, closed_loop(2, np.full(2, 256), np.full(2, 8)), record_steps=True)
        return sorted(res.requests, key=lambda r: r.rid), res.steps

    floor = IterationModel(eager).launch_floor
    (a0, b0), steps0 = run(eager)
    (a1, b1), _ = run(eager.with_(host_timeline=True))
    first, second = (s for s in steps0 if s.prefills)
    assert first.duration < 1.5 * floor  # about F
    assert a0.queued == pytest.approx(first.duration)
    assert a1.queued == pytest.approx(2 * floor)
    assert a1.first_token - a0.first_token == pytest.approx(a1.queued - a0.queued, rel=1e-9)
    assert b0.queued == pytest.approx(second.start + second.duration)
    assert b1.queued == pytest.approx(b0.queued, abs=1e-3)
