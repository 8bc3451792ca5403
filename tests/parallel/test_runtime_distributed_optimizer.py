"""ZeRO-1 in the real runtime runs what the plan prices: Megatron-Core's distributed optimizer
(`runtime/distributed_optimizer.py`), not DDP + ``ZeroRedundancyOptimizer`` (a gradient
all-reduce and parameter broadcasts, about twice the gradient bytes).

On CPU/gloo, on the tiny model, with 4 micro-batches per dp rank (2 for the MoE at dp 4):

- the losses of a ZeRO-1 run equal those of the same run at ZeRO-0 (and the single process's),
  at dp 2, pp 2 x dp 2 (1F1B, the stages' gradients reduced after the schedule) and dp 4 x ep 2
  (routed experts over their edp replicas);
- per step each rank issues one reduce-scatter and one all-gather per data-parallel group (dp;
  the routed experts' edp), no all-reduce, and as many elements as the plan's reduce-scatter
  (fp32 gradients) and all-gather (bf16 parameters: bytes / 2; the run is fp32) carry, up to
  the padding of the flat buffer to a multiple of the group size;
- each rank keeps AdamW's two moments for its 1/dp of the elements only (1/edp for the
  experts), ZeRO-0 for all of them."""

from __future__ import annotations

from collections import Counter

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

from hwtune.hardware.cluster import make_cluster  # noqa: E402
from hwtune.parallel.compiler import compile_plan  # noqa: E402
from hwtune.parallel.runtime.data_parallel import expert_param_names  # noqa: E402
from hwtune.parallel.runtime.launch import launch_many, losses_agree, run_config  # noqa: E402
from hwtune.parallel.runtime.models import build, model_spec  # noqa: E402
from hwtune.parallel.runtime.pipeline import split_stage  # noqa: E402
from hwtune.parallel.spec import make_spec  # noqa: E402

AG, RS = "all_gather_single", "reduce_scatter_single"
FP32 = 4

CASES = {
    "dp2": dict(dp=2),
    "pp2-dp2-1f1b": dict(pp=2, dp=2, schedule="1f1b"),
    "moe-dp4-ep2": dict(dp=4, ep=2),
}
UNSHARDED = [{"match": "layers.*.experts", "ep": 1}]
WORLD = {"dp2": 2, "pp2-dp2-1f1b": 4, "moe-dp4-ep2": 4}


def _spec(name: str, zero: int):
    return make_spec(global_batch=8, micro_batch=1, zero=zero, **CASES[name])


def _cfg(name: str, zero: int):
    if name == "tp2-dp2":
        return run_config(make_spec(global_batch=8, micro_batch=1, zero=zero, tp=2, dp=2), steps=2)
    if name == "pp2-dp2-dualpipe":
        spec = make_spec(global_batch=16, micro_batch=2, zero=zero, pp=2, dp=2, schedule="dualpipe")
        return run_config(spec, steps=2)
    if name == "moe-dp2-ep1":  # the MoE's experts unsharded (ep 1): replicated over dp
        spec = make_spec(global_batch=8, micro_batch=1, zero=zero, dp=2, modules=UNSHARDED)
        return run_config(spec, steps=2, moe=True)
    return run_config(_spec(name, zero), steps=2, moe=name.startswith("moe"))


@pytest.fixture(scope="module")
def runs():
    """{(name, zero): (cfg, result)}: one set of processes per world size; tp 2 x dp 2 at
    ZeRO 0 and 1."""
    out = {}
    for world in (2, 4):
        keys = [(n, z) for n in CASES if WORLD[n] == world for z in (0, 1)]
        keys += (
            [("tp2-dp2", 0), ("tp2-dp2", 1), ("pp2-dp2-dualpipe", 0), ("pp2-dp2-dualpipe", 1)]
            if world == 4
            else [("moe-dp2-ep1", 0), ("moe-dp2-ep1", 1)]
        )
        cfgs = [_cfg(n, z) for n, z in keys]
        for k, c, r in zip(keys, cfgs, launch_many(cfgs), strict=True):
            out[k] = (c, r)
    return out


def _padded(n: int, g: int) -> int:
    return -(-n // g) * g


def _groups(name: str, cfg, rank: int) -> list[tuple[int, int]]:
    """(elements, group size) of each data-parallel group's flat buffer on ``rank``: the dense
    parameters over dp, the routed experts this rank holds over their edp replicas."""
    model = build(cfg.model, 0)
    if cfg.pp > 1:
        s = rank // cfg.dp  # mesh (pp, dp, tp): ranks 0-1 hold stage 0
        n = len(cfg.stage_layers)
        model = split_stage(model, cfg.stage_layers[s], s == 0, s == n - 1)
    ex = set(expert_param_names(model))
    dense = sum(p.numel() for k, p in model.named_parameters() if k not in ex)
    routed = sum(p.numel() for k, p in model.named_parameters() if k in ex) // cfg.ep
    groups = [(dense, cfg.dp)]
    if routed:
        groups.append((routed, cfg.dp // cfg.ep))
    return groups


@pytest.mark.parametrize("name", list(CASES))
def test_zero1_losses_equal_zero0(runs, name):
    (c0, r0), (c1, r1) = runs[(name, 0)], runs[(name, 1)]
    assert c1.zero == 1 and c0.zero == 0 and c1.dp > 1
    assert len(r1["losses"]) == 2
    assert r1["losses"] == pytest.approx(r0["losses"], rel=1e-6, abs=1e-6)
    assert losses_agree(r1["losses"], r1["reference"]), r1


@pytest.mark.parametrize("name", list(CASES))
def test_zero1_reduce_scatters_and_all_gathers_once_per_step_and_group(runs, name):
    cfg, res = runs[(name, 1)]
    plan = compile_plan(
        _spec(name, 1), model_spec(cfg.model), make_cluster("h100-sxm-80gb", cfg.world)
    )
    priced = {r: [o for o in plan.ops if o.rank == r and o.stream == "comm"] for r in range(cfg.pp)}
    assert all(Counter(o.kind for o in ops) == Counter(AG=1, RS=1) for ops in priced.values())
    for rank, steps in res["collectives"].items():
        groups = _groups(name, cfg, int(rank))
        ops = {o.kind: o for o in priced[int(rank) // cfg.dp]}
        elems = sum(n for n, _ in groups)
        # the plan's ops carry this rank's elements: fp32 gradients, bf16 parameters
        assert ops["RS"].nbytes == FP32 * elems and ops["AG"].nbytes == 2 * elems
        want = sum(_padded(n, g) for n, g in groups if g > 1) * FP32
        calls = sum(1 for _, g in groups if g > 1)
        assert len(steps) == 2
        for step in steps:
            # the experts' dispatch (all-to-all; the plan prices it inside the layers' time)
            # (through torch.distributed, and as functional collectives in its autograd)
            step = {k: v for k, v in step.items() if not k.startswith("all_to_all_single")}
            # one reduce-scatter and one all-gather per group; no all-reduce, no broadcast
            assert step == {
                AG: {"calls": calls, "bytes": want},
                RS: {"calls": calls, "bytes": want},
            }
        assert want - ops["RS"].nbytes < FP32 * sum(g for _, g in groups)  # padding only


@pytest.mark.parametrize("name", list(CASES))
def test_zero1_keeps_adam_states_for_its_shard_only(runs, name):
    """AdamW's two fp32 moments: for ceil(n / g) elements of each group's n on a rank at
    ZeRO-1, for all n at ZeRO-0."""
    for zero in (0, 1):
        cfg, res = runs[(name, zero)]
        for rank, mem in res["memory"].items():
            groups = _groups(name, cfg, int(rank))
            shard = sum(_padded(n, g) // g if zero else n for n, g in groups)
            assert mem["optimizer"] == 2 * FP32 * shard, (name, zero, rank)
    cfg, res = runs[(name, 1)]
    for rank, mem in res["memory"].items():
        whole = sum(n for n, _ in _groups(name, cfg, int(rank)))
        assert mem["optimizer"] <= 2 * FP32 * (whole / 2 + cfg.dp)  # about 1/dp (1/edp)


def test_zero1_runs_under_tensor_parallelism(runs):
    """tp 2 x dp 2: the optimizer reduces, steps and gathers each rank's local shards of the
    DTensor parameters (the run's ``params_local`` elements), once per step, and the losses
    match the single process's. (The plan's per-rank parameters divide every weight by tp, the
    tiny model's replicated norms and embeddings too, so its bytes are not compared here.)"""
    cfg, res = runs[("tp2-dp2", 1)]
    assert cfg.tp == 2 and cfg.dp == 2
    assert losses_agree(res["losses"], res["reference"]), res
    for rank, steps in res["collectives"].items():
        local = int(res["memory"][int(rank)]["params_local"])
        assert local < sum(p.numel() for p in build(cfg.model, 0).parameters())
        want = _padded(local, 2) * FP32
        for step in steps:
            dp_only = {k: v for k, v in step.items() if not k.endswith("(functional)")}
            assert dp_only == {AG: {"calls": 1, "bytes": want}, RS: {"calls": 1, "bytes": want}}
        assert res["memory"][int(rank)]["optimizer"] == 2 * FP32 * _padded(local, 2) // 2


def test_tensor_parallel_all_reduces_are_counted(runs):
    """DTensor's tensor-parallel collectives go through functional collectives, not the
    ``torch.distributed`` functions: counted as ``all_reduce (functional)``. Per block and
    micro-batch, Megatron's four (Shoeybi et al. 2019, Fig. 4; the plan prices the same): the
    forward all-reduces the outputs of the two row-parallel linears (attention.wo,
    feed_forward.w2), the backward the input gradients of the two column-parallel ones (the
    fused attention.wqkv and feed_forward.w13; with q, k, v, w1 and w3 as separate linears
    DTensor issued five), each of the micro-batch's (tokens x d_model) fp32 activations.
    tp 2 x dp 2, 4 micro-batches of 1 sequence, 4 blocks."""
    for zero in (0, 1):
        cfg, res = runs[("tp2-dp2", zero)]
        act = cfg.micro_batch * cfg.model.seq * cfg.model.d_model * FP32
        for steps in res["collectives"].values():
            for step in steps:
                want = 4 * cfg.model.n_layers * cfg.n_micro
                assert step["all_reduce (functional)"] == {"calls": want, "bytes": want * act}


def test_zero0_under_tensor_parallelism_all_reduces_the_local_shards_once(runs):
    """tp 2 x dp 2 at ZeRO-0: DDP takes no DTensor parameters (the run crashed in its first
    broadcast), so the step's gradients go in one all-reduce of the rank's local shards over
    dp, once per step as the plan prices it, and the losses match the single process's."""
    cfg, res = runs[("tp2-dp2", 0)]
    assert cfg.tp == 2 and cfg.dp == 2 and cfg.zero == 0
    assert losses_agree(res["losses"], res["reference"]), res
    for rank, steps in res["collectives"].items():
        local = int(res["memory"][int(rank)]["params_local"])
        for step in steps:
            assert step["all_reduce"] == {"calls": 1, "bytes": local * FP32}


def test_zero1_under_dualpipe_reduce_scatters_both_chunks_once(runs):
    """DualPipe (pp 2, dp 2) at ZeRO-1, as DeepSeek-V3 trains it (it was refused): each rank's
    two chunk copies, their gradients summed over the pipeline group, in one flat buffer: one
    reduce-scatter and one all-gather per step (the plan's one RS and one AG per rank), AdamW
    states for half of the rank's elements, and the losses of ZeRO-0 and the single process."""
    z0, r0 = runs[("pp2-dp2-dualpipe", 0)]
    z1, r1 = runs[("pp2-dp2-dualpipe", 1)]
    assert z1.bidirectional and z1.zero == 1
    assert losses_agree(r1["losses"], r1["reference"]), r1
    assert losses_agree(r1["losses"], r0["losses"])
    for rank, steps in r1["collectives"].items():
        local = int(r1["memory"][int(rank)]["params_local"])
        want = _padded(local, 2) * FP32
        for step in steps:
            assert step[AG] == {"calls": 1, "bytes": want}
            assert step[RS] == {"calls": 1, "bytes": want}
        assert r1["memory"][int(rank)]["optimizer"] == 2 * FP32 * _padded(local, 2) // 2
        assert r0["memory"][int(rank)]["optimizer"] == 2 * FP32 * local


def test_unsharded_experts_are_reduced_with_the_dense_weights(runs):
    """A MoE whose experts are not sharded (ep 1) at dp 2: their gradients were left out of
    DDP's all-reduce (as sharded experts are) and never reduced, at ZeRO-0 and ZeRO-1, and the
    losses differed from the single process's from the second step (4.71988 vs 4.74594). Now
    they are reduced with the dense weights: at ZeRO-1 one buffer of all the parameters."""
    for zero in (0, 1):
        cfg, res = runs[("moe-dp2-ep1", zero)]
        assert cfg.model.n_experts and cfg.ep == 1
        assert losses_agree(res["losses"], res["reference"]), (zero, res)
    full = sum(p.numel() for p in build(cfg.model, 0).parameters())
    for steps in res["collectives"].values():
        for step in steps:
            want = _padded(full, 2) * FP32
            assert step == {AG: {"calls": 1, "bytes": want}, RS: {"calls": 1, "bytes": want}}


def _unit_worker(rank: int, port: int, out: str) -> None:
    """Two ranks, parameters of 3 + 4 elements (the flat buffer padded to 8), each rank with its
    own gradients: two steps of the distributed optimizer, its collectives, states and
    parameters, against AdamW on the mean gradient (eps 1: Adam's update then depends on the
    gradient's scale, so a missing or wrong mean shows)."""
    import json
    import os

    from torch.distributed.device_mesh import init_device_mesh

    from hwtune.parallel.runtime.comm import CommCounter
    from hwtune.parallel.runtime.distributed_optimizer import DistributedOptimizer

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        mesh = init_device_mesh("cpu", (2,))
        init = [torch.arange(3.0), torch.arange(4.0).reshape(2, 2) - 1.5]
        ps = [torch.nn.Parameter(t.clone()) for t in init]
        ref = [torch.nn.Parameter(t.clone()) for t in init]
        kw = dict(lr=0.1, eps=1.0, weight_decay=0.1)
        opt = DistributedOptimizer(ps, mesh, 2, **kw)
        ref_opt = torch.optim.AdamW(ref, **kw)
        counter, comm = CommCounter(), []

        def grads(r: int, step: int) -> list[torch.Tensor]:
            g = torch.linspace(-1.0, 2.0, 7) * (r + 1) + step
            return [g[:3].clone(), g[3:].reshape(2, 2).clone()]

        for step in range(2):
            for p, g in zip(ps, grads(rank, step), strict=True):
                p.grad = g
            for p, a, b in zip(ref, grads(0, step), grads(1, step), strict=True):
                p.grad = (a + b) / 2
            with counter:
                opt.step()
            comm.append(counter.take())
            ref_opt.step()
            opt.zero_grad()
            ref_opt.zero_grad()
        doc = {
            "comm": comm,
            "state_numel": opt.state_numel(),
            "max_diff": max((p - q).abs().max().item() for p, q in zip(ps, ref, strict=True)),
            "moved": max((p - t).abs().max().item() for p, t in zip(ps, init, strict=True)),
            "grads": [p.grad is None for p in ps],
        }
        with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
            json.dump(doc, f)
    finally:
        dist.destroy_process_group()


def test_distributed_optimizer_steps_adamw_on_the_mean_gradient_with_a_padded_shard(tmp_path):
    import json

    import torch.multiprocessing as mp

    from hwtune.parallel.runtime.launch import free_port

    mp.spawn(_unit_worker, args=(free_port(), str(tmp_path)), nprocs=2, join=True)
    for rank in range(2):
        doc = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert doc["moved"] > 0.05  # it trained
        assert doc["max_diff"] < 1e-6, doc  # plain AdamW's parameters, on both ranks
        assert doc["state_numel"] == 2 * 4  # two moments of the 4-element shard (7 padded to 8)
        for step in doc["comm"]:
            assert step == {
                RS: {"calls": 1, "bytes": 8 * FP32},
                AG: {"calls": 1, "bytes": 8 * FP32},
            }
        assert doc["grads"] == [True, True]  # zero_grad leaves none


@pytest.fixture(scope="module")
def pp_dp_tp():
    """pp 2 x dp 2 x tp 2 (8 processes) at ZeRO 0 and 1: {zero: (cfg, result)}."""
    specs = {z: make_spec(global_batch=8, micro_batch=1, zero=z, pp=2, dp=2, tp=2) for z in (0, 1)}
    cfgs = [run_config(specs[z], steps=2) for z in (0, 1)]
    return {z: (c, r) for z, c, r in zip((0, 1), cfgs, launch_many(cfgs), strict=True)}


@pytest.mark.parametrize("zero", [0, 1])
def test_pipeline_stages_of_tp_shards_reduce_over_dp(pp_dp_tp, zero):
    """PP x DP x TP at ZeRO-0/1 (refused before: DDP takes no DTensor parameters): each rank's
    stage, its TP DTensors' local shards, reduced by hand at ZeRO-0 (one all-reduce per step)
    or by the distributed optimizer at ZeRO-1 (one reduce-scatter, one all-gather), over dp;
    the losses match the single process's."""
    cfg, res = pp_dp_tp[zero]
    assert (cfg.pp, cfg.dp, cfg.tp, cfg.zero) == (2, 2, 2, zero)
    assert losses_agree(res["losses"], res["reference"]), res
    for rank, steps in res["collectives"].items():
        local = int(res["memory"][int(rank)]["params_local"])
        for step in steps:
            if zero == 0:
                assert step["all_reduce"] == {"calls": 1, "bytes": local * FP32}
            else:
                want = _padded(local, 2) * FP32
                assert step[AG] == {"calls": 1, "bytes": want}
                assert step[RS] == {"calls": 1, "bytes": want}
