"""`benchmarks/serve_validation.py --compare`: a run against a saved one, by group."""

from __future__ import annotations

import copy


def _row(i: int, backend: str, pred_ttft: float, pred_tpot: float = 0.01) -> dict:
    return {"id": f"r{i}", "backend": backend, "model": "org/Model-X", "mode": "agg",
            "client": "InferenceX (sampled lengths)", "ttft_s": 1.0, "tpot_s": 0.01,
            "pred_ttft_s": pred_ttft, "pred_tpot_s": pred_tpot}  # fmt: skip


def test_compare_reports_each_group_and_the_rows_that_cross_the_threshold(benchmark_module):
    sv = benchmark_module("serve_validation")
    base = [_row(0, "vllm", 1.10), _row(1, "vllm", 1.40), _row(2, "sglang", 0.5)]
    new = copy.deepcopy(base)
    new[1]["pred_ttft_s"] = 1.05  # 40% -> 5%: one more vLLM row within 15%
    new[2]["pred_tpot_s"] = 0.02  # TPOT 0% -> 100%
    lines = sv.compare_table(base, new).splitlines()
    vllm = next(x for x in lines if x.startswith("| vllm | Model-X | InferenceX | agg | 2 |"))
    assert "25.0% -> 7.5%" in vllm and "| 1 -> 2 |" in vllm and "0.0% -> 0.0%" in vllm
    sglang = next(x for x in lines if x.startswith("| sglang |"))
    assert "50.0% -> 50.0%" in sglang and "| 0 -> 0 |" in sglang and "0.0% -> 100.0%" in sglang
    assert lines[-1].startswith("| all | | | | 3 |") and "| 1 -> 2 |" in lines[-1]


def test_compare_uses_only_the_rows_both_runs_expressed(benchmark_module):
    sv = benchmark_module("serve_validation")
    base = [_row(0, "vllm", 1.0)]
    new = [_row(0, "vllm", 2.0), _row(9, "vllm", 1.0)]  # r9 is new: not compared
    last = sv.compare_table(base, new).splitlines()[-1]
    assert last.startswith("| all | | | | 1 |") and "0.0% -> 100.0%" in last
