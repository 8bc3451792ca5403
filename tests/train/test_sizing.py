"""Hardware-aware sizing (`hwtune.train.sizing`): the alignment cases of Anthony et al. 2024,
"The Case for Co-Designing Model Architectures with Hardware", and proposals that hit the
target parameter count (recounted here with `hwtune.model.params.total_params`)."""

from __future__ import annotations

import pytest

from hwtune.errors import HwtuneInputError
from hwtune.hardware.catalog import get_device
from hwtune.model.catalog import get_model
from hwtune.model.params import total_params
from hwtune.train.sizing import check, naive_shape, propose

ALIGN_ADVICE = "multiples of 8"


@pytest.fixture(scope="module")
def h100():
    return get_device("h100-sxm-80gb")


@pytest.fixture(scope="module")
def llama8b():
    # h = 4096, 32 heads, 8 KV heads, SwiGLU: the setting of Anthony et al.'s 10,922 example
    return get_model("llama3.1-8b")


def _mlp(issues):
    return [i for i in issues if i.where.startswith(("mlp_up", "mlp_down"))]


# ------------------------------------------------------------------ check
def test_swiglu_10922_is_flagged_for_alignment(llama8b, h100):
    # Anthony et al. 2024 §4 (SwiGLU): 8/3 * 4096 = 10,922.67 rounded down gives 10,922 = 2 x
    # 5,461, not a multiple of 8 bf16 elements (16 B): the tensor cores fall back to slower
    # kernels; 10,944 = 64 x 171 is aligned and faster on an H100
    issues = _mlp(check(llama8b.model_copy(update={"ffn_hidden": 10922}), h100))
    assert issues, "the misaligned FFN width is not flagged"
    assert all(ALIGN_ADVICE in i.advice for i in issues)
    assert all(i.efficiency < 0.97 and i.lost_s_per_step > 0 for i in issues)
    down = next(i for i in issues if i.where.startswith("mlp_down"))
    # per rank (tp=1): m = micro-batch x seq = 4096 tokens, n = h = 4096, k = FFN width
    assert down.shape == (4096, 4096, 10922)


def test_swiglu_10944_is_not_flagged_for_alignment(llama8b, h100):
    issues = check(llama8b.model_copy(update={"ffn_hidden": 10944}), h100)
    assert not any(ALIGN_ADVICE in i.advice for i in issues)
    # and whatever remains (tile / wave quantization) costs less than 10,922's misalignment
    bad = check(llama8b.model_copy(update={"ffn_hidden": 10922}), h100)
    assert sum(i.lost_s_per_step for i in _mlp(issues)) < sum(i.lost_s_per_step for i in _mlp(bad))


def test_per_tp_rank_shapes_are_checked(llama8b, h100):
    # TP=2 splits the 10,944 width into 5,472 = 32 x 171 per rank: still aligned; 10,922
    # splits into 5,461 (odd): misaligned on every rank
    ok = check(llama8b.model_copy(update={"ffn_hidden": 10944}), h100, tp=2)
    assert not any(ALIGN_ADVICE in i.advice for i in ok)
    bad = _mlp(check(llama8b.model_copy(update={"ffn_hidden": 10922}), h100, tp=2))
    down = next(i for i in bad if i.where.startswith("mlp_down"))
    assert down.shape == (4096, 4096, 5461)
    assert ALIGN_ADVICE in down.advice


def test_vocabulary_not_padded_to_64_is_flagged(llama8b, h100):
    # GPT-2's 50,257 tokens vs the 50,304 = 64 x 786 that nanoGPT pads to (Anthony et al.:
    # vocabulary a multiple of 64)
    def lm_head(vocab: int):
        issues = check(llama8b.model_copy(update={"vocab": vocab}), h100)
        return [i for i in issues if i.where.startswith("lm_head")]

    flagged = lm_head(50257)
    assert flagged and ALIGN_ADVICE in flagged[0].advice
    assert flagged[0].shape[1] == 50257
    assert lm_head(50304) == []


def test_issues_are_sorted_worst_first(llama8b, h100):
    issues = check(llama8b.model_copy(update={"ffn_hidden": 10922, "vocab": 50257}), h100)
    lost = [i.lost_s_per_step for i in issues]
    assert len(lost) >= 3
    assert lost == sorted(lost, reverse=True)


def test_check_rejects_a_tp_that_does_not_divide_the_heads(llama8b, h100):
    with pytest.raises(HwtuneInputError) as ei:
        check(llama8b, h100, tp=3)
    assert ei.value.field == "tp"


# ------------------------------------------------------------------ propose
CASES = [
    ("llama3.1-8b", 1e9, "h100-sxm-80gb"),
    ("llama3.1-8b", 7e9, "h100-sxm-80gb"),
    ("llama3.1-8b", 13e9, "h100-sxm-80gb"),
    ("llama3.1-8b", 7e9, "mi300x"),
    ("llama3.1-70b", 30e9, "h100-sxm-80gb"),
]


@pytest.mark.parametrize("base,target,gpu", CASES)
def test_proposals_hit_the_target_and_are_hardware_friendly(base, target, gpu):
    b = get_model(base)
    tol = 0.02
    naive, props = propose(b, target, get_device(gpu), tolerance=tol)
    assert 1 <= len(props) <= 5
    for p in props:
        s = p.spec
        n = total_params(s)  # recounted, not the proposal's own figure
        assert n == p.params
        assert abs(n / target - 1) <= tol
        assert s.d_model % 256 == 0
        assert s.ffn_hidden % 256 == 0
        assert s.vocab % 128 == 0 and s.vocab >= b.vocab
        assert s.n_heads * s.hd == s.d_model
        # the base's number of KV heads is kept (Llama 3.1: 8), so the KV cache per layer
        # and the GQA kernels keep their shape
        assert s.kv_heads == b.kv_heads and s.n_heads % s.kv_heads == 0
        assert p.tokens_per_s > 0
    # the best proposal is at least as fast as the naive (unrounded) shape
    assert props[0].tokens_per_s >= naive.tokens_per_s
    # ranked by predicted throughput at equal parameter count
    key = [p.tokens_per_s * p.params / target for p in props]
    assert key == sorted(key, reverse=True)


@pytest.mark.parametrize("base,target,gpu", CASES[:3])
def test_proposals_are_distinct_shapes(base, target, gpu):
    _, props = propose(get_model(base), target, get_device(gpu))
    assert len({p.note for p in props}) == len(props)


def test_moe_proposals_are_distinct_shapes():
    _, props = propose(get_model("qwen3-30b-a3b"), 30e9, get_device("mi300x"))
    assert len({p.note for p in props}) == len(props)


def test_moe_proposals_keep_experts_and_round_the_expert_width():
    b = get_model("qwen3-30b-a3b")
    _, props = propose(b, 30e9, get_device("mi300x"))
    for p in props:
        assert abs(total_params(p.spec) / 30e9 - 1) <= 0.02
        assert p.spec.moe.n_routed_experts == b.moe.n_routed_experts
        assert p.spec.moe.top_k == b.moe.top_k
        assert p.spec.moe.expert_ffn_hidden % 256 == 0


def test_a_half_size_moe_is_reachable():
    naive, props = propose(get_model("qwen3-30b-a3b"), 15e9, get_device("mi300x"), tolerance=0.05)
    assert props


def test_naive_shape_keeps_the_base_depth_to_width_ratio(llama8b):
    # Llama-3.1-8B: 4096 / 32 layers = 128 hidden units per layer; the naive shape scales both
    nv = naive_shape(llama8b, 7e9)
    assert nv.d_model == round(128 * nv.n_layers)
    assert abs(total_params(nv) / 7e9 - 1) < 0.05
    # FFN ratio 14336 / 4096 = 3.5 kept, unrounded
    assert nv.ffn_hidden == int(nv.d_model * 3.5)


@pytest.mark.parametrize(
    "kw,field",
    [
        (dict(target=0), "target"),
        (dict(target=-7e9), "target"),
        (dict(target=1e3), "target"),  # 1,000 parameters: not even the embedding fits
        (dict(target=7e9, tolerance=0.0), "tolerance"),
        (dict(target=7e9, tolerance=0.5), "tolerance"),
    ],
)
def test_bad_target_or_tolerance_raises_naming_it(llama8b, h100, kw, field):
    with pytest.raises(HwtuneInputError) as ei:
        propose(llama8b, dev=h100, **kw)
    assert ei.value.field == field
