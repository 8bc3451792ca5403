"""Engine limits of the published serving rows: the engines' defaults, or aiconfigurator's
generated configs (``hwtune.serve.published.aic_engine_limits``)."""

from __future__ import annotations

import pytest

from hwtune.errors import HwtuneInputError
from hwtune.serve.published import (
    AIC_EXTRA_TOKENS,
    DISAGG_DECODE_MIN_SEQS,
    INFERENCEX_RANGE_RATIO,
    aic_attention_dp,
    aic_engine_limits,
    default_csv,
    load_rows,
    overlap_schedule,
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
    sgl = aic_engine_limits("sglang", 1000, 16)  # max_prefill_tokens = isl + 1500
    assert sgl == {"max_num_seqs": 16, "max_num_batched_tokens": 2500}


def test_harness_rows_run_the_generated_config_by_default():
    """aiconfigurator's harness rows deploy its generated config (the default); ``defaults``
    gives them the engines' own limits (8192 tokens, a batch that admits every client)."""
    d = to_row(ROW, engine="defaults").deployment
    assert d is not None
    assert d.replica.max_num_batched_tokens == 8192 and d.replica.max_num_seqs == 256
    a = to_row(ROW).deployment
    assert a is not None and a == to_row(ROW, engine="aiconfigurator").deployment
    r = a.replica
    assert (r.max_num_batched_tokens, r.max_num_seqs, r.scheduler) == (16 + 1024 + 1500, 16, "orca")
    assert a.replicas == 1


@pytest.mark.parametrize(
    ("batch", "clients", "tp", "expected"),
    [("16", 16, "1", (1, 16)), ("48", 192, "4", (4, 48)), ("160", 320, "2", (2, 160)),
     ("", 28, "4", (1, 28)), ("40", 100, "4", (1, 100)), ("64", 32, "4", (1, 32)),
     ("16", 128, "4", (1, 128))],
)  # fmt: skip
def test_harness_batch_per_rank_gives_the_attention_dp(batch, clients, tp, expected):
    """The harness keeps the generated engine's batch apart from the clients: 192 clients on
    batch 48 at TP 4 are four attention-DP ranks of 48 (TensorRT-LLM 1.3.0rc1 gpt-oss-120b); a
    concurrency that is not the batch times a divisor of TP is one attention group at the
    concurrency."""
    row = dict(ROW, batch_size=batch, tp_size=tp,
               silicon_data_source=f"x; silicon_concurrency={clients}")  # fmt: skip
    assert aic_attention_dp(row) == expected
    dep = to_row(row).deployment
    assert dep is not None and dep.replicas == 1
    ranks, per_rank = expected
    r = dep.replica
    assert (r.dp_attention, r.tp, r.max_num_seqs) == (ranks, int(tp) // ranks, ranks * per_rank)
    assert r.max_num_batched_tokens == ranks * (per_rank + 1024 + AIC_EXTRA_TOKENS)


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


@pytest.mark.parametrize(
    ("backend", "version", "source", "role", "expected"),
    [
        ("trtllm", "1.0.0rc3", "source_file=/x/aic-auto-gap-analysis/y.csv", "agg", True),
        ("trtllm", "", "db-dump/2026-04-27; workflow_run_id=1", "decode", True),
        ("trtllm", "0.8.1.post1", "db-dump/2026-04-27; workflow_run_id=1", "prefill", False),
        ("sglang", "0.5.6.post2", "source_file=/x/aic-auto-gap-analysis/y.csv", "agg", True),
        ("sglang", "0.5.8.post1", "db-dump/2026-04-27", "prefill", True),
        ("vllm", "", "source_file=2026-04-06.csv; measured=2025-10-29", "agg", True),
        ("vllm", "0.12.0", "source_file=/x/aic-auto-gap-analysis/y.csv", "agg", False),
        ("vllm", "0.13.0", "source_file=/x/aic-auto-gap-analysis/y.csv", "agg", False),
        ("vllm", "0.14.0", "source_file=/x/aic-auto-gap-analysis/y.csv", "agg", True),
        ("vllm", "0.18.0", "source_file=/x/aic-auto-gap-analysis/y.csv", "agg", True),
        ("vllm", "", "source_file=/x/aic-auto-gap-analysis/y.csv", "agg", False),
    ],
)
def test_overlap_scheduling_follows_each_engine_and_launch_script(
    backend, version, source, role, expected
):
    """TensorRT-LLM overlaps except on prefill workers (aiconfigurator's generator: prefill
    ``disable_overlap_scheduler: true``, aggregated and decode false); SGLang by default; vLLM
    when InferenceX's script sets ``async-scheduling: true`` or from v0.14 (PR #27614)."""
    row = {"backend": backend, "backend_version": version, "silicon_data_source": source}
    assert overlap_schedule(row, role) is expected


def test_rows_carry_the_overlap_flag_to_their_replicas():
    d = to_row(ROW).deployment  # TensorRT-LLM, aggregated
    assert d is not None and d.replica.overlap_schedule
    v = to_row(dict(ROW, backend="vllm", backend_version="0.12.0")).deployment
    assert v is not None and not v.replica.overlap_schedule


@pytest.mark.skipif(not default_csv().is_file(), reason="validation data absent")
def test_disaggregated_prefill_workers_do_not_overlap():
    rows = {r.id: r for r in load_rows()}
    dep = rows["dsr1_h200_trtllm_fp8_disagg_1024x1024_c36_cfg303"].deployment
    assert dep is not None and dep.prefill is not None
    assert dep.replica.overlap_schedule and not dep.prefill.overlap_schedule
