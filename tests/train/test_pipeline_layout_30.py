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


# ---- multi-token prediction (DeepSeek-V3 report §2.2; Megatron-Core --mtp-num-layers)

DSV3 = get_model("deepseek-v3")
DS_BASE = dict(dp=64, tp=2, pp=8, ep=64, vpp=4, schedule="interleaved", micro_batch=1,
               global_batch=8192, seq=4096, precision="fp8", sequence_parallel=True)  # fmt: skip


def test_mtp_module_with_its_embedding_and_head_copies_makes_the_685b_checkpoint() -> None:
    # DeepSeek-V3's card: 685B weights = 671B main model + 14B MTP module (the module's file
    # holds its own copies of the embedding and the head)
    from hwtune.model import params as P

    full = P.mtp_module_params(DSV3) + P.input_embedding_params(DSV3) + P.lm_head_params(DSV3)
    assert (P.total_params(DSV3) + full) / 685e9 == pytest.approx(1.0, abs=0.005)


def test_mtp_sits_on_the_last_stage_without_a_layout() -> None:
    from hwtune.model import params as P

    st = Strategy(**DS_BASE, mtp_layers=1)  # type: ignore[arg-type]
    plain = rank_layouts(DSV3, 8, 4, Strategy(**DS_BASE).split_key)  # type: ignore[arg-type]
    lays = rank_layouts(DSV3, 8, 4, st.split_key)
    assert [r.mtp for r in lays] == [0] * 7 + [1]
    assert lays[-1].n_layers == plain[-1].n_layers + 1
    # the block, its projection and norms, and a copy of the embedding on the last stage
    added = (lays[-1].dense_params + lays[-1].expert_params) - (
        plain[-1].dense_params + plain[-1].expert_params
    )
    assert added == P.mtp_module_params(DSV3) + P.input_embedding_params(DSV3)


def test_mtp_prices_a_second_head_and_its_logits() -> None:
    from hwtune.cost.memory import logits_bytes

    cl = make_cluster("h100-sxm-80gb", 1024)
    st0 = Strategy(**DS_BASE, pipeline_split="Et|(tt|)*30L")  # type: ignore[arg-type]
    st1 = Strategy(**DS_BASE, pipeline_split="Et|(tt|)*30mL", mtp_layers=1)  # type: ignore[arg-type]
    e0, e1 = _estimate(DSV3, cl, st0), _estimate(DSV3, cl, st1)
    assert e1.step_time_s > e0.step_time_s
    from hwtune.train.estimator import _activations, act_shape

    a = act_shape("fp8", 2, 1, 64, True, 1, 4096, True, False, 1.0, "fused")
    t0 = _activations(DSV3, 8, 4, a, "none", "interleaved", 128, st0.split_key)[-1][1]
    t1 = _activations(DSV3, 8, 4, a, "none", "interleaved", 128, st1.split_key)[-1][1]
    assert t1 - t0 == logits_bytes(DSV3, a.tokens, a.tp, a.loss)


@pytest.mark.parametrize(
    ("layout", "mtp", "words"),
    [
        ("Et|(tt|)*30mL", 0, ("mtp_layers = 0", "has 1")),
        ("Et|(tt|)*30L", 1, ("mtp_layers = 1", "has 0")),
        ("Etm|(tt|)*30L", 1, ("after every transformer layer",)),
        # m in chunk 23 of 32 (rank 7's third of four virtual stages), no t after it
        ("|".join(["Et", *["ttt"] * 20, "", "", "m", *[""] * 7, "L"]), 1, ("last virtual stage",)),
    ],
)
def test_mtp_layouts_megatron_cannot_build_are_refused(
    layout: str, mtp: int, words: tuple[str, ...]
) -> None:
    with pytest.raises(HwtuneInputError) as info:
        Strategy(**DS_BASE, pipeline_split=layout, mtp_layers=mtp).validate_for(DSV3, 1024)  # type: ignore[arg-type]
    assert all(w in info.value.expected for w in words), info.value.expected


def test_megatron_launch_round_trips_mtp() -> None:
    st = Strategy(**DS_BASE, pipeline_split="Et|(tt|)*30mL", mtp_layers=1, moe_dispatch="deepep")  # type: ignore[arg-type]
    args = megatron_launch(st, DSV3, 1024, 8).args
    assert args[args.index("--mtp-num-layers") + 1] == "1"
    back = megatron_strategy(strategy_from_megatron(args), DSV3, 1024)
    assert (back.mtp_layers, back.pipeline_split) == (1, "Et|(tt|)*30mL")


def test_torchtitan_refuses_mtp() -> None:
    from hwtune.train.launch_torchtitan import torchtitan_refusal

    refusal = torchtitan_refusal(Strategy(dp=8, mtp_layers=1), LLAMA8)
    assert refusal is not None and refusal.field == "mtp_layers"


def test_published_deepseek_2509_h100_runs_its_layout_mtp_and_a2a_overlap(published_runs) -> None:  # noqa: ANN001
    # Megatron-Bridge 25.09 run_script.py: layout "Et|(tt|)*30mL" (the recipe's MTP depth 1)
    # and, on H100, overlap_moe_expert_parallel_comm (A2A_1F1B)
    run = published_runs["mbridge-25.09-h100-deepseek-v3-na-1024gpu"]
    st = run.strategy
    assert (st.pipeline_split, st.mtp_layers, st.overlap_moe_a2a) == ("Et|(tt|)*30mL", 1, True)
    assert _estimate(run.spec, run.cluster, st).fits


def test_plan_keeps_uneven_stages_under_the_default_split() -> None:
    # the even split gives the remainder to the first chunks, so pp x vpp need not divide the
    # layers (until this session a read-through had the planner prune those: 126-layer 405B on
    # 16,384 H100s estimated 443 strategies instead of 5,732 and picked pp 2 at 42.5% MFU)
    from hwtune.train.search import Constraints

    cl = make_cluster("h100-sxm-80gb", 24)
    res = plan(LLAMA8, cl, 48, 4096, constraints=Constraints(fixed={"pp": 3}), top_k=3)
    assert res.top and all(e.strategy.pp == 3 for e in res.top)
    assert not any("pipeline" in str(k) for k in res.pruned)


@pytest.mark.parametrize(
    ("layout", "mtp", "words"),
    [
        ("EttL", 0, ("32 transformer layers", "it has 2")),
        ("E" + "t" * 32 + "mL", 0, ("mtp_layers = 0",)),
    ],
)
def test_a_layout_without_pipeline_parallelism_is_checked_too(
    layout: str, mtp: int, words: tuple[str, ...]
) -> None:
    # at pp 1 a layout of 2 layers was priced as the whole model, and a stray m as an MTP module
    st = Strategy(dp=8, global_batch=64, seq=4096, pipeline_split=layout, mtp_layers=mtp)
    with pytest.raises(HwtuneInputError) as info:
        st.validate_for(get_model("llama3.1-8b"), 8)
    assert all(w in str(info.value) for w in words), str(info.value)
    ok = Strategy(dp=8, global_batch=64, seq=4096, pipeline_split="E" + "t" * 32 + "L")
    ok.validate_for(get_model("llama3.1-8b"), 8)
