"""`Strategy` validation: one-line errors naming the field, the value and what was expected."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from hwtune.errors import HwtuneInputError
from hwtune.model.spec import ModelSpec, MoE
from hwtune.train.strategy import Strategy, expert_data_parallel, make_strategy

# Llama-3-8B shapes: 32 layers, 32 query heads, 8 KV heads.
DENSE = ModelSpec(
    n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8, ffn_hidden=14336, vocab=128256
)
# Mixtral-8x7B-like: 8 experts, top-2.
MOE = ModelSpec(
    n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8, ffn_hidden=14336, vocab=32000,
    moe=MoE(n_routed_experts=8, top_k=2, expert_ffn_hidden=14336),
)  # fmt: skip


def rejects(
    strategy: Strategy, model: ModelSpec, field: str, value: object, n_gpus: int | None = None
):
    with pytest.raises(HwtuneInputError) as info:
        strategy.validate_for(model, n_gpus)
    err = info.value
    msg = str(err)
    assert "\n" not in msg, msg
    assert err.field == field
    assert msg.startswith(field), msg
    assert repr(value) in msg or str(value) in msg, msg
    return msg


def test_valid_strategy_passes():
    Strategy(dp=2, tp=8, pp=4, micro_batch=1, global_batch=64).validate_for(DENSE, 64)


def test_tp_must_divide_heads():
    msg = rejects(Strategy(tp=3), DENSE, "tp", 3)
    assert "32" in msg  # names the head count it must divide


def test_tp_must_fit_kv_heads():
    # 24 query heads, 6 KV heads: tp = 4 divides the query heads but neither divides the 6 KV
    # heads nor is a multiple of them (KV heads can be split or replicated, not both).
    spec = ModelSpec(
        n_layers=4, d_model=3072, n_heads=24, n_kv_heads=6, ffn_hidden=8192, vocab=1000
    )
    msg = rejects(Strategy(tp=4), spec, "tp", 4)
    assert "6" in msg
    Strategy(tp=16).validate_for(DENSE)  # 16 = 2 x 8 KV heads: each KV head on 2 ranks, fine


def test_ep_on_a_dense_model():
    rejects(Strategy(dp=2, ep=2), DENSE, "ep", 2)


def test_ep_must_divide_experts():
    msg = rejects(Strategy(dp=3, ep=3), MOE, "ep", 3)
    assert "8" in msg


def test_ep_must_divide_tp_times_cp_times_dp():
    # EP folds over the tensor x context x data ranks of a stage (Megatron-Core MoE parallel
    # folding with expert TP 1): 4 does not divide 2 ranks, but does divide tp 2 x dp 2.
    msg = rejects(Strategy(dp=2, ep=4), MOE, "ep", 4)
    assert "tp x cp x dp (= 2)" in msg
    Strategy(dp=8, ep=4, global_batch=8).validate_for(MOE)
    Strategy(tp=2, dp=2, ep=4, global_batch=8).validate_for(MOE)
    rejects(Strategy(tp=2, dp=2, ep=8, global_batch=8), MOE, "ep", 8)


@given(
    tp=st.sampled_from([1, 2, 4, 8]),
    cp=st.sampled_from([1, 2]),
    dp=st.integers(1, 64),
    ep=st.sampled_from([1, 2, 4, 8, 16, 32, 64]),
)
def test_expert_groups_tile_the_stage(tp, cp, dp, ep):
    # Every rank of a stage is in exactly one EP group and one expert-DP group: ep x edp = tp x cp x dp.
    assume((tp * cp * dp) % ep == 0)
    assert ep * expert_data_parallel(tp, cp, dp, ep) == tp * cp * dp


def test_global_batch_divisible_by_micro_batch_times_dp():
    msg = rejects(Strategy(dp=4, micro_batch=2, global_batch=12), DENSE, "global_batch", 12)
    assert "8" in msg  # micro_batch * dp = 8


def test_vpp_needs_interleaved_schedule():
    msg = rejects(Strategy(pp=4, vpp=2, global_batch=8), DENSE, "vpp", 2)
    assert "interleaved" in msg
    Strategy(pp=4, vpp=2, schedule="interleaved", global_batch=8).validate_for(DENSE)


def test_sequence_parallel_needs_tp():
    rejects(Strategy(sequence_parallel=True), DENSE, "sequence_parallel", True)


def test_gpu_count_must_match():
    rejects(Strategy(dp=2, tp=4), DENSE, "dp*tp*pp*cp", 8, n_gpus=16)


def test_more_stages_than_layers():
    small = ModelSpec(n_layers=4, d_model=512, n_heads=8, ffn_hidden=1024, vocab=1000)
    rejects(Strategy(pp=8, global_batch=8), small, "pp*vpp", 8)


def test_cp_must_divide_sequence():
    rejects(Strategy(dp=1, cp=3, seq=4096), DENSE, "cp", 3)


def test_interleaved_needs_micro_batches_divisible_by_pp():
    rejects(Strategy(pp=4, vpp=2, schedule="interleaved", global_batch=6), DENSE, "global_batch", 6)


def test_dualpipe_needs_even_pp_and_2p_micro_batches():
    rejects(Strategy(pp=3, schedule="dualpipe", global_batch=12), DENSE, "pp", 3)
    rejects(Strategy(pp=4, schedule="dualpipe", global_batch=4), DENSE, "global_batch", 4)
    Strategy(pp=4, schedule="dualpipe", global_batch=8).validate_for(DENSE)


@pytest.mark.parametrize(
    ("field", "value"),
    [("tp", 0), ("dp", -1), ("micro_batch", 0), ("zero", 4), ("schedule", "foo"),
     ("recompute", "sometimes"), ("precision", "fp9")],
)  # fmt: skip
def test_make_strategy_field_errors_name_the_field(field, value):
    with pytest.raises(HwtuneInputError) as info:
        make_strategy(**{field: value})
    msg = str(info.value)
    assert "\n" not in msg
    assert field in info.value.field
    assert str(value) in msg


def test_make_strategy_rejects_unknown_fields():
    with pytest.raises(HwtuneInputError) as info:
        make_strategy(tensor_parallel=2)
    assert "tensor_parallel" in str(info.value)


def test_make_strategy_drops_none():
    # None means "use the default" (CLI options left unset).
    assert make_strategy(tp=None, dp=2) == Strategy(dp=2)


def test_derived_counts():
    s = Strategy(dp=4, tp=8, pp=2, cp=2, micro_batch=2, global_batch=64)
    assert s.n_gpus == 4 * 8 * 2 * 2
    assert s.grad_accum == 64 // (2 * 4)
    assert s.global_batch_seqs == 64
    # Default global batch is one micro-batch per data-parallel rank.
    assert Strategy(dp=4, micro_batch=2).global_batch_seqs == 8
    assert Strategy(dp=4, micro_batch=2).grad_accum == 1


def test_strategy_is_frozen():
    s = Strategy()
    with pytest.raises(Exception):  # noqa: B017 - pydantic raises ValidationError on frozen models
        s.tp = 2  # type: ignore[misc]


@settings(max_examples=200, deadline=None)
@given(
    tp=st.sampled_from([1, 2, 4, 8]),
    pp=st.sampled_from([1, 2, 4]),
    dp=st.sampled_from([1, 2, 4, 8]),
    mb=st.sampled_from([1, 2]),
    accum=st.integers(1, 8),
)
def test_divisible_layouts_validate(tp, pp, dp, mb, accum):
    # Degrees that divide the heads, layers and batch never raise.
    s = Strategy(tp=tp, pp=pp, dp=dp, micro_batch=mb, global_batch=mb * dp * accum,
                 sequence_parallel=tp > 1)  # fmt: skip
    s.validate_for(DENSE, tp * pp * dp)
    assert s.grad_accum == accum
