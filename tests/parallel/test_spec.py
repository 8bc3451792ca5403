"""The declarative language: Python and YAML forms, the Strategy preset, one-line errors that
name the annotation (issue 8, *Declaring a strategy*, *Bad input*)."""

from __future__ import annotations

import pytest

from hwtune.errors import HwtuneInputError
from hwtune.model.catalog import get_model
from hwtune.parallel.spec import from_strategy, load_spec, make_spec, resolve, validate
from hwtune.train.strategy import Strategy

LLAMA = get_model("llama3.1-8b")  # 32 layers, 32 heads
MOE = get_model("mixtral-8x7b")  # 8 experts


def test_yaml_round_trip(tmp_path):
    text = """
mesh: {dp: 2, tp: 2, pp: 2, ep: 2}
global_batch: 16
stages: [10, 22]
modules:
  - {match: "layers.*.attention", tp: 2}
  - {match: "layers.*.experts", tp: 1, ep: 2}
  - {match: "layers[0:4]", recompute: full}
schedule: {name: 1f1b}
"""
    p = tmp_path / "s.yaml"
    p.write_text(text)
    spec = load_spec(p)
    layers = validate(spec, MOE, 8)
    assert [lp.stage for lp in layers].count(0) == 10
    assert layers[0].recompute == "full" and layers[4].recompute == "none"
    assert layers[5].tp_attention == 2 and layers[5].tp_ffn == 1 and layers[5].ep == 2
    again = tmp_path / "again.yaml"
    again.write_text(spec.to_yaml())
    assert load_spec(again) == spec


def test_strategy_is_a_preset():
    st = Strategy(dp=2, tp=2, pp=4, global_batch=32, schedule="interleaved", vpp=2)
    spec = from_strategy(st)
    assert spec.mesh.world == 16 and spec.schedule.vpp == 2 and spec.n_stages() == 8
    assert spec.base_strategy() == st


def test_uneven_stages_resolve():
    spec = make_spec(pp=4, global_batch=8, stages=[4, 10, 10, 8])
    counts = [0] * 4
    for lp in resolve(spec, LLAMA):
        counts[lp.stage] += 1
    assert counts == [4, 10, 10, 8]


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        (
            dict(tp=2, modules=[{"match": "layers.*.attention", "tp": 3}]),
            "modules[0] 'layers.*.attention'.tp: got 3",
        ),
        (dict(tp=8, modules=[{"match": "layers.*", "tp": 8}], dp=1), None),
        (dict(pp=4, global_batch=8, stages=[4, 10, 10]), "stages: got [4, 10, 10]"),
        (dict(pp=4, global_batch=8, stages=[4, 10, 10, 9]), "summing to the 32 layers"),
        (
            dict(modules=[{"match": "layers.*.experts", "ep": 2}]),
            "no expert annotation on a dense model",
        ),
        (dict(modules=[{"match": "decoder.*", "tp": 1}]), "modules[0].match: got 'decoder.*'"),
        (
            dict(pp=2, global_batch=4, modules=[{"match": "layers[0:8]", "stage": 1}]),
            "a stage for every layer",
        ),
    ],
)
def test_one_line_errors_name_the_annotation(fields, needle):
    spec = make_spec(**fields)
    if needle is None:
        validate(spec, LLAMA, spec.mesh.world)
        return
    with pytest.raises(HwtuneInputError) as e:
        validate(spec, LLAMA, spec.mesh.world)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_experts_that_do_not_divide_are_refused():
    spec = make_spec(dp=4, modules=[{"match": "layers.*.experts", "ep": 3}])
    with pytest.raises(
        HwtuneInputError,
        match=r"modules\[0\] 'layers.\*.experts'.ep: got 3; expected a divisor of the 8 experts",
    ):
        validate(spec, MOE, 4)
    bad = make_spec(
        dp=2, modules=[{"match": "layers.*.experts", "placement": [[0, 1, 2, 3], [4, 5, 6, 6]]}]
    )
    with pytest.raises(HwtuneInputError, match="each of the 8 experts on exactly one rank"):
        validate(bad, MOE, 2)


def test_more_stages_than_ranks_or_cluster_mismatch():
    with pytest.raises(HwtuneInputError, match=r"n_gpus: got 4; expected .* dp\*tp\*pp\*cp = 8"):
        validate(make_spec(pp=8, global_batch=8), LLAMA, 4)
    with pytest.raises(HwtuneInputError, match=r"pp\*vpp: got 64"):
        validate(
            make_spec(pp=8, global_batch=16, schedule={"name": "interleaved", "vpp": 8}), LLAMA, 8
        )


def test_explicit_actions_on_the_wrong_rank():
    spec = make_spec(
        pp=2, global_batch=1, schedule={"actions": {0: ["0F0", "1F0"], 1: ["1B0", "0B0"]}}
    )
    with pytest.raises(
        HwtuneInputError,
        match=r"schedule.actions\[0\]\[1\]: got '1F0'; expected a stage that lives on rank 0",
    ):
        validate(spec, LLAMA, 2)
    with pytest.raises(HwtuneInputError, match="an action <stage>"):
        validate(make_spec(pp=2, schedule={"actions": {0: ["0X0"], 1: []}}), LLAMA, 2)


def test_expert_degree_is_checked_for_explicit_schedules_too():
    """An explicit action list skips the estimator's schedule checks; the mesh's ep is still
    checked against the experts and the tensor x context x data ranks, before anything runs."""
    acts = {0: ["0F0", "0B0"], 1: ["1F0", "1B0"]}
    spec = make_spec(pp=2, dp=3, ep=2, global_batch=3, schedule={"actions": acts})
    with pytest.raises(
        HwtuneInputError, match=r"mesh.ep: got 2; expected a divisor of tp x cp x dp \(= 3\)"
    ):
        validate(spec, MOE, 6)
    spec = make_spec(pp=2, dp=3, ep=3, global_batch=3, schedule={"actions": acts})
    with pytest.raises(
        HwtuneInputError, match="mesh.ep: got 3; expected a divisor of the 8 experts"
    ):
        validate(spec, MOE, 6)
    spec = make_spec(pp=2, dp=2, ep=2, global_batch=2, schedule={"actions": acts})
    with pytest.raises(HwtuneInputError, match="mesh.ep: got 2; expected 1 for the dense model"):
        validate(spec, LLAMA, 4)


def test_a_recompute_action_needs_recomputed_layers():
    from hwtune.hardware.cluster import make_cluster
    from hwtune.parallel.compiler import compile_plan

    acts = {0: ["0F0", "0F1", "0R0", "0B0", "0R1", "0B1"], 1: ["1F0", "1B0", "1F1", "1B1"]}
    spec = make_spec(pp=2, global_batch=2, schedule={"actions": acts})
    with pytest.raises(
        HwtuneInputError,
        match=r"schedule.actions\[0\]\[2\]: got '0R0'; expected an R only on a stage with recomputed",
    ):
        compile_plan(spec, LLAMA, make_cluster("h100-sxm-80gb", 2))
    ok = make_spec(pp=2, global_batch=2, schedule={"actions": acts},
                   modules=[{"match": "layers[0:4]", "recompute": "full"}])  # fmt: skip
    plan = compile_plan(ok, LLAMA, make_cluster("h100-sxm-80gb", 2))
    assert sum(op.kind == "R" for op in plan.ops) == 2
