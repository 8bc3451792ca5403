"""The training-step estimator (`hwtune.estimate`): result shape, identities between its
numbers, FLOP counts from Narayanan et al. SC'21 eq. 3, and invariants (no exact times)."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import hwtune
from hwtune.errors import HwtuneInputError
from hwtune.hardware.cluster import make_cluster
from hwtune.model import params as P
from hwtune.model.catalog import get_model
from hwtune.model.spec import ModelSpec, MoE
from hwtune.train.estimator import Estimate, estimate
from hwtune.train.strategy import SCHEDULES, Strategy

H100_BF16_DENSE = 989.4e12  # H100 SXM datasheet: 1,979 TFLOP/s bf16 with sparsity, half dense
H100_FP8_DENSE = 1978.9e12

# A small Llama-like model keeps the many estimates below fast.
SMALL = ModelSpec(
    name="small", n_layers=8, d_model=1024, n_heads=16, n_kv_heads=4, ffn_hidden=2816, vocab=32000
)
SMALL_MOE = ModelSpec(
    name="small-moe", n_layers=8, d_model=1024, n_heads=16, n_kv_heads=4, ffn_hidden=2816,
    vocab=32000, moe=MoE(n_routed_experts=8, top_k=2, expert_ffn_hidden=1408),
)  # fmt: skip


SMALL_MOE_16 = SMALL_MOE.model_copy(
    update={
        "name": "small-moe-16",
        "moe": MoE(n_routed_experts=16, top_k=2, expert_ffn_hidden=1408),
    }
)


def est(model: ModelSpec | str = "llama3.1-8b", **kw: object) -> Estimate:
    if "cluster" not in kw:  # a cluster names its device (a gpu beside it is refused)
        kw.setdefault("gpu", "h100-sxm-80gb")
    kw.setdefault("seq", 4096)
    return estimate(model, **kw)


# --- result shape --------------------------------------------------------------------------------
def test_public_entry_point_is_the_estimator():
    assert hwtune.estimate is estimate


def test_to_dict_keys():
    d = est(gpus=8, global_batch=32).to_dict()
    for key in ("step_time_s", "mfu", "hfu", "tflops_per_gpu", "tokens_per_s",
                "tokens_per_s_per_gpu", "memory_per_gpu_bytes", "fits", "breakdown"):  # fmt: skip
        assert key in d, key
    mem = d["memory_per_gpu_bytes"]
    for key in ("weights", "gradients", "optimizer", "activations", "total"):
        assert key in mem, key
    assert mem["total"] == pytest.approx(sum(v for k, v in mem.items() if k != "total"))
    assert isinstance(d["fits"], bool)
    assert all(isinstance(v, float) for v in d["breakdown"].values())


def test_to_dict_is_json_serializable():
    import json

    text = json.dumps(est(gpus=8, global_batch=32, tp=2, pp=2).to_dict())
    assert json.loads(text)["n_gpus"] == 8


# --- identities between the reported numbers --------------------------------------------------------
CONFIGS = [
    dict(model="llama3.1-8b", gpus=8, global_batch=32),
    dict(model="llama3.1-8b", gpus=8, tp=2, pp=2, global_batch=32, sequence_parallel=True),
    dict(model="llama3.1-70b", gpus=64, tp=8, pp=4, global_batch=128, recompute="full"),
    dict(
        model="llama3.1-70b", gpus=64, tp=8, pp=4, vpp=2, schedule="interleaved", global_batch=128
    ),
    dict(model="mixtral-8x7b", gpus=16, tp=2, ep=8, global_batch=64, recompute="selective"),
    dict(model="llama3.1-8b", gpus=16, cp=2, zero=3, global_batch=64),
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_reported_numbers_are_consistent(cfg):
    e = est(**cfg)
    assert 0 < e.mfu <= e.hfu < 1
    assert e.step_time_s > 0 and math.isfinite(e.step_time_s)
    # tokens per step = sequences per step x sequence length
    assert e.tokens_per_step == e.strategy.global_batch_seqs * e.strategy.seq
    assert e.tokens_per_s == pytest.approx(e.tokens_per_step / e.step_time_s)
    assert e.tokens_per_s_per_gpu == pytest.approx(e.tokens_per_s / e.n_gpus)
    assert e.n_gpus == cfg["gpus"]
    # MFU = achieved model FLOP/s per GPU / dense peak
    assert e.mfu == pytest.approx(
        e.model_flops_per_step / (e.step_time_s * e.n_gpus * e.peak_flops_used)
    )
    assert e.model_tflops_per_gpu * 1e12 == pytest.approx(e.mfu * e.peak_flops_used)
    assert e.tflops_per_gpu * 1e12 == pytest.approx(e.hfu * e.peak_flops_used)
    # fits means the per-GPU total is within the device memory
    assert e.fits == (e.memory.total <= e.memory_capacity_bytes)
    # breakdown: every part non-negative, and together never more than the step
    assert all(v >= 0 for v in e.breakdown.values())
    assert sum(e.breakdown.values()) <= e.step_time_s * (1 + 1e-9)


def test_peak_is_the_dense_peak_of_the_training_precision():
    assert est(gpus=8, global_batch=32).peak_flops_used == pytest.approx(H100_BF16_DENSE)
    assert est(gpus=8, global_batch=32, precision="fp8").peak_flops_used == pytest.approx(
        H100_FP8_DENSE
    )
    assert est(gpus=8, global_batch=32, gpu="a100-sxm4-80gb").peak_flops_used == pytest.approx(
        312e12  # A100 datasheet, bf16 dense
    )


# Step time = pipeline (forward, backward, recompute, bubble, p2p, in-layer comm) + exposed DP
# comm + optimizer + offload. Whether each term is fully itemized: with tp = 1 there is no
# vocabulary-parallel loss all-reduce, so the parts add up exactly.
@pytest.mark.parametrize(
    "cfg",
    [
        dict(gpus=8, global_batch=32),
        dict(gpus=8, pp=4, global_batch=32, recompute="full"),
        dict(gpus=8, cp=2, global_batch=32),
        dict(gpus=8, zero=3, global_batch=32),
        dict(gpus=8, pp=2, global_batch=32, offload_optimizer=True),
    ],
)
def test_breakdown_adds_up_to_step_time(cfg):
    e = est(**cfg)
    assert sum(e.breakdown.values()) == pytest.approx(e.step_time_s, rel=1e-9)


@pytest.mark.parametrize("tp", [2, 8])
def test_breakdown_adds_up_with_tensor_parallel(tp):
    e = est(gpus=8, tp=tp, global_batch=32)
    assert sum(e.breakdown.values()) == pytest.approx(e.step_time_s, rel=1e-9)


# --- FLOP counts ----------------------------------------------------------------------------------
def megatron_hw_flops_full_recompute(b: int, s: int, L: int, h: int, V: int) -> float:
    """Narayanan et al. SC'21 eq. (3): 96 B s L h^2 (1 + s/(6h) + V/(16 L h)) per step:
    per layer 24 B s h^2 + 4 B s^2 h forward, x4 with backward and the recomputed forward;
    the logit layer 2 B s h V forward, x3 (it is not recomputed)."""
    return 96 * b * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))


def megatron_model_flops(b: int, s: int, L: int, h: int, V: int) -> float:
    """The same derivation without the recomputed forward: 72 B s L h^2 + 12 B s^2 L h + 6 B s V h
    (the layers x3, the logit layer x3; *not* 72 x (1 + s/6h + V/16Lh), which under-counts the
    logits)."""
    return 72 * b * s * L * h * h + 12 * b * s * s * L * h + 6 * b * s * V * h


GPT = dict(model="gpt-3.6b", gpus=8, tp=8, seq=2048, global_batch=16)  # L 30, h 3072, V 51200


def test_model_flops_match_narayanan_derivation():
    e = est(**GPT)
    assert e.model_flops_per_step == pytest.approx(megatron_model_flops(16, 2048, 30, 3072, 51200))


def test_full_recompute_hardware_flops_match_narayanan_eq3():
    e = est(recompute="full", **GPT)
    hw = e.tflops_per_gpu * 1e12 * e.step_time_s * e.n_gpus
    assert hw == pytest.approx(megatron_hw_flops_full_recompute(16, 2048, 30, 3072, 51200))


def test_full_recompute_hfu_close_to_four_thirds():
    # One extra forward of the layers (1/3 of 3x forward): HFU / MFU = 4/3 minus the
    # non-recomputed head's share, i.e. within (1.25, 4/3].
    e = est(recompute="full", **GPT)
    assert 1.25 < e.hfu / e.mfu <= 4 / 3 + 1e-9


def test_selective_recompute_adds_the_attention_forward():
    # Korthikanti §4.2: selective recomputation redoes the attention core forward: QK^T and AV,
    # 4 L h s FLOPs per token without masking, half of it as executed by a causal flash kernel.
    # So the hardware FLOPs exceed the model FLOPs by between 2 L h s and 4 L h s per token.
    e = est(recompute="selective", **GPT)
    hw = e.tflops_per_gpu * 1e12 * e.step_time_s * e.n_gpus
    tokens = 16 * 2048
    per_token = (hw - e.model_flops_per_step) / tokens
    assert 2 * 30 * 3072 * 2048 * (1 - 1e-9) <= per_token <= 4 * 30 * 3072 * 2048 * (1 + 1e-9)


def test_model_flops_palm_for_llama3_8b():
    # 6 N + 6 V h + 12 L h s per token (PaLM App. B), N the layers' matmul weights; the input
    # embedding is a lookup. Llama 3.1 8B: params.py total minus both tables and the norms.
    spec = get_model("llama3.1-8b")
    L, h, V, s = 32, 4096, 128256, 4096
    n_matmul = P.total_params(spec) - P.embedding_params(spec) - (2 * L + 1) * h
    per_token = 6 * n_matmul + 6 * V * h + 12 * L * h * s
    e = est(gpus=8, global_batch=32, seq=s)
    assert e.model_flops_per_step == pytest.approx(per_token * 32 * s)


def test_model_state_memory_llama3_8b_zero1():
    # Llama 3.1 8B = 8,030,261,248 parameters (HF safetensors). No TP/PP, ZeRO-1 over 8 ranks,
    # Megatron fp32 main grads: 2 bytes of bf16 weights, 4 of grads, 12/8 of optimizer state.
    n = 8_030_261_248
    e = est(gpus=8, global_batch=32, zero=1)
    assert e.memory.weights == pytest.approx(2 * n)
    assert e.memory.gradients == pytest.approx(4 * n)
    assert e.memory.optimizer == pytest.approx(12 * n / 8)


# --- invariants ---------------------------------------------------------------------------------------
def test_zero_stages_reduce_memory():
    mems = [est(gpus=8, global_batch=32, zero=z).memory for z in (0, 1, 2, 3)]
    states = [m.weights + m.gradients + m.optimizer for m in mems]
    assert states[0] > states[1] > states[2] > states[3]
    assert mems[0].total > mems[1].total > mems[3].total


def test_full_recompute_saves_memory_and_costs_time():
    none = est(gpus=8, tp=2, global_batch=32, recompute="none")
    sel = est(gpus=8, tp=2, global_batch=32, recompute="selective")
    full = est(gpus=8, tp=2, global_batch=32, recompute="full")
    assert full.memory.activations < sel.memory.activations <= none.memory.activations
    assert full.step_time_s > sel.step_time_s >= none.step_time_s
    assert full.breakdown["recompute"] > 0 == none.breakdown["recompute"]


def test_more_micro_batches_shrink_the_bubble_share():
    # 1F1B bubble share (p - 1)/(m + p - 1) falls as gradient accumulation grows.
    shares = []
    for gb in (8, 32, 128):
        e = est(gpus=8, pp=8, global_batch=gb)
        shares.append(e.breakdown["pipeline_bubble"] / e.step_time_s)
    assert shares[0] > shares[1] > shares[2] > 0


def test_no_pipeline_no_bubble():
    assert est(gpus=8, global_batch=32).breakdown["pipeline_bubble"] == 0.0


def test_interleaving_shrinks_the_bubble():
    base = est("llama3.1-70b", gpus=32, tp=8, pp=4, global_batch=64)
    inter = est("llama3.1-70b", gpus=32, tp=8, pp=4, global_batch=64, schedule="interleaved", vpp=2)
    assert inter.breakdown["pipeline_bubble"] < base.breakdown["pipeline_bubble"]


def test_too_big_returns_fits_false():
    e = est("llama3.1-70b", gpus=1, global_batch=1)
    assert e.fits is False
    # 70.6B parameters x 2 bytes of weights alone exceed one 80 GiB GPU
    assert e.memory.total > e.memory_capacity_bytes > 0


def test_small_model_fits():
    assert est(SMALL, gpus=1, seq=2048).fits is True


def test_fp8_faster_than_bf16_on_h100():
    # Large GEMMs at 2x the peak dominate a 70B step (H100: 1979 vs 989 TFLOP/s dense).
    kw = dict(gpus=64, tp=8, pp=4, global_batch=128)
    assert (
        est("llama3.1-70b", precision="fp8", **kw).step_time_s
        < est("llama3.1-70b", precision="bf16", **kw).step_time_s
    )


def test_more_gpus_more_throughput():
    # Weak scaling over data parallelism: doubling dp with the per-rank batch fixed raises tokens/s.
    a = est(gpus=8, global_batch=32)
    b = est(gpus=16, global_batch=64)
    assert b.tokens_per_s > a.tokens_per_s


def test_tp_and_ep_comm_show_up():
    assert est(gpus=8, tp=8, global_batch=8).breakdown["tp_comm_exposed"] > 0
    assert est(gpus=8, global_batch=8).breakdown["tp_comm_exposed"] == 0
    e = est("mixtral-8x7b", gpus=16, tp=2, ep=8, global_batch=64)
    assert e.breakdown["ep_comm_exposed"] > 0


def test_expert_groups_are_consecutive_ranks():
    # Megatron-Core builds expert groups in the order tp-ep-dp-pp with expert TP 1 (the NeMo
    # DeepSeek-V3/Qwen3 recipes), so with tp 2 the 8 EP ranks are ranks 0-7: one 8-GPU node.
    # The all-to-all then costs what it costs when the whole cluster is one NVLink domain.
    two_nodes = make_cluster("h100-sxm-80gb", 16)
    one_domain = make_cluster("h100-sxm-80gb", 16, gpus_per_node=16, scaleup_domain=16)
    kw = dict(tp=2, ep=8, global_batch=64)
    a = est("mixtral-8x7b", cluster=two_nodes, **kw).breakdown["ep_comm_exposed"]
    b = est("mixtral-8x7b", cluster=one_domain, **kw).breakdown["ep_comm_exposed"]
    assert a > 0
    assert a == pytest.approx(b)
    # EP 16 (folded over tp 2 x dp 8) must cross the two nodes: slower than in one domain
    kw["ep"] = 16
    wide = est(SMALL_MOE_16, cluster=two_nodes, **kw).breakdown["ep_comm_exposed"]
    flat = est(SMALL_MOE_16, cluster=one_domain, **kw).breakdown["ep_comm_exposed"]
    assert wide > flat


def test_estimates_are_deterministic():
    a = est(gpus=8, tp=2, pp=2, global_batch=32).to_dict()
    b = est(gpus=8, tp=2, pp=2, global_batch=32).to_dict()
    assert a == b


def test_explicit_strategy_object():
    st_ = Strategy(dp=4, tp=2, global_batch=16, seq=2048)
    e = estimate(SMALL, None, st_, gpu="h100-sxm-80gb", gpus=8)
    assert e.strategy == st_


# --- bad input -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kw", "field"),
    [
        (dict(model="llama3.1-8b", gpus=8, tp=3), "tp*pp*cp"),  # 3 does not divide 8 GPUs
        (dict(model="llama3.1-8b", gpus=3, tp=3), "tp"),  # 3 does not divide 32 heads
        (dict(model="llama3.1-8b", gpus=8, ep=2), "ep"),  # dense model
        (dict(model="llama3.1-8b", gpus=8, global_batch=12), "global_batch"),
        (dict(model="llama3.1-8b", gpus=8, vpp=2, pp=2, global_batch=8), "vpp"),
        (dict(model="llama3.1-8b", gpus=8, sequence_parallel=True), "sequence_parallel"),
        (dict(model="lama3.1-8b", gpus=8), "model"),
        (dict(model="llama3.1-8b", gpus=8, gpu="h1000"), "gpu"),
        (dict(model="llama3.1-8b", gpus=8, gpu="a100-sxm4-80gb", precision="fp8"), "precision"),
        (dict(model="llama3.1-8b", gpus=8, tp=0), "tp"),
    ],
)
def test_bad_input_is_a_one_line_error(kw, field):
    with pytest.raises(HwtuneInputError) as info:
        est(**kw)
    msg = str(info.value)
    assert "\n" not in msg
    assert field in info.value.field, msg


def test_unknown_model_suggests_close_names():
    with pytest.raises(HwtuneInputError) as info:
        est("llama3.1-8bb", gpus=1)
    assert "llama3.1-8b" in str(info.value)


# --- random small strategies --------------------------------------------------------------------------
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(
    moe=st.booleans(),
    tp=st.sampled_from([1, 2, 4]),
    pp=st.sampled_from([1, 2, 4]),
    dp=st.sampled_from([1, 2, 4]),
    cp=st.sampled_from([1, 2]),
    ep=st.sampled_from([1, 2]),
    mb=st.sampled_from([1, 2]),
    accum=st.sampled_from([1, 2, 4, 8]),
    schedule=st.sampled_from(SCHEDULES),
    vpp=st.sampled_from([1, 2]),
    recompute=st.sampled_from(["none", "selective", "full"]),
    zero=st.integers(0, 3),
    sp=st.booleans(),
    precision=st.sampled_from(["bf16", "fp8"]),
    optimizer=st.sampled_from(["adam", "adam-8bit", "sgd"]),
    seq=st.sampled_from([1024, 2048]),
    flash=st.booleans(),
)
def test_random_valid_strategies_give_finite_positive_estimates(
    moe, tp, pp, dp, cp, ep, mb, accum, schedule, vpp, recompute, zero, sp, precision,
    optimizer, seq, flash,
):  # fmt: skip
    spec = SMALL_MOE if moe else SMALL
    strategy = Strategy(
        tp=tp, pp=pp, dp=dp, cp=cp, ep=ep if moe else 1, micro_batch=mb,
        global_batch=mb * dp * accum, schedule=schedule,
        vpp=vpp if schedule == "interleaved" else 1, recompute=recompute, zero=zero,
        sequence_parallel=sp and tp > 1, precision=precision, optimizer=optimizer, seq=seq,
        flash_attention=flash,
    )  # fmt: skip
    n = tp * pp * dp * cp
    try:
        strategy.validate_for(spec, n)
    except HwtuneInputError:
        assume(False)
    e = estimate(spec, None, strategy, gpu="h100-sxm-80gb", gpus=n)
    for v in (e.step_time_s, e.mfu, e.hfu, e.tokens_per_s, e.memory.total):
        assert math.isfinite(v) and v > 0
    assert 0 < e.mfu <= e.hfu < 1
    assert all(math.isfinite(v) and v >= 0 for v in e.breakdown.values())
    assert sum(e.breakdown.values()) <= e.step_time_s * (1 + 1e-9)
    # the busiest rank cannot be faster than its share of the model's FLOPs at peak
    assert e.step_time_s >= e.model_flops_per_step / (n * e.peak_flops_used)
    # slower kernels (FlashAttention-2, eager elementwise ops) never make a step faster (to
    # rounding: where communication hides the kernels both sum to the same time in another order)
    slow = strategy.model_copy(update={"attention_kernel": "fa2", "fused_elementwise": False})
    t_slow = estimate(spec, None, slow, gpu="h100-sxm-80gb", gpus=n).step_time_s
    assert t_slow >= e.step_time_s * (1 - 1e-12)


def test_fsdp_pays_collective_latency_once_per_layer():
    """ZeRO-3 gathers and reduce-scatters one FSDP unit (a transformer block) at a time, so the
    alpha term of the ring collectives is paid per layer: without overlap, the exposed
    data-parallel time holds at least 3 x layers x the cross-node ring latency (a tiny model,
    so the bandwidth term is small; one collective per stage would pay it 3 times in all)."""
    from hwtune.hardware.cluster import make_cluster

    cl = make_cluster("h100-sxm-80gb", 512, gpus_per_node=8)
    lat = cl.inter_latency_s * (cl.n_gpus // 8 - 1)  # ring steps across the nodes, one collective
    kw = dict(gpus=512, zero=3, global_batch=512, seq=256, overlap_grad_reduce=False,
              overlap_param_gather=False)  # fmt: skip
    tiny = ModelSpec(name="tiny", n_layers=4, d_model=256, n_heads=4, ffn_hidden=512, vocab=1024)
    for n_layers in (4, 16):
        spec = tiny.model_copy(update={"n_layers": n_layers})
        t = estimate(spec, gpu="h100-sxm-80gb", **kw).breakdown["dp_comm_exposed"]
        assert t >= 3 * n_layers * lat  # gather (fwd), gather (bwd), reduce-scatter per layer


def test_pytorch_loss_adds_six_bytes_per_logit_on_the_last_stage():
    """`loss_kernel="pytorch"` (F.cross_entropy on fp32) holds 12 B per logit at its peak against
    the fused kernel's 6 (cost.memory.LOSS_KERNELS): the difference is 6 x tokens x vocab/tp."""
    kw = dict(gpus=8, tp=2, pp=2, micro_batch=2, global_batch=16, seq=2048)
    fused = est("llama3.1-8b", **kw).memory
    torch_ce = est("llama3.1-8b", loss_kernel="pytorch", **kw).memory
    spec = get_model("llama3.1-8b")
    extra = 6.0 * 2 * 2048 * spec.vocab / 2
    assert torch_ce.total - fused.total == pytest.approx(extra, rel=1e-9)


def test_deepep_dispatch_cuts_cross_node_expert_traffic_only():
    """One network copy per destination node (DeepEP) instead of one per routed expert: cheaper
    when the EP group spans nodes, identical inside one NVLink domain."""
    kw = dict(gpu="h100-sxm-80gb", gpus=128, ep=64, global_batch=128, seq=4096)
    a2a = est("deepseek-v3", **kw).breakdown["ep_comm_exposed"]
    dedup = est("deepseek-v3", moe_dispatch="deepep", **kw).breakdown["ep_comm_exposed"]
    assert 0 < dedup < a2a
    kw = dict(gpus=8, ep=8, global_batch=8)
    assert (
        est("mixtral-8x7b", moe_dispatch="deepep", **kw).step_time_s
        == est("mixtral-8x7b", **kw).step_time_s
    )


def test_fp8_current_scaling_costs_more_than_delayed_on_moe():
    """Current scaling quantizes each expert's input with amax, scale and cast kernels where
    delayed scaling runs one fused cast (TE Float8CurrentScalingQuantizer): never faster; outside
    fp8 it would change nothing, so it is an error there rather than ignored."""
    kw = dict(gpus=16, ep=8, global_batch=16, seq=4096)
    delayed = est("qwen3-30b-a3b", precision="fp8", **kw).step_time_s
    current = est("qwen3-30b-a3b", precision="fp8", fp8_recipe="current", **kw).step_time_s
    assert current > delayed
    with pytest.raises(HwtuneInputError, match="fp8_recipe"):
        est("qwen3-30b-a3b", fp8_recipe="current", **kw)


def test_fsdp_overlap_switches_act_independently():
    """Prefetched gathers and overlapped reduce-scatters hide separately: turning either one
    off exposes at least that collective, so each half-overlapped case lies between all-on and
    all-off, and all-off exposes 2 gathers + 1 reduce-scatter per micro-batch in full."""
    kw = dict(gpus=64, zero=3, global_batch=64, seq=4096)
    dp = {}
    for pg in (True, False):
        for gr in (True, False):
            e = est("llama3.1-8b", overlap_param_gather=pg, overlap_grad_reduce=gr, **kw)
            dp[pg, gr] = e.breakdown["dp_comm_exposed"]
    assert dp[True, True] <= dp[True, False] <= dp[False, False]
    assert dp[True, True] <= dp[False, True] <= dp[False, False]
    assert dp[True, False] < dp[False, False] and dp[False, True] < dp[False, False]
