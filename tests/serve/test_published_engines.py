"""Engine limits of the published serving rows: the engines' defaults, or aiconfigurator's
generated configs (``hwtune.serve.published.aic_engine_limits``)."""

from __future__ import annotations

import pytest

from hwtune.errors import HwtuneInputError
from hwtune.serve.published import AIC_EXTRA_TOKENS, aic_engine_limits, to_row

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
