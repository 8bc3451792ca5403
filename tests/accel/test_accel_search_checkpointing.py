"""`hwtune accel search --activation-limit-mib`: every architecture's step is costed under the
checkpointing plan for the limit (the plan `accel evaluate --activation-limit-mib` makes); an
architecture no plan fits is infeasible, counted, never silently dropped."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("pymoo")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from hwtune.accel.architecture import load_accelerator  # noqa: E402
from hwtune.accel.evaluate import checkpointed, evaluate  # noqa: E402
from hwtune.accel.models import GPT2Config, gpt2, resnet18  # noqa: E402
from hwtune.accel.schedule import schedule  # noqa: E402
from hwtune.accel.search import XL, XU, Checkpointing, decode, search  # noqa: E402
from hwtune.accel.training import lower_training, saved_roots  # noqa: E402
from hwtune.cli.main import app  # noqa: E402
from hwtune.errors import HwtuneInputError  # noqa: E402

TEMPLATE = load_accelerator("edge-hetero")
R18 = resnet18(batch=1, image=32)
GPT = gpt2(batch=1, seq=64, config=GPT2Config(n_layer=1))


def _all_kept(g) -> int:
    """Bytes of every activation the backward pass reads, summed from the graph."""
    return sum(g.tensors[r].nbytes for r in saved_roots(g))


def test_pareto_points_meet_their_limit_as_accel_evaluate_plans_them():
    """Each Pareto point: kept bytes <= planned peak <= limit, the kept bytes are the bytes of
    its kept tensors, and its latency, energy and peak DRAM memory are those of
    `evaluate(..., activation_limit_bytes)` on that architecture (the `accel evaluate` path,
    which lowers and schedules on its own)."""
    limit = 0.6 * _all_kept(R18)
    res = search(lower_training(R18), TEMPLATE, evaluations=24, pop_size=12, seed=1,
                 third="memory", checkpointing=Checkpointing(limit))  # fmt: skip
    rows = res.rows(TEMPLATE)
    assert rows, "no Pareto point to check"
    assert len(res.plans) + res.infeasible == res.evaluations
    pts = sorted(zip(res.X.tolist(), res.F.tolist(), strict=True), key=lambda t: t[1][0])
    for (x, f), row in zip(pts, rows, strict=True):  # rows() is in this order
        acc, depth = decode(x, TEMPLATE)
        assert row["kept_bytes"] <= row["activation_peak_bytes"] <= limit
        assert row["activation_limit_bytes"] == limit
        ev = evaluate(R18, acc, fusion_depth=depth, activation_limit_bytes=limit)
        assert ev.plan is not None and ev.plan.feasible
        assert row["kept_bytes"] == sum(R18.tensors[t].nbytes for t in ev.plan.kept)
        assert row["recomputed"] == len(ev.plan.dropped) > 0  # the limit is below all kept
        assert row["recompute_macs"] == ev.result.recompute_macs > 0
        assert (f[0], f[1], f[2]) == (
            ev.result.latency_s,
            ev.result.total_energy_j,
            ev.result.peak_bytes["dram"],
        )


@settings(max_examples=15, deadline=None)
@given(
    genome=st.tuples(*(st.integers(int(lo), int(hi)) for lo, hi in zip(XL, XU, strict=True))),
    frac=st.sampled_from([0.5, 0.7, 0.9]),
    graph=st.sampled_from([R18, GPT]),
)
def test_recompute_is_costed_and_never_shortens_an_unfused_step(genome, frac, graph):
    """On the same architecture the planned step has the keep-everything step's MACs plus the
    recomputed ones, and pays their MAC energy (the core's pJ per MAC). Without fusion it is
    never faster, up to list-scheduling anomalies (Graham, "Bounds on multiprocessing timing
    anomalies", SIAM J. Appl. Math. 1969; 0.011% seen on ResNet-18). With fusion it can be:
    a dropped activation inside a fused group is never written in the forward pass and a
    recomputed one can pass to its backward reader on chip instead of being read back from
    DRAM (next test; up to 11% shorter in a scan of 1,300 plans), so no latency bound is
    asserted there."""
    acc, depth = decode(list(genome), TEMPLATE)
    tg = lower_training(graph)
    try:
        base = schedule(tg, acc, depth)
    except HwtuneInputError:
        return  # a layer fits no core (the search's other infeasibility)
    ev = checkpointed(tg, acc, depth, base, frac * _all_kept(graph))
    r = ev.result
    assert r.macs == base.macs + r.recompute_macs
    assert (r.recompute_macs > 0) == bool(ev.plan.dropped)
    pj = acc.cores[0].mac_energy_pj * 1e-12  # the search's architectures have one core type
    assert r.energy_j["mac"] == pytest.approx(base.energy_j["mac"] + r.recompute_macs * pj)
    if depth == 1:
        assert r.latency_s >= base.latency_s * (1 - 1e-3)


@pytest.mark.parametrize(
    ("genome", "frac", "phases"),
    [
        ([5, 2, 4, 9, 6, 2, 0, 4], 0.5, ("fwd",)),
        ([6, 5, 7, 4, 5, 0, 1, 3], 0.9, ("bwd", "bwd_x", "bwd_w")),
    ],
)
def test_fusion_lets_recompute_shorten_a_step(genome, frac, phases):
    """The exception above exists, on GPT-2 (2 layers, 128 tokens) with fusion (depths 4 and
    3): (a) dropped activations inside fused groups are not written in the forward pass; (b)
    on a 4 GB/s DRAM, attention activations rebuilt in the backward pass and fused into their
    readers are not read back from DRAM (FlashAttention's argument: Dao et al., NeurIPS 2022,
    Sec. 3.1), which saved ~11% of the step here. Either way the step moves fewer bytes in
    those phases and ends sooner than keeping everything."""
    g = gpt2(batch=1, seq=128, config=GPT2Config(n_layer=2))
    acc, depth = decode(genome, TEMPLATE)
    tg = lower_training(g)
    base = schedule(tg, acc, depth)
    r = checkpointed(tg, acc, depth, base, frac * _all_kept(g)).result

    def moved(res) -> float:
        return sum(o.dram_bytes + o.shared_bytes + o.link_bytes for o in res.ops
                   if o.phase in phases)  # fmt: skip

    assert depth > 1 and r.recompute_macs > 0
    assert moved(r) < moved(base) and r.latency_s < base.latency_s


def test_same_seed_same_front_serial_and_parallel():
    tg = lower_training(GPT)
    ck = Checkpointing(0.9 * _all_kept(GPT))  # the smallest reachable is ~0.79x
    a = search(tg, TEMPLATE, evaluations=30, pop_size=10, seed=4, checkpointing=ck)
    b = search(tg, TEMPLATE, evaluations=30, pop_size=10, seed=4, checkpointing=ck)
    c = search(tg, TEMPLATE, evaluations=30, pop_size=10, seed=4, checkpointing=ck, workers=2)
    assert len(a.F) > 0
    for other in (b, c):
        assert np.array_equal(a.X, other.X) and np.array_equal(a.F, other.F)
        assert a.rows(TEMPLATE) == other.rows(TEMPLATE)
        assert (a.infeasible, a.over_limit, a.met_limit) == (
            other.infeasible,
            other.over_limit,
            other.met_limit,
        )


def test_a_limit_that_holds_every_activation_changes_nothing():
    """At the all-kept bytes nothing is recomputed: the same front as the search without
    the option (its third constraint is never violated)."""
    tg = lower_training(GPT)
    kept = _all_kept(GPT)
    plain = search(tg, TEMPLATE, evaluations=30, pop_size=10, seed=2, third="memory")
    ck = search(tg, TEMPLATE, evaluations=30, pop_size=10, seed=2, third="memory",
                checkpointing=Checkpointing(float(kept)))  # fmt: skip
    assert np.array_equal(plain.X, ck.X) and np.array_equal(plain.F, ck.F)
    assert ck.over_limit == 0 and ck.met_limit >= len(ck.plans) > 0
    for row in ck.rows(TEMPLATE):
        assert row["recomputed"] == 0 and row["recompute_macs"] == 0
        assert row["activation_peak_bytes"] == row["kept_bytes"] == kept


def test_a_limit_below_the_smallest_reachable_makes_every_architecture_infeasible():
    """No plan keeps less than the largest saved activation (each is kept or rebuilt in some
    segment), so a 1-byte limit is met nowhere: every evaluation is infeasible, none dropped."""
    res = search(lower_training(GPT), TEMPLATE, evaluations=12, pop_size=6, seed=0,
                 checkpointing=Checkpointing(1.0))  # fmt: skip
    assert len(res.F) == 0 and res.met_limit == 0
    assert res.infeasible == res.evaluations == 12 and res.over_limit > 0
    largest = max(GPT.tensors[r].nbytes for r in saved_roots(GPT))
    assert res.smallest_activation_bytes is not None
    assert res.smallest_activation_bytes >= largest


def test_cli_limit_below_the_smallest_reachable_exits_1_with_one_line():
    args = ["accel", "search", "-w", "resnet18", "--image", "32", "--evaluations", "8",
            "--pop-size", "4", "--activation-limit-mib", "0.001"]  # fmt: skip
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 1, r.output
    assert r.output.count("\n") == 1 and "Traceback" not in r.output
    # the limit as given (was "activation limit 0.00 MiB"), and the least reachable, not 0.00
    assert "--activation-limit-mib: 0.001 MiB cannot be met" in r.output
    least = float(r.output.split("the least any checkpoint plan reaches is ")[1].split(" MiB")[0])
    assert least > 0.001
    r = CliRunner().invoke(app, [*args, "--json"])
    assert r.exit_code == 1, r.output
    doc = json.loads(r.stdout)
    assert doc["pareto"] == [] and doc["checkpointing"]["met_limit"] == 0
    assert doc["checkpointing"]["infeasible"] == doc["evaluations"] == 8


def test_cli_reports_infeasible_count_and_plan_columns(tmp_path):
    out = tmp_path / "front.csv"
    r = CliRunner().invoke(app, ["accel", "search", "-w", "gpt2", "--seq", "64", "--evaluations",
                                 "20", "--pop-size", "10", "--activation-limit-mib", "40",
                                 "--checkpoint-method", "chain", "--table", str(out)])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "evaluations infeasible" in r.output and "act MiB" in r.output
    header = out.read_text().splitlines()[0].split(",")
    for col in ("activation_peak_bytes", "kept_bytes", "recomputed", "recompute_macs"):
        assert col in header


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "abc"])
def test_bad_activation_limit_exits_2(rejects, value):
    rejects(["accel", "search", "--activation-limit-mib", value], "activation-limit-mib", value)


def test_bad_or_idle_checkpoint_method_exits_2(rejects):
    rejects(["accel", "search", "--activation-limit-mib", "5", "--checkpoint-method", "dp"],
            "checkpoint-method", "dp", "auto, chain or greedy")  # fmt: skip
    rejects(["accel", "search", "--checkpoint-method", "chain"], "checkpoint-method",
            "--activation-limit-mib")  # fmt: skip


@settings(max_examples=25, deadline=None)
@given(data=st.data(), graph=st.sampled_from([R18, GPT]))
def test_segment_rekeep_keeps_what_the_exact_model_allows(data, graph):
    """The search plans once per architecture, so the planner's re-keeping (`_rekeep`) reuses
    the current plan's segments; it must keep again exactly what trying each tensor with the
    exact memory model (`_Units.evaluate`) keeps, dearest recompute first."""
    from hwtune.accel.checkpointing import _Units

    slow = _Units(graph, {})
    dropped = frozenset(data.draw(st.sets(st.sampled_from(sorted(slow.saved)))))
    limit = data.draw(st.floats(0.3, 1.0)) * _all_kept(graph)
    order = sorted(dropped, key=lambda r: (-slow.cost[r], r))
    want = dropped
    for r in order:
        if slow.evaluate(want - {r})[0] <= limit:
            want = want - {r}
    assert _Units(graph, {}).rekeep(dropped, order, limit) == want
