"""A user's review of ``hwtune compile`` (session 48): the Gantt draws every span once, grouped
per rank, stream and kind (one bar call per op took minutes on a 32k-op plan); ``--trace`` is a
Chrome/Perfetto JSON, so another suffix is refused before the work; a strategy file that says two
things (``dp: 2`` beside ``mesh: {dp: 4}``, ``vpp`` beside another ``schedule.vpp``, a schedule
``name`` beside explicit ``actions``) is refused, naming the field; a pipeline send is priced on
the network only across the boundary whose two ranks sit in two scale-up domains."""

from __future__ import annotations

import matplotlib.axes
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from hwtune.cost import collectives as coll
from hwtune.errors import HwtuneInputError
from hwtune.hardware.cluster import make_cluster
from hwtune.model.catalog import get_model
from hwtune.parallel import compile_and_simulate
from hwtune.parallel.compiler import compile_plan
from hwtune.parallel.spec import make_spec
from hwtune.report.parallel_trace import write_gantt


def _invoke(args: list[str]):
    from hwtune.cli.main import app

    return CliRunner().invoke(app, ["compile", *args])


def test_gantt_draws_every_non_p2p_span_once(tmp_path, monkeypatch):
    _, res = compile_and_simulate(
        "llama3.1-8b", make_spec(pp=4, dp=2, global_batch=16, seq=2048, schedule="zb-h1")
    )
    drawn: list[tuple[float, float]] = []
    real = matplotlib.axes.Axes.broken_barh

    def spy(self, xranges, yrange, **kw):
        drawn.extend(xranges)
        return real(self, xranges, yrange, **kw)

    monkeypatch.setattr(matplotlib.axes.Axes, "broken_barh", spy)
    png = write_gantt(res, tmp_path / "g.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    want = [s for s in res.spans if s.op.stream != "p2p"]
    assert len(drawn) == len(want)
    scale = 1e3 if res.step_time_s < 10 else 1.0
    assert sum(w for _, w in drawn) == pytest.approx(
        sum((s.end - s.start) * scale for s in want), rel=1e-9
    )
    assert sorted(x for x, _ in drawn) == pytest.approx(sorted(s.start * scale for s in want))


def test_trace_other_than_json_is_refused_before_the_work(tmp_path):
    r = _invoke(["--pp", "2", "--global-batch", "4", "--trace", str(tmp_path / "t.png")])
    assert r.exit_code == 2, r.output
    assert "--trace" in r.output and ".json" in r.output
    assert not (tmp_path / "t.png").exists()


@pytest.mark.parametrize(
    ("text", "field", "says"),
    [
        ("dp: 2\nmesh: {dp: 4, pp: 2}\nglobal_batch: 8\n", "mesh.dp", "mesh.dp: 4"),
        (
            "mesh: {pp: 2}\nvpp: 2\nschedule: {name: interleaved, vpp: 3}\nglobal_batch: 8\n",
            "schedule.vpp",
            "schedule.vpp: 3",
        ),
        (
            "mesh: {pp: 2}\nglobal_batch: 2\nschedule: {name: gpipe, actions: "
            "{0: [0F0, 0F1, 0B0, 0B1], 1: [1F0, 1B0, 1F1, 1B1]}}\n",
            "schedule.name",
            "actions",
        ),
    ],
)
def test_a_file_that_says_two_things_is_refused(tmp_path, text, field, says):
    f = tmp_path / "s.yaml"
    f.write_text(text)
    r = _invoke(["--strategy", str(f)])
    assert r.exit_code == 2, r.output
    assert f"s.yaml.{field}" in r.output and says in r.output
    assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1


def test_the_same_value_twice_is_accepted():
    spec = make_spec({"dp": 2, "mesh": {"dp": 2, "pp": 2}, "global_batch": 8})
    assert spec.mesh.dp == 2 and spec.mesh.pp == 2


def test_a_flag_over_a_file_shorthand_is_not_a_contradiction_in_the_file():
    # spec_fields checks the file only: a keyword given beside it is the caller's override
    spec = make_spec({"mesh": {"dp": 2}, "global_batch": 8}, dp=4)
    assert spec.mesh.dp == 4
    with pytest.raises(HwtuneInputError):
        make_spec({"dp": 4, "mesh": {"dp": 2}, "global_batch": 8})


# ---- pipeline sends priced per boundary: on the network only where two ranks' GPUs part ---------


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 16), st.integers(0, 64), st.integers(0, 64), st.integers(1, 20))
def test_crosses_domain_is_any_pair_in_two_domains(d, a, b, size):
    cl = make_cluster("h100-sxm-80gb", 128 * d, gpus_per_node=d, scaleup_domain=d)
    brute = any((a + j) // d != (b + j) // d for j in range(size))
    assert cl.crosses_domain(a, b, size) == brute


def test_only_the_boundary_between_nodes_is_priced_on_the_network():
    # tp 2 x pp 8 on 8-GPU nodes: pipeline ranks 0-3 in node 0, 4-7 in node 1; only 3 <-> 4
    # crosses (the estimator's old rule, tp·cp·dp >= domain, priced none of them on the network)
    spec = make_spec(tp=2, pp=8, global_batch=16, seq=4096)
    cl = make_cluster("h100-sxm-80gb", 16, nic_gbps=100)
    plan = compile_plan(spec, get_model("llama3.1-8b"), cl)
    sends = [o for o in plan.ops if o.stream == "p2p"]
    assert sends
    for o in sends:
        crosses = {o.rank, o.peer} == {3, 4}
        want = coll.send_recv_time(o.nbytes, crosses, cl)
        assert o.seconds == pytest.approx(want), (o.label, o.rank, o.peer)
    net = [o for o in sends if {o.rank, o.peer} == {3, 4}]
    assert net and min(o.seconds for o in net) > 5 * max(
        o.seconds for o in sends if {o.rank, o.peer} != {3, 4}
    )


# ---- errors name the flags (or the file's fields) the user gave, not the checks' internals ------
@pytest.mark.parametrize(
    ("args", "files", "head"),
    [
        (["--pp", "3", "--global-batch", "4", "--gpus", "4"], {}, "error: --gpus: got 4; "),
        (
            ["--pp", "16", "--vpp", "4", "--schedule", "interleaved", "--global-batch", "16"],
            {},
            "error: --pp x --vpp: got 64; ",
        ),
        (
            ["--strategy", "{d}/v.yaml"],
            {"v.yaml": "mesh: {pp: 16}\nschedule: {name: interleaved, vpp: 4}\nglobal_batch: 16\n"},
            "error: v.yaml.mesh.pp x schedule.vpp: got 64; ",
        ),
        (
            ["--pp", "2", "--gpus-per-node", "0", "--global-batch", "4"],
            {},
            "error: --gpus-per-node",
        ),
        (["--pp", "2", "--nic-gbps", "-1", "--global-batch", "4"], {}, "error: --nic-gbps: got -1"),
        (
            ["--cluster", "{d}/cl.yaml", "--pp", "2", "--global-batch", "4"],
            {"cl.yaml": "device: h100-sxm-80gb\nn_gpus: 16\n"},
            "error: cl.yaml n_gpus: got 16; ",
        ),
    ],
)
def test_mismatches_name_what_the_user_typed(tmp_path, args, files, head):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    r = _invoke([a.format(d=tmp_path) for a in args])
    assert r.exit_code == 2, r.output
    assert r.output.startswith(head), r.output
    assert len(r.output.strip().splitlines()) == 1


def test_an_annotation_that_sets_nothing_is_refused(tmp_path):
    f = tmp_path / "a.yaml"
    f.write_text('mesh: {pp: 2}\nglobal_batch: 4\nmodules:\n  - {match: "layers[0:4]"}\n')
    r = _invoke(["--strategy", str(f)])
    assert r.exit_code == 2, r.output
    assert r.output.startswith(
        "error: a.yaml.modules.0.match: got 'layers[0:4]'; expected a setting"
    )


def test_the_strategy_line_says_what_the_annotations_recompute(tmp_path):
    f = tmp_path / "a.yaml"
    f.write_text(
        'mesh: {pp: 2}\nglobal_batch: 4\nmodules:\n  - {match: "layers[0:4]", recompute: full}\n'
    )
    r = _invoke(["--strategy", str(f)])
    assert r.exit_code == 0, r.output
    assert "recompute=none (full on 4 of 32 layers)" in r.output
    plain = _invoke(["--pp", "2", "--global-batch", "4"])
    assert "recompute=none bf16" in plain.output


# ---- an uneven expert placement is priced at its busiest rank -----------------------------------
def _moe(placement):
    mods = [{"match": "layers.*.experts", "ep": 2, "placement": placement}] if placement else []
    spec = make_spec(dp=2, ep=2, zero=0, global_batch=8, micro_batch=2, seq=4096, modules=mods)
    return compile_and_simulate("mixtral-8x7b", spec)


def test_an_even_placement_costs_what_no_placement_does():
    (p0, r0), (p1, r1) = _moe(None), _moe([[0, 1, 2, 3], [4, 5, 6, 7]])
    assert r1.step_time_s == r0.step_time_s and r1.peak_bytes == r0.peak_bytes
    assert p1.stages[0].expert_params == p0.stages[0].expert_params


def test_six_of_eight_experts_on_one_rank_cost_it_one_and_a_half_times_the_experts():
    (p0, r0), (p6, r6) = _moe(None), _moe([[0, 1, 2, 3, 4, 5], [6, 7]])
    # 6 of Mixtral's 8 experts per layer on the busiest rank, against 4: 1.5x their parameters
    assert p6.stages[0].expert_params == pytest.approx(1.5 * p0.stages[0].expert_params)
    assert r6.step_time_s > r0.step_time_s and max(r6.peak_bytes) > max(r0.peak_bytes)
