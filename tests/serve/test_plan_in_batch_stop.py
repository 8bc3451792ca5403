"""`serve plan` stops inside a batch: once a layout meets the SLOs on g GPUs and every layout on
at most g has been simulated, the rest of the batch (more GPUs) is cancelled and any result of
it dropped, so the answer does not depend on the workers' timing. Before, a batch of one to
eight GPUs (every layout of an 8-GPU budget) was simulated whole even when one GPU met the
SLOs: the README's plan took 142 s on two cores, now 6 s. ``every_layout`` keeps the old
exhaustive ranking on request."""

from __future__ import annotations

import time
from pathlib import Path

from hwtune.hardware.catalog import get_device
from hwtune.model.catalog import get_model
from hwtune.serve.config import ReplicaConfig
from hwtune.serve.plan import SLO, candidates, plan
from hwtune.serve.request import closed_loop, fixed_lengths
from hwtune.workers import job_runner


def _base() -> ReplicaConfig:
    return ReplicaConfig(get_model("llama3.1-8b"), get_device("h100-sxm-80gb"))


def _wl():  # noqa: ANN202
    return closed_loop(8, *fixed_lengths(16, 256, 16))


def test_a_met_slo_on_one_gpu_simulates_only_one_gpu_layouts() -> None:
    # an SLO of 100 s: every layout meets it, so the answer is on one GPU
    base, wl = _base(), _wl()
    got = plan(base, wl, SLO(ttft_p90_s=100.0), max_gpus=4, disagg=False, processes=1)
    one = [d for d in candidates(base, 4, disagg=False) if d.gpus == 1]
    assert all(r.meets for r in got) and {r.gpus for r in got} == {1}
    assert sorted(map(repr, (r.deployment for r in got))) == sorted(map(repr, one))


def test_the_answer_does_not_depend_on_the_workers() -> None:
    # two worker processes finish layouts on more GPUs before the last one-GPU layout: those
    # results are dropped, and the list is the one a single process gives
    base, wl, slo = _base(), _wl(), SLO(ttft_p90_s=100.0)
    alone = plan(base, wl, slo, max_gpus=4, disagg=False, processes=1)
    pooled = plan(base, wl, slo, max_gpus=4, disagg=False, processes=2)
    assert [r.to_dict() for r in pooled] == [r.to_dict() for r in alone]


def test_every_layout_ranks_the_larger_ones_too() -> None:
    base, wl = _base(), _wl()
    every = plan(base, wl, SLO(ttft_p90_s=100.0), max_gpus=4, disagg=False, processes=1,
                 every_layout=True)  # fmt: skip
    assert {r.gpus for r in every} == {1, 2, 3, 4}
    assert every[0].gpus == 1 and every[0].meets  # fewest GPUs first still
    assert len(every) == len(candidates(base, 4, disagg=False))


def _mark(job: tuple[str, int]) -> int:
    """A job that leaves a file behind when it runs; every job but the first then waits for the
    file ``go`` in the folder's parent (so none can finish, and free its worker for the next,
    before the caller has stopped: the count does not depend on the machine's load)."""
    folder, i = job
    Path(folder, str(i)).touch()
    go = Path(folder).parent / "go"
    for _ in range(6000):  # at most 60 s
        if i == 0 or go.exists():
            break
        time.sleep(0.01)
    return i


def test_closing_the_results_cancels_the_jobs_not_begun(tmp_path: Path) -> None:
    # two workers and 40 jobs: after the first result the caller stops; the jobs already handed
    # to the workers (two running, at most three in the executor's call queue) run, the others
    # never do
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir(), second.mkdir()
    with job_runner(2, None, "spawn") as run:  # 2 processes: the pool path
        it = run(_mark, [(str(first), i) for i in range(40)])
        assert next(it) == (0, 0)
        it.close()
        (tmp_path / "go").touch()
        # the same pool runs a second round: jobs of the first left in its queue would run
        # before these (first in, first out), so counting after it shows what was cancelled
        assert sorted(i for _, i in run(_mark, [(str(second), i) for i in range(4)])) == [
            0,
            1,
            2,
            3,
        ]
        ran = len(list(first.iterdir()))
    assert 1 <= ran <= 6, ran
