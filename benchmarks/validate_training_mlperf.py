"""Cross-vendor check of `hwtune estimate`: MLPerf Training v5.1 Llama 3.1 8B on NVIDIA and AMD,
and Llama 3.1 405B on 256-5,120 GPUs.

    python benchmarks/validate_training_mlperf.py [--print-only]

Reads benchmarks/data/training_mlperf.jsonl (34 ``llama31_8b`` submissions of at most 72 GPUs)
and training_mlperf_405b.jsonl (8 ``llama31_405b`` submissions; both files' figures re-derived
from the MLPerf logs by benchmarks/data/check_training_mlperf.py), writes the
``training-mlperf`` section of VALIDATION.md and the AMD CDNA4 record of
src/hwtune/train/accuracy.json (``by_architecture``: the track record an MI350X or MI355X
estimate prints instead of the shared set's, which holds no AMD run).
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from validate_training import (  # noqa: E402
    DEFAULT_DATA,
    NO_FIT,
    error_stats,
    evaluate,
    write_architecture_record,
    write_section,
)

from hwtune.train.accuracy import ACCURACY_FILE, record_family  # noqa: E402
from hwtune.train.estimator import _estimate  # noqa: E402
from hwtune.train.published import load_published  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "benchmarks" / "data" / "training_mlperf.jsonl"
DATA_405B = ROOT / "benchmarks" / "data" / "training_mlperf_405b.jsonl"
DATA_SCALE = ROOT / "benchmarks" / "data" / "training_mlperf_8b_scale.jsonl"
NEMO_CP2 = "nemo2407-h100-fp8-llama3-8b-8gpu"
"""The shared set's context-parallel run at the same sequence length (Llama 3 8B, CP 2)."""
AMD_RECORD = "cdna4"
"""The architecture whose record these rows write (the MI350X's and MI355X's)."""


def _span(errs: list[float]) -> str:
    return f"{min(errs):+.0%}..{max(errs):+.0%}"


def _med(errs: list[float]) -> str:
    return f"{statistics.median(errs):+.1%}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--data-405b", type=Path, default=DATA_405B)
    ap.add_argument("--data-scale", type=Path, default=DATA_SCALE)
    ap.add_argument("--out", type=Path, default=ROOT / "VALIDATION.md")
    ap.add_argument("--print-only", action="store_true")
    a = ap.parse_args()
    rows, skipped, runs, no_fit = compare(a.data)
    big, big_skipped, big_runs, big_no_fit = compare(a.data_405b)
    wide, wide_skipped, wide_runs, _ = compare(a.data_scale)
    if a.print_only:
        return
    amd = [r for r in rows if r["arch"] == AMD_RECORD]
    write_architecture_record(AMD_RECORD, "benchmarks/validate_training_mlperf.py", a.data, amd)
    text = section(rows, skipped, runs, a.data, no_fit)
    text += section_scale(wide, wide_skipped, wide_runs, rows, runs)
    text += section_405b(big, big_skipped, big_runs, big_no_fit)
    write_section(a.out, "training-mlperf", "\n".join(text))
    print(f"wrote {a.out} and {ACCURACY_FILE}", file=sys.stderr)


def compare(data: Path) -> tuple[list[dict], list[tuple[str, str]], dict, list[tuple]]:
    """The throughput rows of one file (with device and record family), the rows not
    expressible, the loaded runs and the runs the estimate says do not fit; printed."""
    runs = {r.id: r for r in load_published(data)}
    rows, skipped = evaluate(data)
    no_fit = list(NO_FIT)  # evaluate() refills the shared list on every call
    rows = [r for r in rows if r["metric"] == "throughput"]
    for r in rows:
        r["device"] = runs[r["id"]].cluster.device.name
        r["arch"] = record_family(runs[r["id"]].cluster.device.architecture)
        print(f"{r['id']:<66} {r['device']:<15} meas {r['measured']:>8,.0f} "
              f"pred {r['predicted']:>8,.0f} err {r['rel_err']:+.1%}")  # fmt: skip
    st = error_stats([r["rel_err"] for r in rows])
    print(f"{data.name} throughput: n={st['n']} median |err| {st['median']:.1%} p90 "
          f"{st['p90']:.1%} signed median {st['signed_median']:+.1%}; skipped {len(skipped)}")  # fmt: skip
    return rows, skipped, runs, no_fit


def _not_expressible(skipped: list[tuple[str, str]], no_fit: list[tuple]) -> list[str]:
    lines = ["", "Not expressible:", ""]
    lines += [f"- {i}: {why}" for i, why in skipped] or ["- (none)"]
    lines += ["", "The estimate says these do not fit (they ran, so the memory model is off):", ""]
    lines += [f"- {i}: {need:.0f} GiB predicted of {have:.0f}" for i, need, have in no_fit]
    return lines if no_fit else lines + ["- (none)"]


def section(
    rows: list[dict], skipped: list[tuple[str, str]], runs: dict, data: Path, no_fit: list[tuple]
) -> list[str]:
    """The VALIDATION.md section; every figure computed here from ``rows`` or a re-estimate."""
    st = error_stats([r["rel_err"] for r in rows])
    submitters = len({i.split("-")[1] for i in runs})
    lines = [
        "## Training estimator across vendors: MLPerf Training v5.1 Llama 3.1 8B",
        "",
        f"Data: `benchmarks/data/training_mlperf.jsonl`, {len(rows) + len(skipped)} submissions of",
        "MLCommons Training v5.1's `llama31_8b` benchmark (Llama 3.1 8B pretraining on C4, 8,192-token",
        f"sequences, closed division) on at most 72 GPUs from {submitters} submitters: NVIDIA H100,",
        "H200, B200, B300, GB200 and GB300 systems and AMD MI350X and MI355X systems. Layout and",
        "precision from each submission's config files and the configuration its logs print (the",
        "rows' `source.locator`, `precision_detail`, `notes`; what was inferred is in",
        "`inferred_fields`, e.g. Cisco's MI350X run takes AMD's MI350X configuration, whose",
        "logged batch, learning rate and warm-up it matches; every implementation keeps bf16",
        "gradient buffers, `grad_reduce_in_fp32=False`, priced since 2026-12-07: median 15.3% ->",
        "15.9%, the multi-node NVIDIA rows up 5-8 points; measured CDNA4 FP8 GEMM rates and",
        "the B300 at the B200's sustained clock, 2026-12-07, forty-sixth session: 15.9% -> 10.9%,",
        "AMD 14.5% -> 2.6%, B300 23.6% -> 8.5%; the edge bucket group exposed, the same day:",
        "10.9% -> 8.8%); tokens/s per GPU from the logs'",
        "training blocks (the median block over 10 runs, each run's first block left out,",
        "evaluation outside the blocks; the AMD-stack and Cisco H100 logs also print that",
        "throughput, and the rows take it), re-derived by",
        "`python benchmarks/data/check_training_mlperf.py --repo <clone of",
        "mlcommons/training_results_v5.1>` (every row within 0.03% of its logs, ~10 s, 2026-12-06).",
        f"Command: `python benchmarks/validate_training_mlperf.py` (Python {platform.python_version()},",
        f"{platform.machine()}). Tier 1, nothing fitted. An MI350X or MI355X estimate prints the AMD",
        "rows' record (`accuracy.json` `by_architecture.cdna4`).",
        "",
        "| accelerator | rows | median abs. error | signed median | range |",
        "|---|---:|---:|---:|---:|",
    ]
    for dev in sorted({r["device"] for r in rows}):
        errs = [r["rel_err"] for r in rows if r["device"] == dev]
        lines.append(f"| {dev} | {len(errs)} | {statistics.median(map(abs, errs)):.1%} | "
                     f"{_med(errs)} | {_span(errs)} |")  # fmt: skip
    for name, pick in (("NVIDIA", lambda r: r["arch"] != AMD_RECORD),
                       ("AMD", lambda r: r["arch"] == AMD_RECORD)):  # fmt: skip
        errs = [r["rel_err"] for r in rows if pick(r)]
        lines.append(f"| all {name} | {len(errs)} | {statistics.median(map(abs, errs)):.1%} | "
                     f"{_med(errs)} | {_span(errs)} |")  # fmt: skip
    lines.append(f"| all | {st['n']} | {st['median']:.1%} | {st['signed_median']:+.1%} | "
                 f"{_span([r['rel_err'] for r in rows])} |")  # fmt: skip
    lines += ["", "| row | GPUs | CP | micro-batch / global batch | measured tokens/s/GPU | "
              "predicted | error |", "|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for r in rows:
        s = runs[r["id"]].strategy
        lines.append(f"| {r['id']} | {s.n_gpus} | {s.cp} | {s.micro_batch} / {s.global_batch} | "
                     f"{r['measured']:,.0f} | {r['predicted']:,.0f} | {r['rel_err']:+.1%} |")  # fmt: skip
    return lines + _not_expressible(skipped, no_fit) + notes(rows, runs)


def _submitter(run_id: str) -> str:
    """A row's submitter and system, without the benchmark and the node count ('-n8')."""
    system = run_id.removeprefix("mlperf51-").split("-llama31-")[0]
    return re.sub(r"-n\d+(?=-|$)", "", system)


def section_scale(
    rows: list[dict], skipped: list[tuple[str, str]], runs: dict, small: list[dict],
    small_runs: dict,
) -> list[str]:  # fmt: skip
    """The 8B submissions beyond 72 GPUs beside the same systems' smaller runs: per-GPU
    throughput measured and predicted as the GPUs grow (the tables and errors computed here;
    the prose's figures from the check script and the one-off trials it names)."""
    if not rows:
        return []
    st = error_stats([r["rel_err"] for r in rows])
    families = {_submitter(r["id"]) for r in rows}
    series = [r for r in small + rows if _submitter(r["id"]) in families]
    all_runs = small_runs | runs

    def gpus(r: dict) -> int:
        return all_runs[r["id"]].strategy.n_gpus

    lines = [
        "",
        "### Llama 3.1 8B beyond 72 GPUs (`training_mlperf_8b_scale.jsonl`)",
        "",
        f"The {len(rows) + len(skipped)} `llama31_8b` submissions on more than 72 GPUs, kept apart",
        "from the table above: Cisco's H100 on 128 GPUs, NVIDIA's GB200 and GB300 NVL72 systems on",
        "512 and the University of Florida's DGX B200 on 128 and 256, all FP8, re-derived from",
        "their logs by the same check script (`--data benchmarks/data/training_mlperf_8b_scale.jsonl`,",
        "all within 0.003%). Each submitter's smaller runs of the same system are listed beside",
        "them: the series is where adding accelerators stops paying, which `hwtune scale` is for.",
        "",
        "| system | GPUs | TP / CP / DP | global batch | measured tokens/s/GPU | predicted | error |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for fam in sorted(families):
        for r in sorted((r for r in series if _submitter(r["id"]) == fam), key=gpus):
            s = all_runs[r["id"]].strategy
            lines.append(f"| {fam} | {s.n_gpus} | {s.tp} / {s.cp} / {s.dp} | {s.global_batch} | "
                         f"{r['measured']:,.0f} | {r['predicted']:,.0f} | {r['rel_err']:+.1%} |")  # fmt: skip
    lines += [
        "",
        f"Median |error| {st['median']:.1%} over the {st['n']} rows beyond 72 GPUs (signed "
        f"{st['signed_median']:+.1%}), against {error_stats([r['rel_err'] for r in small])['median']:.1%} "
        "below: the measured per-GPU rate falls further than the estimate's.",
    ]  # fmt: skip
    for fam in sorted(families):
        fam_rows = sorted((r for r in series if _submitter(r["id"]) == fam), key=gpus)
        lo, hi = fam_rows[0], fam_rows[-1]
        lines.append(
            f"- {fam}: {gpus(lo)} -> {gpus(hi)} GPUs measured "
            f"{hi['measured'] / lo['measured'] - 1:+.0%} per GPU, predicted "
            f"{hi['predicted'] / lo['predicted'] - 1:+.0%}."
        )
    lines += [
        "",
        "What is known of the gap (2026-12-07, forty-sixth session; a helper read NVIDIA's",
        "implementation at the pinned Megatron-LM 25.09-alpha.rc1 and TransformerEngine 2.8):",
        "the steps are short, and part of what they miss is a cost per step that does not",
        "shrink with the work per GPU. Priced since: the edge bucket group",
        "(above). Read but not priced, no size sourced: the FP8 current-scaling amax and scale",
        "kernels beside each cast, a host synchronisation per step (`clip_grad` takes the norm's",
        "`.item()`), the bucketed collectives' per-call latency at 128-256 data-parallel ranks",
        "(small: NVIDIA's `config_common_8b.sh` exports `BUCKET_SIZE=768000000`, ~11 buckets for",
        "8B; one collective per bucket at that size moves the 256-GPU row +38% -> +35%, tried",
        "and not adopted, since the rows would need each submission's bucket size),",
        "and NCCL communicators limited to one thread block for context parallelism and eight",
        "for data parallelism (`conf/nccl/custom_communicator_cta.yaml`). NVIDIA's 512-GPU runs",
        "change layout against their 72-GPU ones (TP 2, CP 4: 1,024 tokens per GPU per step) and",
        "use 64 of each rack's 72 GPUs (`--segment 16` trays), which the estimate's NVL72 domain",
        "does not follow, though a domain of 64 prices the step the same (47.07 and 48.00 ms,",
        "checked 2026-12-07); Cisco's 128-GPU run moves to TP 2 at the same global batch and its logs",
        "put ~35 ms per step outside the step timer. Not fitted; `hwtune scale` at these sizes",
        "should be read as an upper bound on the per-GPU rate.",
    ]
    if skipped:
        lines += ["", "Not expressible:", ""] + [f"- {i}: {why}" for i, why in skipped]
    return lines


def section_405b(
    rows: list[dict], skipped: list[tuple[str, str]], runs: dict, no_fit: list[tuple]
) -> list[str]:
    """The 405B part of the section: the table, errors and scaling figures computed here from
    ``rows`` and a re-estimate; the description of the runs (layouts, block lengths, the check
    script's agreement) is written from the data files and the check script's output."""
    st = error_stats([r["rel_err"] for r in rows])
    lines = [
        "",
        "### Llama 3.1 405B on 256-5,120 GPUs (`llama31_405b`)",
        "",
        f"Data: `benchmarks/data/training_mlperf_405b.jsonl`, the {len(rows) + len(skipped)}",
        "submissions of MLCommons Training v5.1's `llama31_405b` benchmark (Llama 3.1 405B",
        "pretraining, 8,192-token sequences, the Mixtral tokenizer's 32,000-token vocabulary, as",
        "the logs' parameter counts confirm): NVIDIA GB200 and GB300 NVL72 systems (512-5,120",
        "GPUs, NVFP4), Nebius H200 (512 and 1,024 GPUs) and the University of Florida's DGX B200",
        "(256 and 448 GPUs), both FP8. Every run is PP 8 x VP 8 with the embedding and the loss",
        "counted as layers, CP 2, micro-batch 1, no recomputation, sequence parallelism, the",
        "distributed optimizer and bf16 gradient buffers; TP 4 (GB300: 2). Layout, precision and",
        "overlap settings from each submission's configs or the config dump its logs print",
        "(Nebius); throughput from the logs as above (3 runs each), except NVIDIA's 2,560- and",
        "5,120-GPU runs, whose later blocks hold 15-20 steps and end seconds after their last",
        "step: those are taken per step (the rows' `method: step_time`; the check script does",
        "both, all 8 within 0.13%). Tier 1, nothing fitted.",
        "",
        "| row | GPUs | accelerator | TP / CP | global batch | measured tokens/s/GPU | "
        "predicted | error |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]  # fmt: skip
    for r in rows:
        s = runs[r["id"]].strategy
        lines.append(f"| {r['id']} | {s.n_gpus} | {r['device']} | {s.tp} / {s.cp} | "
                     f"{s.global_batch} | {r['measured']:,.0f} | {r['predicted']:,.0f} | "
                     f"{r['rel_err']:+.1%} |")  # fmt: skip
    lines += ["", f"Median |error| {st['median']:.1%} over {st['n']} rows, signed "
              f"{st['signed_median']:+.1%}."]  # fmt: skip
    lines += _not_expressible(skipped, no_fit)
    h200 = [r for r in rows if r["device"].startswith("h200")]
    b200 = [r for r in rows if r["device"] == "b200"]
    if len(h200) != 2 or len(b200) != 2:
        return lines

    def per_gpu_change(pair: list[dict], key: str) -> str:
        lo, hi = sorted(pair, key=lambda r: runs[r["id"]].strategy.n_gpus)
        return f"{hi[key] / lo[key] - 1:+.1%}"

    b = runs[b200[0]["id"]]
    est = _estimate(b.spec, b.cluster, b.strategy)
    tp_share = est.breakdown.get("tp_comm_exposed", 0.0) / est.step_time_s
    return lines + [
        "",
        "What the rows say:",
        "",
        f"- **H200 (Nebius): {_span([r['rel_err'] for r in h200])}.** NeMo 25.01 with",
        "  Transformer Engine's userbuffers overlapping the TP communication (the config dump's",
        "  `ub_tp_comm_overlap: true`, read by the loader) and no CUDA graphs.",
        f"- **B200 (University of Florida): {_span([r['rel_err'] for r in b200])},** the",
        "  direction and size of the Blackwell record (Megatron-Bridge's B200/GB200 rows,",
        "  `validate_training_blackwell.py`). These runs leave TP overlap off (the config's",
        f"  `TP_COMM_OVERLAP` is commented out), which the estimate prices as {tp_share:.0%} of the",
        "  step of exposed TP communication.",
        f"- **Scaling: 512 -> 1,024 H200s measured {per_gpu_change(h200, 'measured')} per GPU,",
        f"  predicted {per_gpu_change(h200, 'predicted')}; 256 -> 448 B200s measured",
        f"  {per_gpu_change(b200, 'measured')}, predicted {per_gpu_change(b200, 'predicted')}.**",
        "  The H200 pair keeps its global batch, so twice the data-parallel ranks halve the",
        "  micro-batches per pipeline (144 -> 72) and double the bubble's share; the B200 pair",
        "  grows its global batch with the ranks (144 micro-batches each), so only the",
        "  data-parallel traffic changes, and the estimate's per-GPU rate barely moves.",
    ]


def notes(rows: list[dict], runs: dict) -> list[str]:
    """What the rows say."""
    by = {r["id"]: r for r in rows}
    amd = [r["rel_err"] for r in rows if r["device"] == "mi355x"]
    mi350 = [r["rel_err"] for r in rows if r["device"] == "mi350x"]
    one_node = [r["rel_err"] for r in rows
                if r["arch"] == "blackwell" and runs[r["id"]].strategy.cp == 1]  # fmt: skip
    cp2 = [r["rel_err"] for r in rows if runs[r["id"]].strategy.cp == 2]
    uf = "mlperf51-university-of-florida-hpg-dgxb200-n{}-llama31-8b-fp8-{}gpu"
    n2, n4 = by[uf.format(2, 16)], by[uf.format(4, 32)]
    record = json.loads(ACCURACY_FILE.read_text())["by_architecture"]["blackwell"]["classes"]
    bw = record["megatron"]["signed_median"]
    run4 = runs[n4["id"]]
    est4 = _estimate(run4.spec, run4.cluster, run4.strategy)
    cp_share = est4.breakdown.get("cp_comm_exposed", 0.0) / est4.step_time_s
    dp_share = est4.breakdown.get("dp_comm_exposed", 0.0) / est4.step_time_s
    nemo = next(r for r in load_published(DEFAULT_DATA) if r.id == NEMO_CP2)
    nemo_err = (_estimate(nemo.spec, nemo.cluster, nemo.strategy).tokens_per_s_per_gpu
                / nemo.targets["tokens_per_s_per_gpu"] - 1)  # fmt: skip
    return [
        "",
        "What the rows say:",
        "",
        "- **AMD within 10%, NVIDIA too fast.** The NVIDIA rows are predicted faster than",
        f"  measured ({_span([r['rel_err'] for r in rows if r['arch'] != AMD_RECORD])}), the",
        f"  MI355X rows at {_span(amd)}, the MI350X rows at {_span(mi350)}. The CDNA4 FP8 GEMM",
        "  rates are measured ones since 2026-12-07 (`gemm_efficiency_fp8` 0.62 for the MI355X",
        "  from AMD's CDNA4 FP8 GEMM blog, hipBLASLt 8192^3; 0.58 for the MI350X and its bf16",
        "  0.55 from HipKittens' benchmark files, UNCERTAIN); before, both parts took the MI300X's",
        "  0.44 and the MI355X rows were -19%..-14%, the MI350X rows -7%..-4%. Nothing was fitted.",
        f"- **Blackwell, one node or two, no context parallelism: {_span(one_node)}** (median",
        f"  {_med(one_node)}), the direction and size of the Megatron-Bridge Blackwell record",
        f"  (signed median {bw:+.1%}, `validate_training_blackwell.py`): both suites ran NeMo /",
        "  Megatron-Core with Transformer Engine FP8 current scaling.",
        f"- **One micro-batch per step on 32-72 GPUs (the context-parallel runs): {_span(cp2)}.**",
        f"  The same University of Florida DGX B200 system measured {n2['measured']:,.0f}",
        f"  tokens/s/GPU on 2 nodes (CP 1, micro-batch 2) and {n4['measured']:,.0f} on 4 (CP 2,",
        f"  micro-batch 1): {n4['measured'] / n2['measured'] - 1:+.0%}; the estimate goes",
        f"  {n2['predicted']:,.0f} -> {n4['predicted']:,.0f} ({n4['predicted'] / n2['predicted'] - 1:+.0%}).",
        "  Those runs take one 8,192-token sequence per GPU pair and one micro-batch per step",
        "  (global batch 16-36), so the data-parallel gradient and parameter traffic overlaps most",
        f"  of the step: in the 4-node estimate it costs {dp_share:.0%} of the step: the slowdown of",
        "  the compute it overlaps (`estimator.OVERLAP_SLOWDOWN`), and since 2026-12-07 the",
        "  bucket group Megatron-Core reduces after the backward and gathers before the forward,",
        "  which with fp8 weights holds every 16-bit parameter, embedding and output head both",
        "  (`estimator.edge_bucket_params`; +26% -> +19% on these rows, 10.9% -> 8.8% on all; exposed",
        f"  context-parallel communication {cp_share:.1%}). CP 2 at 8,192 tokens by itself is priced",
        "  well elsewhere: NeMo 24.07's Llama 3 8B on 8 H100 at CP 2 (the shared set,",
        f"  `{NEMO_CP2}`) is {nemo_err:+.1%}.",
    ]


if __name__ == "__main__":
    main()
