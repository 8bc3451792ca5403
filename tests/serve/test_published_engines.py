"""Engine limits of the published serving rows: the engines' defaults, or aiconfigurator's
generated configs (``hwtune.serve.published.aic_engine_limits``)."""

from __future__ import annotations

import pytest

from hwtune.errors import HwtuneInputError
from hwtune.serve.published import (
    AIC_EXTRA_TOKENS,
    DISAGG_DECODE_MIN_SEQS,
    INFERENCEX_RANGE_RATIO,
    aic_engine_limits,
    default_csv,
    load_rows,
    to_row,
)

ROW = {
    "id": "x", "silicon_data_source": "test; silicon_concurrency=16", "backend": "trtllm",
    "model_path": "meta-llama/Llama-3.1-8B-Instruct", "system": "h100_sxm", "precision": "",
    "mode": "agg", "isl": "1024", "osl": "128", "batch_size": "16", "tp_size": "1",
    "pp_size": "1", "attention_dp_size": "1", "moe_tp_size": "", "moe_ep_size": "1",
    "prefill_moe_ep_size": "", "decode_moe_ep_size": "", "silicon_ttft_ms": "100",
    "silicon_tpot_ms": "10",
}  # fmt: skip


def test_aiconfigurator_budget_is_batch_plus_isl_plus_1500():
    """aiconfigurator's generator: max_num_tokens = max_batch_size + isl + 1500 (TRT-LLM, with
    chunked prefill off; vLLM --max-num-batched-tokens; SGLang max_prefill_tokens isl + 1500)."""
    assert AIC_EXTRA_TOKENS == 1500
    trt = aic_engine_limits("trtllm", 1024, 8)
    assert trt == {"max_num_seqs": 8, "max_num_batched_tokens": 2532, "scheduler": "orca"}
    vllm = aic_engine_limits("vllm", 8192, 64)
    assert vllm == {"max_num_seqs": 64, "max_num_batched_tokens": 9756}
    assert "scheduler" not in aic_engine_limits("sglang", 1000, 16)


def test_rows_take_the_engine_preset():
    d = to_row(ROW).deployment
    assert d is not None
    assert d.replica.max_num_batched_tokens == 8192 and d.replica.max_num_seqs == 256
    a = to_row(ROW, engine="aiconfigurator").deployment
    assert a is not None
    r = a.replica
    assert (r.max_num_batched_tokens, r.max_num_seqs, r.scheduler) == (16 + 1024 + 1500, 16, "orca")


def test_bad_engine_and_batch_are_one_line_errors():
    with pytest.raises(HwtuneInputError, match="engine") as e:
        to_row(ROW, engine="tgi")
    assert "\n" not in str(e.value)
    with pytest.raises(HwtuneInputError, match="batch_size"):
        aic_engine_limits("vllm", 1024, 0)


@pytest.mark.skipif(not default_csv().is_file(), reason="validation data absent")
def test_disaggregated_rows_map_to_their_pools():
    """The walk-through row of VALIDATION.md (InferenceX cfg303, 36 clients): one TP8/EP8
    prefill worker taking one prompt per step, nine TP8/EP8 decode workers with the engine's
    batch limit (aiconfigurator's adapter writes decode_batch_size = 36 / 9 = 4, a share of the
    clients, not a limit), and InferenceX's sampled lengths."""
    rows = {r.id: r for r in load_rows()}
    r = rows["dsr1_h200_trtllm_fp8_disagg_1024x1024_c36_cfg303"]
    dep = r.deployment
    assert dep is not None and dep.prefill is not None
    assert (r.concurrency, r.isl, r.osl) == (36, 1024, 1024)
    assert (dep.prefill_replicas, dep.prefill.tp, dep.prefill.ep, dep.prefill.max_num_seqs) == (
        1, 8, 8, 1)  # fmt: skip
    assert (dep.replicas, dep.replica.tp, dep.replica.ep) == (9, 8, 8)
    assert dep.replica.max_num_seqs == DISAGG_DECODE_MIN_SEQS == 256
    assert dep.replica.kv_dtype == "fp8" and dep.gpus == 80
    assert r.range_ratio == INFERENCEX_RANGE_RATIO == 0.8
    dis = [x for x in rows.values() if x.mode == "disagg" and x.deployment is not None]
    assert len(dis) == 36 and all(x.range_ratio == 0.8 for x in dis)  # all measured by InferenceX
    for x in dis:  # decode limits per attention-DP rank
        d = x.deployment.replica
        assert d.max_num_seqs >= DISAGG_DECODE_MIN_SEQS * d.dp_attention


def test_aiconfigurator_limits_apply_to_its_own_harness_rows_only():
    """An InferenceX row keeps InferenceX's engine settings under ``engine="aiconfigurator"``."""
    ix = dict(ROW, silicon_data_source="source_file=2026-04-06.csv; silicon_concurrency=16")
    a = to_row(ix, engine="aiconfigurator").deployment
    d = to_row(ix).deployment
    assert a is not None and d is not None
    assert a.replica == d.replica
