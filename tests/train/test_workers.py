"""`hwtune.workers`: the fan-out that `study` and `serve plan` share (in process, local
processes, Ray)."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwtune.errors import HwtuneInputError
from hwtune.workers import check_workers, job_runner, run_all


def _square(x: int) -> int:
    return x * x


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(-1000, 1000), max_size=12))
def test_in_process_every_job_once_with_its_index(jobs):
    got = list(run_all(_square, jobs, workers=1))
    assert [i for i, _ in got] == list(range(len(jobs)))  # in process: in order
    assert [r for _, r in got] == [x * x for x in jobs]


def test_local_processes_return_every_job_under_its_index():
    jobs = list(range(-7, 9))
    got = dict(run_all(_square, jobs, workers=2, context="spawn"))
    assert sorted(got) == list(range(len(jobs)))
    assert all(got[i] == jobs[i] ** 2 for i in got)


def _square_and_pid(x: int) -> tuple[int, int]:
    return x * x, os.getpid()


def test_a_runner_keeps_its_processes_across_rounds():
    # `serve plan` runs a batch of layouts per round; the workers of the first round serve the
    # later ones (their caches stay warm), and every job of a round comes back under its index
    rounds = [list(range(6)), list(range(-5, 3)), [4, 9]]
    pids: list[set[int]] = []
    with job_runner(workers=2, context="spawn") as run:
        for jobs in rounds:
            got = dict(run(_square_and_pid, jobs))
            assert sorted(got) == list(range(len(jobs)))
            assert all(got[i][0] == jobs[i] ** 2 for i in got)
            pids.append({p for _, p in got.values()})
    assert os.getpid() not in pids[0] and len(pids[0] | pids[1] | pids[2]) <= 2
    with job_runner(workers=1) as run:  # one worker: in this process, in order
        assert [r for _, r in run(_square_and_pid, [3, 4])] == [(9, os.getpid()), (16, os.getpid())]


def test_no_jobs_start_nothing():
    assert list(run_all(_square, [], ray_address=None)) == []


@pytest.mark.parametrize(
    ("workers", "ray", "field"),
    [
        (0, None, "workers"),
        (-3, None, "workers"),
        (2, "local", "workers"),
        (None, "  ", "--ray"),
        (4 * (os.cpu_count() or 1) + 1, None, "workers"),
    ],
)
def test_bad_counts_and_addresses_are_refused(workers, ray, field):
    with pytest.raises(HwtuneInputError, match=field):
        check_workers(workers, ray)
    with pytest.raises(HwtuneInputError, match=field):  # also before any job runs
        list(run_all(_square, [1, 2], workers=workers, ray_address=ray))


def test_serve_plan_on_ray_equals_the_in_process_plan():
    """The same candidates on a local Ray instance come back complete and in the same order as
    when simulated in this process (each simulation is deterministic)."""
    pytest.importorskip("ray")
    from hwtune.hardware.catalog import get_device
    from hwtune.model.catalog import get_model
    from hwtune.serve.config import ReplicaConfig
    from hwtune.serve.plan import SLO, plan
    from hwtune.serve.request import closed_loop, fixed_lengths

    base = ReplicaConfig(model=get_model("llama3.1-8b"), device=get_device("h100-sxm-80gb"))
    wl = closed_loop(4, *fixed_lengths(12, 256, 8))
    here = plan(base, wl, SLO(), max_gpus=2, disagg=False, processes=1)
    seen: list[tuple[int, int]] = []
    far = plan(base, wl, SLO(), max_gpus=2, disagg=False, ray_address="local",
               progress=lambda d, t: seen.append((d, t)))  # fmt: skip
    assert [r.to_dict() for r in far] == [r.to_dict() for r in here]
    assert seen == [(k, len(here)) for k in range(1, len(here) + 1)]
