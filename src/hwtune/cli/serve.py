"""`hwtune serve` (simulate serving) and `hwtune serve plan` (deployment search under SLOs).

Registered in `hwtune.cli.main` with ``app.add_typer(serve_app, name="serve")``; also runnable
as ``python -m hwtune.cli.serve``. Parse, call the library, render: no formulas here.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from hwtune.cli.parsing import fail, output_path
from hwtune.errors import HwtuneInputError
from hwtune.serve.accuracy import accuracy_for as serve_accuracy
from hwtune.serve.accuracy import clients_per_replica, likely_range, record_scope
from hwtune.serve.measured_runs import check_requests_per_client
from hwtune.serve.speculative import MAX_DRAFT_TOKENS

if TYPE_CHECKING:
    from hwtune.serve.config import Deployment, ReplicaConfig
    from hwtune.serve.correction import FittedTo
    from hwtune.serve.engines import Engine

PLAN_MAX_LAYOUTS = 10_000
"""`serve plan --max-layouts`'s default: a search for an SLO that nothing meets stops beginning
batches past it. At the 0.1 s a layout of BENCHMARKS.md's 8B, 16-client job that is about
8 minutes on two cores, longer for larger workloads; the layouts that would simulate alike are
not simulated or counted (`hwtune.serve.plan.ReplicaSaturation`)."""

serve_app = typer.Typer(
    name="serve",
    help="Simulate LLM serving (continuous batching, paged KV cache) and plan deployments.",
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _json_safe(x: object) -> object:
    """``x`` with every non-finite number (NaN: a statistic of no request, such as the TPOT of
    one-token outputs; inf) as null, so that strict JSON parsers read it."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_json_safe(v) for v in x]
    return x


def _print_json(doc: object) -> None:
    """Print ``doc`` as one strict JSON document (non-finite numbers as null)."""
    sys.stdout.write(json.dumps(_json_safe(doc), indent=2, allow_nan=False) + "\n")


def _write(write: Callable[[], object], field: str, path: Path) -> None:
    """Run ``write``; an OS error (the disk filled, the directory went away) is a one-line
    error naming ``field`` (the path was checked up front with `output_path`)."""
    try:
        write()
    except OSError as e:
        fail(HwtuneInputError(field, str(path), f"a writable file ({e.strerror or e})"))


Model = Annotated[str, typer.Option("--model", "-m", help="catalog name or a config.json path")]
Gpu = Annotated[
    str, typer.Option(help="catalog GPU name, a device YAML or a `hwtune bench` profile")
]
Precision = Annotated[
    str | None,
    typer.Option(
        help="weight format: bf16|fp16|fp8|fp4|int4 (int4: weight-only W4A16; default: the "
        "checkpoint's, from its config.json quantization_config, else bf16)"
    ),
]
KvPrecision = Annotated[
    str | None,
    typer.Option(
        help="KV-cache format: bf16|fp16|fp8|fp4 (default: the checkpoint's, from ModelOpt "
        "kv_cache_quant_algo or compressed-tensors kv_cache_scheme, else bf16)"
    ),
]
InLen = Annotated[int | None, typer.Option(help="prompt tokens per request (fixed)")]
OutLen = Annotated[int | None, typer.Option(help="output tokens per request (fixed)")]
Dataset = Annotated[
    str | None,
    typer.Option(help="length mix without --input-len/--output-len: sharegpt (default)|fixed"),
]
NumReq = Annotated[int | None, typer.Option(help="requests (default 10 x concurrency, or 1000)")]
Rate = Annotated[float | None, typer.Option(help="open loop: requests/s (Poisson)")]
Burst = Annotated[
    float,
    typer.Option(
        help="coefficient of variation of gaps, above 0 and up to 10 (gamma; 1 = "
        "Poisson; near 0 = even gaps)"
    ),
]
Trace = Annotated[
    Path | None, typer.Option(help="trace CSV/JSONL (arrival, prompt, output tokens)")
]
Seed = Annotated[int, typer.Option(help="seed of every random choice", min=0)]
RangeRatio = Annotated[
    float,
    typer.Option(
        help="with --input-len/--output-len: lengths uniform in \\[ratio x L, L] (InferenceX and "
        "vLLM<=0.8 benchmark_serving --random-range-ratio); 1 = fixed"
    ),
]
Sched = Annotated[
    str | None,
    typer.Option(
        help="vllm|sarathi|orca|prefill-first|sglang|static (default: vllm, or --engine's)"
    ),
]
EngineOpt = Annotated[
    str | None,
    typer.Option(
        "--engine",
        help="engine preset, vllm|sglang|trtllm\\[@VERSION]: its batch formation, eager prefill and "
        "overlap scheduling as the published-run validation assumes them (explicit options win)",
    ),
]
Tp = Annotated[int, typer.Option(help="tensor-parallel degree per replica")]
Pp = Annotated[int, typer.Option(help="pipeline stages per replica")]
Ep = Annotated[int, typer.Option(help="expert-parallel degree (MoE)")]
DpAttention = Annotated[int, typer.Option(help="attention data parallelism (MLA models)")]
MaxSeqs = Annotated[int, typer.Option(help="running sequences per replica")]
TokenBudget = Annotated[int, typer.Option(help="token budget per step")]
MaxModelLen = Annotated[
    int | None,
    typer.Option(help="longest request, prompt + output tokens (default: the model's context)"),
]
Replicas = Annotated[int, typer.Option(help="replicas behind the router")]
Profile = Annotated[
    Path | None,
    typer.Option(
        help="serve profile (YAML/JSON): measured efficiencies and engine host overheads, as "
        "`python -m hwtune.calibrate.serving_reference --engine` writes (a `hwtune bench` "
        "profile goes to --gpu)"
    ),
]
WoKernel = Annotated[
    str | None,
    typer.Option(
        help="weight-only GEMM kernel family: wgmma (Hopper's native) | marlin (mma.sync) | "
        "triton-mxfp4 (triton_kernels' MXFP4 MoE) (default: the GPU's native tensor-core path, "
        "wgmma on Hopper)"
    ),
]
EagerPrefill = Annotated[
    bool | None,
    typer.Option(
        "--eager-prefill/--no-eager-prefill",
        help="prefill steps without CUDA graphs: at least the host's kernel launches "
        "(TensorRT-LLM PyTorch backend, SGLang; default: off, or --engine's)",
    ),
]
OverlapSchedule = Annotated[
    bool | None,
    typer.Option(
        "--overlap-schedule/--no-overlap-schedule",
        help="the engine forms the next batch while a step runs (TensorRT-LLM's overlap "
        "scheduler, SGLang's default, vLLM --async-scheduling): arrivals wait one step more "
        "(default: off, or --engine's)",
    ),
]
HostTimeline = Annotated[
    bool,
    typer.Option(
        "--host-timeline/--no-host-timeline",
        help="with --overlap-schedule: the host launches the next step while one runs and "
        "sends a step's tokens after that launch (eager prefill steps after a decode end "
        "earlier; tokens before an eager step go out one launch later); off in the published "
        "-run validation, whose launch floor was fitted without it",
    ),
]
SpecTokens = Annotated[
    int,
    typer.Option(
        help=f"speculative decoding: draft tokens per step, 0-{MAX_DRAFT_TOKENS} (MTP "
        "num_nextn_predict_layers, "
        "EAGLE num_speculative_tokens; 0: off)"
    ),
]
SpecAcceptance = Annotated[
    float | None,
    typer.Option(
        help="speculative decoding: probability a draft token is accepted given the ones "
        "before it (DeepSeek-V3 MTP: 0.85-0.90 on natural text; data-dependent; required "
        "with --spec-tokens)"
    ),
]
ServeLaunchOpt = Annotated[
    str | None,
    typer.Option(
        "--launch",
        help="vllm|sglang|trtllm: also give the deployment as the engine's server command that "
        "runs it (`vllm serve`, `python -m sglang.launch_server`, `trtllm-serve` with its "
        "options YAML) and simulate that engine's behaviour (--engine vllm|sglang|trtllm)",
    ),
]
FrontEnd = Annotated[
    float | None,
    typer.Option(
        help="output tokens/s the engine's front end (API server, detokenizer) can stream; "
        "every step's tokens queue through it first in, first out (default: no limit; measure "
        "it as the output-token plateau of a high-concurrency run of your engine)"
    ),
]
Correction = Annotated[
    Path | None,
    typer.Option(
        help="tier-3 correction from `hwtune serve calibrate` (the corrected latencies printed "
        "beside the simulated ones)"
    ),
]
PlanCorrection = Annotated[
    Path | None,
    typer.Option(
        "--correction",
        help="tier-3 correction from `hwtune serve calibrate`: the SLOs are checked on the "
        "corrected percentiles",
    ),
]


def _behaviour(
    engine: str | None,
    scheduler: str | None,
    eager_prefill: bool | None,
    overlap_schedule: bool | None,
) -> tuple[str, bool, bool, Engine | None]:
    """(scheduler, eager prefill, overlap scheduling, engine): each explicit option, else the
    ``--engine`` preset's (`hwtune.serve.engines.engine_fields`), else the generic default."""
    from hwtune.serve.engines import engine_fields, parse_engine

    e = parse_engine(engine) if engine is not None else None
    preset = engine_fields(e) if e is not None else {}
    return (
        scheduler if scheduler is not None else str(preset.get("scheduler", "vllm")),
        eager_prefill if eager_prefill is not None else bool(preset.get("eager_prefill", False)),
        overlap_schedule
        if overlap_schedule is not None
        else bool(preset.get("overlap_schedule", False)),
        e,
    )


def _check_speculative(spec_tokens: int, spec_acceptance: float | None) -> float:
    """The acceptance rate to simulate: draft tokens need one given (left out, it would be 0,
    at which every draft is rejected and speculative decoding only costs; an explicit 0 is a
    what-if and stays). An acceptance without drafts `ReplicaConfig` refuses, and the ranges."""
    if spec_tokens > 0 and spec_acceptance is None:
        raise HwtuneInputError("spec-acceptance", None, "a probability in [0, 1] beside "
                               f"--spec-tokens {spec_tokens}: the rate your engine accepts drafts "
                               "at (DeepSeek-V3 MTP: 0.85-0.90 on natural text)")  # fmt: skip
    return 0.0 if spec_acceptance is None else spec_acceptance


def _launch_engine(launch: str | None, engine: str | None) -> str | None:
    """The engine to simulate: ``--launch``'s, which ``--engine`` may name (with a version)."""
    from hwtune.serve.engines import parse_engine
    from hwtune.serve.launch import SERVE_LAUNCH_ENGINES

    if launch is None:
        return engine
    if launch not in SERVE_LAUNCH_ENGINES:
        raise HwtuneInputError("--launch", launch, "one of " + ", ".join(SERVE_LAUNCH_ENGINES))
    if engine is not None and parse_engine(engine).name != launch:
        raise HwtuneInputError("--engine", engine, f"{launch} (or none) with --launch {launch}")
    return engine if engine is not None else launch


def _launch_error(e: HwtuneInputError, launch: str) -> HwtuneInputError:
    """An engine's refusal (`hwtune.serve.launch`) naming the option that set the field."""
    # an option's field as its flag; a file's field (model.quantization_config) as it is
    flag = e.field if e.field.startswith("--") or "." in e.field else (
        "--" + e.field.replace("_", "-"))  # fmt: skip
    return HwtuneInputError(flag, e.value, f"{e.expected} (--launch {launch})")


def _max_model_len(cfg: ReplicaConfig, launch: str | None, disagg: bool) -> int | None:
    """The longest request `serve --json` reports: the one ``--launch vllm`` passes (lowered to
    what the KV cache holds when no limit is given, `hwtune.serve.launch.vllm_max_model_len`),
    else the replica's limit or the model's context (`ReplicaConfig.context_limit`)."""
    if launch == "vllm" and not disagg:
        from hwtune.serve.launch import vllm_max_model_len

        return vllm_max_model_len(cfg) or cfg.context_limit
    return cfg.context_limit


def _launch_doc(launch: str | None, dep: Deployment, model: str) -> dict:
    """The engine command of ``dep`` (`hwtune.serve.launch`) as a JSON-ready dict; a refusal
    names the option that set the field. ``model`` as typed: a config.json's directory is what
    the engine loads, a Hugging Face id is kept, a catalog name becomes the repository of its
    config.json (`hwtune.model.catalog.hf_repo`), or MODEL for an entry given inline."""
    from hwtune.serve.launch import launch_instructions, serve_launch_for

    if launch is None:
        return {}
    from hwtune.model.catalog import hf_repo

    path = Path(model)
    if path.exists():  # a config.json: the engine loads its directory
        target = str(path.parent if path.is_file() else path)
    else:  # an id as typed, else the repository the catalog's config.json came from
        target = model if "/" in model else (hf_repo(model) or "MODEL")
    try:
        doc = serve_launch_for(launch, dep, target).to_dict()
    except HwtuneInputError as e:
        raise _launch_error(e, launch) from None
    if not doc.get("disaggregated"):  # the same top-level keys as a disaggregated launch
        doc["disaggregated"] = False
    doc["note"] = launch_instructions(doc, dep.router)
    if target == "MODEL":
        doc["model_of"] = dep.replica.model.name
        doc["note"] += (
            f"; replace MODEL with the Hugging Face id or local directory of {doc['model_of']}"
        )
    return doc


def _launchable(launch: str, cfg: ReplicaConfig) -> bool:
    """Whether engine ``launch`` runs replica ``cfg`` as simulated (`serve plan --launch`)."""
    from hwtune.serve.launch import launch_refusal

    return launch_refusal(launch, cfg) is None


def _launchable_layout(launch: str, dep: Deployment) -> bool:
    """Whether engine ``launch`` runs deployment ``dep`` as simulated: a disaggregated one's
    pools and router too (`hwtune.serve.launch.disagg_launch_refusal`)."""
    from hwtune.serve.launch import disagg_launch_refusal

    return disagg_launch_refusal(launch, dep) is None


def _gpus_words(n: int, g: int, one: str = "1 replica on") -> str:
    """``n`` replicas of ``g`` GPUs in words; ``one`` what precedes the GPUs of a single one."""
    gpus = f"{g} GPU" + ("s" if g > 1 else "")
    return f"{n} replicas, each on {gpus}" if n > 1 else f"{one} {gpus}"


def _print_disagg_launch(doc: dict) -> None:
    """A disaggregated launch: each pool's server command with how many of it, the router's
    command, then the files they read."""
    from rich.console import Console

    con = Console(soft_wrap=True)
    con.print(f"\n[bold]{doc['engine']} launch[/bold] (disaggregated, {doc['gpus']} GPUs):",
              highlight=False)  # fmt: skip
    con.print(f"to run: {doc['note']}", highlight=False, markup=False)
    files: dict[str, str] = {}
    for pool in ("prefill", "decode"):
        p = doc[pool]
        con.print(f"\n{pool} ({_gpus_words(p['replicas'], p['gpus_per_replica'])}):",
                  highlight=False, markup=False)  # fmt: skip
        con.print(p["command"], highlight=False, markup=False)
        files |= p.get("files", {})
    con.print("\nrouter:", highlight=False, markup=False)
    con.print(doc["router"]["command"], highlight=False, markup=False)
    for name, text in (files | doc.get("files", {})).items():
        con.print(f"\n{name}:", highlight=False, markup=False)
        con.print(text.rstrip("\n"), highlight=False, markup=False)


def _print_launch(doc: dict) -> None:
    """The engine command under a human-readable result (nothing without ``--launch``)."""
    if not doc:
        return
    if doc.get("disaggregated"):
        _print_disagg_launch(doc)
        return
    from rich.console import Console

    con = Console(soft_wrap=True)
    each = _gpus_words(doc["replicas"], doc["gpus_per_replica"], "on")
    con.print(f"\n[bold]{doc['engine']} launch[/bold] ({each}):", highlight=False)
    con.print(f"to run: {doc['note']}", highlight=False, markup=False)
    con.print(doc["command"], highlight=False, markup=False)
    for name, text in doc.get("files", {}).items():  # what the command reads, beside it
        con.print(f"\n{name}:", highlight=False, markup=False)
        con.print(text.rstrip("\n"), highlight=False, markup=False)


def _engine_memory(e: Engine | None) -> dict[str, object]:
    """The ``--engine`` preset's KV-cache sizing and admission (`ReplicaConfig.kv_memory_rule`,
    ``reserve_to_completion``) and its all-reduce kernels (``all_reduce_kernel``); none without
    a preset."""
    from hwtune.serve.engines import kernel_fields, memory_fields

    return {**memory_fields(e), **kernel_fields(e)} if e is not None else {}


def _tier(cfg: ReplicaConfig, profile: Path | None) -> int:
    """2 with measured figures (a serve ``--profile``, or a `hwtune bench` device profile as
    ``--gpu``, whose curves the cost models then use), else 1 (spec sheet)."""
    return 2 if profile is not None or cfg.device.profile is not None else 1


def _fitted_to(cfg: ReplicaConfig, e: Engine | None, profile: Path | None) -> FittedTo:
    """What a tier-3 correction fitted or applied here belongs to (`hwtune.serve.correction`)."""
    from hwtune.serve.correction import FittedTo

    return FittedTo(model=cfg.model.name, gpu=cfg.device.name, precision=cfg.weight_dtype,
                    engine=str(e) if e is not None else None, tier=_tier(cfg, profile),
                    kv_precision=cfg.kv_dtype, spec_tokens=cfg.spec_tokens,
                    spec_acceptance=cfg.spec_acceptance, eager_prefill=cfg.eager_prefill,
                    overlap_schedule=cfg.overlap_schedule, host_timeline=cfg.host_timeline,
                    frontend_tokens_per_s=cfg.frontend_tokens_per_s,
                    scheduler=cfg.scheduler)  # fmt: skip


def _precision_source(cfg: ReplicaConfig, precision: str | None) -> str:
    """Where the weight format came from: "option", "checkpoint" or "default"
    (`hwtune.serve.config.weight_format`)."""
    from hwtune.serve.config import weight_format

    return weight_format(cfg.model, precision, cfg.device)[1]


def _kv_precision_source(cfg: ReplicaConfig, kv_precision: str | None) -> str:
    """Where the KV-cache format came from: "option", "checkpoint" or "default"
    (`hwtune.serve.config.kv_format`)."""
    from hwtune.serve.config import kv_format

    return kv_format(cfg.model, kv_precision, cfg.device)[1]


def _precision_words(
    cfg: ReplicaConfig, precision: str | None, kv_precision: str | None = None
) -> str:
    """The weight format for a human: "fp8 weights (the checkpoint's)", and the KV cache's
    when it is the checkpoint's: "..., fp8 KV cache (the checkpoint's)"."""
    why = {"option": "--precision", "checkpoint": "the checkpoint's", "default": "default"}
    words = f"{cfg.weight_dtype} weights ({why[_precision_source(cfg, precision)]})"
    if _kv_precision_source(cfg, kv_precision) == "checkpoint":
        words += f", {cfg.kv_dtype} KV cache (the checkpoint's)"
    return words


def _workload(
    concurrency: int | None,
    input_len: int | None,
    output_len: int | None,
    dataset: str | None,
    num_requests: int | None,
    rate: float | None,
    burstiness: float,
    trace: Path | None,
    seed: int,
    prefix_len: int,
    prefix_groups: int,
    range_ratio: float = 1.0,
):  # noqa: ANN202
    """The workload the options describe; options that contradict one another or would be
    ignored (``--rate`` with ``--concurrency``, lengths with ``--trace``, ...) are errors."""
    from hwtune.serve.request import (
        check_burstiness,
        closed_loop,
        fixed_lengths,
        load_trace,
        open_loop,
        range_ratio_lengths,
        sharegpt_like_lengths,  # fmt: skip
    )

    if dataset is not None and dataset not in ("sharegpt", "fixed"):
        raise HwtuneInputError("dataset", dataset, "sharegpt or fixed")
    if not 0 < range_ratio <= 1:
        raise HwtuneInputError("range-ratio", range_ratio, "a fraction in (0, 1]")
    check_burstiness(burstiness, "burstiness")
    if trace is not None:  # the trace gives arrivals and lengths: anything else would be ignored
        given = {"rate": rate, "concurrency": concurrency, "input-len": input_len,
                 "output-len": output_len, "num-requests": num_requests, "dataset": dataset,
                 "prefix-len": prefix_len or None, "prefix-groups": prefix_groups or None,
                 "range-ratio": None if range_ratio == 1 else range_ratio,
                 "burstiness": None if burstiness == 1 else burstiness,
                 "seed": seed or None}  # fmt: skip
        for name, v in given.items():
            if v is not None:
                raise HwtuneInputError(name, v, "no such option with --trace (the trace gives "
                                       "the arrivals and lengths)")  # fmt: skip
        return load_trace(trace)
    if rate is not None and concurrency is not None:
        raise HwtuneInputError("concurrency", concurrency, "either --concurrency (a closed loop) "
                               "or --rate (an open loop), not both")  # fmt: skip
    if rate is None and burstiness != 1:
        raise HwtuneInputError("burstiness", burstiness, "--rate beside it (it shapes the gaps "
                               "between open-loop arrivals)")  # fmt: skip
    if range_ratio < 1 and input_len is None and output_len is None:
        raise HwtuneInputError(
            "range-ratio", range_ratio, "--input-len and/or --output-len to sample around"
        )
    lengths = input_len is not None or output_len is not None
    if dataset == "sharegpt" and lengths:
        raise HwtuneInputError("dataset", dataset, "fixed (or no --dataset) with --input-len or "
                               "--output-len")  # fmt: skip
    c = concurrency if concurrency is not None else 16
    if c < 1:
        raise HwtuneInputError("concurrency", c, "a positive integer")
    n = num_requests if num_requests is not None else (1000 if rate else 10 * c)
    if n < 1:
        raise HwtuneInputError("num-requests", n, "a positive integer")
    if lengths or dataset == "fixed":
        i = 1024 if input_len is None else input_len
        o = 256 if output_len is None else output_len
        for name, v in (("input-len", i), ("output-len", o)):
            if v < 1:
                raise HwtuneInputError(name, v, "a positive token count")
        if range_ratio < 1:
            p, q = range_ratio_lengths(n, i, o, range_ratio, seed)
        else:
            p, q = fixed_lengths(n, i, o)
    else:
        p, q = sharegpt_like_lengths(n, seed)
    if rate is not None:
        return open_loop(rate, p, q, seed, burstiness, prefix_len, prefix_groups)
    return closed_loop(c, p, q, prefix_len, prefix_groups, seed)


def _replica(
    model: str,
    gpu: str,
    tp: int,
    pp: int,
    ep: int,
    dp_attention: int,
    precision: str | None,
    kv_precision: str | None,
    scheduler: str,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    block_size: int,
    gpu_memory_utilization: float,
    prefix_caching: bool,
    profile: Path | None,
    weight_only_kernel: str | None = None,
):  # noqa: ANN202
    from hwtune.cost.quantized_gemm import WEIGHT_ONLY_FORMATS, WEIGHT_ONLY_KERNELS, supports
    from hwtune.hardware.catalog import get_device
    from hwtune.model.catalog import get_model
    from hwtune.serve.config import ReplicaConfig, kv_format, weight_format
    from hwtune.serve.profile import check_profile_device, load_profile

    prof = load_profile(profile) if profile is not None else None
    dev = get_device(gpu)
    if prof is not None and prof.device:
        check_profile_device(prof.device, dev)
    spec = get_model(model)
    if dp_attention > 1 and spec.moe is None:  # as `hwtune serve --launch` refuses it
        raise HwtuneInputError("--dp-attention", dp_attention,
                               "1 for a dense model (serve more --replicas)")  # fmt: skip
    wdt = weight_format(spec, precision, dev)[0]
    # None: the GPU's native tensor-core path, which ReplicaConfig calls wgmma (Hopper's; on
    # another GPU the name stands for its own native path: the kernel choice is priced on Hopper
    # only, `hwtune.cost.quantized_gemm.kernel_share`)
    weight_only_kernel = weight_only_kernel or "wgmma"
    known = weight_only_kernel in WEIGHT_ONLY_KERNELS  # an unknown name: ReplicaConfig says so
    if (
        known
        and weight_only_kernel != "wgmma"
        and wdt not in WEIGHT_ONLY_FORMATS
        and supports(dev, wdt)
    ):
        raise HwtuneInputError("weight-only-kernel", weight_only_kernel,
                               f"wgmma or the option left out with {wdt} weights, which "
                               f"{dev.name} computes natively (the kernel choice is for "
                               "weight-only formats)")  # fmt: skip
    return ReplicaConfig(
        spec, dev, tp=tp, pp=pp, ep=ep, dp_attention=dp_attention,
        weight_dtype=wdt, kv_dtype=kv_format(spec, kv_precision, dev)[0],
        scheduler=scheduler,
        max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
        block_size=block_size, gpu_memory_utilization=gpu_memory_utilization,
        enable_prefix_caching=prefix_caching, profile=prof, weight_only_kernel=weight_only_kernel,
    )  # fmt: skip


@serve_app.callback(invoke_without_command=True)
def serve(
    ctx: typer.Context,
    model: Model = "llama3.1-8b",
    gpu: Gpu = "h100-sxm-80gb",
    tp: Tp = 1,
    pp: Pp = 1,
    ep: Ep = 1,
    dp_attention: DpAttention = 1,
    precision: Precision = None,
    kv_precision: KvPrecision = None,
    concurrency: Annotated[int | None, typer.Option(help="closed loop: clients")] = None,
    input_len: InLen = None,
    output_len: OutLen = None,
    range_ratio: RangeRatio = 1.0,
    dataset: Dataset = None,
    num_requests: NumReq = None,
    rate: Rate = None,
    burstiness: Burst = 1.0,
    trace: Trace = None,
    prefix_len: Annotated[int, typer.Option(help="shared prompt prefix tokens")] = 0,
    prefix_groups: Annotated[int, typer.Option(help="distinct shared prefixes")] = 0,
    scheduler: Sched = None,
    engine: EngineOpt = None,
    max_num_seqs: MaxSeqs = 256,
    max_num_batched_tokens: TokenBudget = 8192,
    max_model_len: MaxModelLen = None,
    block_size: Annotated[int, typer.Option(help="KV block size, tokens")] = 16,
    gpu_memory_utilization: Annotated[float, typer.Option(help="usable memory fraction")] = 0.9,
    prefix_caching: Annotated[bool, typer.Option("--prefix-caching/--no-prefix-caching")] = True,
    replicas: Replicas = 1,
    router: Annotated[
        str | None, typer.Option(help="round-robin|least-tokens (default round-robin)")
    ] = None,
    disagg: Annotated[
        bool, typer.Option("--disagg/--no-disagg", help="separate prefill pool")
    ] = False,
    prefill_tp: Annotated[int | None, typer.Option(help="prefill replica tp (disagg)")] = None,
    prefill_replicas: Annotated[
        int | None, typer.Option(help="prefill replicas (disagg; default 1)")
    ] = None,
    profile: Profile = None,
    weight_only_kernel: WoKernel = None,
    eager_prefill: EagerPrefill = None,
    overlap_schedule: OverlapSchedule = None,
    host_timeline: HostTimeline = False,
    adp_balance_timeout_iters: Annotated[
        int,
        typer.Option(
            help="TensorRT-LLM attention-DP balancing: steps new prompts may wait for "
            "one per DP rank (its attention_dp_config timeout_iters; 0: off)"
        ),
    ] = 0,
    batch_wait_timeout_iters: Annotated[
        int,
        typer.Option(
            help="TensorRT-LLM batch waiting: steps prompts may be held while requests decode "
            "(its batch_wait_timeout_iters; 0: off)"
        ),
    ] = 0,
    batch_wait_max_tokens_ratio: Annotated[
        float,
        typer.Option(
            help="TensorRT-LLM batch waiting: held prompts go once they and the decodes fill "
            "this fraction of --max-num-batched-tokens (its batch_wait_max_tokens_ratio)"
        ),
    ] = 0.0,
    spec_tokens: SpecTokens = 0,
    spec_acceptance: SpecAcceptance = None,
    frontend_tokens_per_s: FrontEnd = None,
    correction: Correction = None,
    seed: Seed = 0,
    trace_out: Annotated[
        Path | None, typer.Option(help="write a Perfetto/Chrome trace JSON")
    ] = None,
    plot: Annotated[Path | None, typer.Option(help="write a latency CDF / timeline PNG")] = None,
    requests_out: Annotated[
        Path | None,
        typer.Option(help="write each request's latencies (.csv; .jsonl adds its token times)"),
    ] = None,
    launch: ServeLaunchOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON document")] = False,
) -> None:
    """Simulate serving a model: TTFT, TPOT, E2E percentiles, throughput, KV use, prefix hits."""
    if ctx.invoked_subcommand is not None:
        return
    from dataclasses import replace

    from hwtune.cli.parsing import plot_suffixes
    from hwtune.cli.plan import progress_bar
    from hwtune.report.serve_requests import SUFFIXES, write_requests
    from hwtune.serve.config import Deployment
    from hwtune.serve.correction import check_applies, corrected_stats, load_correction
    from hwtune.serve.metrics import per_request, summarize
    from hwtune.serve.simulator import simulate

    try:
        if trace_out is not None:  # a path that cannot be written fails now, not after the run
            output_path(trace_out, "trace-out")
        if plot is not None:
            output_path(plot, "plot", plot_suffixes())
        if requests_out is not None:
            output_path(requests_out, "requests-out", SUFFIXES)
        corr = load_correction(correction) if correction is not None else None
        engine = _launch_engine(launch, engine)
        spec_acceptance = _check_speculative(spec_tokens, spec_acceptance)
        scheduler, eager_prefill, overlap_schedule, eng = _behaviour(
            engine, scheduler, eager_prefill, overlap_schedule
        )
        cfg = _replica(model, gpu, tp, pp, ep, dp_attention, precision, kv_precision, scheduler,
                       max_num_seqs, max_num_batched_tokens, block_size, gpu_memory_utilization,
                       prefix_caching, profile, weight_only_kernel)  # fmt: skip
        cfg = cfg.with_(**_engine_memory(eng), eager_prefill=eager_prefill, overlap_schedule=overlap_schedule,
                        host_timeline=host_timeline,
                        adp_balance_timeout_iters=adp_balance_timeout_iters,
                        batch_wait_timeout_iters=batch_wait_timeout_iters,
                        batch_wait_max_tokens_ratio=batch_wait_max_tokens_ratio,
                        spec_tokens=spec_tokens, spec_acceptance=spec_acceptance,
                        frontend_tokens_per_s=frontend_tokens_per_s,
                        max_model_len=max_model_len)  # fmt: skip
        if adp_balance_timeout_iters and cfg.dp_attention == 1:  # would be ignored
            raise HwtuneInputError("adp-balance-timeout-iters", adp_balance_timeout_iters,
                                   "0 without --dp-attention 2 or more (it balances prompts "
                                   "over attention-DP ranks)")  # fmt: skip
        if (batch_wait_timeout_iters > 0) != (batch_wait_max_tokens_ratio > 0):
            one, v = (("batch-wait-timeout-iters", batch_wait_timeout_iters)
                      if batch_wait_timeout_iters > 0
                      else ("batch-wait-max-tokens-ratio", batch_wait_max_tokens_ratio))  # fmt: skip
            raise HwtuneInputError(one, v, "both --batch-wait-timeout-iters and "
                                   "--batch-wait-max-tokens-ratio, or neither (one alone never "
                                   "holds a prompt)")  # fmt: skip
        if corr is not None:
            check_applies(corr, _fitted_to(cfg, eng, profile))
            if disagg:  # calibrate fits aggregated closed loops: no disaggregated runs in it
                raise HwtuneInputError("correction", str(correction), "an aggregated deployment "
                                       "(`serve calibrate` fits aggregated runs; leave out "
                                       "--disagg)")  # fmt: skip
        for name, v in (("prefill-tp", prefill_tp), ("prefill-replicas", prefill_replicas)):
            if v is not None and not disagg:  # would be ignored
                raise HwtuneInputError(name, v, "--disagg beside it (a separate prefill pool)")
        if disagg and requests_out is not None:
            raise HwtuneInputError("requests-out", str(requests_out),
                                   "an aggregated deployment (leave out --disagg): token times "
                                   "are recorded there only")  # fmt: skip
        if prefill_tp is not None and prefill_tp < 1:
            raise HwtuneInputError("prefill-tp", prefill_tp, "a positive integer")
        from hwtune.serve.config import ROUTERS

        if router is not None and router not in ROUTERS:
            raise HwtuneInputError("router", router, "one of " + ", ".join(ROUTERS))
        try:
            pre = replace(cfg, tp=tp if prefill_tp is None else prefill_tp) if disagg else None
        except HwtuneInputError as e:  # the prefill replica's tp is --prefill-tp's, not --tp's
            if prefill_tp is None:
                raise
            if e.field == "tp":
                raise HwtuneInputError("prefill-tp", e.value, e.expected) from None
            raise HwtuneInputError("prefill-tp", prefill_tp, "a prefill tp with which the prefill "
                                   f"replica is valid ({e.field} {e.value!r}: {e.expected})") from None  # fmt: skip
        n_pre = 1 if prefill_replicas is None else prefill_replicas
        if router is not None and replicas == 1 and (pre is None or n_pre == 1):
            raise HwtuneInputError("router", router, "--replicas (or --prefill-replicas) 2 or "
                                   "more beside it (with one replica it would be ignored)")  # fmt: skip
        dep = Deployment(cfg, replicas, router or "round-robin", pre, n_pre)
        launch_doc = _launch_doc(launch, dep, model)
        wl = _workload(concurrency, input_len, output_len, dataset, num_requests, rate,
                       burstiness, trace, seed, prefix_len, prefix_groups, range_ratio)  # fmt: skip
        with progress_bar("requests", not as_json) as cb:  # drawn on a terminal's stderr
            res = simulate(dep, wl, record_steps=trace_out is not None,
                           record_tokens=requests_out is not None, progress=cb)  # fmt: skip
    except HwtuneInputError as e:
        fail(e)
    doc = summarize(res)
    doc.update(model=cfg.model.name, gpu=cfg.device.name, tp=tp, pp=pp, ep=ep,
               dp_attention=dp_attention, precision=cfg.weight_dtype,
               precision_source=_precision_source(cfg, precision), kv_precision=cfg.kv_dtype,
               kv_precision_source=_kv_precision_source(cfg, kv_precision),
               scheduler=scheduler, replicas=replicas, disaggregated=disagg, seed=seed,
               tier=_tier(cfg, profile), workload=wl.mode, engine=eng and str(eng),
               eager_prefill=eager_prefill, overlap_schedule=overlap_schedule,
               all_reduce_kernel=cfg.all_reduce_kernel,
               max_model_len=_max_model_len(cfg, launch, disagg))  # fmt: skip
    if cfg.device.profile is not None:  # --gpu is a `hwtune bench` profile: its curves price
        from hwtune.train.estimator import tier_note

        doc["measured_profile"] = cfg.device.name  # the steps (as `hwtune estimate` says)
        doc["tier_note"] = tier_note(cfg.device)  # the same line, and what priced the links
    if spec_tokens:
        doc["speculative"] = {"draft_tokens": spec_tokens, "acceptance": spec_acceptance,
                              "tokens_per_step": cfg.tokens_per_step}  # fmt: skip
    if frontend_tokens_per_s:
        doc["frontend_tokens_per_s"] = frontend_tokens_per_s
    # the nearest published cell: a closed loop's clients per replica (open loops: mode only)
    clients = clients_per_replica(wl.mode, wl.concurrency, replicas)
    doc["accuracy"] = serve_accuracy(disagg, cfg.model.moe is not None, clients,
                                     eng and eng.name)  # fmt: skip
    scope = record_scope(doc["tier"], cfg.device.architecture)
    if doc["accuracy"] and scope:
        doc["accuracy"]["scope"] = scope
    # the band is the record's measured/predicted spread of tier-1 predictions: a tier-2
    # prediction, priced from other figures, would be corrected for errors it does not have
    if doc["accuracy"] and doc["tier"] == 1:
        likely = likely_range(doc["accuracy"], doc["ttft_s"]["mean"], doc["tpot_s"]["mean"])
        if likely:
            doc["accuracy"]["likely"] = likely
    if corr is not None:
        pr = per_request(res)
        doc["calibrated"] = corrected_stats(corr, pr["ttft"], pr["tpot"], pr["output"])
        doc["calibrated"]["correction"] = corr.model_dump()
    if trace_out is not None:
        from hwtune.report.serve_trace import write_chrome_trace

        _write(lambda: write_chrome_trace(res, trace_out), "trace-out", trace_out)
    if plot is not None:
        from hwtune.report.serve_plots import plot_serving

        title = f"{cfg.model.name} on {dep.gpus} x {cfg.device.name}"
        _write(lambda: plot_serving(res, plot, title), "plot", plot)
    if requests_out is not None:
        _write(lambda: write_requests(res, requests_out), "requests-out", requests_out)
    if launch_doc:
        doc["launch"] = launch_doc
    if as_json:
        _print_json(doc)
        return
    from hwtune.report.serve_view import render_summary

    how = f"{eng}, {scheduler}" if eng else scheduler
    render_summary(doc, f"{cfg.model.name} on {dep.gpus} x {cfg.device.name} ({wl.mode} loop, "
                        f"{len(wl)} requests, {how}; "
                        f"{_precision_words(cfg, precision, kv_precision)})")  # fmt: skip
    _print_launch(launch_doc)


@serve_app.command("plan")
def plan_cmd(
    model: Model = "llama3.1-8b",
    gpu: Gpu = "h100-sxm-80gb",
    precision: Precision = None,
    kv_precision: KvPrecision = None,
    max_gpus: Annotated[int, typer.Option(help="GPU budget")] = 8,
    max_layouts: Annotated[
        int,
        typer.Option(
            help="begin no further batch of GPU counts once this many layouts are "
            "simulated (an SLO nothing meets on a large budget; the refusal says where "
            "it stopped)"
        ),
    ] = PLAN_MAX_LAYOUTS,
    every_layout: Annotated[
        bool,
        typer.Option(
            "--every-layout",
            help="simulate and rank every layout up to --max-gpus (default: stop at the fewest "
            "GPUs that meet the SLOs)",
        ),
    ] = False,
    ttft_p90: Annotated[float | None, typer.Option(help="SLO: p90 TTFT, seconds")] = None,
    tpot_p90: Annotated[float | None, typer.Option(help="SLO: p90 TPOT, seconds")] = None,
    e2e_p90: Annotated[float | None, typer.Option(help="SLO: p90 E2E, seconds")] = None,
    concurrency: Annotated[int | None, typer.Option(help="closed loop: clients")] = None,
    input_len: InLen = None,
    output_len: OutLen = None,
    range_ratio: RangeRatio = 1.0,
    dataset: Dataset = None,
    num_requests: NumReq = None,
    rate: Rate = None,
    burstiness: Burst = 1.0,
    trace: Trace = None,
    scheduler: Sched = None,
    engine: EngineOpt = None,
    max_num_batched_tokens: TokenBudget = 8192,
    max_model_len: MaxModelLen = None,
    objective: Annotated[str, typer.Option(help="gpus|cost")] = "gpus",
    disagg: Annotated[bool, typer.Option("--disagg/--no-disagg", help="also disaggregated")] = True,
    processes: Annotated[
        int | None,
        typer.Option(
            "--processes",
            "--workers",
            help="worker processes (default: all cores; --workers as in study)",
        ),
    ] = None,
    ray: Annotated[
        str | None,
        typer.Option("--ray", help="Ray cluster address, or 'local' for a local Ray instance"),
    ] = None,
    top: Annotated[int, typer.Option(help="layouts to show")] = 5,
    profile: Profile = None,
    weight_only_kernel: WoKernel = None,
    eager_prefill: EagerPrefill = None,
    overlap_schedule: OverlapSchedule = None,
    spec_tokens: SpecTokens = 0,
    spec_acceptance: SpecAcceptance = None,
    frontend_tokens_per_s: FrontEnd = None,
    correction: PlanCorrection = None,
    margin: Annotated[
        str,
        typer.Option(
            help="none|likely: check the SLOs on the simulated latencies, or on them times the "
            "upper end of each layout's likely band (the published record's error)"
        ),
    ] = "none",
    seed: Seed = 0,
    launch: ServeLaunchOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON document")] = False,
) -> None:
    """Find the layouts that meet the SLOs with the fewest GPUs (or lowest cost)."""
    from hwtune.cli.plan import progress_bar
    from hwtune.serve.correction import check_applies, load_correction
    from hwtune.serve.plan import SLO, ReplicaSaturation, plan
    from hwtune.workers import check_workers

    try:
        if margin not in ("none", "likely"):
            raise HwtuneInputError("margin", margin, "none or likely")
        if top < 1:
            raise HwtuneInputError("top", top, "a positive number of layouts to show")
        check_workers(processes, ray, "processes")
        corr = load_correction(correction) if correction is not None else None
        engine = _launch_engine(launch, engine)
        from hwtune.serve.launch import DISAGG_LAUNCH_ENGINES

        if launch is not None and launch not in DISAGG_LAUNCH_ENGINES:
            disagg = False  # what it launches: aggregated layouts only
        spec_acceptance = _check_speculative(spec_tokens, spec_acceptance)
        scheduler, eager_prefill, overlap_schedule, eng = _behaviour(
            engine, scheduler, eager_prefill, overlap_schedule
        )
        name = eng and eng.name
        base = _replica(model, gpu, 1, 1, 1, 1, precision, kv_precision, scheduler, 256,
                        max_num_batched_tokens, 16, 0.9, True, profile,
                        weight_only_kernel)  # fmt: skip
        base = base.with_(**_engine_memory(eng), eager_prefill=eager_prefill, overlap_schedule=overlap_schedule,
                          spec_tokens=spec_tokens,
                          spec_acceptance=spec_acceptance,
                          frontend_tokens_per_s=frontend_tokens_per_s,
                          max_model_len=max_model_len)  # fmt: skip
        keep = keep_layout = None
        disagg_router = "least-tokens"
        if launch is not None:  # refuse now what no layout changes; search what it launches
            from hwtune.serve.launch import disagg_plan_router, launch_refusal
            from hwtune.serve.plan import PLAN_MAX_NUM_SEQS, PREFILL_MAX_NUM_SEQS

            # at the smallest sequence limit a layout gets: what depends on it (vLLM's token
            # budget of at least max_num_seqs, a KV cache that holds --max-model-len) is left
            # to each candidate (`keep`)
            least = min(*PLAN_MAX_NUM_SEQS, PREFILL_MAX_NUM_SEQS)
            refusal = launch_refusal(launch, base.with_(max_num_seqs=least, max_model_len=None))
            if refusal is not None:
                raise _launch_error(refusal, launch)
            keep = partial(_launchable, launch)
            keep_layout = partial(_launchable_layout, launch)
            disagg_router = disagg_plan_router(launch)
        if corr is not None:
            check_applies(corr, _fitted_to(base, eng, profile))
            if disagg:  # its maps were fitted to aggregated runs, not to disaggregated layouts
                raise HwtuneInputError("disagg", True, "--no-disagg beside --correction "
                                       "(`serve calibrate` fits aggregated runs)")  # fmt: skip
        # an open loop of PLAN_OPEN_LOOP_S of arrivals, at least 400 requests (at 4 requests/s
        # without --rate), unless told otherwise
        from hwtune.serve.plan import PLAN_OPEN_LOOP_S

        open_ = concurrency is None and trace is None
        rate_ = 4.0 if open_ and rate is None else rate
        n = num_requests
        if num_requests is None and open_:
            n = max(400, math.ceil(PLAN_OPEN_LOOP_S * rate_))
        wl = _workload(concurrency, input_len, output_len, dataset, n, rate_, burstiness, trace,
                       seed, 0, 0, range_ratio)  # fmt: skip
        sat = ReplicaSaturation()
        with progress_bar("layouts", not as_json) as cb:
            res = plan(base, wl, SLO(ttft_p90, tpot_p90, e2e_p90), max_gpus, objective, disagg,
                       processes, correction=corr, margin=margin == "likely", ray_address=ray,
                       progress=cb, keep=keep, keep_layout=keep_layout,
                       disagg_router=disagg_router, saturation=sat,
                       max_layouts=max_layouts, every_layout=every_layout)  # fmt: skip
    except HwtuneInputError as e:
        fail(e)
    best = [r.to_dict() for r in res[:top] if r.meets]
    try:
        first = next((r for r in res if r.meets), None)  # the layout shown first
        launch_doc = _launch_doc(launch, first.deployment, model) if first else {}
    except HwtuneInputError as e:
        fail(e)
    records = [serve_accuracy(d, engine=name) for d in (False, True)]  # agg, disagg
    scope = record_scope(_tier(base, profile), base.device.architecture)
    for acc in records:
        if acc and scope:
            acc["scope"] = scope
    if as_json:
        doc = {"model": base.model.name, "gpu": base.device.name, "objective": objective,
               "precision": base.weight_dtype,
               "precision_source": _precision_source(base, precision),
               "kv_precision": base.kv_dtype,
               "kv_precision_source": _kv_precision_source(base, kv_precision),
               "engine": eng and str(eng),
               "slo": {"ttft_p90_s": ttft_p90, "tpot_p90_s": tpot_p90, "e2e_p90_s": e2e_p90},
               "candidates": len(res), "searched_gpus": max(r.gpus for r in res),
               "skipped_alike": sat.skipped,
               "max_gpus": max_gpus, "max_layouts": max_layouts,
               "every_layout": every_layout,
               "max_model_len": base.context_limit,
               "best": best, "margin": margin,
               "correction": corr.model_dump() if corr is not None else None,
               "accuracy": {"agg": records[0], "disagg": records[1]}}  # fmt: skip
        if launch_doc:
            doc["launch"] = launch_doc
        _print_json(doc)
        return
    from hwtune.report.serve_view import render_plan

    words = _precision_words(base, precision, kv_precision)
    searched = max(r.gpus for r in res)
    title = (f"{base.model.name} on {base.device.name} ({words}): "
             f"{len(res)} layouts simulated, on 1-{searched} GPUs")  # fmt: skip
    if sat.skipped:
        title += (f" ({sat.skipped} more with more replicas than a smaller one's simulation "
                  "used: they run alike)")  # fmt: skip
    if searched < max_gpus:
        title += (f" (the search stops at the fewest that meet the SLOs; --max-gpus {max_gpus}, "
                  "--every-layout to rank every layout)")  # fmt: skip
    if corr is not None:
        title += f" (latencies corrected by {corr.runs} measured runs, tier 3)"
    if margin == "likely":
        title += " (latencies times the upper end of each layout's likely band)"
    render_plan(best, title, accuracy=[records[0]] + ([records[1]] if disagg else []))
    _print_launch(launch_doc)


@serve_app.command("calibrate")
def calibrate_cmd(
    runs: Annotated[Path, typer.Option(help="CSV of measured runs (hwtune.serve.measured_runs)")],
    model: Model = "llama3.1-8b",
    gpu: Gpu = "h100-sxm-80gb",
    precision: Precision = None,
    kv_precision: KvPrecision = None,
    scheduler: Sched = None,
    engine: EngineOpt = None,
    max_num_seqs: MaxSeqs = 256,
    max_num_batched_tokens: TokenBudget = 8192,
    profile: Profile = None,
    weight_only_kernel: WoKernel = None,
    eager_prefill: EagerPrefill = None,
    overlap_schedule: OverlapSchedule = None,
    host_timeline: HostTimeline = False,
    spec_tokens: SpecTokens = 0,
    spec_acceptance: SpecAcceptance = None,
    frontend_tokens_per_s: FrontEnd = None,
    out: Annotated[Path | None, typer.Option(help="write the correction (YAML)")] = None,
    seed: Seed = 0,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON document")] = False,
) -> None:
    """Fit a tier-3 correction (TTFT, TPOT) to your own measured runs of one engine and model."""
    from hwtune.cli.plan import progress_bar
    from hwtune.serve.correction import fit_correction, save_correction
    from hwtune.serve.measured_runs import load_runs, simulate_run

    try:
        if out is not None:  # a path that cannot be written fails now, not after the fit
            output_path(out, "out")
        measured = load_runs(runs)
        spec_acceptance = _check_speculative(spec_tokens, spec_acceptance)
        scheduler, eager_prefill, overlap_schedule, eng = _behaviour(
            engine, scheduler, eager_prefill, overlap_schedule
        )
        base = _replica(model, gpu, 1, 1, 1, 1, precision, kv_precision, scheduler, max_num_seqs,
                        max_num_batched_tokens, 16, 0.9, True, profile, weight_only_kernel)  # fmt: skip
        base = base.with_(**_engine_memory(eng), eager_prefill=eager_prefill, overlap_schedule=overlap_schedule,
                          host_timeline=host_timeline,
                          spec_tokens=spec_tokens,
                          spec_acceptance=spec_acceptance,
                          frontend_tokens_per_s=frontend_tokens_per_s)  # fmt: skip
        sims = []
        for r in measured:  # a run the deployment cannot serve names its line in the file
            try:
                with progress_bar(f"{runs.name} line {r.line}: requests", not as_json) as cb:
                    sims.append(simulate_run(base, r, seed, progress=cb))
            except HwtuneInputError as e:
                raise HwtuneInputError(f"{runs.name}: line {r.line}: {e.field}", e.value,
                                       e.expected) from None  # fmt: skip
        corr = fit_correction([s[0] for s in sims], [r.ttft_s for r in measured],
                              [s[1] for s in sims], [r.tpot_s for r in measured],
                              source=f"{runs.name}: {base.model.name} on {base.device.name}",
                              fitted_to=_fitted_to(base, eng, profile))  # fmt: skip
    except HwtuneInputError as e:
        fail(e)
    if out is not None:
        _write(lambda: save_correction(corr, out), "out", out)
    rows = [{"concurrency": r.concurrency, "input_len": r.input_len, "output_len": r.output_len,
             "tp": r.tp, "measured_ttft_s": r.ttft_s, "simulated_ttft_s": s[0],
             "corrected_ttft_s": float(corr.ttft(s[0])), "measured_tpot_s": r.tpot_s,
             "simulated_tpot_s": s[1], "corrected_tpot_s": float(corr.tpot(s[1]))}
            for r, s in zip(measured, sims, strict=True)]  # fmt: skip
    if as_json:
        doc = {"model": base.model.name, "gpu": base.device.name, "runs": rows,
               "precision": base.weight_dtype,
               "precision_source": _precision_source(base, precision),
               "kv_precision": base.kv_dtype,
               "kv_precision_source": _kv_precision_source(base, kv_precision),
               "engine": eng and str(eng),
               "correction": corr.model_dump(), "written_to": str(out) if out else None}  # fmt: skip
        _print_json(doc)
        return
    from rich.console import Console
    from rich.table import Table

    from hwtune.report.serve_view import correction_line

    con = Console()
    t = Table(title=f"{base.model.name} on {base.device.name} "
                    f"({_precision_words(base, precision, kv_precision)}): measured, simulated (tier "
                    f"{_tier(base, profile)}), corrected", title_justify="left")  # fmt: skip
    for c in ("C", "in", "out", "tp", "TTFT ms", "sim", "corr", "TPOT ms", "sim", "corr"):
        t.add_column(c, justify="right")
    for r in rows:
        t.add_row(str(r["concurrency"]), str(r["input_len"]), str(r["output_len"]), str(r["tp"]),
                  *(f"{r[f'{a}_{m}_s'] * 1e3:.1f}" for m in ("ttft", "tpot")
                    for a in ("measured", "simulated", "corrected")))  # fmt: skip
    con.print(t)
    con.print(f"correction: {correction_line(corr.model_dump())}")
    if out is not None:
        con.print(f"written to {out}; use it with `hwtune serve --correction {out}`")


@serve_app.command("measure")
def measure_cmd(
    url: Annotated[str, typer.Option(help="base URL of an OpenAI-compatible server")],
    served_model: Annotated[
        str | None, typer.Option(help="model name in requests (default: the first /v1/models)")
    ] = None,
    concurrency: Annotated[str, typer.Option(help="clients, a comma list: 1,8,32")] = "8",
    input_len: Annotated[str, typer.Option(help="prompt tokens, a comma list")] = "1024",
    output_len: Annotated[str, typer.Option(help="output tokens, a comma list")] = "256",
    range_ratio: RangeRatio = 1.0,
    num_requests: Annotated[
        int | None, typer.Option(help="measured requests per run (default 10 x concurrency)")
    ] = None,
    warmup: Annotated[
        int | None, typer.Option(help="warm-up requests per run, discarded (default 2 x C)")
    ] = None,
    tp: Annotated[int, typer.Option(help="the server's tensor parallelism (recorded)")] = 1,
    pp: Annotated[int, typer.Option(help="the server's pipeline stages (recorded)")] = 1,
    ep: Annotated[int, typer.Option(help="the server's expert parallelism (recorded)")] = 1,
    dp_attention: Annotated[int, typer.Option(help="the server's attention DP (recorded)")] = 1,
    endpoint: Annotated[str, typer.Option(help="completions path")] = "/v1/completions",
    timeout: Annotated[
        float,
        typer.Option(
            help="seconds the client waits for each read of a response (a stream that keeps "
            "sending tokens is not cut off)"
        ),
    ] = 600.0,
    extra_body: Annotated[
        str | None,
        typer.Option(
            help='JSON fields to add to each request (null drops one): {"min_tokens": null}'
        ),
    ] = None,
    out: Annotated[Path | None, typer.Option(help="write the runs CSV (serve calibrate)")] = None,
    append: Annotated[bool, typer.Option(help="append to --out instead of replacing it")] = False,
    seed: Seed = 0,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON document")] = False,
) -> None:
    """Measure a live OpenAI-compatible server (vLLM, SGLang, TensorRT-LLM) in closed loops and
    write the runs CSV that `hwtune serve calibrate` fits."""
    import csv

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from hwtune.cli.parsing import positive_ints
    from hwtune.serve import endpoint_bench as eb

    err = Console(stderr=True)
    try:
        cs = positive_ints(concurrency, "concurrency")
        ins = positive_ints(input_len, "input-len")
        outs = positive_ints(output_len, "output-len")
        for name, text, vs in (("concurrency", concurrency, cs), ("input-len", input_len, ins),
                               ("output-len", output_len, outs)):  # fmt: skip
            if len(set(vs)) < len(vs):  # a run twice is a repeated row, which calibrate refuses
                raise HwtuneInputError(name, text, "a comma list without repeated values")
        if not 0 < range_ratio <= 1:
            raise HwtuneInputError("range-ratio", range_ratio, "a fraction in (0, 1]")
        if num_requests is not None and num_requests < 1:
            raise HwtuneInputError("num_requests", num_requests, "a positive integer")
        if num_requests is not None:  # calibrate refuses such a run
            check_requests_per_client(num_requests, max(cs), "num-requests",
                                      "the largest --concurrency")  # fmt: skip
        if warmup is not None and warmup < 0:
            raise HwtuneInputError("warmup", warmup, "a non-negative integer")
        if append and out is None:
            raise HwtuneInputError("append", True, "--out, the runs CSV to append to")
        for o in outs:  # TPOT, which calibrate fits, needs two output tokens or more
            if o < 2 or int(o * range_ratio) < 2:
                raise HwtuneInputError("output-len", output_len, "2 tokens or more (with "
                                       "--range-ratio, at the low end too): TPOT is the time "
                                       "between output tokens")  # fmt: skip
        for name, v in (("tp", tp), ("pp", pp), ("ep", ep), ("dp-attention", dp_attention)):
            if v < 1:
                raise HwtuneInputError(name, v, "a positive integer")
        if served_model is not None and not served_model.strip():
            raise HwtuneInputError("served-model", served_model, "a model name (leave the "
                                   "option out for the first of /v1/models)")  # fmt: skip
        extra: tuple[tuple[str, object], ...] = ()
        if extra_body:
            try:
                fields = json.loads(extra_body)
            except ValueError:
                fields = None
            if not isinstance(fields, dict):
                raise HwtuneInputError("extra-body", extra_body, "a JSON object")
            fixed = [k for k in ("prompt", "max_tokens", "stream", "model") if k in fields]
            if fixed:  # the runs recorded would not be the requests sent (model: --served-model)
                raise HwtuneInputError("extra-body", extra_body, "fields other than prompt, "
                                       "max_tokens, stream and model, which the lengths, the "
                                       f"streamed timing and --served-model set ({fixed[0]})")  # fmt: skip
            extra = tuple(fields.items())
        target = eb.Endpoint(url, served_model or "", endpoint, timeout, extra)
        if not served_model:
            target = eb.Endpoint(url, eb.discover_model(target), endpoint, timeout, extra)
        if out is not None:  # an unwritable path fails now, not after the sweep
            exists = append and out.exists() and out.stat().st_size > 0
            if exists:  # rows appended under another header would be read as wrong columns
                from hwtune.structured_file import read_utf8

                lines = read_utf8(out, "out").splitlines()
                header = next(csv.reader(lines[:1]), [])
                if header != list(eb.CSV_COLUMNS):
                    raise HwtuneInputError("out", str(out), "a runs CSV written by `serve "
                                           f"measure` to append to (its header is "
                                           f"{','.join(header)[:80]!r})")  # fmt: skip
                from hwtune.serve.measured_runs import load_runs

                have = {(r.concurrency, r.input_len, r.output_len, r.tp, r.pp, r.ep,
                         r.dp_attention, r.range_ratio, r.num_requests): r.line
                        for r in load_runs(out)}  # fmt: skip
                for c, i, o in ((c, i, o) for c in cs for i in ins for o in outs):
                    key = (c, i, o, tp, pp, ep, dp_attention, range_ratio,
                           10 * c if num_requests is None else num_requests)  # fmt: skip
                    if key in have:  # calibrate refuses a configuration measured twice
                        raise HwtuneInputError("out", str(out), f"a runs CSV without C={c} "
                                               f"in={i} out={o} on this layout to append it to "
                                               f"(line {have[key]} has it)")  # fmt: skip
            else:  # written (header first) when the first run lands: a run that fails, or a
                # server that does not answer, leaves a file that was there as it was
                output_path(out, "out")
        results = []
        configs = [(c, i, o) for c in cs for i in ins for o in outs]
        # drawn on a terminal only: off one, rich ends the bar with an empty line, which came
        # before the error line of a run that failed (as `progress_bar` in cli/plan.py)
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      console=err, transient=True,
                      disable=as_json or not err.is_interactive) as bar:  # fmt: skip
            for c, i, o in configs:
                n = 10 * c if num_requests is None else num_requests
                w = 2 * c if warmup is None else warmup
                task = bar.add_task(f"C={c} in={i} out={o}", total=n + w)
                res = eb.run_closed_loop(target, c, i, o, n, w, range_ratio, seed,
                                         lambda t=task: bar.advance(t))  # fmt: skip
                results.append(res)
                if out is not None and not res.failures:  # each run as it ends
                    with out.open("a" if exists else "w", newline="") as f:
                        writer = csv.DictWriter(f, fieldnames=list(eb.CSV_COLUMNS))
                        if not exists:
                            writer.writeheader()
                            exists = True
                        writer.writerow(eb.csv_row(res, tp, pp, ep, dp_attention))
    except HwtuneInputError as e:
        fail(e)
    rows = [r for r in results if not r.failures]
    bad = [r for r in results if r.failures]
    if as_json:
        doc = {"url": url, "served_model": target.model,
               "runs": [r.summary() for r in results],
               "written_to": str(out) if out is not None and rows else None}  # fmt: skip
        _print_json(doc)
    else:
        from rich.table import Table

        con = Console()
        t = Table(title=f"{target.model} at {url}: measured (closed loop, mean and p90)",
                  title_justify="left")  # fmt: skip
        for col in ("C", "in", "out", "req", "failed", "TTFT ms", "p90", "TPOT ms", "p90",
                    "req/s", "out tok/s"):  # fmt: skip
            t.add_column(col, justify="right")
        for r in results:
            s = r.summary()
            tt, tp_ = s["ttft_s"], s["tpot_s"]
            t.add_row(str(r.concurrency), str(r.input_len), str(r.output_len),
                      str(s["num_requests"]), str(s["failed"]), f"{tt['mean'] * 1e3:.1f}",
                      f"{tt['p90'] * 1e3:.1f}", f"{tp_['mean'] * 1e3:.2f}",
                      f"{tp_['p90'] * 1e3:.2f}", f"{s['requests_per_s']:.2f}",
                      f"{s['throughput_tokens_per_s']:.0f}")  # fmt: skip
        con.print(t)
        if out is not None and rows:
            con.print(f"written to {out}; fit it with `hwtune serve calibrate --runs {out} ...`")
    if bad:
        for r in bad:
            sys.stderr.write(f"error: C={r.concurrency} in={r.input_len} out={r.output_len}: "
                             f"{len(r.failures)} of {len(r.records)} requests failed "
                             f"({r.failures[0]}); run not written\n")  # fmt: skip
        raise typer.Exit(1)


@serve_app.command("emulate")
def emulate_cmd(
    model: Model = "llama3.1-8b",
    gpu: Gpu = "h100-sxm-80gb",
    tp: Tp = 1,
    pp: Pp = 1,
    ep: Ep = 1,
    dp_attention: DpAttention = 1,
    precision: Precision = None,
    kv_precision: KvPrecision = None,
    scheduler: Sched = None,
    engine: EngineOpt = None,
    max_num_seqs: MaxSeqs = 256,
    max_num_batched_tokens: TokenBudget = 8192,
    max_model_len: MaxModelLen = None,
    profile: Profile = None,
    weight_only_kernel: WoKernel = None,
    eager_prefill: EagerPrefill = None,
    overlap_schedule: OverlapSchedule = None,
    frontend_tokens_per_s: FrontEnd = None,
    replicas: Replicas = 1,
    router: Annotated[
        str | None, typer.Option(help="round-robin|least-tokens (default round-robin)")
    ] = None,
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on")] = 8000,
    served_model: Annotated[
        str | None, typer.Option(help="model name clients send (default: --model)")
    ] = None,
    time_scale: Annotated[
        float, typer.Option(help="wall seconds per simulated second (>1: slower than real)")
    ] = 1.0,
) -> None:
    """Serve a simulated deployment as a live OpenAI-compatible endpoint (streamed
    /v1/completions with token-id prompts): tokens leave when the simulator says they would."""
    from hwtune.serve.config import Deployment
    from hwtune.serve.emulator import EMULATOR_SWITCH_INTERVAL_S, EmulatedEngine, EmulatedTiming
    from hwtune.serve.mock_server import MockServer, serve_until_interrupted

    try:
        if not 0 <= port <= 65535:
            raise HwtuneInputError("port", port, "a TCP port in 0-65535 (0: any free port)")
        # "" would listen on every interface (0.0.0.0), not on none; `hwtune` refuses every
        # empty value before this, but `python -m hwtune.cli.serve` runs this app alone
        if not host.strip():
            raise HwtuneInputError("host", host, "an address to listen on (0.0.0.0 for every "
                                   "interface, said explicitly)")  # fmt: skip
        if served_model is not None and not served_model.strip():
            raise HwtuneInputError("served-model", served_model, "a model name (leave the "
                                   "option out for --model's)")  # fmt: skip
        scheduler, eager_prefill, overlap_schedule, eng = _behaviour(
            engine, scheduler, eager_prefill, overlap_schedule
        )
        cfg = _replica(model, gpu, tp, pp, ep, dp_attention, precision, kv_precision, scheduler,
                       max_num_seqs, max_num_batched_tokens, 16, 0.9, True, profile,
                       weight_only_kernel)  # fmt: skip
        cfg = cfg.with_(**_engine_memory(eng), eager_prefill=eager_prefill, overlap_schedule=overlap_schedule,
                        frontend_tokens_per_s=frontend_tokens_per_s,
                        max_model_len=max_model_len)  # fmt: skip
        if router is not None and replicas == 1:  # one replica: nothing to route
            raise HwtuneInputError("router", router, "--replicas 2 or more beside it (with one "
                                   "replica it would be ignored)")  # fmt: skip
        dep = Deployment(cfg, replicas=replicas, router=router or "round-robin")
        from hwtune.serve.memory import replica_memory

        replica_memory(cfg)  # a deployment that cannot fit fails now, not at every request
        emu = EmulatedEngine(dep, time_scale)
        name = served_model or cfg.model.name
        try:
            srv = MockServer(timing=EmulatedTiming(emu), host=host, port=port, model=name)
        except OSError as e:
            import errno
            import socket

            if isinstance(e, socket.gaierror) or e.errno == errno.EADDRNOTAVAIL:
                raise HwtuneInputError("host", host, "an address of this machine to listen on "
                                       f"({e.strerror})") from None  # fmt: skip
            raise HwtuneInputError("port", port, f"a free port on {host} ({e.strerror})") from None
    except HwtuneInputError as e:
        fail(e)
    # hand the interpreter to the request threads often, so that a request is stamped when it
    # arrives and not when a simulation running in another thread lets go (5 ms by default)
    sys.setswitchinterval(EMULATOR_SWITCH_INTERVAL_S)
    as_engine = f" as {eng}" if eng else ""
    sys.stderr.write(f"emulating {name}{as_engine} on {replicas} x {cfg.device.name} (tp {tp}, "
                     f"{_precision_words(cfg, precision, kv_precision)}) at "
                     f"{srv.url} (time scale {time_scale:g}); Ctrl-C stops\n")  # fmt: skip
    serve_until_interrupted(srv)
    sys.stderr.write(f"{emu.requests} requests served, {emu.simulations} simulations in "
                     f"{emu.simulation_s:.1f} s\n")  # fmt: skip


if __name__ == "__main__":  # the root app, for its one-line errors
    from hwtune.cli.main import main

    main("serve")
