"""Megatron-Core's custom pipeline layouts (``--pipeline-model-parallel-layout``) as
`Strategy.pipeline_split`."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as hs

from hwtune.errors import HwtuneInputError
from hwtune.hardware.cluster import make_cluster
from hwtune.model.catalog import get_model
from hwtune.train.estimator import _estimate, rank_layouts
from hwtune.train.launch import megatron_launch, megatron_strategy, strategy_from_megatron
from hwtune.train.pipeline_layout import chunk_layers, parse_layout
from hwtune.train.search import plan
from hwtune.train.strategy import Strategy, make_strategy

LLAMA8 = get_model("llama3.1-8b")  # 32 layers
BASE = dict(dp=4, pp=4, micro_batch=1, global_batch=64, seq=8192, schedule="interleaved", vpp=2)


def test_megatron_docstring_example() -> None:
    # pipeline_parallel_layer_layout.py parse_str_to_list: "Ettt|(tt|)*29,m|L" is
    # [["E","t","t","t"]] + [["t","t"]]*29 + [["m"],["L"]]
    got = parse_layout("Ettt|(tt|)*29,m|L")
    assert got == ("Ettt",) + ("tt",) * 29 + ("m", "L")


def test_megatron_bridge_deepseek_h100_layout() -> None:
    # scripts/performance of Megatron-Bridge v0.1.0rc3-v0.3.0: 32 chunks for PP 8 x VP 4
    chunks = parse_layout("Et|(tt|)*30mL")
    assert len(chunks) == 32 and chunks[0] == "Et" and chunks[-1] == "mL"
    assert sum(c.count("t") for c in chunks) == 61


def _layout(sizes: list[int]) -> str:
    body = "|".join("t" * s for s in sizes)
    return "E" + body + "L"


@given(sizes=hs.lists(hs.integers(0, 6), min_size=2, max_size=12))
def test_a_layout_builds_what_it_says(sizes: list[int]) -> None:
    assert chunk_layers(_layout(sizes), sum(sizes), len(sizes)) == sizes


def test_even_layout_prices_as_the_even_split() -> None:
    cl = make_cluster("h100-sxm-80gb", 16)
    even = _estimate(LLAMA8, cl, Strategy(**BASE))  # type: ignore[arg-type]
    lay = _estimate(LLAMA8, cl, Strategy(**BASE, pipeline_split=_layout([4] * 8)))  # type: ignore[arg-type]
    assert lay.step_time_s == even.step_time_s
    assert lay.memory.total == even.memory.total


def test_embedding_and_loss_layout_prices_as_that_split() -> None:
    # 405B, 16 x 4 chunks: the named split builds 1, 2 x 62, 1 layers; so does this layout
    spec = get_model("llama3.1-405b")
    cl = make_cluster("h100-sxm-80gb", 1024)
    st = dict(dp=8, tp=8, pp=16, vpp=4, schedule="interleaved", micro_batch=1,
              global_batch=512, seq=8192, sequence_parallel=True)  # fmt: skip
    named = _estimate(spec, cl, Strategy(**st, pipeline_split="layers+embedding+loss"))  # type: ignore[arg-type]
    layout = _estimate(spec, cl, Strategy(**st, pipeline_split="Et|(tt|)*62tL"))  # type: ignore[arg-type]
    assert layout.step_time_s == named.step_time_s
    assert layout.memory.total == named.memory.total


def test_a_lighter_first_chunk_lowers_the_first_ranks_memory() -> None:
    st = Strategy(**BASE, pipeline_split="Et*3|(t*4|)*6t*5L")  # type: ignore[arg-type]
    st.validate_for(LLAMA8, 16)
    assert [r.n_layers for r in rank_layouts(LLAMA8, 4, 2, st.pipeline_split)] == [7, 8, 8, 9]
    cl = make_cluster("h100-sxm-80gb", 16)
    assert (
        _estimate(LLAMA8, cl, st).memory.activations
        < _estimate(
            LLAMA8,
            cl,
            Strategy(**BASE),  # type: ignore[arg-type]
        ).memory.activations
    )


@pytest.mark.parametrize(
    ("layout", "words"),
    [
        ("Et*3|(t*4|)*6t*5L|", ("8 chunks", "has 9")),
        ("tE|(t*4|)*6t*7L", ("embedding",)),
        ("Et*3|(t*4|)*6Lt*5", ("loss",)),
        ("Et*3|(t*4|)*6t*4L", ("32 transformer layers", "has 31")),
        ("Et*3|(t*4|)*6t*5mL", ("multi-token",)),
    ],
)
def test_layouts_megatron_cannot_build_are_refused(layout: str, words: tuple[str, ...]) -> None:
    with pytest.raises(HwtuneInputError) as info:
        Strategy(**BASE, pipeline_split=layout).validate_for(LLAMA8, 16)  # type: ignore[arg-type]
    assert info.value.field == "pipeline_split"
    assert all(w in info.value.expected for w in words), info.value.expected


def test_unknown_symbols_get_one_line() -> None:
    with pytest.raises(HwtuneInputError) as info:
        make_strategy(**BASE, pipeline_split="Et*3|x")
    assert "pipeline_split" in info.value.field and "'x'" in info.value.expected


def test_megatron_launch_round_trips_a_layout() -> None:
    st = Strategy(**BASE, pipeline_split="Et*3|(t*4|)*6t*5L")  # type: ignore[arg-type]
    args = megatron_launch(st, LLAMA8, 16, 8).args
    i = args.index("--pipeline-model-parallel-layout")
    assert args[i + 1] == "Et*3|(t*4|)*6t*5L"
    assert "--num-virtual-stages-per-pipeline-rank" not in args  # arguments.py:927-939
    assert megatron_strategy(strategy_from_megatron(args), LLAMA8, 16) == st


def test_megatron_layout_beside_virtual_stages_is_refused() -> None:
    args = ["--pipeline-model-parallel-size", "4", "--pipeline-model-parallel-layout",
            "Et*3|(t*4|)*6t*5L", "--num-virtual-stages-per-pipeline-rank", "2", "--bf16"]  # fmt: skip
    with pytest.raises(HwtuneInputError, match="pipeline-model-parallel-layout"):
        strategy_from_megatron(args)


def test_plan_keeps_only_layouts_of_the_given_chunks() -> None:
    cl = make_cluster("h100-sxm-80gb", 16)
    res = plan(LLAMA8, cl, 64, 8192, base={"pipeline_split": "Et*3|(t*4|)*6t*5L"}, top_k=5)
    assert res.top
    for e in res.top:
        v = e.strategy.vpp if e.strategy.schedule == "interleaved" else 1
        assert e.strategy.pp * v == 8


def test_cli_estimates_a_layout_and_refuses_a_bad_one(rejects) -> None:  # noqa: ANN001
    from typer.testing import CliRunner

    from hwtune.cli.main import app

    base = ["estimate", "--model", "llama3.1-8b", "--gpu", "h100-sxm-80gb", "--gpus", "16",
            "--pp", "4", "--vpp", "2", "--schedule", "interleaved", "--global-batch", "64",
            "--json"]  # fmt: skip
    r = CliRunner().invoke(app, [*base, "--pipeline-split", "Et*3|(t*4|)*6t*5L"])
    assert r.exit_code == 0, r.output
    rejects([*base, "--pipeline-split", "Et*3|(t*4|)*6t*4L"], "--pipeline-split", "31")
