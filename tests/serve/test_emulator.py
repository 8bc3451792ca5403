"""`hwtune serve emulate`: a simulated deployment served in real time, its causality, and the
measure -> simulate loop closed on it."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwtune.errors import HwtuneInputError
from hwtune.serve.config import Deployment, ReplicaConfig
from hwtune.serve.emulator import EmulatedEngine, EmulatedTiming
from hwtune.serve.endpoint_bench import Endpoint, run_closed_loop
from hwtune.serve.measured_runs import MeasuredRun, simulate_run
from hwtune.serve.mock_server import MockServer, free_port
from hwtune.serve.request import Workload, closed_loop, fixed_lengths
from hwtune.serve.simulator import simulate


@pytest.fixture(scope="module")
def cfg(llama8b, h100):
    return ReplicaConfig(llama8b, h100, max_num_seqs=16, max_num_batched_tokens=2048)


def trace(arrivals, prompts, outputs) -> Workload:
    return Workload(tuple(prompts), tuple(outputs), mode="trace", arrivals=tuple(arrivals))


@settings(max_examples=15, deadline=None)
@given(
    n=st.integers(1, 12),
    seed=st.integers(0, 10_000),
)
def test_token_times_are_the_requests_tokens(cfg, n, seed):
    import numpy as np

    rng = np.random.default_rng(seed)
    arr = np.sort(rng.uniform(0, 0.5, n))
    p = rng.integers(16, 1500, n)
    o = rng.integers(1, 40, n)
    fast = simulate(cfg, trace(arr, p, o), record_tokens=True)
    slow = simulate(cfg, trace(arr, p, o), record_tokens=True, fast=False)
    for r, q in zip(fast.requests, slow.requests, strict=True):
        assert len(r.token_times) == r.output
        assert r.token_times[0] == r.first_token and r.token_times[-1] == r.finish
        assert all(a <= b for a, b in zip(r.token_times, r.token_times[1:], strict=False))
        assert r.token_times == pytest.approx(q.token_times, rel=1e-12, abs=1e-12)


VARIANTS = {
    "default": {},
    "overlap scheduling": {"overlap_schedule": True},
    "front end": {"frontend_tokens_per_s": 300.0},
    "two stages": {"pp": 2},
    "sglang policy": {"scheduler": "sglang"},
    "small KV cache (preemption)": {"gpu_memory_utilization": 0.215},
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@settings(max_examples=10, deadline=None)
@given(n=st.integers(2, 10), seed=st.integers(0, 10_000), late=st.floats(0.0, 0.6))
def test_the_simulator_is_causal(cfg, variant, n, seed, late):
    """What the emulator relies on: a request arriving at t changes no token before t (each
    deployment option the emulator serves; two replicas behind a router below)."""
    import numpy as np

    dep = cfg.with_(**VARIANTS[variant])
    rng = np.random.default_rng(seed)
    arr = list(np.sort(rng.uniform(0, 0.4, n)))
    p = list(rng.integers(16, 1500, n))
    o = list(rng.integers(2, 40, n))
    t_new = max(arr) + late
    for d in (dep, Deployment(dep, replicas=2, router="least-tokens")):
        before = simulate(d, trace(arr, p, o), record_tokens=True)
        after = simulate(d, trace(arr + [t_new], p + [512], o + [8]), record_tokens=True)
        old = {r.rid: r.token_times for r in before.requests}
        for r in after.requests:
            if r.rid < n:
                kept = [t for t in old[r.rid] if t < t_new]
                assert r.token_times[: len(kept)] == kept


def gapped_trace(
    n: int, seed: int, gap_share: float, gap: tuple[float, float], burst: float, max_output: int
) -> tuple[list[float], list[int], list[int]]:
    """Seeded arrivals (a share of them after idle gaps, the rest in bursts), prompts, outputs."""
    import numpy as np

    rng = np.random.default_rng(seed)
    gaps = np.where(rng.random(n) < gap_share, rng.uniform(*gap, n), rng.uniform(0, burst, n))
    arr = list(np.cumsum(gaps) - gaps[0])
    p = [int(x) for x in rng.integers(16, 1500, n)]
    o = [int(x) for x in rng.integers(1, max_output, n)]
    return arr, p, o


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@settings(max_examples=8, deadline=None)
@given(n=st.integers(2, 12), seed=st.integers(0, 10_000))
def test_dropping_idle_history_keeps_every_token(cfg, variant, n, seed):
    """The emulator simulates only the requests since the deployment was last idle. Requests
    sent on a driven clock, some after gaps longer than any request, some into a busy engine:
    every token is due when one simulation of the whole trace has it, and the simulations after
    a gap start afresh (none covers a request that finished before the gap)."""
    dep = cfg.with_(**VARIANTS[variant])
    arr, p, o = gapped_trace(n, seed, 0.5, (2.0, 4.0), 0.05, 30)
    now = [100.0]
    eng = EmulatedEngine(dep, clock=lambda: now[0])
    sizes = []
    for a, pi, oi in zip(arr, p, o, strict=True):
        now[0] = 100.0 + a
        eng.submit(pi, oi)
        sizes.append(eng.requests - eng._base)
    whole = simulate(dep, trace(arr, p, o), record_tokens=True)
    for r in whole.requests:
        due = [eng.due(r.rid, k) - 100.0 for k in range(r.output)]
        assert due == pytest.approx(r.token_times, rel=1e-9, abs=1e-9)
    idle = [i for i in range(1, n) if max(whole.requests[j].finish for j in range(i)) < arr[i]]
    assert [sizes[i] for i in idle] == [1] * len(idle)  # a gap: only the newcomer


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 14), seed=st.integers(0, 10_000))
def test_stamped_and_admitted_in_either_order(cfg, n, seed):
    """Request threads stamp an arrival on receipt and add it to the history later, so one
    stamped earlier may be admitted after one stamped later, even after that one's simulation
    (seen in a real run of 8 clients: the first of a wave was admitted second). Replayed here
    in a seeded random order: every token is due when one simulation of the whole trace has it,
    whatever the order, including after idle gaps (where the history is cut)."""
    import numpy as np

    arr, p, o = gapped_trace(n, seed, 0.3, (1.0, 2.0), 0.01, 20)
    rng = np.random.default_rng(seed + 1)  # the order of stamps and admissions
    now = [50.0]
    eng = EmulatedEngine(cfg, clock=lambda: now[0])
    held: list[tuple[int, float]] = []
    rid_of: dict[int, int] = {}
    i = 0
    while i < n or held:
        if i < n and (not held or rng.random() < 0.6):
            now[0] = 50.0 + arr[i]
            held.append((i, eng._receive()))
            i += 1
        else:
            j, a = held.pop(int(rng.integers(len(held))))
            rid_of[j] = eng._admit(a, p[j], o[j])
    assert not eng._inflight and eng._pending is None
    stamps = [eng._arrivals[rid_of[j]] for j in range(n)]  # the clock's own rounding
    whole = simulate(cfg, trace(stamps, p, o), record_tokens=True)
    for j, r in enumerate(whole.requests):
        due = [eng.due(rid_of[j], k) - eng._t0 for k in range(r.output)]
        assert due == pytest.approx(r.token_times, rel=1e-9, abs=1e-9)


def test_record_tokens_is_aggregated_only(cfg):
    dis = Deployment(cfg, prefill=cfg)
    p, o = fixed_lengths(2, 64, 4)
    with pytest.raises(HwtuneInputError, match="record_tokens"):
        simulate(dis, closed_loop(1, p, o), record_tokens=True)
    with pytest.raises(HwtuneInputError, match="aggregated"):
        EmulatedEngine(dis)
    with pytest.raises(HwtuneInputError, match="time_scale"):
        EmulatedEngine(cfg, time_scale=0)


@pytest.fixture
def emulated(cfg):
    servers = []

    def start(scale: float) -> tuple[MockServer, EmulatedEngine]:
        eng = EmulatedEngine(cfg, time_scale=scale)
        srv = MockServer(timing=EmulatedTiming(eng), model="llama")
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return srv, eng

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def test_measuring_the_emulator_gives_the_simulation(cfg, emulated):
    """The client (`serve measure`) against the emulated deployment reads what `simulate_run`
    predicts for the same closed loop: the two protocols are the same (burst of C, successor on
    the last token, TTFT to the first token, TPOT over the rest). Four times slower than real
    time, so the host's milliseconds count a quarter; 1,024-token prompts make a prefill step long
    enough that a group's successors, a few host milliseconds apart, still share the step they
    share in the simulation (with 256 tokens a loaded host split them and the mean TTFT came out
    10% short)."""
    scale = 4.0
    srv, eng = emulated(scale)
    res = run_closed_loop(Endpoint(srv.url, "llama"), 4, 1024, 16, num_requests=20, warmup=0)
    s = res.summary()
    sim_ttft, sim_tpot = simulate_run(cfg, MeasuredRun(4, 1024, 16, 1.0, 1.0, num_requests=20))
    assert eng.requests == 20 and 1 <= eng.simulations <= 20
    assert s["ttft_s"]["mean"] / scale == pytest.approx(sim_ttft, rel=0.08)
    assert s["tpot_s"]["mean"] / scale == pytest.approx(sim_tpot, rel=0.04)


def test_a_request_the_deployment_cannot_hold_is_refused(emulated):
    srv, _eng = emulated(1.0)
    with pytest.raises(HwtuneInputError, match="HTTP 400"):
        run_closed_loop(Endpoint(srv.url, "llama"), 1, 600_000, 4, num_requests=1, warmup=1)


def emulate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hwtune.cli.serve", "emulate", *args],
                          capture_output=True, text=True, timeout=60)  # fmt: skip


@pytest.mark.parametrize(
    "args, field",
    [
        (("--time-scale", "0"), "--time-scale"),
        (("--router", "nearest"), "router"),
        (("--gpu", "nope"), "gpu"),
    ],  # fmt: skip
)
def test_emulate_bad_input_is_one_line(args, field):
    r = emulate("--port", str(free_port()), *args)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and field in lines[0]


def test_emulate_busy_port_is_one_line():
    srv = MockServer()
    try:
        r = emulate("--port", str(srv.server_address[1]))
    finally:
        srv.server_close()
    assert r.returncode == 2 and "port" in r.stderr and "Traceback" not in r.stderr
