"""Published serving measurements (``shared/validation/serving_measured.csv``) as simulator runs.

Each row is a benchmark at a fixed client concurrency with nominal input and output lengths. It
becomes a closed-loop workload of ``REQUESTS_PER_CLIENT`` x concurrency requests (``vllm bench
serve --max-concurrency C --num-prompts 10C``, the InferenceMAX/aiconfigurator sweep convention;
all requests count, the first wave included) on the row's layout and precision.

Assumptions, the same for every row (none is tuned to a row):
- Empty ``precision`` (the TensorRT-LLM Llama-3.1-8B sweep) means the checkpoint's bf16.
- KV cache in fp8 for TensorRT-LLM fp8 rows (its quantized checkpoints ship fp8 KV scales and
  aiconfigurator's default ``kvcache_quant_mode`` for them is fp8), bf16 otherwise (vLLM and
  SGLang default ``kv_cache_dtype=auto``, the model dtype).
- Engine limits: ``max_num_batched_tokens`` 8192 (vLLM V1 default on H100/H200-class GPUs,
  TensorRT-LLM ``max_num_tokens`` default 8192, SGLang ``chunked_prefill_size`` 8192), and
  ``max_num_seqs`` at least the concurrency (benchmark servers are started with a batch limit
  that admits every client: 256 by default, raised otherwise). Disaggregated rows: prefill
  workers take ``prefill_batch_size`` prompts per attention-DP rank; decode workers admit
  ``max(256, decode_batch_size)`` sequences per attention-DP rank, because for these rows
  ``decode_batch_size`` is not an engine limit but concurrency / (workers x attention DP), and
  ``prefill_batch_size`` 1 is a default, both written by aiconfigurator's InferenceX adapter
  (``src/aiconfigurator/sdk/config_adapter/inferencex.py``: "InferenceX disaggregated prefill
  batch defaults to 1 unless explicitly overridden"); the decode engines that InferenceX ran
  were configured with larger limits (e.g. NVIDIA/srt-slurm
  ``recipes/trtllm/h200/1k1k/stp/c4_ctx1_gen9_tep8_batch256_eplb0_mtp0.yaml``, the recipe of
  the 36-client cfg303 row: decode ``max_batch_size: 256``).
- Lengths: fixed, except for rows measured by InferenceX (see `is_inferencex`): its client
  draws input and output lengths uniformly in [0.8 L, L] (``RANDOM_RANGE_RATIO: 0.8`` in
  SemiAnalysisAI/InferenceX ``.github/workflows/benchmark-tmpl.yml`` and
  ``benchmark-multinode-tmpl.yml``, ``random-range-ratio: 0.8`` in ``full-sweep-tmpl.yml`` at
  its 2025-10-29 runs; srt-slurm sa-bench's default), see
  `hwtune.serve.request.range_ratio_lengths`. Its requests are ``--num-prompts 10C`` after a
  separate warm-up run of 2C, so the measured run starts with a burst of C, as simulated.
- Overlap scheduling (`ReplicaConfig.overlap_schedule`) as each engine ran it (`overlap_schedule`):
  TensorRT-LLM's aggregated and decode workers and SGLang always, vLLM with InferenceX's
  ``async-scheduling: true`` or from v0.14 on.
- One measurement, one row: the data's InferenceX exports overlap (164 rows repeat an earlier
  row's measurement, see `measurement_key`); a repeat is listed, not expressed.

The aggregated rows measured by aiconfigurator's own harness (not the InferenceX ones, which run
InferenceX's engine settings) run the engine config that aiconfigurator's generator writes for
the row's ``batch_size`` (`aic_engine_limits`; ``engine="aiconfigurator"``, the default): these
rows are its gap analysis (``source_file=/.../aic-auto-gap-analysis/...``), which deploys a
generated config and benchmarks it (the ``eval`` pipeline, 961028348: generate, deploy with
Dynamo, genai-perf), and their ``batch_size`` is that config's batch, apart from the client
concurrency (`aic_attention_dp`). ``engine="defaults"`` gives them the engines' own defaults
instead (the assumptions above), a what-if.
"""

from __future__ import annotations

import csv
import math
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

from hwtune.errors import HwtuneInputError
from hwtune.hardware.catalog import get_device
from hwtune.model.catalog import get_model
from hwtune.serve.config import Deployment, ReplicaConfig
from hwtune.serve.engines import (
    EAGER_PREFILL_ENGINES,
    kernel_fields,
    memory_fields,
    overlap_by_default,
    version_tuple,
)
from hwtune.serve.request import Workload, closed_loop, fixed_lengths, range_ratio_lengths

REQUESTS_PER_CLIENT = 10
INFERENCEX_RANGE_RATIO = 0.8
"""InferenceX's ``RANDOM_RANGE_RATIO`` (see the module docstring)."""
DISAGG_DECODE_MIN_SEQS = 256
"""Decode-worker sequences per attention-DP rank at least (see the module docstring)."""
SYSTEMS = {"h100_sxm": "h100-sxm-80gb", "h200_sxm": "h200-sxm-141gb"}
ENGINES: tuple[str, ...] = ("aiconfigurator", "defaults")


def overlap_schedule(row: dict, role: str = "agg") -> bool:
    """Whether the engine of a row formed each batch while the previous step ran
    (`ReplicaConfig.overlap_schedule`); ``role``: "agg", "prefill" or "decode".

    - TensorRT-LLM (PyTorch backend): on by default (``disable_overlap_scheduler: false``); the
      configs behind these rows keep it for aggregated and decode workers and turn it off for
      prefill workers: aiconfigurator's generator (``cli/backends/trtllm.py`` at 961028348, the
      eval pipeline of the 1.0.0rc3 sweeps: ``agg_config["disable_overlap_scheduler"] = False``,
      prefill True, decode False; the same in ``generator/rule_plugin/trtllm.rule`` since), and
      InferenceX's TensorRT-LLM scripts do not set it.
    - SGLang: on by default since v0.4 (the overlap scheduler); neither InferenceX's scripts nor
      aiconfigurator's templates pass ``--disable-overlap-schedule``.
    - vLLM: InferenceX's vLLM scripts for H100 and H200 write ``async-scheduling: true`` into
      their config (Llama-3.1-70B and gpt-oss-120b, 2025-10 to 2026-01; later images schedule
      asynchronously by default); otherwise on from
      `hwtune.serve.engines.VLLM_ASYNC_DEFAULT_SINCE`.
    """
    backend = row["backend"]
    if backend == "trtllm":  # the engine's default, off for prefill workers by the configs
        return role != "prefill" and overlap_by_default(backend)
    if backend == "sglang":
        return overlap_by_default(backend)
    if backend == "vllm":
        if is_inferencex(row):
            return True
        version = version_tuple(row.get("backend_version"))  # none recorded: off
        return version is not None and overlap_by_default(backend, version)
    return False


AIC_EXTRA_TOKENS = 1500
"""Token headroom of aiconfigurator's generated engine configs for an aggregated worker:
``max_num_tokens = max_batch_size + isl + 1500`` with ``max_batch_size`` = the row's batch size
(ai-dynamo/aiconfigurator: ``src/aiconfigurator/cli/backends/trtllm.py`` at the first public
commit, 2025-08, and ``src/aiconfigurator/generator/backends/trtllm.py``, 2025-10, for
TensorRT-LLM, whose template also leaves ``enable_chunked_prefill`` at false;
``generator/rule_plugin/vllm.rule`` (2025-12, passed as ``--max-num-batched-tokens`` since
2026-01) for vLLM; ``generator/rule_plugin/sglang.rule`` (95ddf241a, 2025-12-04):
``max_prefill_tokens = isl + 1500``, with ``enable_mixed_chunk`` since fa895ffb1, 2026-01-19,
for SGLang)."""


def aic_engine_limits(backend: str, isl: int, batch: int) -> dict[str, object]:
    """`ReplicaConfig` fields of aiconfigurator's generated aggregated-worker config (see
    `AIC_EXTRA_TOKENS`): ``max_num_seqs`` = batch size, the token budget ``batch + isl + 1500``
    (SGLang: ``isl + 1500``, its ``max_prefill_tokens``; with ``--enable-mixed-chunk`` the
    running decodes take their tokens out of it, as this budget counts them), and for
    TensorRT-LLM whole prompts only (chunked prefill off: the ``orca`` policy)."""
    if batch < 1 or isl < 1:
        raise HwtuneInputError("batch_size", batch, "a positive batch size and input length")
    extra = 0 if backend == "sglang" else batch
    kw: dict[str, object] = {
        "max_num_seqs": batch,
        "max_num_batched_tokens": extra + isl + AIC_EXTRA_TOKENS,
    }
    if backend == "trtllm":
        kw["scheduler"] = "orca"
    return kw


INFERENCEX_ADP_BALANCE_TIMEOUT = 60
"""``timeout_iters`` of the ``attention_dp_config`` that InferenceX's TensorRT-LLM DeepSeek-R1
H200 script writes when DP_ATTENTION is true (``dsr1_fp8_h200_trt*.sh``, 2025-11 to 2026-01),
with ``enable_balance: true`` and ``batching_wait_iters: 0``."""

MARLIN_SINCE = "2026-01-02"
"""InferenceX's vLLM gpt-oss scripts for H100 and H200 export ``VLLM_MXFP4_USE_MARLIN=1`` since
this date (SemiAnalysisAI/InferenceX commit 4e52ed4c6, "Update vLLM version to v0.13.0 for NVIDIA
configs"): the MXFP4 experts run vLLM's fused Marlin MoE (`hwtune.cost.quantized_gemm`)."""

VLLM_TRITON_MXFP4_SINCE = "2025-12-05"
"""From this date until `MARLIN_SINCE` InferenceX ran gpt-oss on ``vllm/vllm-openai:v0.11.2``
(commit 25506e87c, "Upgrade vLLM to v0.11.2", 2025-12-05), whose image installs OpenAI's
``triton_kernels`` (vLLM PR #27370, merged 2025-10-22: the dependency added to
``requirements/cuda.txt`` because "users have to install triton_kernels manually"), so on Hopper
``get_mxfp4_backend`` picks the Triton MoE (``matmul_ogs``; ``weight_only_kernel``
"triton-mxfp4"). Before it, on v0.10.2 and v0.11.0 (2025-11-04, commit 7103d6608), there was no
``triton_kernels`` and the same function fell back to Marlin (its code in the v0.10.2 wheel: "If
FlashInfer is not available, try either Marlin or Triton", Marlin when
``not has_triton_kernels()``; vLLM PR #27523: the dependency "caused SM90 to default to Triton
instead of Marlin")."""


INFERENCEX_70B_BATCH_WAIT: dict[str, object] = {
    "batch_wait_timeout_iters": 20, "batch_wait_max_tokens_ratio": 0.9}  # fmt: skip
"""TensorRT-LLM batch waiting in InferenceX's Llama-3.1-70B H200 script for 1k/1k below TP 8
(``70b_fp8_h200_trt_slurm.sh`` as of 2025-10-29, the rows' date, parent of commit 2582bce40:
"For 1k/1k, use batch_wait_max_tokens_ratio and batch_wait_timeout_iters will improve the
performance", ``batch_wait_max_tokens_ratio: 0.9``, ``batch_wait_timeout_iters: 20``; added by
1b563c858, 2025-09-18, "Update 70B TRT To use latest container and flags")."""


def inferencex_engine_limits(
    backend: str,
    model_path: str,
    isl: int,
    conc: int,
    measured: str | None = None,
    osl: int | None = None,
    tp: int | None = None,
) -> dict[str, object]:
    """`ReplicaConfig` fields of the engines InferenceX launched for its single-node H100/H200 runs,
    at the rows' measurement dates (2025-10 to 2026-03; SemiAnalysisAI/InferenceX ``benchmarks/``):

    - TensorRT-LLM DeepSeek-R1 with attention DP balances context requests over the ranks
      (``INFERENCEX_ADP_BALANCE_TIMEOUT``; the field acts only when ``dp_attention`` > 1).
    - TensorRT-LLM never enables chunked prefill (its default), so a step takes whole prompts
      (the ``orca`` policy) within ``--max_num_tokens``: DeepSeek-R1 ``ceil64(C + ISL + 64)``
      (``dsr1_fp8_h200_trt_slurm.sh``; a floor of 8192 came only in 2026-02), gpt-oss-120b 20000
      (``gptoss_fp4_h200_trt_slurm.sh``, whose ``moe_config: backend: TRITON`` runs the MXFP4
      experts in triton_kernels: ``weight_only_kernel`` "triton-mxfp4"), Llama-3.1-70B 16384
      (``70b_fp8_h200_trt_slurm.sh``), whose 1k/1k runs below TP 8 (``osl``, ``tp``) also
      wait for batches (`INFERENCEX_70B_BATCH_WAIT`).
    - SGLang for DeepSeek-R1: ``--chunked-prefill-size 32768 --max-prefill-tokens 32768``
      (``dsr1_fp8_h200.sh``).
    - vLLM: ``max-num-batched-tokens: 8192`` and ``--max-num-seqs C``: the defaults used here;
      gpt-oss-120b's MXFP4 experts run by the ``measured`` date (ISO): the Marlin MoE kernel
      before `VLLM_TRITON_MXFP4_SINCE` and from `MARLIN_SINCE` on, the Triton MoE in between.
    Anything else keeps the module's defaults (empty dict)."""
    m = model_path.lower()
    if backend == "trtllm":
        if "deepseek" in m:
            # with attention DP its script adds attention_dp_config: enable_balance: true,
            # timeout_iters: 60, batching_wait_iters: 0 (every version 2025-11 to 2026-01)
            return {"max_num_batched_tokens": -(-(conc + isl + 64) // 64) * 64, "scheduler": "orca",
                    "adp_balance_timeout_iters": INFERENCEX_ADP_BALANCE_TIMEOUT}  # fmt: skip
        if "gpt-oss" in m:  # its config: moe_config: backend: TRITON
            return {"max_num_batched_tokens": 20000, "scheduler": "orca",
                    "weight_only_kernel": "triton-mxfp4"}  # fmt: skip
        if "llama-3.1-70b" in m:
            lim: dict[str, object] = {"max_num_batched_tokens": 16384, "scheduler": "orca"}
            if isl == 1024 and osl == 1024 and tp is not None and tp < 8:
                lim |= INFERENCEX_70B_BATCH_WAIT
            return lim
    if backend == "sglang" and "deepseek" in m:
        return {"max_num_batched_tokens": 32768}
    if backend == "vllm" and "gpt-oss" in m and measured is not None:
        triton = VLLM_TRITON_MXFP4_SINCE <= measured < MARLIN_SINCE
        return {"weight_only_kernel": "triton-mxfp4" if triton else "marlin"}
    return {}


INFERENCEX_MTP_ONLY_DAY = "2026-01-14"
"""The day InferenceX measured TensorRT-LLM DeepSeek-R1 on H200 with MTP speculative decoding
and nothing else: its sweep was started by SemiAnalysisAI/InferenceX commit bf3456727 ("Add MTP
Benchmark Support for DeepSeek-R1 TRT", #392, merged 2026-01-14T22:26:18Z), whose
``perf-changelog.yaml`` entry names only the ``dsr1-*-trt-mtp`` config keys; the rows say
``measured=2026-01-14T22:26:21Z``. That day's 21 points (20 in the 2026-03-25 export, one more in
the 2026-04-06 one) are exactly the ``dsr1-fp8-h200-trt-mtp`` search space (1k/1k at 4-64
clients plus 128-256 with attention DP, 1k/8k at 4-128 plus 256 with attention DP, 8k/1k at 4-32
plus 64-256 with attention DP), and their TPOT is 30-40% below the same image's non-MTP runs
(8.6 vs 13.8 ms at 4 clients, 1k/1k)."""

INFERENCEX_MTP_ONLY_POINTS: frozenset[tuple[int, int, int]] = frozenset(
    {(1024, 1024, 128), (1024, 1024, 256), (1024, 8192, 128), (1024, 8192, 256),
     (8192, 1024, 128), (8192, 1024, 256)}
)  # fmt: skip
"""(isl, osl, clients) that ``dsr1-fp8-h200-trt-mtp`` ran and ``dsr1-fp8-h200-trt`` did not, in
the ``.github/configs/nvidia-master.yaml`` of 2026-01-14 to 2026-01-28 (commits bf3456727,
e28c038f8: the non-MTP key stops at 64 clients, 32 plus attention DP at 64 for 8k/1k). A sweep
that ran both keys (e28c038f8, 2026-01-28, "trigger full sweep") measured these points with MTP
only; at the other points it measured both, and a row there is taken as the non-MTP key's."""


def inferencex_spec_decoding(row: dict) -> str:
    """Why a row measured an engine running speculative decoding, or "" when it did not (as far
    as the sources tell). The simulator decodes one token per step; a speculative engine accepts
    a number of draft tokens per step that depends on the data, and for InferenceX's random-token
    prompts it is not published (InferenceX's own guide: "Raw random tokens tank spec-decode
    acceptance", ``.claude/commands/add-model-hardware.md``), so these rows are listed, not
    expressed. The InferenceX database dumps (``db-dump/...``) went through aiconfigurator's
    InferenceX adapter, which refuses speculative configs without explicit draft-length and
    acceptance overrides (``src/aiconfigurator/sdk/config_adapter/inferencex.py``), so only the
    date-named exports can hold such runs: TensorRT-LLM DeepSeek-R1 on H200 from
    ``INFERENCEX_MTP_ONLY_DAY`` on (``INFERENCEX_MTP_ONLY_POINTS``)."""
    if not is_inferencex(row) or row["backend"] != "trtllm" or row["mode"] != "agg":
        return ""
    if "deepseek" not in row["model_path"].lower() or row["system"] != "h200_sxm":
        return ""
    day = measured_date(row)
    if day is None or day < INFERENCEX_MTP_ONLY_DAY:
        return ""
    point = (int(row["isl"]), int(row["osl"]), _concurrency(row))
    if day == INFERENCEX_MTP_ONLY_DAY or point in INFERENCEX_MTP_ONLY_POINTS:
        nextn = 1 if _i(row["attention_dp_size"]) > 1 else 3
        return (f"speculative decoding: InferenceX's dsr1-fp8-h200-trt-mtp run (MTP, {nextn} draft "
                f"token{'s' if nextn > 1 else ''} per step) at an acceptance rate not published "
                "for its random-token prompts")  # fmt: skip
    return ""


_MEASURED = re.compile(r"measured=(\d{4}-\d{2}-\d{2})")


def measured_date(row: dict) -> str | None:
    """The ISO date a row was measured on (its ``silicon_data_source``), if it says."""
    m = _MEASURED.search(row.get("silicon_data_source", ""))
    return m.group(1) if m else None


def default_csv() -> Path:
    """``serving_measured.csv`` in ``$HWTUNE_VALIDATION_DIR`` if set, else in
    ``shared/validation/`` beside the checkout; a path that does not exist when neither has it
    (callers test ``is_file()``)."""
    env = os.environ.get("HWTUNE_VALIDATION_DIR")
    if env:
        return Path(env) / "serving_measured.csv"
    here = Path(__file__).resolve()
    for up in here.parents:
        cand = up / "shared" / "validation" / "serving_measured.csv"
        if cand.is_file():
            return cand
        cand = up.parent / "shared" / "validation" / "serving_measured.csv"
        if cand.is_file():
            return cand
    return here.parents[3].parent / "shared" / "validation" / "serving_measured.csv"


@dataclass(frozen=True)
class Row:
    """One measured point and the deployment that expresses it (or why none does)."""

    id: str
    backend: str
    model: str
    system: str
    mode: str
    isl: int
    osl: int
    concurrency: int
    ttft_s: float
    tpot_s: float
    deployment: Deployment | None
    reason: str = ""
    range_ratio: float = 1.0
    note: str = ""


def _i(v: str, default: int = 1) -> int:
    return int(float(v)) if v not in ("", None) else default


def inferencex_layout(row: dict) -> tuple[int, int, str]:
    """(tp, attention DP, note) of an aggregated row, with the GPU count of InferenceX's
    expert-parallel records undone where it was multiplied by EP.

    aiconfigurator's InferenceX adapter (``sdk/config_adapter/inferencex.py``, ``_worker``)
    derives the worker layout from the record's GPU count: attention TP (or attention DP) =
    GPUs per worker, MoE TP = GPUs / EP. Some exports were made from records whose GPU count
    was TP x EP, which yields MoE TP = EP: DeepSeek-R1 "TP 8, EP 8" appears as ``tp_size`` 64,
    ``moe_tp_size`` 8 (and with attention DP as ``attention_dp_size`` 64), gpt-oss-120b "TP 4,
    EP 4" as 16 / 4. The evidence: 9 measurements appear in both date-named exports, as TP 8 /
    MoE TP 1 / EP 8 in ``2026-03-25.csv`` and as TP 64 / MoE TP 8 / EP 8 in ``2026-04-06.csv``
    (identical TTFT and TPOT); these are single-node runs (8 GPUs per H100/H200 node); and
    InferenceX's ``configs/nvidia-master.yaml`` runs gpt-oss-120b on H200 TensorRT-LLM with "EP=TP"
    at TP 1, 2, 4, 8 (TP 8 only at concurrency 4-8), which these rows match once divided (TP 4 /
    EP 2 in the data is TP 2 / EP 2, 16 / 4 is 4 / 4, 64 / 8 at concurrency 4 and 8 is 8 / 8).
    The signature ``moe_tp_size == moe_ep_size > 1`` with ``tp x attention_dp = moe_tp x
    moe_ep`` marks them; the GPU count is divided by EP (MoE TP becomes 1)."""
    tp, adp = _i(row["tp_size"]), _i(row["attention_dp_size"])
    mtp, mep = _i(row["moe_tp_size"], 0), _i(row["moe_ep_size"], 0)
    if not (is_inferencex(row) and mep > 1 and mtp == mep and tp * adp == mtp * mep):
        return tp, adp, ""
    if adp > 1:
        new_tp, new_adp = tp, adp // mep
    else:
        new_tp, new_adp = tp // mep, adp
    note = (f"GPU count divided by EP {mep}: tp {tp} -> {new_tp}, attention DP {adp} -> "
            f"{new_adp}, MoE TP {mtp} -> 1 (InferenceX record with GPUs = TP x EP)")  # fmt: skip
    return new_tp, new_adp, note


INFERENCEX_TRT_GPTOSS_EP_TP = ("2025-09-28", "2025-11-03")
"""Dates (from, before) when InferenceX's TensorRT-LLM gpt-oss-120b H200 script launched with
``--ep_size=$TP`` (SemiAnalysisAI/InferenceX ffe0b55a7, 2025-09-28, to 17d5e204f, 2025-11-03,
``benchmarks/gptoss_fp4_h200_trt_slurm.sh``; before, ``--ep_size 1``; after, the config's
``EP_SIZE``): its runs of 2025-11-02, recorded with EP 1, ran their experts expert-parallel."""

INFERENCEX_TRT_DSR1_EP_SINCE = "2025-09-18"
"""Since this date InferenceX's TensorRT-LLM DeepSeek-R1 scripts launch with ``EP_SIZE="$TP"``
and ``--ep_size=$EP_SIZE`` (SemiAnalysisAI/InferenceX commit ec90f3fe7, "Update DSR1 TRT-LLM FP4
and add TRT FP8", ``benchmarks/dsr1_fp8_h200_trt_slurm.sh``; later ``nvidia-master.yaml``: "For
all sequence lengths, EP=TP"): the experts run expert-parallel over all the worker's GPUs even
where the record says ``moe_ep_size`` 1 (its config of 2025-11-02, id 83, gave no ``ep``)."""


def inferencex_expert_parallel(row: dict, stage_gpus: int) -> tuple[int, str]:
    """(EP, note) of an aggregated row: `INFERENCEX_TRT_DSR1_EP_SINCE` applied to InferenceX's
    TensorRT-LLM DeepSeek runs recorded with EP 1, `INFERENCEX_TRT_GPTOSS_EP_TP` to its
    gpt-oss ones; the recorded EP otherwise."""
    ep = _i(row["moe_ep_size"])
    day = measured_date(row)
    if not (is_inferencex(row) and row["backend"] == "trtllm" and ep == 1 and stage_gpus > 1
            and day is not None):  # fmt: skip
        return ep, ""
    model = row["model_path"].lower()
    lo, hi = INFERENCEX_TRT_GPTOSS_EP_TP
    if ("deepseek" in model and day >= INFERENCEX_TRT_DSR1_EP_SINCE) or (
        "gpt-oss" in model and lo <= day < hi
    ):
        return stage_gpus, (f"EP 1 -> {stage_gpus}: InferenceX's TensorRT-LLM script of the "
                            "run's date launches with --ep_size equal to TP")  # fmt: skip
    return ep, ""


def row_layout(row: dict) -> tuple[int, int, str]:
    """(tp, attention DP, note) of an aggregated row: `inferencex_layout`, then the MoE layout's
    GPU count where it exceeds the attention layout's.

    aiconfigurator's rows obey ``moe_tp x moe_ep = tp x attention_dp`` (its adapter derives the
    MoE layout from the worker's GPUs; TensorRT-LLM's docs state the same product rule). 19 vLLM
    0.12 rows of Qwen3-235B-A22B-FP8 record ``moe_tp_size`` 2 or 4 with ``tp_size`` 1 or 2 and
    no attention DP; 13 of them would put its 220 GiB of fp8 weights on one 141 GB H200. They are
    read as the worker the MoE layout spans: attention DP = moe_tp x moe_ep / tp (vLLM's
    ``--data-parallel-size`` with the experts sharded over all its GPUs)."""
    tp, adp, note = inferencex_layout(row)
    if note:  # already read as TP x attention DP = EP (MoE TP 1)
        return tp, adp, note
    mtp, mep = _i(row["moe_tp_size"], 0), _i(row["moe_ep_size"], 0)
    moe_gpus = mtp * max(1, mep)
    if mtp and moe_gpus > tp * adp and moe_gpus % tp == 0:
        new_adp = moe_gpus // tp
        note = (f"attention DP {adp} -> {new_adp}: the MoE layout (TP {mtp} x EP {max(1, mep)}) "
                f"spans {moe_gpus} GPUs, tp x attention DP = {tp * adp}")  # fmt: skip
        adp = new_adp
    return tp, adp, note


TRT_FREE_GPU_MEMORY_FRACTION = {"default": 0.9, "harness": 0.7, "gpt-oss": 0.85,
                                "deepseek": 0.75}  # fmt: skip
"""TensorRT-LLM's ``free_gpu_memory_fraction`` (of the memory left after the model) by who ran
the row: the engine's default 0.9 (``KvCacheConfig``; InferenceX's Llama-3.1-70B script sets
none, ``70b_fp8_h200_trt_slurm.sh``; the disaggregated recipes are not in the data);
aiconfigurator's harness 0.7 (``tools/automation/launch_eval.sh``: ``FREE_GPU_MEM_FRAC``,
passed as ``--free_gpu_memory_fraction``, 961028348); InferenceX's gpt-oss-120b 0.85
(``gptoss_fp4_h200_trt_slurm.sh``) and DeepSeek-R1 0.75 (``dsr1_fp8_h200_trt_slurm.sh``)."""


def trt_memory_fraction(row: dict, prefix: str = "") -> float:
    """`TRT_FREE_GPU_MEMORY_FRACTION` for a TensorRT-LLM row (aggregated workers only; the
    disaggregated pools keep the engine's default)."""
    f = TRT_FREE_GPU_MEMORY_FRACTION
    if prefix or row["mode"] != "agg":
        return f["default"]
    if not is_inferencex(row):
        return f["harness"]
    model = row["model_path"].lower()
    for key in ("gpt-oss", "deepseek"):
        if key in model:
            return f[key]
    return f["default"]


def _replica(row: dict, prefix: str, prec: str, kv: str, seqs: int) -> ReplicaConfig:
    """The replica of one role (``prefix`` "", "prefill_" or "decode_") of a row."""
    spec = get_model(row["model_path"])
    dev = get_device(SYSTEMS[row["system"]])
    tp, adp = _i(row[f"{prefix}tp_size"]), _i(row[f"{prefix}attention_dp_size"])
    if not prefix:
        tp, adp, _ = row_layout(row)
    return ReplicaConfig(
        spec, dev, tp=tp, pp=_i(row[f"{prefix}pp_size"]), ep=_i(row[f"{prefix}moe_ep_size"]),
        dp_attention=adp, weight_dtype=prec, kv_dtype=kv, max_num_seqs=max(1, seqs),
        # none of the rows' launch scripts sets SGLang's --enable-piecewise-cuda-graph
        eager_prefill=row["backend"] in EAGER_PREFILL_ENGINES,
        overlap_schedule=overlap_schedule(row, prefix.rstrip("_") or "agg"),
        **memory_fields(row["backend"]), **kernel_fields(row["backend"]),
        **({"gpu_memory_utilization": trt_memory_fraction(row, prefix)}
           if row["backend"] == "trtllm" else {}),
    )  # fmt: skip


def to_row(row: dict, engine: str = "aiconfigurator") -> Row:
    """A CSV row as a `Row`; ``deployment`` None with a ``reason`` when it cannot be expressed.
    ``engine``: "aiconfigurator" (aggregated harness rows with aiconfigurator's generated
    config, `aic_engine_limits` and `aic_attention_dp`) or "defaults" (the engines' defaults, the
    assumptions of the module docstring)."""
    if engine not in ENGINES:
        raise HwtuneInputError("engine", engine, "one of " + ", ".join(ENGINES))
    prec = row["precision"] or "bf16"
    kv = "fp8" if row["backend"] == "trtllm" and prec == "fp8" else "bf16"
    conc = _concurrency(row)
    base = dict(id=row["id"], backend=row["backend"], model=row["model_path"],
                system=row["system"], mode=row["mode"], isl=int(row["isl"]), osl=int(row["osl"]),
                concurrency=conc, ttft_s=float(row["silicon_ttft_ms"]) / 1e3,
                tpot_s=float(row["silicon_tpot_ms"]) / 1e3,
                range_ratio=INFERENCEX_RANGE_RATIO if is_inferencex(row) else 1.0,
                note=row_layout(row)[2] if row["mode"] == "agg" else "")  # fmt: skip
    if "0" in (row["moe_ep_size"], row["prefill_moe_ep_size"], row["decode_moe_ep_size"]):
        return Row(**base, deployment=None, reason="moe_ep_size is 0: not a parallel layout")
    spec = inferencex_spec_decoding(row)
    if spec:
        return Row(**base, deployment=None, reason=spec)
    try:
        if row["mode"] == "agg":
            rep = _replica(row, "", prec, kv, max(256, conc))
            ep, ep_note = inferencex_expert_parallel(row, rep.stage_gpus)
            if ep_note:
                rep = rep.with_(ep=ep)
                base["note"] = "; ".join(x for x in (base["note"], ep_note) if x)
            if is_inferencex(row):
                lim = inferencex_engine_limits(row["backend"], row["model_path"], int(row["isl"]),
                                               conc, measured_date(row), int(row["osl"]),
                                               rep.tp)  # fmt: skip
                rep = rep.with_(**lim) if lim else rep
            elif engine == "aiconfigurator":  # its generated configs, for its own harness's rows
                n, batch = aic_attention_dp(row)
                lim = aic_engine_limits(row["backend"], int(row["isl"]), batch)
                if n > 1:  # per-rank limits, summed over the ranks of the one worker
                    lim = {k: v * n if isinstance(v, int) else v for k, v in lim.items()}
                    lim |= {"tp": rep.tp // n, "dp_attention": n}
                rep = rep.with_(**lim)
            dep = Deployment(rep)
        else:
            missing = [k for k in ("prefill_num_workers", "decode_num_workers") if not row[k]]
            if missing:
                return Row(**base, deployment=None,
                           reason=f"{missing[0]} is empty: the pool sizes are not in the data")  # fmt: skip
            # batch sizes are per attention-DP rank; max_num_seqs is per replica
            dbatch = max(DISAGG_DECODE_MIN_SEQS, _i(row["decode_batch_size"], 256))
            dseqs = dbatch * _i(row["decode_attention_dp_size"])
            pseqs = _i(row["prefill_batch_size"], 1) * _i(row["prefill_attention_dp_size"])
            d = _replica(row, "decode_", prec, kv, dseqs)
            p = _replica(row, "prefill_", prec, kv, max(1, pseqs))
            dep = Deployment(d, replicas=_i(row["decode_num_workers"]), prefill=p,
                             prefill_replicas=_i(row["prefill_num_workers"]))  # fmt: skip
        from hwtune.serve.memory import replica_memory

        replica_memory(dep.replica)
        if dep.prefill is not None:
            replica_memory(dep.prefill)
    except HwtuneInputError as e:
        return Row(**base, deployment=None, reason=str(e))
    return Row(**base, deployment=dep)


_DATED_EXPORT = re.compile(r"source_file=\d{4}-\d{2}-\d{2}\.csv")


def is_inferencex(row: dict) -> bool:
    """Whether a CSV row was measured by InferenceX (SemiAnalysis): its ``silicon_data_source``
    is a dump of the InferenceX database (``db-dump/...``) or one of the date-named exports
    (``source_file=2026-03-25.csv``, ``2026-04-06.csv``). ai-dynamo/aiconfigurator added the
    date-named files with "older bench data" (commit ed133e9d1, 2026-05-05); they cover
    InferenceX's matrix (1k/1k, 1k/8k, 8k/1k at concurrency 4-64 and more), their ``image``
    field is missing on exactly the runs before 2025-12-08 (the InferenceX-app schema: "null
    for runs before 2025-12-08"), and 71 of their measurements equal db-dump ones to the last
    digit. The other rows (``source_file=/.../aic-auto-gap-analysis/...``) come from
    aiconfigurator's own harness, its gap analysis of generated configs (fixed lengths;
    genai-perf in the 2025 sweeps, aiperf later)."""
    src = row.get("silicon_data_source", "") or ""
    return src.startswith("db-dump") or _DATED_EXPORT.match(src) is not None


def aic_attention_dp(row: dict) -> tuple[int, int]:
    """(attention-DP ranks, engine batch per rank) of an aggregated deployment of
    aiconfigurator's harness. Its rows keep the generated config's ``batch_size`` apart from the
    client concurrency (``silicon_concurrency=`` in ``silicon_data_source``): equal for one
    attention group; the batch times the ranks where the worker runs attention data-parallel
    over its ``tp_size`` GPUs, which the rows do not mark in ``attention_dp_size`` (gpt-oss-120b
    on TensorRT-LLM 1.3.0rc1: batch 48 at 192 clients on TP 4, batch 160 at 320 on TP 2; in
    aiconfigurator's own ``silicon_sample.csv``, DeepSeek-R1 NVFP4 on B200: batch 56 at 224
    clients on TP 4, batch 12 at 96 on TP 8). Any other concurrency is one attention group
    (rank count 1) taking it all."""
    conc = _concurrency(row)
    batch = _i(row.get("batch_size") or "", 0)
    tp = _i(row.get("tp_size") or "", 1)
    if batch >= 1 and conc > batch and conc % batch == 0 and tp % (conc // batch) == 0:
        return conc // batch, batch
    return 1, conc


def _concurrency(row: dict) -> int:
    src = row.get("silicon_data_source", "") or ""
    if "silicon_concurrency=" in src:
        return int(src.split("silicon_concurrency=")[1].split(";")[0])
    return _i(row["batch_size"], 0) or _i(row["decode_batch_size"], 0)


def measurement_key(row: dict) -> tuple[object, ...]:
    """What identifies one measurement: engine, system, mode, lengths, client concurrency and
    the measured TTFT and TPOT to 14 significant figures (the exports print the same double
    with 16 or with 17 digits, e.g. 19.25209975761523 and 19.252099757615234; two real
    measurements do not agree to 14). The model name is left out because the exports name the
    same DeepSeek-R1 runs ``deepseek-ai/DeepSeek-V3`` (the architecture) in one file and
    ``deepseek-ai/DeepSeek-R1`` in another. Rows with the same key are one benchmark run
    exported more than once: 201 in the data (164 printed alike to the last digit: 88 differ
    only in that name, 63 in nothing, 9 in ``tp_size`` (8 vs 64 for DeepSeek-R1 on one 8-GPU
    node), 4 in the derived batch columns; 37 more printed with one digit more)."""
    keys = ("backend", "system", "mode", "isl", "osl")
    times = tuple(f"{float(row[k]):.14g}" for k in ("silicon_ttft_ms", "silicon_tpot_ms"))
    return (*(row[k] for k in keys), *times, _concurrency(row))


def load_rows(path: str | Path | None = None, engine: str = "aiconfigurator") -> list[Row]:
    """Every CSV row as a `Row`. A row that repeats an earlier row's measurement (see
    `measurement_key`) is kept but not expressed, with the earlier row named as the reason, so
    that one run counts once; where the two copies record different layouts (9 DeepSeek-R1
    rows: TP 8 in one export, TP 64 in the other) the first is used."""
    seen: dict[tuple[object, ...], str] = {}
    out: list[Row] = []
    with open(path or default_csv(), newline="") as f:
        for raw in csv.DictReader(f):
            key = measurement_key(raw)
            first = seen.setdefault(key, raw["id"])
            row = to_row(raw, engine)
            if first != raw["id"]:
                row = replace(row, deployment=None, reason=f"repeats the measurement of {first}")
            out.append(row)
    return out


def with_profile(rows: list[Row], path: str | Path) -> list[Row]:
    """The expressible rows whose GPU the `hwtune bench` profile at ``path`` was measured on,
    with that profile's curves attached to their devices (tier 2:
    `hwtune.hardware.profile.attach_profile`); rows on other GPUs are left out."""
    from hwtune.hardware.profile import attach_profile, load_profile_file

    name = str(load_profile_file(path)[0].get("name", "")).lower()
    out: list[Row] = []
    cache: dict[str, object] = {}
    for r in rows:
        dep = r.deployment
        if dep is None:
            continue
        dev = dep.replica.device
        if name not in {dev.name.lower(), *(a.lower() for a in dev.aliases)}:
            continue
        tier2 = cache.setdefault(dev.name, attach_profile(dev, path))
        upd: dict[str, object] = {"replica": dep.replica.with_(device=tier2)}
        if dep.prefill is not None:
            upd["prefill"] = dep.prefill.with_(device=tier2)
        out.append(replace(r, deployment=replace(dep, **upd)))
    return out


def row_workload(row: Row, requests_per_client: int = REQUESTS_PER_CLIENT) -> Workload:
    """The closed loop a row is simulated with: its concurrency, ``requests_per_client`` x that
    many requests, fixed lengths or its client's sampled ones (`Row.range_ratio`)."""
    n = max(1, requests_per_client) * row.concurrency
    if row.range_ratio < 1:
        p, o = range_ratio_lengths(n, row.isl, row.osl, row.range_ratio)
    else:
        p, o = fixed_lengths(n, row.isl, row.osl)
    return closed_loop(row.concurrency, p, o)


def predict(row: Row, requests_per_client: int = REQUESTS_PER_CLIENT) -> tuple[float, float]:
    """(mean TTFT, mean TPOT) seconds predicted for an expressible row."""
    from hwtune.serve.metrics import per_request
    from hwtune.serve.simulator import simulate

    assert row.deployment is not None
    res = simulate(row.deployment, row_workload(row, requests_per_client))
    pr = per_request(res)
    tpot = pr["tpot"][~(pr["tpot"] != pr["tpot"])]
    return float(pr["ttft"].mean()), float(tpot.mean()) if tpot.size else math.nan


def _predict_star(args: tuple[Row, int]) -> tuple[str, float, float, float, str]:
    import time

    t = time.perf_counter()
    try:
        ttft, tpot = predict(*args)
    except HwtuneInputError as e:  # not picklable across processes: return its text
        return args[0].id, math.nan, math.nan, time.perf_counter() - t, str(e)
    return args[0].id, ttft, tpot, time.perf_counter() - t, ""


def predict_all(
    rows: list[Row], requests_per_client: int = REQUESTS_PER_CLIENT, processes: int | None = None
) -> dict[str, tuple[float, float, float, str]]:
    """(TTFT, TPOT, wall seconds, error) for every expressible row, in worker processes."""
    import multiprocessing as mp

    todo = [(r, requests_per_client) for r in rows if r.deployment is not None]
    ctx = mp.get_context("spawn")
    with ctx.Pool(processes) as pool:
        out = pool.map(_predict_star, todo, chunksize=1)
    return {i: (a, b, w, e) for i, a, b, w, e in out}
