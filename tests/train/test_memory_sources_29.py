"""Memory as Megatron-Core and Transformer Engine keep it: bf16 gradients in Megatron-Bridge's
performance runs, fp8 copies of the linear layers' inputs, the embedding/loss pipeline split,
and the interleaved schedule's peak walked chunk by chunk."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as hs

from hwtune.cost.memory import ActShape, layer_activation_bytes
from hwtune.errors import HwtuneInputError
from hwtune.hardware.cluster import make_cluster
from hwtune.model.catalog import get_model
from hwtune.train.estimator import FRAGMENTATION, _chunk_sizes, _estimate, estimate_memory
from hwtune.train.launch import megatron_launch, strategy_from_megatron
from hwtune.train.launch_torchtitan import torchtitan_refusal
from hwtune.train.published import load_published
from hwtune.train.schedules import in_flight, interleaved_peak
from hwtune.train.search import plan
from hwtune.train.strategy import Strategy

BLACKWELL = "benchmarks/data/training_blackwell.jsonl"


# ---- the interleaved schedule's peak, chunk by chunk


@given(p=hs.integers(2, 12), v=hs.integers(2, 6), groups=hs.integers(1, 6))
def test_equal_chunks_give_korthikanti_in_flight(p: int, v: int, groups: int) -> None:
    # Korthikanti et al. 2022 §4.2.3: the first stage holds p (1 + (p-1)/(p v)) micro-batches
    # of its layers; one chunk is 1/v of them
    m = p * groups
    got = interleaved_peak(p, v, m, 0, (1.0,) * v)
    assert got == pytest.approx(in_flight("interleaved", p, m, v) * v)


def test_a_small_first_chunk_is_held_most_on_the_first_rank() -> None:
    # 405B on 16 stages x 4 chunks with the embedding/loss split: rank 0's chunks hold 1, 2, 2, 2
    # layers. Megatron's warm-up runs 2 (p - 1) + (v - 1) p = 78 forwards, then one more before
    # the first backward: chunk 0 of micro-batches 0-15 and 16-30 (31 x 1 layer), chunks 1-3 of
    # micro-batches 0-15 (48 x 2 layers) = 127 layer-micro-batches, not Korthikanti's
    # 7 x 16 x (1 + 15/64) = 138 for 7 evenly spread layers
    assert interleaved_peak(16, 4, 384, 0, (1.0, 2.0, 2.0, 2.0)) == 127
    # the last rank warms up (v - 1) p = 48 forwards (chunks 0-2 of micro-batches 0-15, 96
    # layers); its one-layer chunk 3 then runs forward and backward in turn (97 at most), and
    # the 65th forward, chunk 0 of micro-batch 16, comes before the backward of chunk 2 of
    # micro-batch 0: 49 two-layer chunks, 98
    assert interleaved_peak(16, 4, 384, 15, (2.0, 2.0, 2.0, 1.0)) == 98


@given(p=hs.integers(2, 8), v=hs.integers(2, 4), groups=hs.integers(1, 4),
       sizes=hs.lists(hs.integers(0, 5), min_size=4, max_size=4))  # fmt: skip
def test_peak_lies_between_the_lightest_and_heaviest_chunk(
    p: int, v: int, groups: int, sizes: list[int]
) -> None:
    chunks = tuple(float(x) for x in sizes[:v])
    m = p * groups
    peak = interleaved_peak(p, v, m, 0, chunks)
    forwards = interleaved_peak(p, v, m, 0, (1.0,) * v)  # chunk-forwards held at the peak
    assert min(chunks) * forwards <= peak <= max(chunks) * forwards


# ---- the embedding/loss split


@given(n=hs.integers(4, 200), p=hs.integers(2, 16), v=hs.integers(1, 4))
def test_split_builds_every_layer_once(n: int, p: int, v: int) -> None:
    if (n + 2) % (p * v) or (n + 2) // (p * v) < 1:
        return
    sizes = _chunk_sizes(n, p, v, "layers+embedding+loss")
    per = (n + 2) // (p * v)
    assert sum(sizes) == n
    assert sizes[0] == sizes[-1] == per - 1
    assert all(s == per for s in sizes[1:-1])


def test_split_that_megatron_cannot_build_is_refused() -> None:
    st = Strategy(tp=8, pp=8, vpp=3, schedule="interleaved", dp=1, global_batch=64,
                  pipeline_split="layers+embedding+loss")  # fmt: skip
    with pytest.raises(HwtuneInputError, match="pipeline_split.*128.*24"):
        st.validate_for(get_model("llama3.1-405b"), 64)


def test_megatron_launch_writes_and_reads_the_split() -> None:
    st = Strategy(tp=8, pp=8, vpp=8, schedule="interleaved", dp=1, global_batch=64,
                  sequence_parallel=True, pipeline_split="layers+embedding+loss")  # fmt: skip
    args = megatron_launch(st, get_model("llama3.1-405b"), 64, 8).args
    assert "--account-for-embedding-in-pipeline-split" in args
    assert "--account-for-loss-in-pipeline-split" in args
    assert "--decoder-first-pipeline-num-layers" not in args
    from hwtune.train.launch import megatron_strategy

    back = megatron_strategy(strategy_from_megatron(list(args)), get_model("llama3.1-405b"), 64)
    assert back.pipeline_split == "layers+embedding+loss"


def test_one_split_switch_alone_is_refused() -> None:
    from hwtune.train.launch import megatron_strategy

    with pytest.raises(HwtuneInputError, match="account-for-loss.*account-for-embedding"):
        job = strategy_from_megatron(["--pipeline-model-parallel-size", "2", "--seq-length",
                                      "4096", "--account-for-loss-in-pipeline-split"])  # fmt: skip
        megatron_strategy(job, get_model("llama3.1-8b"), 2)


def test_torchtitan_refuses_megatrons_split() -> None:
    st = Strategy(pp=2, dp=1, global_batch=8, pipeline_split="layers+embedding+loss")
    err = torchtitan_refusal(st)
    assert err is not None and err.field == "pipeline_split"


def test_plan_keeps_only_layouts_the_split_divides() -> None:
    res = plan("llama3.1-70b", make_cluster("h100-sxm-80gb", 64), 64, 4096, top_k=10,
               base={"pipeline_split": "layers+embedding+loss"}, micro_batches=[1])  # fmt: skip
    assert res.top
    for est in res.top:
        st = est.strategy
        v = st.vpp if st.schedule == "interleaved" else 1
        assert st.pp == 1 or (80 + 2) % (st.pp * v) == 0
    assert res.pruned["pipeline split: n_layers + 2 not divisible by pp x vpp"] > 0


def test_cli_refuses_split_without_pipeline(rejects) -> None:  # noqa: ANN001
    rejects(["estimate", "--model", "llama3.1-8b", "--gpus", "8", "--pipeline-split",
             "layers+embedding+loss"], "--pipeline-split", "--pp")  # fmt: skip
    rejects(["estimate", "--model", "llama3.1-405b", "--gpus", "64", "--tp", "8", "--pp", "8",
             "--vpp", "3", "--schedule", "interleaved", "--pipeline-split",
             "layers+embedding+loss"], "--pipeline-split", "128", "24")  # fmt: skip


# ---- fp8 inputs of the linear layers


def _llama405_tp4(linear_bytes: float | None) -> float:
    a = ActShape(tokens=8192, seq=8192, tp=4, sp=True, linear_bytes=linear_bytes)
    return layer_activation_bytes(get_model("llama3.1-405b"), "full", False, a, "none")


def test_fp8_keeps_linear_inputs_in_one_byte() -> None:
    # Transformer Engine keeps one fp8 copy of each linear layer's input: per token on a TP 4
    # rank with sequence parallelism, the QKV and MLP inputs (h/4 each) and the activation
    # output (ffn/4) drop from 2 bytes to 1, and the output projection adds a 1-byte copy of
    # the attention output (heads x head_dim / 4) beside the kernel's bf16 one:
    # (16384 + 16384 + 53248 - 128 x 128) / 4 = 17408 bytes per token fewer
    saved = _llama405_tp4(None) - _llama405_tp4(1.0)
    assert saved == pytest.approx(17408 * 8192)


def test_torchao_fp8_keeps_bf16_inputs() -> None:
    spec, cl = get_model("llama3.1-8b"), make_cluster("h100-sxm-80gb", 8)
    fields = dict(dp=8, global_batch=8, seq=8192)
    bf16 = estimate_memory(spec, cl, Strategy(precision="bf16", **fields))
    te = estimate_memory(spec, cl, Strategy(precision="fp8", **fields))
    torchao = estimate_memory(spec, cl, Strategy(precision="fp8", fp8_saved_inputs=False, **fields))
    assert torchao.activations == bf16.activations
    assert te.activations < bf16.activations


def test_megatron_refuses_torchao_fp8() -> None:
    st = Strategy(dp=8, precision="fp8", fp8_saved_inputs=False)
    with pytest.raises(HwtuneInputError, match="fp8_saved_inputs"):
        megatron_launch(st, get_model("llama3.1-8b"), 8, 8)


# ---- the published runs that ran


def test_megatron_bridge_rows_reduce_in_bf16() -> None:
    rows = [r for r in load_published(BLACKWELL) if not r.skip_reason]
    assert rows and all(r.strategy.grad_reduce_dtype == "bf16" for r in rows)


def test_published_llama405_runs_fit() -> None:
    # every one of these ran, on H100, B200, GB200 and GB300: the estimate must fit them
    import os
    from pathlib import Path

    shared = Path(os.environ.get("HWTUNE_VALIDATION_DIR", Path(__file__).parents[3] / "shared"
                                 / "validation")) / "training_published.jsonl"  # fmt: skip
    runs = [r for p in (BLACKWELL, shared) if Path(p).exists() for r in load_published(p)
            if "405b" in r.id and "mbridge" in r.id and not r.skip_reason]  # fmt: skip
    assert len(runs) >= 5
    for r in runs:
        est = _estimate(r.spec, r.cluster, r.strategy)
        assert est.fits, (r.id, est.memory.total / 2**30)


# ---- Megatron-Core's selective recomputation by module


def _layer(name: str, moe: bool, mods: tuple[str, ...], **shape: object) -> float:
    a = ActShape(tokens=4096, seq=4096, tp=1, sp=False, **shape)  # type: ignore[arg-type]
    return layer_activation_bytes(get_model(name), "full", moe, a, "selective", mods)


def test_mla_up_proj_drops_the_up_projected_qkv() -> None:
    # DeepSeek-V3: 128 heads, q/k head dim 128 + 64 (rope), v head dim 128; recomputing the
    # up-projections keeps the latents and drops Q, K and V: 2 B x 4096 tokens x 128 x
    # (192 + 192 + 128)
    saved = _layer("deepseek-v3", True, ("core_attn",)) - _layer(
        "deepseek-v3", True, ("core_attn", "mla_up_proj")
    )
    assert saved == 2 * 4096 * 128 * (192 + 192 + 128)


def test_mlp_recompute_keeps_only_the_mlp_input() -> None:
    # Llama 3.1 8B, bf16, TP 1: the MLP keeps its input (kept anyway, as the checkpoint's),
    # not the two up-projection outputs and the activation output: 2 B x 3 x 14336 per token
    saved = _layer("llama3.1-8b", False, ("core_attn",)) - _layer(
        "llama3.1-8b", False, ("core_attn", "mlp")
    )
    assert saved == 2 * 3 * 14336 * 4096


def test_moe_act_drops_the_experts_activation_output() -> None:
    # DeepSeek-V3: top-8 routing, expert width 2048; bf16 activation output per routed slot
    saved = _layer("deepseek-v3", True, ("core_attn",)) - _layer(
        "deepseek-v3", True, ("core_attn", "moe_act")
    )
    assert saved == 2 * 4096 * 8 * 2048


def test_module_recompute_costs_time_and_hardware_flops() -> None:
    spec, cl = get_model("llama3.1-8b"), make_cluster("h100-sxm-80gb", 8)
    base = Strategy(dp=8, global_batch=8, seq=8192, recompute="selective")
    core = _estimate(spec, cl, base)
    mlp = _estimate(spec, cl, base.model_copy(update={"recompute_modules": ("core_attn", "mlp")}))
    assert mlp.breakdown["recompute"] > core.breakdown["recompute"] > 0
    assert mlp.hfu > core.hfu and mlp.mfu < core.mfu
    assert mlp.memory.activations < core.memory.activations


@pytest.mark.parametrize(
    ("fields", "model", "word"),
    [
        ({"recompute": "selective", "recompute_modules": ("mla_up_proj",)}, "llama3.1-8b",
         "multi-latent"),
        ({"recompute": "selective", "recompute_modules": ("moe_act",)}, "llama3.1-8b", "MoE"),
        ({"recompute": "none", "recompute_modules": ("mlp",)}, "llama3.1-8b", "selective"),
        ({"recompute": "selective", "recompute_modules": ()}, "llama3.1-8b", "one or more"),
    ],
)  # fmt: skip
def test_recompute_modules_that_change_nothing_are_refused(
    fields: dict, model: str, word: str
) -> None:
    with pytest.raises(HwtuneInputError, match=word) as info:
        Strategy(dp=8, **fields).validate_for(get_model(model), 8)
    assert info.value.field == "recompute_modules"


def test_megatron_launch_round_trips_recompute_modules() -> None:
    from hwtune.train.launch import megatron_strategy

    spec = get_model("deepseek-v3")
    st = Strategy(tp=2, pp=1, dp=512, ep=64, sequence_parallel=True, global_batch=1024,
                  recompute="selective", recompute_modules=("mla_up_proj", "mlp"))  # fmt: skip
    args = list(megatron_launch(st, spec, 1024, 8).args)
    i = args.index("--recompute-modules")
    assert args[i + 1 : i + 3] == ["mla_up_proj", "mlp"]
    back = megatron_strategy(strategy_from_megatron(args), spec, 1024)
    assert back.recompute_modules == ("mla_up_proj", "mlp")


def test_published_deepseek_gb200_run_fits() -> None:
    # Megatron-Bridge 25.11 recomputes MLA's up-projections on GB200; the run ran in 186 GB
    run = next(
        r
        for r in load_published(BLACKWELL)
        if r.id == "mbridge-25.11-gb200-deepseek-v3-bf16-256gpu"
    )
    assert run.strategy.recompute_modules == ("mla_up_proj",)
    assert _estimate(run.spec, run.cluster, run.strategy).fits


# ---- activation offloading (Megatron-Core --cpu-offloading)


def _llama70_gb200(**fields: object) -> Strategy:
    base = dict(dp=64, zero=3, micro_batch=2, global_batch=256, seq=8192, precision="fp8")
    return Strategy(**{**base, **fields})  # type: ignore[arg-type]


def test_offloaded_layers_leave_the_gpu() -> None:
    # 40 of 80 equal layers offloaded: half the activations stay, and one offloaded layer's
    # copy is in flight as a transient
    spec, cl = get_model("llama3.1-70b"), make_cluster("gb200", 64)
    kept = estimate_memory(spec, cl, _llama70_gb200())
    off = estimate_memory(spec, cl, _llama70_gb200(offload_activation_layers=40))
    assert off.activations == pytest.approx(kept.activations / 2, rel=1e-9)
    one_layer = kept.activations / FRAGMENTATION / 80
    assert off.transient - kept.transient == pytest.approx(one_layer, rel=1e-9)


def test_offload_copies_hide_behind_compute_until_the_link_is_slow() -> None:
    spec = get_model("llama3.1-70b")
    cl = make_cluster("gb200", 64)
    st = _llama70_gb200(offload_activation_layers=40)
    # NVLink-C2C, 450 GB/s each way: ~150 GB per micro-batch each way hides behind ~1 s passes
    assert _estimate(spec, cl, st).breakdown["activation_offload"] == 0.0
    slow = cl.model_copy(update={"device": cl.device.model_copy(
        update={"host_link_gbps_per_direction": 16.0})})  # fmt: skip
    est = _estimate(spec, slow, st)
    assert est.breakdown["activation_offload"] > 0
    assert est.step_time_s > _estimate(spec, cl, st).step_time_s


@pytest.mark.parametrize(
    ("fields", "word"),
    [
        ({"pp": 2, "dp": 32}, "pipeline"),
        ({"recompute": "full"}, "recompute"),
        ({"offload_activation_layers": 80}, "fewer than"),
    ],
)
def test_offload_megatron_cannot_run_is_refused(fields: dict, word: str) -> None:
    st = _llama70_gb200(**{"offload_activation_layers": 8, **fields})
    with pytest.raises(HwtuneInputError, match=word) as info:
        st.validate_for(get_model("llama3.1-70b"), 64)
    assert info.value.field == "offload_activation_layers"


def test_megatron_launch_round_trips_activation_offload() -> None:
    from hwtune.train.launch import megatron_strategy

    spec = get_model("llama3.1-70b")
    st = _llama70_gb200(offload_activation_layers=40)
    args = list(megatron_launch(st, spec, 64, 4).args)
    i = args.index("--cpu-offloading-num-layers")
    # Megatron-LM at d98e8a64 has no --cpu-offloading switch: the count turns it on
    assert args[i + 1] == "40" and "--cpu-offloading" not in args
    assert megatron_strategy(strategy_from_megatron(args), spec, 64).offload_activation_layers == 40


def test_torchtitan_refuses_activation_offload() -> None:
    err = torchtitan_refusal(_llama70_gb200(offload_activation_layers=8))
    assert err is not None and err.field == "offload_activation_layers"


def test_plan_with_offload_runs_only_what_megatron_runs() -> None:
    res = plan("llama3.1-70b", make_cluster("gb200", 64), 256, 8192, precision="fp8", top_k=3,
               base={"offload_activation_layers": 40}, micro_batches=[1, 2])  # fmt: skip
    assert res.top
    for est in res.top:
        assert est.strategy.pp == 1 and est.strategy.recompute == "none"
        assert est.strategy.offload_activation_layers == 40


def test_cli_offload_refusals(rejects) -> None:  # noqa: ANN001
    rejects(["estimate", "--model", "llama3.1-70b", "--gpus", "64", "--pp", "2",
             "--offload-activations", "4"], "--offload-activations", "pipeline")  # fmt: skip
    rejects(["estimate", "--model", "llama3.1-70b", "--gpus", "64", "--recompute", "full",
             "--offload-activations", "4"], "--offload-activations", "recompute")  # fmt: skip


def test_published_offload_rows_are_expressed() -> None:
    rows = [r for r in load_published(BLACKWELL) if "llama3-70b" in r.id]
    assert len(rows) == 4 and all(not r.skip_reason for r in rows)
    assert {r.strategy.offload_activation_layers for r in rows} == {20, 40}


def test_megatron_refuses_moe_act_recompute_under_delayed_fp8() -> None:
    # transformer_config.py:2001-2004 (Megatron-LM d98e8a64): delayed scaling does not support
    # moe_act recomputation
    st = Strategy(
        dp=8, ep=8, precision="fp8", recompute="selective", recompute_modules=("moe_act",)
    )
    with pytest.raises(HwtuneInputError, match="delayed"):
        megatron_launch(st, get_model("mixtral-8x7b"), 8, 8)
    ok = st.model_copy(update={"fp8_recipe": "current"})
    args = list(megatron_launch(ok, get_model("mixtral-8x7b"), 8, 8).args)
    assert "moe_act" in args and "--moe-grouped-gemm" in args


def test_reading_older_cpu_offloading_switch() -> None:
    from hwtune.train.launch import megatron_strategy

    job = strategy_from_megatron(["--cpu-offloading", "--cpu-offloading-num-layers", "8",
                                  "--seq-length", "4096", "--bf16"])  # fmt: skip
    assert megatron_strategy(job, get_model("llama3.1-8b"), 8).offload_activation_layers == 8
    with pytest.raises(HwtuneInputError, match="cpu-offloading-num-layers"):
        strategy_from_megatron(["--cpu-offloading", "--seq-length", "4096", "--bf16"])
