"""The training estimator against the papers it cites, each number computed here by hand from
the architecture or the paper's formula (never by calling the helper under test).

What the other test files already cover is not repeated: published parameter totals are
matched by the catalog-driven tests in ``tests/model/test_params.py``; Korthikanti Table 2 on a
small GPT layer and ZeRO Figure 1 on ``sharded_state_bytes`` in ``tests/cost/test_memory.py``;
the schedule formulas in ``tests/train/test_schedules.py``; the alpha-beta primitives in
``tests/cost/test_collectives.py``. Here: exact hand counts of the headline models, the GPT-3
175B shapes, and how the estimator composes those formulas (bubble share of a step, the model
states it reports under each ZeRO stage, the bytes its gradient all-reduce moves, MFU).
"""

from __future__ import annotations

import pytest

from hwtune.cost.collectives import ring_all_gather, ring_all_reduce
from hwtune.cost.memory import ActShape, layer_activation_bytes
from hwtune.hardware.cluster import make_cluster
from hwtune.model.catalog import get_model
from hwtune.model.lowering import model_flops_per_token
from hwtune.model.params import active_params, total_params
from hwtune.train.estimator import FRAGMENTATION, estimate, estimate_memory
from hwtune.train.schedules import in_flight
from hwtune.train.strategy import Strategy


# --- parameter counts, by hand from each config.json ------------------------------------------
def _gqa_attention(d: int, heads: int, kv: int, hd: int) -> int:
    """q, k, v, o projections without biases (modeling_llama.py)."""
    return d * heads * hd + 2 * d * kv * hd + heads * hd * d


def _llama(L: int, d: int, heads: int, kv: int, f: int, vocab: int) -> int:
    layer = _gqa_attention(d, heads, kv, 128) + 3 * d * f + 2 * d
    return L * layer + 2 * vocab * d + d  # untied embedding and LM head, final RMSNorm


@pytest.mark.parametrize(
    ("name", "hand", "published"),
    [
        # Llama 3.1 config.json: 80 x 8192, 64 heads / 8 KV, FFN 28672, vocab 128256
        ("llama3.1-70b", _llama(80, 8192, 64, 8, 28672, 128256), 70.6e9),
        # 126 x 16384, 128 heads / 8 KV, FFN 53248
        ("llama3.1-405b", _llama(126, 16384, 128, 8, 53248, 128256), 405.9e9),
    ],
)
def test_llama31_totals_by_hand(name, hand, published):
    assert total_params(get_model(name)) == hand
    assert abs(hand - published) <= 0.05e9 + 1  # half a unit of the last printed digit


def test_mixtral_8x7b_by_hand():
    """Mistral AI (Dec 2023): 46.7B total, 12.9B active. config.json: 32 x 4096, 32 heads / 8 KV,
    8 experts of width 14336, top-2, vocab 32000, untied."""
    d, L, V = 4096, 32, 32000
    attn, expert, router, norms = _gqa_attention(d, 32, 8, 128), 3 * d * 14336, d * 8, 2 * d
    shared = 2 * V * d + d
    total = L * (attn + router + 8 * expert + norms) + shared
    active = L * (attn + router + 2 * expert + norms) + shared
    s = get_model("mixtral-8x7b")
    assert (total_params(s), active_params(s)) == (total, active)
    assert (round(total / 1e8), round(active / 1e8)) == (467, 129)


def _mla_attention() -> int:
    """DeepSeek-V3 MLA (modeling_deepseek_v3.py): d 7168, 128 heads, q_lora 1536, kv_lora 512,
    nope 128, rope 64, v 128; the two latent RMSNorms."""
    d, h = 7168, 128
    return (
        d * 1536 + 1536 + 1536 * h * (128 + 64)  # q_a_proj, q_a_layernorm, q_b_proj
        + d * (512 + 64) + 512 + 512 * h * (128 + 128)  # kv_a_proj_with_mqa, norm, kv_b_proj
        + h * 128 * d  # o_proj
    )  # fmt: skip


def test_deepseek_v3_by_hand():
    """DeepSeek-V3 report: 671B total (MTP excluded), 37B activated. 61 layers, the first 3 dense
    (FFN 18432); 256 routed experts of 2048 + 1 shared, top-8, router + e_score_correction_bias;
    vocab 129280, untied."""
    d, V = 7168, 129280
    expert = 3 * d * 2048
    dense = _mla_attention() + 3 * d * 18432 + 2 * d
    moe_fixed = _mla_attention() + d * 256 + 256 + expert + 2 * d  # router, bias, shared expert
    total = 3 * dense + 58 * (moe_fixed + 256 * expert) + 2 * V * d + d
    active = 3 * dense + 58 * (moe_fixed + 8 * expert) + 2 * V * d + d
    s = get_model("deepseek-v3")
    assert (total_params(s), active_params(s)) == (total, active)
    assert round(total / 1e9) == 671
    # 37.55B with both tables, 36.63B without the input embedding: the report's 37B is between
    assert active - V * d < 37e9 < active


def test_qwen3_235b_a22b_by_hand():
    """Qwen3-235B-A22B model card: 235B total, 22B activated. 94 x 4096, 64 heads / 4 KV of 128
    with per-head q/k RMSNorm, 128 experts of 1536, top-8, vocab 151936, untied."""
    d, V = 4096, 151936
    attn = _gqa_attention(d, 64, 4, 128) + 2 * 128
    expert, fixed = 3 * d * 1536, d * 128 + 2 * d
    total = 94 * (attn + fixed + 128 * expert) + 2 * V * d + d
    active = 94 * (attn + fixed + 8 * expert) + 2 * V * d + d
    s = get_model("qwen3-235b-a22b")
    assert (total_params(s), active_params(s)) == (total, active)
    assert (round(total / 1e9), round(active / 1e9)) == (235, 22)


def test_gpt_oss_120b_by_hand():
    """gpt-oss model card Table 1: 116.83B total, 5.13B active (active counts the unembedding,
    not the embedding). 36 x 2880, 64 heads / 8 KV of 64, q/k/v/o biases; 128 experts of 2880
    with biases, top-4, router with bias; vocab 201088, untied. Attention sinks (64 per layer,
    2,304 in all) are not counted by params.py: far below the card's last digit."""
    d, V = 2880, 201088
    attn = _gqa_attention(d, 64, 8, 64) + (64 * 64 + 2 * 8 * 64) + d
    expert = 3 * d * 2880 + (2 * 2880 + d)  # gate/up/down + their biases
    fixed = attn + d * 128 + 128 + 2 * d
    total = 36 * (fixed + 128 * expert) + 2 * V * d + d
    active_all = 36 * (fixed + 4 * expert) + 2 * V * d + d
    s = get_model("gpt-oss-120b")
    assert (total_params(s), active_params(s)) == (total, active_all)
    assert round(total / 1e7) == 11683
    assert round((active_all - V * d) / 1e7) == 513  # the card's convention


# --- FLOPs and MFU -----------------------------------------------------------------------------
def test_gpt3_175b_model_flops_per_token():
    """Narayanan et al. SC'21 eq. (3) without the recomputed forward, per token: 72 L h^2 +
    12 L h s + 6 h V; the 12 L h s is PaLM App. B's 12 L H Q T (non-causal). GPT-3 175B, s 2048,
    vocab 50257 (Brown et al. 2020). Biases and norms are not counted (as in eq. 3)."""
    L, h, V, s = 96, 12288, 50257, 2048
    hand = 72 * L * h * h + 12 * L * h * s + 6 * h * V
    assert model_flops_per_token(get_model("gpt3-175b"), s) == hand
    # 6N + 12 L h s with N the layers' matmul weights plus the LM head (PaLM's 6N)
    n_matmul = 12 * L * h * h + V * h
    assert hand == 6 * n_matmul + 12 * L * h * s


H100_BF16_DENSE = 989.4e12  # H100 SXM datasheet: 1,979 TFLOP/s bf16 with sparsity; half dense


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_mfu_counts_model_flops_only(recompute):
    """PaLM App. B: MFU = model FLOPs / (step time x GPUs x dense peak), recomputation excluded;
    HFU includes it. GPT-3.6B (Narayanan Table 1: 30 x 3072, vocab 51200), 8 H100, tp 8."""
    L, h, V, s, gb = 30, 3072, 51200, 2048, 16
    e = estimate("gpt-3.6b", gpu="h100-sxm-80gb", gpus=8, tp=8, seq=s, global_batch=gb,
                 recompute=recompute)  # fmt: skip
    model = (72 * L * h * h + 12 * L * h * s + 6 * h * V) * gb * s
    assert e.model_flops_per_step == pytest.approx(model, rel=1e-12)
    assert e.peak_flops_used == pytest.approx(H100_BF16_DENSE, rel=1e-3)
    assert e.mfu == pytest.approx(model / (e.step_time_s * 8 * e.peak_flops_used), rel=1e-12)
    if recompute == "none":
        assert e.hfu == pytest.approx(e.mfu, rel=1e-12)
    else:
        assert e.hfu > e.mfu


# --- activation memory, Korthikanti et al. 2022 Table 2, GPT-3 175B shapes ----------------------
S3, H3, A3 = 2048, 12288, 96  # GPT-3 175B: 5 a s / h = 80


def _gpt3_layer(t: int, sp: bool, recompute: str, flash: bool = False, dropout: bool = True):
    shape = ActShape(tokens=S3, seq=S3, tp=t, sp=sp, flash=flash, dropout=dropout)  # b = 1
    return layer_activation_bytes(get_model("gpt3-175b"), "full", False, shape, recompute)


@pytest.mark.parametrize(
    ("t", "sp", "recompute", "per_sbh"),
    [
        (1, False, "none", 34 + 80),  # no parallelism: 34 + 5as/h
        (8, False, "none", 10 + 24 / 8 + 80 / 8),  # tensor parallel
        (8, True, "none", 34 / 8 + 80 / 8),  # tensor + sequence parallel
        (8, False, "selective", 10 + 24 / 8),  # tensor parallel + selective
        (8, True, "selective", 34 / 8),  # tensor + sequence parallel + selective
        (1, False, "full", 2),  # full recomputation: the layer input
        (8, True, "full", 2 / 8),
    ],
)
def test_gpt3_175b_layer_activations_table2(t, sp, recompute, per_sbh):
    assert _gpt3_layer(t, sp, recompute) == pytest.approx(S3 * H3 * per_sbh, rel=1e-12)


def test_flash_attention_drops_only_the_5as_over_h_term():
    """The code's assumption with FlashAttention (its default): the a s^2 b tensors (softmax
    output, its dropout mask and output) are not stored; the softmax log-sum-exp (4 a s b bytes,
    < 0.1% here) is not counted. Without dropout (also the default) the two sbh dropout masks
    go too: 32 sbh / t, not 34."""
    assert _gpt3_layer(8, True, "none", flash=True) == pytest.approx(S3 * H3 * 34 / 8)
    assert _gpt3_layer(8, True, "none", flash=True, dropout=False) == pytest.approx(
        S3 * H3 * 32 / 8
    )


def test_gpt3_first_stage_holds_L_layers_of_activations():
    """Korthikanti §4.2.3: with 1F1B the first stage holds p micro-batches of L/p layers, i.e. L
    layers: 34 s b h L / t with sequence parallelism and selective recomputation, plus (§4.3) the
    embedding dropout's 1-byte mask of each in-flight micro-batch, s b h p / t; the estimator
    adds the allocator's FRAGMENTATION factor."""
    L, t, p = 96, 8, 8
    st = Strategy(tp=t, pp=p, dp=1, micro_batch=1, global_batch=64, seq=S3,
                  sequence_parallel=True, recompute="selective", flash_attention=False,
                  dropout=True)  # fmt: skip
    cl = make_cluster("h100-sxm-80gb", 64)
    mem = estimate_memory(get_model("gpt3-175b"), cl, st)
    hand = (34 * S3 * H3 * L / t + S3 * H3 * p / t) * FRAGMENTATION
    assert mem.activations == pytest.approx(hand, rel=1e-12)


# --- pipeline bubble (Narayanan et al. SC'21 §2.2) ------------------------------------------------
@pytest.mark.parametrize(("schedule", "v"), [("1f1b", 1), ("interleaved", 2), ("interleaved", 4)])
def test_estimator_bubble_share(schedule, v):
    """Bubble / ideal time = (p - 1)/m for 1F1B and (p - 1)/(v m) interleaved, as the estimator
    composes it: ideal = the step less bubble, data-parallel, optimizer and offload time
    (overlapped interleaved p2p adds warm-up transfers outside the m (F + B); switched off)."""
    p, m = 4, 8
    e = estimate("llama3.1-8b", gpu="h100-sxm-80gb", gpus=8, tp=2, pp=p, seq=4096,
                 global_batch=m, schedule=schedule, vpp=v, overlap_p2p_comm=False)  # fmt: skip
    bd = e.breakdown
    ideal = e.step_time_s - bd["pipeline_bubble"] - bd["dp_comm_exposed"] - bd["optimizer"]
    ideal -= bd["offload"]
    assert bd["pipeline_bubble"] / ideal == pytest.approx((p - 1) / (v * m), rel=1e-9)


@pytest.mark.parametrize(("p", "v"), [(2, 2), (4, 2), (4, 3), (8, 2), (8, 4)])
def test_interleaved_in_flight_from_megatron_warmup(p, v):
    """Megatron's interleaved schedule runs 2(p - 1) + (v - 1) p warm-up chunk forwards on rank 0
    and holds one more in the steady state: v p + p - 1 chunks of L/(p v) layers, i.e.
    p + (p - 1)/v micro-batches of the rank's layers = p (1 + (p - 1)/(p v)) (Korthikanti §4.2.3,
    whose "m" there is the number of model chunks, not of micro-batches)."""
    chunks = 2 * (p - 1) + (v - 1) * p + 1
    assert in_flight("interleaved", p, m=64, v=v) == pytest.approx(chunks / v, rel=1e-12)


# --- ZeRO model states through the estimator (Rajbhandari et al. SC'20 §5) -------------------------
@pytest.mark.parametrize(
    ("zero", "per_param"),
    [
        (0, lambda nd: 2 + 2 + 12),
        (1, lambda nd: 2 + 2 + 12 / nd),  # P_os: 4 Psi + K Psi / Nd
        (2, lambda nd: 2 + (2 + 12) / nd),  # P_os+g: 2 Psi + (2 + K) Psi / Nd
        (3, lambda nd: (2 + 2 + 12) / nd),  # P_os+g+p: (2 + 2 + K) Psi / Nd
    ],
)
def test_estimator_model_states_per_zero_stage(zero, per_param):
    """K = 12 (fp32 master, momentum, variance); 16-bit gradients as in the paper
    (grad_reduce_dtype bf16: Megatron's default for bf16 is an fp32 main_grad, see memory.py)."""
    nd = 8
    psi = 8_030_261_248  # Llama 3.1 8B, the checkpoint's count
    st = Strategy(dp=nd, micro_batch=1, global_batch=8, seq=4096, zero=zero,
                  grad_reduce_dtype="bf16")  # fmt: skip
    mem = estimate_memory(get_model("llama3.1-8b"), make_cluster("h100-sxm-80gb", nd), st)
    assert mem.weights + mem.gradients + mem.optimizer == pytest.approx(
        per_param(nd) * psi, rel=1e-12
    )


# --- data-parallel collectives through the estimator --------------------------------------------
def test_estimator_gradient_all_reduce_is_a_ring():
    """Without overlap, ZeRO-0 pays one ring all-reduce of the fp32 gradient buffer (4 Psi bytes)
    over the dp ranks of one NVLink domain: 2(n-1)/n S/B + 2(n-1) alpha (Thakur et al. 2005;
    nccl-tests busbw), on the cluster's intra-node link, plus NCCL's fixed 8.4 us per
    Simple-protocol call (``src/graph/tuning.cc`` baseLat); on a DGX H100, whose NVSwitches
    reduce in the switch (NVLink SHARP, NCCL's default there), S / 275 GB/s plus the same
    latency steps (NCCL maintainer, nccl-tests #212: algbw ~275 GB/s on 8 H100s)."""
    n, psi = 8, 8_030_261_248
    dgx = make_cluster("h100-sxm-80gb", n)
    S = 4 * psi
    link = dgx.intra_link()
    lat = 2 * (n - 1) * link.latency
    ring = 2 * (n - 1) / n * S / link.bandwidth + lat
    assert ring == pytest.approx(ring_all_reduce(S, n, link), rel=1e-12)
    for cl, hand in ((dgx.model_copy(update={"nvls_allreduce_algbw_gbps": None}), ring + 8.4e-6),
                     (dgx, S / 275e9 + lat)):  # fmt: skip
        e = estimate("llama3.1-8b", cl, dp=n, seq=4096, global_batch=8, zero=0,
                     overlap_grad_reduce=False)  # fmt: skip
        assert e.breakdown["dp_comm_exposed"] == pytest.approx(hand, rel=1e-9)


def test_estimator_zero1_is_reduce_scatter_plus_all_gather():
    """ZeRO-1/2: reduce-scatter of the fp32 gradients and all-gather of the updated bf16 weights,
    each (n-1)/n S/B + (n-1) alpha + NCCL's fixed 8.4 us per call, not overlapped here."""
    n, psi = 8, 8_030_261_248
    cl = make_cluster("h100-sxm-80gb", n)
    e = estimate("llama3.1-8b", cl, dp=n, seq=4096, global_batch=8, zero=1,
                 overlap_grad_reduce=False, overlap_param_gather=False)  # fmt: skip
    link = cl.intra_link()

    def one_pass(size: float) -> float:
        return (n - 1) / n * size / link.bandwidth + (n - 1) * link.latency + 8.4e-6

    hand = one_pass(4 * psi) + one_pass(2 * psi)
    assert e.breakdown["dp_comm_exposed"] == pytest.approx(hand, rel=1e-9)
    assert one_pass(2 * psi) == pytest.approx(ring_all_gather(2 * psi, n, link) + 8.4e-6, rel=1e-12)


@pytest.mark.parametrize("p", [2, 4, 8])
def test_dualpipev_in_flight_from_its_phases(p):
    """deepseek-ai/DualPipe ``dualpipev.py`` on rank 0 of p ranks (2p stages, two chunks of
    L/(2p) layers per rank): step 1 runs 2(p - 1) chunk-0 forwards, step 2 one F0 and one F1
    (2p live), and the first overlapped F&B of step 4 allocates its forward before its backward
    frees: 2p + 1 chunks = p + 1/2 micro-batches of the rank's layers (README: PP + 1 stage
    activations per device, PP = 2p). DualPipe over p ranks holds p + 1 of its L/p-layer stages."""
    chunks = 2 * (p - 1) + 2 + 1
    assert in_flight("dualpipev", p, m=4 * p, v=1) == pytest.approx(chunks / 2, rel=1e-12)
    assert in_flight("dualpipe", p, m=4 * p, v=1) == pytest.approx(p + 1, rel=1e-12)


@pytest.mark.parametrize("m", [1, 4])
def test_zero2_reduces_every_micro_batch(m):
    """Rajbhandari et al. SC'20 §5.2 (P_os+g): each gradient is reduce-scattered as soon as the
    backward produces it and only the rank's shard (2 Psi / Nd bytes) is kept; with m
    micro-batches per step that is m reduce-scatters, each (n-1)/n S/B + (n-1) alpha (ZeRO-1
    accumulates the full gradients and reduces once), plus one all-gather of the updated bf16
    weights. Nothing overlapped here. Each NCCL call also pays NCCL's fixed 8.4 us (tuning.cc
    baseLat, Simple protocol)."""
    n, psi = 8, 8_030_261_248
    cl = make_cluster("h100-sxm-80gb", n)
    link = cl.intra_link()

    def one_pass(size: float) -> float:
        return (n - 1) / n * size / link.bandwidth + (n - 1) * link.latency + 8.4e-6

    common = dict(dp=n, seq=4096, global_batch=8 * m, grad_reduce_dtype="bf16",
                  overlap_grad_reduce=False, overlap_param_gather=False)  # fmt: skip
    z1 = estimate("llama3.1-8b", cl, zero=1, **common)
    z2 = estimate("llama3.1-8b", cl, zero=2, **common)
    assert z1.breakdown["dp_comm_exposed"] == pytest.approx(2 * one_pass(2 * psi), rel=1e-9)
    assert z2.breakdown["dp_comm_exposed"] == pytest.approx(
        m * one_pass(2 * psi) + one_pass(2 * psi), rel=1e-9
    )
    assert z2.comm_volume_bytes["dp_bytes_per_gpu"] == pytest.approx(m * 2 * psi, rel=1e-12)
