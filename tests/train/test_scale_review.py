"""Review of `hwtune scale` and of the hardware/network selection of `hwtune plan`: what the
sweep attributes a knee to, bad lists (duplicates, order, fractions), the JSON document and the
plot. Expected values are computed by hand in the comments."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from hwtune.cli.main import app
from hwtune.errors import HwtuneInputError
from hwtune.hardware.cluster import make_cluster
from hwtune.model.spec import ModelSpec
from hwtune.report.scale_plot import plot_scaling
from hwtune.train import scaling
from hwtune.train.scaling import RESOURCE, ScalePoint, saturating_resource, scale_sweep
from hwtune.train.strategy import make_strategy


def _pt(n: int, thr: float, shares: dict[str, float]) -> ScalePoint:
    return ScalePoint(n, 64, None, None, thr, shares=shares)  # type: ignore[arg-type]


# ------------------------------------------------------------------ saturating resource
def test_a_small_share_growth_is_not_named_when_compute_lost_more():
    # 100 GPUs at 1000 tokens/s: 0.1 GPU-s per token; 200 at 1600: 0.125 (+0.025).
    # data-parallel share 1% -> 3%: its GPU time per token 0.001 -> 0.00375 (+0.00275), an
    # eighth of the loss; the rest (compute) grew by 0.025 - 0.00275 = 0.02225. The share grew
    # by 2 points, over the old code's 0.5-point threshold, which named the NIC.
    prev, cur = _pt(100, 1000.0, {"dp": 0.01}), _pt(200, 1600.0, {"dp": 0.03})
    assert saturating_resource(prev, cur).startswith("none dominant")


def test_a_share_that_explains_the_loss_is_named():
    # as above but 20% data-parallel at 200 GPUs: 0.2 x 0.125 - 0.001 = 0.024 of the 0.025
    prev, cur = _pt(100, 1000.0, {"dp": 0.01}), _pt(200, 1600.0, {"dp": 0.2})
    assert saturating_resource(prev, cur) == RESOURCE["dp"]


def test_nothing_saturates_when_gpu_time_per_token_falls():
    # 100 -> 200 GPUs at 1000 -> 2400 tokens/s: 0.1 -> 0.083 GPU-s per token (superlinear,
    # e.g. offload no longer needed), though the tensor-parallel share grew 0 -> 10%
    prev, cur = _pt(100, 1000.0, {"tp": 0.0}), _pt(200, 2400.0, {"tp": 0.1})
    assert saturating_resource(prev, cur).startswith("none (")


# ------------------------------------------------------------------ bad lists
S = ["scale", "--seq", "2048"]


@pytest.mark.parametrize(
    ("args", "field", "value", "expected"),
    [
        # a repeated count was dropped without a word; an unsorted list was reordered
        (["-m", "llama3.1-8b", "--gpus", "8,8,16", "--global-batch", "64"], "--gpus", "8,8,16",
         "once"),
        (["-m", "llama3.1-8b", "--gpus", "16,8", "--global-batch", "64"], "--gpus", "16,8",
         "increasing"),
        # 1.0 made every step short of exactly linear (rounding included) a knee
        (["-m", "llama3.1-8b", "--gpus", "8,16", "--knees", "0.9,1"], "--knees", "0.9,1",
         "(0, 1)"),
        (["-m", "llama3.1-8b", "--gpus", "8,16", "--knees", "0.9,0.9"], "--knees", "0.9,0.9",
         "once"),
        # repeated rows in the batch and model-size sweeps
        (["-m", "llama3.1-8b", "--global-batches", "64,64", "--fixed-gpus", "8"],
         "--global-batches", "64,64", "once"),
        (["-m", "llama3.1-8b,LLAMA3.1-8B", "--fixed-gpus", "8"], "--model", "LLAMA3.1-8B",
         "once"),
    ],
)  # fmt: skip
def test_repeated_unsorted_and_degenerate_lists_are_errors(rejects, args, field, value, expected):
    rejects([*S, *args], field, value, expected)


def _tiny() -> ModelSpec:
    return ModelSpec(n_layers=2, d_model=256, n_heads=4, ffn_hidden=512, vocab=1000)


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        (dict(gpus=[8, 8, 16]), "gpus"),  # was deduplicated silently
        (dict(gpus=[8, 16], fractions=(0.9, 1.0)), "knees"),
        (dict(gpus=[8, 16], fractions=(0.5, 0.5)), "knees"),
    ],
)
def test_scale_sweep_rejects_repeats_and_a_fraction_of_one(kw, field):
    with pytest.raises(HwtuneInputError) as ei:
        scale_sweep(_tiny(), lambda n: make_cluster("h100-sxm-80gb", n), seq=1024,
                    global_batch=64, **kw)  # fmt: skip
    assert ei.value.field == field


# ------------------------------------------------------------------ plan: hardware and network
P = ["plan", "-m", "llama3.1-8b", "--seq", "2048", "--gpus", "16", "--global-batch", "64"]


@pytest.mark.parametrize(
    ("args", "field", "value", "expected"),
    [
        # an empty item was skipped; a repeated GPU (or an alias of one) was a repeated row
        (["--gpu", "h100-sxm-80gb,,b200"], "--gpu", "h100-sxm-80gb,,b200", "names"),
        (["--gpu", "h100-sxm-80gb,"], "--gpu", "h100-sxm-80gb,", "names"),
        (["--gpu", "b200,b200"], "--gpu", "b200,b200", "once"),
        (["--gpu", "H100-SXM-80GB,h100-sxm-80gb"], "--gpu", "H100-SXM-80GB", "once"),
        # a repeated what-if value was a repeated row
        (["--what-if", "nic=100,100"], "--what-if nic", "100", "once"),
    ],
)  # fmt: skip
def test_plan_repeated_or_empty_hardware_and_network_values(rejects, args, field, value, expected):
    rejects([*P, *args], field, value, expected)


# ------------------------------------------------------------------ regimes and knee order
def _fake_plan(thr: dict[int, float], offload_below: int):
    """A stand-in for the search: at n GPUs a data-parallel ZeRO-1 strategy at ``thr[n]``
    tokens/s, with the optimizer offloaded below ``offload_below`` GPUs, and no exposed parts."""

    def plan(spec, cl, gb, seq, **kw):  # noqa: ANN001, ANN202, ARG001
        n = cl.n_gpus
        st = make_strategy(dp=n, zero=1, offload_optimizer=n < offload_below)
        est = SimpleNamespace(strategy=st, tokens_per_s=thr[n], breakdown={}, step_time_s=1.0,
                              mfu=0.5)  # fmt: skip
        return SimpleNamespace(top=[est])

    return plan


def test_offload_is_a_regime_and_knees_come_in_sweep_order(monkeypatch):
    thr = {8: 800.0, 16: 1600.0, 32: 2400.0, 64: 2600.0}
    monkeypatch.setattr(scaling, "plan", _fake_plan(thr, offload_below=32))
    res = scaling.scale_sweep(_tiny(), lambda n: make_cluster("h100-sxm-80gb", n),
                              [8, 16, 32, 64], 1024, global_batch=64)  # fmt: skip
    # first point 100 tokens/s per GPU; 8->16: 800/8/100 = 1.0; 16->32: 800/16/100 = 0.5
    # (below 0.9, not below 0.5); 32->64: 200/32/100 = 0.0625 (below 0.5)
    # offload stops at 32: a regime change there (it was not one: the regime left it out)
    assert [(k.kind, k.n_gpus, k.fraction) for k in res.knees] == [
        ("efficiency", 32, 0.9),
        ("regime", 32, None),
        ("efficiency", 64, 0.5),
    ]
    assert "offload" in res.points[0].regime and "offload" not in res.points[2].regime
    assert "offload" in res.knees[1].detail


# ------------------------------------------------------------------ the plot
def test_plot_keeps_labels_inside_and_superlinear_points_in_view(monkeypatch, tmp_path):
    import matplotlib.pyplot as plt

    # 16 GPUs at 2000 tokens/s: 125 per GPU against 100 at 8, an efficiency of 1.25 (the
    # first count offloads); 16->32: 400/16/100 = 0.25 and 32->64: 200/32/100 = 0.0625, both
    # knees at 32, each labelled with the long "none dominant" resource
    thr = {8: 800.0, 16: 2000.0, 32: 2400.0, 64: 2600.0}
    monkeypatch.setattr(scaling, "plan", _fake_plan(thr, offload_below=16))
    res = scaling.scale_sweep(_tiny(), lambda n: make_cluster("h100-sxm-80gb", n),
                              [8, 16, 32, 64], 1024, global_batch=64)  # fmt: skip
    assert [(k.n_gpus, k.fraction) for k in res.knees if k.kind == "efficiency"] == [
        (32, 0.9),
        (32, 0.5),
    ]
    figs = []
    monkeypatch.setattr(plt, "close", figs.append)  # keep the figure to inspect it
    out = plot_scaling(res, tmp_path / "s.png", "fake")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    fig = figs[0]
    fig.canvas.draw()
    ax1, ax2 = fig.axes
    assert ax2.get_ylim()[1] >= 1.25  # was fixed at 1.1: the point was cut off
    box = ax1.get_window_extent()
    texts = ax1.texts
    # the two regimes the sweep lists are named on the plot, each once
    assert sorted(t.get_text() for t in texts if "ZeRO" in t.get_text()) == sorted(
        {p.regime for p in res.points}
    )
    for t in texts:  # regime names fell under the axis, knee labels ran over the right axis
        bb = t.get_window_extent()
        assert box.x0 - 1 <= bb.x0 and bb.x1 <= box.x1 + 1, t.get_text()
        assert box.y0 - 1 <= bb.y0 and bb.y1 <= box.y1 + 1, t.get_text()
    plt.close(fig)


# ------------------------------------------------------------------ the JSON document
def test_json_has_what_the_table_shows_and_names_the_catalog_gpu():
    args = [*S, "-m", "llama3.1-8b", "--gpu", "h100", "--gpus", "8,16", "--global-batch", "32"]
    r = CliRunner().invoke(app, [*args, "--json", "--knees", "0.5,0.8"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    # the table's title says the sequence; the catalog resolves the alias "h100"
    assert (doc["gpu"], doc["seq"], doc["precision"]) == ("h100-sxm-80gb", 2048, "bf16")
    assert doc["knee_fractions"] == [0.8, 0.5]
    for p in doc["points"]:
        assert p["fits"] is True
        # the table's "exposed comm": the communication shares, not bubble or recomputation
        sh = p["exposed_share"]
        assert p["exposed_comm_share"] == pytest.approx(
            sh["tp"] + sh["cp"] + sh["ep"] + sh["dp"] + sh["pp_p2p"]
        )
        assert p["regime"].startswith(("data-parallel", "tensor", "pipeline", "context"))
    table = CliRunner().invoke(app, args, env={"COLUMNS": "200"}).output
    assert "h100-sxm-80gb" in table
    for p in doc["points"]:
        assert f"{p['exposed_comm_share']:.1%}" in table and p["strategy"] in table


@pytest.mark.parametrize(
    ("args", "field", "value"),
    [
        # the sweep replaced the flag's value without a word
        (["--nic-gbps", "200", "--what-if", "nic=100,400"], "--nic-gbps", "200"),
        (["--scaleup-domain", "4", "--what-if", "domain=8,16"], "--scaleup-domain", "4"),
    ],
)
def test_a_network_flag_the_what_if_sweeps_is_an_error(rejects, args, field, value):
    rejects([*P, *args], field, value, "--what-if")


def test_hardware_comparison_reports_progress_per_gpu():
    from hwtune.model.catalog import get_model
    from hwtune.train.selection import compare_hardware

    calls = []
    clusters = [make_cluster(g, 8) for g in ("h100-sxm-80gb", "b200")]
    compare_hardware(
        get_model("llama3.1-8b"),
        clusters,
        32,
        2048,
        progress=lambda d, t: calls.append((d, t)),
        top_k=1,
    )
    # the bar stood at 0/1 for the whole comparison: before each GPU, then done
    assert calls == [(0, 2), (1, 2), (2, 2)]


# ------------------------------------------------------------------ checked before any search
def test_a_bad_count_or_network_value_stops_the_sweep_before_any_search(monkeypatch):
    from hwtune.train import selection

    searched = []

    def plan(*a, **k):  # noqa: ANN002, ANN003, ANN202
        searched.append(1)
        raise AssertionError("searched before the bad value was seen")

    monkeypatch.setattr(scaling, "plan", plan)
    monkeypatch.setattr(selection, "plan", plan)
    # 12 GPUs are not whole 8-GPU nodes; it comes after two good counts
    with pytest.raises(HwtuneInputError, match="12"):
        scale_sweep(_tiny(), lambda n: make_cluster("h100-sxm-80gb", n), [8, 16, 12], 1024,
                    global_batch=64)  # fmt: skip
    # a NIC of -5 Gb/s after two good ones
    with pytest.raises(HwtuneInputError, match="-5"):
        selection.network_whatif(_tiny(), make_cluster("h100-sxm-80gb", 16), "nic",
                                 [100.0, 200.0, -5.0], 64, 1024)  # fmt: skip
    assert searched == []


@pytest.mark.parametrize(
    ("args", "field"),
    [
        # named "cluster.n_gpus", an option the command does not have
        (["-m", "llama3.1-8b", "--gpus", "8,12", "--global-batch", "48"], "--gpus"),
        (["-m", "llama3.1-8b", "--global-batches", "64", "--fixed-gpus", "12"], "--fixed-gpus"),
    ],
)
def test_a_count_that_is_not_whole_nodes_names_its_flag(rejects, args, field):
    rejects([*S, *args], field, "12", "--gpus-per-node (= 8)")


@pytest.mark.parametrize("models", ["llama3.1-8b,,qwen3-8b", "llama3.1-8b,"])
def test_an_empty_model_item_is_an_error(rejects, models):
    # the empty item was skipped: "a," swept one model's accelerators instead of two models
    rejects([*S, "-m", models, "--fixed-gpus", "8"], "--model", models, "comma-separated")


def test_knees_carry_the_marginal_fraction_they_fell_to(monkeypatch):
    thr = {8: 800.0, 16: 1600.0, 32: 2400.0, 64: 2600.0}
    monkeypatch.setattr(scaling, "plan", _fake_plan(thr, offload_below=0))
    res = scaling.scale_sweep(_tiny(), lambda n: make_cluster("h100-sxm-80gb", n),
                              [8, 16, 32, 64], 1024, global_batch=64)  # fmt: skip
    # 16->32: 800/16/100 = 0.5; 32->64: 200/32/100 = 0.0625 (see above)
    eff = [(k.n_gpus, k.from_gpus, k.marginal) for k in res.knees if k.kind == "efficiency"]
    assert eff == [(32, 16, pytest.approx(0.5)), (64, 32, pytest.approx(0.0625))]
    assert "50% of linear" in res.knees[0].detail and "from 16 GPUs" in res.knees[0].detail


def test_a_regime_change_alone_still_says_there_is_no_knee(monkeypatch):
    # linear throughput (100 tokens/s per GPU everywhere), the optimizer offloaded at 8 GPUs
    # only: one regime change at 16 and no efficiency knee
    thr = {8: 800.0, 16: 1600.0, 32: 3200.0}
    monkeypatch.setattr(scaling, "plan", _fake_plan(thr, offload_below=16))
    r = CliRunner().invoke(app, [*S, "-m", "llama3.1-8b", "--gpus", "8,16,32", "--global-batch",
                                 "64"], env={"COLUMNS": "200"})  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "best strategy changes" in r.output
    assert "no knee in the sweep" in r.output  # was left out when a regime change was listed


def test_a_count_with_no_fit_shows_dashes_not_zero_throughput():
    # 405B needs more than 8 GPUs' memory (810 GB of bf16 weights alone > 8 x 80 GB)
    args = [*S, "-m", "llama3.1-405b", "--gpus", "8,32", "--global-batch", "16"]
    r = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    row = next(line for line in r.output.splitlines() if line.startswith("│    8 "))
    assert "no strategy fits" in row and "0.0%" not in row
    assert [c.strip() for c in row.split("│")[3:8]] == ["-"] * 5


@pytest.mark.parametrize(("objective", "metric"), [("energy", "energy_j"), ("cost", "cost_usd")])
def test_hardware_comparison_orders_by_the_objective(objective, metric):
    from hwtune.model.catalog import get_model
    from hwtune.train.selection import compare_hardware

    # the MI300X here is faster than the H100 and H200 but spends more energy; it has no
    # catalog price, so the cost comparison leaves it out
    gpus = ["h100-sxm-80gb", "h200", "b200"] + (["mi300x"] if objective == "energy" else [])
    clusters = [make_cluster(g, 16) for g in gpus]
    out = compare_hardware(get_model("llama3.1-8b"), clusters, 64, 2048, objective=objective,
                           top_k=1)  # fmt: skip
    values = [getattr(h, metric) for h in out]
    assert values == sorted(values)  # was ordered by time to train whatever the objective


def test_hardware_comparison_says_its_order():
    r = CliRunner().invoke(app, [*P, "--gpu", "h100-sxm-80gb,b200", "--objective", "energy",
                                 "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["objective"] == "energy"


def test_what_if_json_says_which_job_it_swept():
    r = CliRunner().invoke(app, [*P, "--gpu", "h100", "--what-if", "nic=100,400", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    # P: 16 GPUs, batch 64 x 2048; "h100" is the catalog's h100-sxm-80gb
    assert (doc["gpu"], doc["n_gpus"], doc["global_batch"], doc["seq"]) == (
        "h100-sxm-80gb", 16, 64, 2048,
    )  # fmt: skip
    assert [p["value"] for p in doc["points"]] == [100.0, 400.0]


def test_a_batch_with_no_layout_is_a_no_fit_row_not_the_end_of_the_sweep():
    # 2-token sequences allow no context parallelism, the 8-GPU NVLink domain caps tensor
    # parallelism at 8 and 32 layers pipeline parallelism at 32: 8 x 32 = 256 < 1024 GPUs
    # without data parallelism, so batch 1 cannot be laid out; batch 64 can (dp 64 x 16)
    args = [*S[:1], "-m", "llama3.1-8b", "--seq", "2", "--global-batches", "1,64", "--fixed-gpus",
            "1024", "--json"]  # fmt: skip
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output  # was exit 2 for the whole sweep
    rows = json.loads(r.output)["points"]
    assert [row["global_batch"] for row in rows] == [1, 64]
    assert rows[0]["strategy"] is None and rows[1]["strategy"] is not None


def test_a_model_that_does_not_fit_shows_dashes_in_a_model_sweep():
    # 405B's bf16 weights alone (810 GB) exceed 8 x 80 GB
    args = [*S, "-m", "llama3.1-8b,llama3.1-405b", "--fixed-gpus", "8", "--global-batch", "64"]
    r = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    row = next(line for line in r.output.splitlines() if "llama3.1-405b" in line)
    assert [c.strip() for c in row.split("│")[3:6]] == ["-", "-", "no fit"]  # was "0" tokens/s
    assert "seq 2048" in r.output


def test_a_sweep_where_nothing_fits_exits_1_and_says_how_much_memory_is_missing():
    args = [*S, "-m", "llama3.1-405b", "--gpus", "8,16", "--global-batch", "16"]
    r = CliRunner().invoke(app, [*args, "--json"])
    assert r.exit_code == 1, r.output  # as `hwtune plan` for an impossible job (was 0)
    pts = json.loads(r.output)["points"]
    assert [p["fits"] for p in pts] == [False, False]
    # at least the bf16 weights of 4e11 parameters, sharded over 8 GPUs, beyond 80 GiB each
    capacity = make_cluster("h100-sxm-80gb", 8).device.memory_gib * 2**30
    assert pts[0]["shortfall_bytes"] >= 4e11 * 2 / 8 - capacity
    assert 0 < pts[1]["shortfall_bytes"] < pts[0]["shortfall_bytes"]  # twice the GPUs
    table = CliRunner().invoke(app, args, env={"COLUMNS": "250"})
    assert table.exit_code == 1 and "GiB more per GPU" in table.output


@pytest.mark.parametrize(
    ("gpus", "expected"), [("12", "--gpus-per-node (= 8)"), ("0", "a positive integer")]
)
def test_plan_names_gpus_for_a_count_the_nodes_do_not_take(rejects, gpus, expected):
    # named "cluster.n_gpus", an option plan does not have
    args = ["plan", "-m", "llama3.1-8b", "--seq", "2048", "--global-batch", "64"]
    rejects([*args, "--gpus", gpus, "--gpu", "h100-sxm-80gb,b200"], "--gpus", gpus, expected)


def test_offload_time_that_grows_is_named_the_host_link():
    # 100 -> 200 GPUs at 1000 -> 1600 tokens/s: 0.1 -> 0.125 GPU-s per token; the offload part
    # 0 -> 0.16 x 0.125 = 0.02 of the 0.025 grown (the estimator's "offload" time was left out
    # of the parts, so it counted as compute)
    prev, cur = _pt(100, 1000.0, {"offload": 0.0}), _pt(200, 1600.0, {"offload": 0.16})
    assert saturating_resource(prev, cur) == RESOURCE["offload"]
    assert "offload" in RESOURCE["offload"]
