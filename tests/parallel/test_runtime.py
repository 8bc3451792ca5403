"""The real runtime on torch.distributed (CPU, gloo, 127.0.0.1): a tiny GPT and a tiny MoE
train three steps under composite strategies and match a single-process run within
floating-point tolerance; measured parameter + gradient + optimizer bytes per rank match the
estimator's memory model (`hwtune.cost.memory.sharded_state_bytes`) within 10% (issue 8, *Proof*).
All strategies of one world size share one set of processes (torch's start-up dominates)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

from hwtune.cost.memory import sharded_state_bytes, state_bytes_per_param  # noqa: E402
from hwtune.parallel.runtime.launch import launch_many, run_config  # noqa: E402
from hwtune.parallel.runtime.models import TinyConfig, build  # noqa: E402
from hwtune.parallel.runtime.train import RunConfig  # noqa: E402
from hwtune.parallel.spec import make_spec  # noqa: E402

TOL = 1e-5  # relative; float32 sums in a different order

TWO = {
    "dp2-ddp": make_spec(dp=2, zero=0),
    "dp2-zero1": make_spec(dp=2, zero=1),
    "dp2-zero3-fsdp2": make_spec(dp=2, zero=3),
    "tp2-dtensor": make_spec(tp=2),
    "pp2-1f1b": make_spec(pp=2, global_batch=8, micro_batch=2),
    "pp2-interleaved": make_spec(pp=2, global_batch=8, micro_batch=2, schedule={"name": "interleaved", "vpp": 2}),
    "pp2-zb-h1": make_spec(pp=2, global_batch=8, micro_batch=2, schedule="zb-h1"),
    "pp2-dualpipev": make_spec(pp=2, global_batch=8, micro_batch=2, schedule="dualpipev"),
    "pp2-uneven-explicit": make_spec(
        pp=2, global_batch=4, micro_batch=2, stages=[3, 1],
        schedule={"actions": {0: ["0F0", "0F1", "0B0", "0B1"], 1: ["1F0", "1B0", "1F1", "1B1"]}},
    ),
    "moe-ep2": make_spec(dp=2, ep=2, zero=0),
}  # fmt: skip
FOUR = {
    "tp2-dp2-fsdp2": make_spec(tp=2, dp=2, zero=3),
    "pp2-dp2-fsdp2-1f1b": make_spec(pp=2, dp=2, zero=3, global_batch=8, micro_batch=2),
}


def _cfg(spec) -> RunConfig:
    cfg = run_config(spec, steps=3, moe=spec.mesh.ep > 1)
    # global batch counts sequences of the tiny model: micro-batch of 2 sequences
    return cfg


@pytest.fixture(scope="module")
def two():
    cfgs = [_cfg(s) for s in TWO.values()]
    return dict(zip(TWO, launch_many(cfgs), strict=True)), dict(zip(TWO, cfgs, strict=True))


@pytest.fixture(scope="module")
def four():
    cfgs = [_cfg(s) for s in FOUR.values()]
    return dict(zip(FOUR, launch_many(cfgs), strict=True)), dict(zip(FOUR, cfgs, strict=True))


@pytest.mark.parametrize("name", list(TWO))
def test_two_processes_match_single_process(two, name):
    res = two[0][name]
    assert len(res["losses"]) == 3
    assert res["losses"] == pytest.approx(res["reference"], rel=TOL, abs=TOL)
    assert res["losses"][-1] < res["losses"][0]  # it trains


@pytest.mark.parametrize("name", list(FOUR))
def test_four_processes_match_single_process(four, name):
    res = four[0][name]
    assert res["losses"] == pytest.approx(res["reference"], rel=TOL, abs=TOL)


@pytest.mark.parametrize(
    ("name", "zero", "shards"), [("dp2-ddp", 0, 2), ("dp2-zero3-fsdp2", 3, 2), ("dp2-zero1", 1, 2)]
)
def test_state_bytes_match_the_memory_model(two, name, zero, shards):
    res, cfg = two[0][name], two[1][name]
    n = sum(p.numel() for p in build(cfg.model, 0).parameters())
    sb = state_bytes_per_param("fp32", "adam", fp32_grads=True)
    w, g, o = sharded_state_bytes(n, sb, zero, shards)
    for mem in res["memory"].values():
        measured = mem["weights"] + mem["gradients"] + mem["optimizer"]
        assert measured == pytest.approx(w + g + o, rel=0.10)


def test_tp_shards_the_blocks(two):
    res, cfg = two[0]["tp2-dtensor"], two[1]["tp2-dtensor"]
    full = sum(p.numel() for p in build(cfg.model, 0).parameters())
    local = res["memory"][0]["params_local"]
    assert local < 0.75 * full


def test_runtime_refuses_what_it_cannot_run():
    from hwtune.errors import HwtuneInputError

    with pytest.raises(HwtuneInputError, match="dualpipev for --run"):
        run_config(make_spec(pp=2, global_batch=8, micro_batch=2, schedule="dualpipe"))
    with pytest.raises(HwtuneInputError, match="context parallelism is simulated only"):
        run_config(make_spec(cp=2))
    assert TinyConfig().n_layers == 4
