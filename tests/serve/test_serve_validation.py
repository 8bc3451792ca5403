"""Accuracy against published serving measurements (shared/validation/serving_measured.csv).

The full comparison (every expressible row, each measurement once, 10 x concurrency requests
each) is ``benchmarks/serve_validation.py``, reported in VALIDATION.md. Here a fixed,
deterministic subset runs inside the test budget: the expressible aggregated rows whose
concurrency x output length is at most 16,384 (the cost of a run), one in four by a hash of the
row id: 117 rows, 42 of them measured by InferenceX (its client's sampled lengths).

Full run (901 expressed rows, VALIDATION.md, at ff44e52): median TTFT error 21.9% (p90 67.9%),
median TPOT error 7.5% (p90 33.8%). This subset: TTFT 20.2%, TPOT 5.6%.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from hwtune.serve.published import (
    INFERENCEX_RANGE_RATIO,
    default_csv,
    inferencex_engine_limits,
    inferencex_layout,
    is_inferencex,
    load_rows,
    measured_date,
    measurement_key,
    predict_all,
)

pytestmark = pytest.mark.skipif(not default_csv().is_file(), reason="validation data absent")

TTFT_TARGET = 0.15  # issue 4: median relative TTFT error
TPOT_TARGET = 0.12  # issue 4: median relative TPOT error
# reached: 0.202 on this subset since 2026-12-05 (TensorRT-LLM's TRITON MoE launches counted in
# the eager-prefill floor); 0.225 with the fused norms alone, 0.223 before them
GUARD_TTFT = 0.21
# reached: 0.056 on this subset since ff44e52 (2026-12-05: the TRITON MoE's extra kernels cost
# their GPU time), 0.062 when the engines' residual add + RMSNorm became one kernel per norm, or
# none inside TensorRT-LLM's all-reduce (VALIDATION.md); 0.096 from the busiest-rank MoE pricing
# earlier that day, 0.076 before it
GUARD_TPOT = 0.07
XFAIL_REASON = (
    "issue-4 TTFT target not met: median TTFT error 21.9% (target 15%) over all 901 expressed "
    "rows (TPOT 7.5%, target 12%, is met); 20.2% on this 117-row subset. TTFT "
    "depends on per-request and MoE prefill time and engine admission details the data does not "
    "record (see VALIDATION.md, 'What is missing')"
)


@pytest.fixture(scope="module")
def rows():
    return load_rows()


@pytest.fixture(scope="module")
def subset_predictions(rows):
    """(row, predicted mean TTFT, predicted mean TPOT) of the fixed subset: short aggregated
    runs, one in four by a hash of the row id (so that rows leaving or joining the expressed set
    elsewhere do not reshuffle it)."""
    pick = [r for r in rows if r.deployment is not None and r.mode == "agg"
            and r.concurrency * r.osl <= 16384 and zlib.crc32(r.id.encode()) % 4 == 0]  # fmt: skip
    pred = predict_all(pick, processes=2)
    out = []
    for r in pick:
        t, p, _w, err = pred[r.id]
        assert not err, err
        out.append((r, t, p))
    return out


@pytest.fixture(scope="module")
def subset_errors(subset_predictions):
    e_ttft = [abs(t - r.ttft_s) / r.ttft_s for r, t, _p in subset_predictions]
    e_tpot = [abs(p - r.tpot_s) / r.tpot_s for r, _t, p in subset_predictions]
    return len(subset_predictions), np.array(e_ttft), np.array(e_tpot)


def test_most_rows_are_expressible_and_the_rest_say_why(rows):
    ok = [r for r in rows if r.deployment is not None]
    bad = [r for r in rows if r.deployment is None]
    assert len(rows) == 1267
    assert len(ok) == 901
    assert all(r.reason for r in bad)
    pools = [r for r in bad if "pool sizes are not in the data" in r.reason]
    assert len(pools) == 141  # disaggregated rows without prefill/decode worker counts
    assert sum(r.reason.startswith("repeats the measurement of") for r in bad) == 201
    assert sum(r.reason.startswith("speculative decoding") for r in bad) == 22
    assert len(bad) == 141 + 201 + 22 + 2  # and the 2 rows with moe_ep_size 0


def test_speculative_decoding_runs_are_listed_not_expressed(rows):
    """InferenceX's dsr1-fp8-h200-trt-mtp runs (`inferencex_spec_decoding`): the sweep of
    2026-01-14 ran only that key; on 2026-01-28 both keys ran and only the points the non-MTP key
    lacked (here 1k/8k at 256 clients) are MTP. The same image's non-MTP runs stay expressed."""
    import csv

    with open(default_csv(), newline="") as f:
        raw = {r["id"]: r for r in csv.DictReader(f)}
    spec = [r for r in rows if r.reason.startswith("speculative decoding")]
    days = {measured_date(raw[r.id]) for r in spec}
    assert days == {"2026-01-14", "2026-01-28"}
    assert all(r.backend == "trtllm" and r.system == "h200_sxm" for r in spec)
    late = [r for r in rows if measured_date(raw[r.id]) == "2026-01-28" and "DeepSeek" in r.model]
    assert {(r.osl, r.concurrency, r.reason[:11]) for r in late} == {
        (8192, 256, "speculative"), (8192, 64, "")}  # fmt: skip
    same_image = [r for r in rows if "config_id=181;" in raw[r.id]["silicon_data_source"]]
    assert same_image and all(r.deployment is not None for r in same_image)
    mtp3 = [r for r in spec if "MTP, 3 draft" in r.reason]
    assert mtp3 and all(int(raw[r.id]["attention_dp_size"] or 1) == 1 for r in mtp3)


def test_moe_layouts_wider_than_attention_span_their_gpus(rows):
    """aiconfigurator's rows obey moe_tp x moe_ep = tp x attention DP; the vLLM Qwen3-235B rows
    that record a wider MoE layout run on the GPUs it spans (and then fit: 220 GiB of fp8
    weights need at least two H200s)."""
    import csv

    with open(default_csv(), newline="") as f:
        raw = {r["id"]: r for r in csv.DictReader(f)}
    wide = [r for r in rows if r.deployment is not None and r.note.startswith("attention DP")]
    assert len(wide) == 19
    for r in wide:
        x, rep = raw[r.id], r.deployment.replica
        assert r.backend == "vllm" and "Qwen3-235B" in r.model
        assert rep.tp * rep.dp_attention == int(x["moe_tp_size"]) * max(1, int(x["moe_ep_size"]))
        assert rep.gpus >= 2


def test_each_measurement_counts_once():
    """A repeated row names an earlier row with the same measured TTFT and TPOT (to 14
    significant figures), lengths and concurrency; no two expressed rows share a measurement."""
    import csv

    with open(default_csv(), newline="") as f:
        raw = list(csv.DictReader(f))
    rows = load_rows()
    pos = {r["id"]: i for i, r in enumerate(raw)}
    expressed_keys = set()
    for i, (r, x) in enumerate(zip(rows, raw, strict=True)):
        if r.reason.startswith("repeats the measurement of "):
            j = pos[r.reason.removeprefix("repeats the measurement of ")]
            assert j < i
            y = raw[j]
            for k in ("isl", "osl", "backend", "system"):
                assert x[k] == y[k], k
            for k in ("silicon_ttft_ms", "silicon_tpot_ms"):  # printed with 16 or 17 digits
                assert float(x[k]) == pytest.approx(float(y[k]), rel=1e-13), k
        if r.deployment is not None:
            key = measurement_key(x)
            assert key not in expressed_keys
            expressed_keys.add(key)


def test_inferencex_rows_are_its_exports_and_draw_sampled_lengths(rows):
    """InferenceX's client samples lengths in [0.8 L, L]; aiconfigurator's harness does not."""
    import csv

    with open(default_csv(), newline="") as f:
        raw = {r["id"]: r for r in csv.DictReader(f)}
    for r in rows:
        src = raw[r.id]["silicon_data_source"]
        ix = is_inferencex(raw[r.id])
        assert ix == (src.startswith("db-dump") or src.startswith("source_file=2026-"))
        assert ix != ("aic-auto-gap-analysis" in src)
        assert r.range_ratio == (INFERENCEX_RANGE_RATIO if ix else 1.0)
    assert INFERENCEX_RANGE_RATIO == 0.8


def test_errors_stay_at_the_level_reached(subset_errors):
    """Guard: the accuracy reached so far must not regress (numbers in VALIDATION.md)."""
    n, et, ep = subset_errors
    assert n == 117
    assert np.median(et) <= GUARD_TTFT, np.median(et)
    assert np.median(ep) <= GUARD_TPOT, np.median(ep)


@pytest.mark.xfail(strict=True, reason=XFAIL_REASON)
def test_issue_target_ttft(subset_errors):
    _, et, _ = subset_errors
    assert np.median(et) <= TTFT_TARGET


def test_issue_target_tpot(subset_errors):
    """Issue 4: median TPOT error <= 12% (9.6% on this subset, 9.8% over all 901 rows)."""
    _, _, ep = subset_errors
    assert np.median(ep) <= TPOT_TARGET


def test_ttft_closer_than_aiconfigurator_on_the_rows_both_predict(subset_predictions):
    """A peer's independent predictions of the same rows: NVIDIA's aiconfigurator 0.12.0
    (measured per-op timings, corrections fitted to this corpus), run by
    benchmarks/serve_peer_aiconfigurator.py and kept in benchmarks/data/. Over the 770 rows both
    tools predict, TTFT median 26.0% (tier 1) against 48.2% (VALIDATION.md, "Side by side with
    aiconfigurator"); on the 104 of this subset's rows it predicts: 22.9% against 44.8%, tier 1
    closer on 81% of them."""
    import json
    from pathlib import Path

    data = Path(__file__).resolve().parents[2] / "benchmarks/data/aiconfigurator_serving.json"
    doc = json.loads(data.read_text())
    assert doc["aiconfigurator"] == "0.12.0"
    aic = {r["id"]: r["aic_ttft_s"] for r in doc["rows"] if "aic_ttft_s" in r}
    both = [(r, t) for r, t, _p in subset_predictions if r.id in aic]
    assert len(both) == 104
    ours = np.array([abs(t - r.ttft_s) / r.ttft_s for r, t in both])
    peer = np.array([abs(aic[r.id] - r.ttft_s) / r.ttft_s for r, _t in both])
    assert np.median(ours) < np.median(peer), (np.median(ours), np.median(peer))
    assert np.mean(ours < peer) > 0.5


def test_inferencex_layouts_recorded_with_gpus_tp_x_ep_are_undone():
    """Repeated measurements agree on the layout once the GPU count is divided by EP, and
    InferenceX's gpt-oss TensorRT-LLM runs come out with EP = TP (its search space)."""
    import csv

    with open(default_csv(), newline="") as f:
        raw = list(csv.DictReader(f))
    by_key: dict = {}
    conflicts = 0
    for x in raw:
        if x["mode"] != "agg":
            continue
        lay = (*inferencex_layout(x)[:2], x["moe_ep_size"])
        first = by_key.setdefault(measurement_key(x), (x["tp_size"], lay))
        conflicts += first[0] != x["tp_size"]
        assert first[1] == lay, x["id"]
    assert conflicts == 15  # the TP 8 vs TP 64 repeats, now equal
    rows = [r for r in load_rows() if r.deployment is not None]
    oss = [r for r in rows if r.backend == "trtllm" and "gpt-oss" in r.model
           and "GPU count divided by EP" in r.note]  # fmt: skip
    assert len(oss) == 35
    for r in oss:
        rep = r.deployment.replica
        assert rep.tp == rep.ep and rep.tp * rep.dp_attention <= 8


def test_inferencex_rows_run_the_engine_limits_its_scripts_set(rows):
    """TensorRT-LLM (chunked prefill off) takes whole prompts, so its token budget must hold a
    whole prompt plus every running decode; InferenceX's DeepSeek-R1 script sizes it exactly so
    (ceil64(C + ISL + 64)); SGLang's DeepSeek-R1 runs prefill chunks of 32768; vLLM keeps 8192."""
    ix = [r for r in rows if r.deployment is not None and r.mode == "agg" and r.range_ratio < 1]
    assert ix
    for r in ix:
        rep = r.deployment.replica
        if r.backend == "trtllm":
            assert rep.scheduler == "orca"
            assert rep.max_num_batched_tokens >= r.isl + r.concurrency
        elif r.backend == "sglang":
            assert rep.max_num_batched_tokens == 32768
        else:
            assert (rep.scheduler, rep.max_num_batched_tokens) == ("vllm", 8192)
    assert inferencex_engine_limits("trtllm", "deepseek-ai/DeepSeek-R1", 1024, 4) == {
        "max_num_batched_tokens": 1152,  # (4 + 1024 + 64) rounded up to 64
        "scheduler": "orca",
        "adp_balance_timeout_iters": 60,  # its attention_dp_config (acts only with attention DP)
    }


@pytest.mark.parametrize(
    "measured,kernel",
    [
        ("2025-11-02", "marlin"),  # vllm-openai v0.10.2: no triton_kernels, Marlin fallback
        ("2025-11-20", "marlin"),  # v0.11.0 (from 2025-11-04): still no triton_kernels
        ("2025-12-05", "triton-mxfp4"),  # v0.11.2: triton_kernels installed, Triton on SM90
        ("2025-12-08", "triton-mxfp4"),
        ("2025-12-31", "triton-mxfp4"),
        ("2026-01-02", "marlin"),  # v0.13.0 with VLLM_MXFP4_USE_MARLIN=1
        ("2026-03-27", "marlin"),
    ],
)
def test_inferencex_vllm_gptoss_moe_kernel_follows_the_image(measured, kernel):
    """Which MXFP4 MoE kernel InferenceX's vLLM gpt-oss runs used, by the image of the date
    (`hwtune.serve.published.VLLM_TRITON_MXFP4_SINCE`, `MARLIN_SINCE`)."""
    lim = inferencex_engine_limits("vllm", "openai/gpt-oss-120b", 1024, 4, measured)
    assert lim == {"weight_only_kernel": kernel}
    assert inferencex_engine_limits("vllm", "openai/gpt-oss-120b", 1024, 4, None) == {}


def test_tier3_correction_fitted_to_five_runs_predicts_the_others_better(subset_predictions):
    """Tier 3 (`hwtune.serve.correction`): per engine, model and GPU, maps fitted to five runs
    predict that group's other runs of the subset. Full run (VALIDATION.md, "Tier 3"): TTFT
    15.9%, TPOT 6.0% median held-out error with five fitting runs; tier 1 24.2% / 9.5%. On
    this subset's groups of more than five rows: TTFT 22.6% (tier 1) -> 18.7% (tier 3), TPOT
    5.2% (2026-12-05; 24.5% -> 18.4%, 4.9% before that day's fused norms and TRITON MoE
    launches)."""
    import collections

    from hwtune.serve.correction import held_out_errors

    groups = collections.defaultdict(list)
    for r, t, p in subset_predictions:
        groups[(r.backend, r.model, r.system)].append((r, t, p))
    et, ep, et1 = [], [], []
    for i, (_key, g) in enumerate(sorted(groups.items())):
        a = held_out_errors([t for _r, t, _p in g], [r.ttft_s for r, _t, _p in g], 5, 20, seed=i)
        b = held_out_errors([p for _r, _t, p in g], [r.tpot_s for r, _t, _p in g], 5, 20, seed=i)
        if a.size:
            et.append(a)
            ep.append(b)
            et1 += [abs(t - r.ttft_s) / r.ttft_s for r, t, _p in g]
    t3_ttft, t3_tpot = np.median(np.concatenate(et)), np.median(np.concatenate(ep))
    assert t3_ttft < 0.9 * np.median(et1)  # the correction must beat tier 1 on runs it never saw
    assert t3_ttft < 0.25
    assert t3_tpot < TPOT_TARGET


def test_inferencex_trtllm_deepseek_runs_expert_parallel_over_tp(rows):
    """InferenceX's TensorRT-LLM DeepSeek-R1 script launches --ep_size = TP (since 2025-09-18);
    the 2025-11-02 runs (config 83) record EP 1 and run EP 8 here; SGLang's DeepSeek script
    passes no EP (TP-sharded experts) and keeps EP 1."""
    import csv

    with open(default_csv(), newline="") as f:
        raw = {r["id"]: r for r in csv.DictReader(f)}
    cfg83 = [r for r in rows if "config_id=83;" in raw[r.id]["silicon_data_source"]]
    assert cfg83 and all(raw[r.id]["moe_ep_size"] == "1" for r in cfg83)
    assert all(r.deployment.replica.ep == 8 and "EP 1 -> 8" in r.note for r in cfg83)
    sgl = [r for r in rows if "config_id=81;" in raw[r.id]["silicon_data_source"]]
    assert sgl and all(r.deployment.replica.ep == 1 for r in sgl)


def test_inferencex_trt_gptoss_runs_of_november_2025_are_expert_parallel(rows):
    """InferenceX's TensorRT-LLM gpt-oss-120b script launched with ``--ep_size=$TP`` from
    2025-09-28 to 2025-11-03 (`INFERENCEX_TRT_GPTOSS_EP_TP`): its runs of 2025-11-02, recorded
    with EP 1 at TP 2/4/8, run EP = TP; the December runs keep their recorded layout."""
    import csv

    with open(default_csv(), newline="") as f:
        raw = {r["id"]: r for r in csv.DictReader(f)}
    nov = [r for r in rows if r.deployment is not None and r.backend == "trtllm"
           and "gpt-oss" in r.model and measured_date(raw[r.id]) == "2025-11-02"]  # fmt: skip
    assert len(nov) == 45
    assert all(r.deployment.replica.ep == r.deployment.replica.tp > 1 for r in nov)
    dec = [r for r in rows if r.deployment is not None and r.backend == "trtllm"
           and "gpt-oss" in r.model and measured_date(raw[r.id]) == "2025-12-15"
           and raw[r.id]["tp_size"] == "1"]  # fmt: skip
    assert dec and all(r.deployment.replica.ep == 1 for r in dec)
