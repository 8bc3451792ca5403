"""Published training runs (``shared/validation/training_published.jsonl``) as hwtune inputs.

Each row becomes a (`ModelSpec`, `Cluster`, `Strategy`) and the measured figures it can be
compared on. Rows the tool cannot express are returned with the reason. Where a row leaves a
setting unstated, the framework's documented default of that time is used and listed in
``assumptions``; nothing is fitted to a row.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from hwtune.cost.compute import FA2_SHARE_OF_BEST
from hwtune.errors import HwtuneInputError
from hwtune.hardware.catalog import get_device
from hwtune.hardware.cluster import Cluster, make_cluster
from hwtune.hardware.device import Device
from hwtune.model.spec import MLA, ModelSpec, MoE
from hwtune.train.frameworks import framework_fields
from hwtune.train.strategy import Strategy, make_strategy

# Frameworks before FlashAttention (2022) materialized the attention scores and trained with
# dropout 0.1 (Shoeybi et al. 2019 §3; Narayanan et al. 2021 §5; Korthikanti et al. 2022 §5;
# BLOOM's Megatron-DeepSpeed config).
# The same rows ran code from before Megatron-Core's overlapped communication (2023): the
# interleaved schedule waited for each boundary's transfer (SC'21 §4.1 describes scatter/gather,
# no overlap), and data-parallel gradients were reduced after the backward: Megatron-LM's
# default "local" DDP (--DDP-impl local until 2023) reduces them once the backward pass has
# finished, as its 2019 README says; DeepSpeed (BLOOM's ZeRO-1) had the documented default
# ``overlap_comm: false`` in 2021, except under ZeRO-3, whose default was true
# (``ZERO3_OPTIMIZATION_OVERLAP_COMM_DEFAULT``, deepspeed/runtime/zero/constants.py, v0.3.13).
_UNFUSED_PREFIXES = ("megatron19", "narayanan21", "korthikanti22", "bloom")


# TP communication overlap (Transformer Engine userbuffers) as the recipes behind the NVIDIA rows
# set it; only TP > 1 with sequence parallelism uses it (NeMo/Megatron-Bridge turn it off
# otherwise). NeMo-Framework-Launcher (launcher_scripts/conf/training/*, the file version whose
# layout matches the row): ``ub_tp_comm_overlap`` True in gpt3/20b.yaml, llama/llama2_70b.yaml,
# llama/llama3_70b.yaml (tag 24.07) and in gpt3/175b_mlperf.yaml (121c975d, 2024-07-18: TP4 PP8
# VP6, micro-batch 2, global batch 2048 on 512 GPUs, fp8: the 512-GPU row); False in
# gpt3/175b.yaml (77b69bba, the first TP4 PP8 VP6 version: the 128-GPU row) and in
# nemotron/nemotron_340b.yaml (630e6544, the first TP8 PP8 VP12 version, whose later duplicate
# key says False). Megatron-Bridge v0.1.0rc4 (25.09) and v0.2.0 (25.11) recipes:
# ``tp_comm_overlap=True`` for Llama-3 70B and Llama-3.1 405B, False for DeepSeek-V3
# (recipes/deepseek/deepseek_v3.py). First match wins.
_TP_OVERLAP_RECIPES: dict[tuple[str, str], bool] = {
    ("nemo2407", "gpt3-175b-512gpu"): True,
    ("nemo2407", "gpt3-20b"): True,
    ("nemo2407", "llama2-70b"): True,
    ("nemo2407", "llama3-70b"): True,
    ("nemo2407", "gpt3-175b"): False,
    ("nemo2407", "nemotron-340b"): False,
    ("mbridge", "llama3-70b"): True,
    ("mbridge", "llama3.1-405b"): True,
    ("mbridge", "deepseek-v3"): False,
}


def _tp_overlap(run: PublishedRun, other: dict, tp: int, sp: bool) -> bool:
    """Whether the row's recipe overlaps TP communication (`_TP_OVERLAP_RECIPES`, or the row's
    own ``async_tp``, or its ``ub_tp_comm_overlap`` where it states Transformer Engine's
    userbuffers, which run only with TP > 1 and sequence parallelism)."""
    if other.get("async_tp"):
        return True
    if other.get("ub_tp_comm_overlap") is not None:
        return bool(other["ub_tp_comm_overlap"]) and tp > 1 and sp
    for (prefix, model), on in _TP_OVERLAP_RECIPES.items():
        if run.id.startswith(prefix) and re.search(rf"-{re.escape(model)}(-|$)", run.id):
            if on and tp > 1 and sp:
                run.assumptions.append("TP communication overlapped (the recipe's userbuffers)")
                return True
            return False
    return False


@dataclass
class PublishedRun:
    id: str
    spec: ModelSpec | None = None
    cluster: Cluster | None = None
    strategy: Strategy | None = None
    targets: dict[str, float] = field(default_factory=dict)  # metric -> measured value (SI)
    assumptions: list[str] = field(default_factory=list)
    skip_reason: str | None = None
    source: str = ""


def _act(s: str) -> str:
    s = (s or "").lower()
    if "squared" in s:
        return "squared_relu"
    if "swiglu" in s or "silu" in s:
        return "swiglu"
    if "geglu" in s:
        return "geglu"
    if "relu" in s:
        return "relu"
    return "gelu"


def _spec(r: dict) -> ModelSpec:
    m = r["model"]
    layer_only = any(x["metric"].startswith("layer_") for x in r["measured"])
    if m.get("vocab") is None and not layer_only:
        raise HwtuneInputError("model.vocab", None, "a vocabulary size (not stated in the source)")
    megatron_gpt = m.get("norm", "").startswith("layernorm") and m.get("pos_emb", "").startswith(
        "learned"
    )
    moe = None
    mo = m.get("moe")
    if mo:
        moe = MoE(
            n_routed_experts=mo["n_routed_experts"],
            top_k=mo["top_k"],
            expert_ffn_hidden=mo["expert_ffn_hidden"],
            n_shared_experts=mo.get("n_shared_experts") or 0,
            first_k_dense_layers=mo.get("first_k_dense_layers") or 0,
        )
    mla = None
    other = m.get("other") if isinstance(m.get("other"), dict) else {}
    if m.get("attention") == "mla" and other.get("mla"):
        x = other["mla"]
        mla = MLA(
            **{
                k: x[k]
                for k in (
                    "q_lora_rank",
                    "kv_lora_rank",
                    "qk_nope_head_dim",
                    "qk_rope_head_dim",
                    "v_head_dim",
                )
            }
        )
    att = str(m.get("attention") or "")
    sliding = None
    layer_types = None
    sw = re.search(r"sliding-window\((\d+)\)", att)
    if sw:
        sliding = int(sw.group(1))
        layer_types = tuple("sliding" if i % 2 == 0 else "full" for i in range(m["n_layers"]))
    ffn = (
        m.get("ffn_hidden")
        or (mo or {}).get("dense_ffn_hidden")
        or (mo or {}).get("expert_ffn_hidden")
    )
    return ModelSpec(
        name=m.get("name", r["id"]),
        n_layers=m["n_layers"],
        d_model=m["d_model"],
        n_heads=m["n_heads"],
        n_kv_heads=m.get("n_kv_heads"),
        head_dim=m.get("head_dim"),
        ffn_hidden=ffn,
        ffn_act=_act(m.get("ffn_act")),
        vocab=m["vocab"] or 51200,  # per-layer rows time one layer: the vocabulary plays no part
        tied_embeddings=bool(m.get("tied_embeddings")),
        norm="layernorm" if str(m.get("norm", "")).startswith("layernorm") else "rmsnorm",
        pos_emb="learned" if megatron_gpt else ("alibi" if m.get("pos_emb") == "alibi" else "rope"),
        max_position=m["seq_len"] if megatron_gpt else 0,
        qkv_bias=megatron_gpt or "gpt-oss" in r["id"],
        out_bias=megatron_gpt,
        mlp_bias=megatron_gpt,
        mla=mla,
        moe=moe,
        sliding_window=sliding,
        layer_types=layer_types,
    )


NEMOTRON_VOCAB = 256000
"""Vocabulary of NVIDIA's Nemotron-3/-4 pre-training benchmarks: NeMo's performance scripts build
them with ``NullTokenizer(vocab_size=256000)`` (NVIDIA/NeMo ``scripts/performance/llm/
pretrain_nemotron3_8b.py``, ``pretrain_nemotron3_22b.py``), the size of the family's SentencePiece
model that NeMo-Framework-Launcher's 340B config names (``nemotron_2_256k.model``)."""


def _recipe_vocab(r: dict, run: PublishedRun) -> dict:
    """The row with its vocabulary filled from the benchmark recipe when the table leaves it out
    (NVIDIA's Nemotron rows: `NEMOTRON_VOCAB`); any other row unchanged."""
    m = r.get("model") or {}
    fw = str(r.get("framework") or "")
    if m.get("vocab") is None and str(m.get("name", "")).startswith("Nemotron") and "NeMo" in fw:
        run.assumptions.append(
            f"vocabulary {NEMOTRON_VOCAB} (NeMo's Nemotron performance scripts, NullTokenizer)"
        )
        return r | {"model": m | {"vocab": NEMOTRON_VOCAB}}
    return r


def _nic_gbps(text: str | None, gpus_per_node: int = 8) -> float | None:
    if not text:
        return None
    opa = re.search(r"Omni-Path.*?(\d+)\s*OPA links per node", text)
    if opa:
        # Intel Omni-Path Architecture 100 Series: 100 Gb/s per link (Intel OPA product brief)
        return 100.0 * int(opa.group(1)) / gpus_per_node
    gbit = re.search(r"([\d.]+)\s*Gb/s", text)
    if gbit:
        return float(gbit.group(1))
    gbyte = re.search(r"=\s*([\d.]+)\s*GB/s per GPU", text)
    if gbyte:
        return float(gbyte.group(1)) * 8
    return None


def _grad_accumulation(fw: str, precision: str, zero: int, run: PublishedRun) -> str:
    """DeepSpeed in bf16 below ZeRO-2 trains with its BF16_Optimizer, which adds every
    micro-batch's bf16 gradients into fp32 copies (`estimator.GRAD_ACCUMULATION_BYTES`): the
    BLOOM-176B run (its README: ``--bf16``, ZeRO stage 0 with the bf16 optimizer sharding the
    states). Everything else accumulates in the backward GEMMs (the `Strategy` default)."""
    if "DeepSpeed" in fw and precision == "bf16" and zero <= 1:
        run.assumptions.append(
            "DeepSpeed BF16_Optimizer: each micro-batch's gradients cast to fp32 and added"
        )
        return "fp32-copy"
    return "fused"


def _torch_ddp(run: PublishedRun, dp: int) -> bool:
    """Megatron-LM 2019 with data parallelism ran PyTorch DDP, which overlaps the gradient
    all-reduce with the backward: its README gives the 8.3B model on 512 GPUs 74% scaling "when
    torch's distributed data parallel is used" (60% with its own all-reduce after the backward;
    NVIDIA/Megatron-LM f86bb67, README)."""
    if run.id.startswith("megatron19") and dp > 1:
        run.assumptions.append(
            "PyTorch DDP: gradient all-reduce overlapped (2019 README, 512 GPUs)"
        )
        return True
    return False


def _schedule(p: dict, vpp: int) -> str:
    s = str(p.get("schedule") or "").lower()
    if "interleaved" in s and "not stated" not in s and vpp > 1:
        return "interleaved"
    return "1f1b"


def _zero3_gather(fw: str, zero: int, run: PublishedRun, year: int) -> str:
    """DeepSpeed's ZeRO-3 gathers per module under its live-parameter cap, in 2021 one
    synchronous call per parameter (`estimator.deepspeed_2021_param_gather`); FSDP per block."""
    if zero >= 3 and "DeepSpeed" in fw:
        if year <= 2021:
            run.assumptions.append(
                "ZeRO-3 as DeepSpeed ran it in 2021: one synchronous all-gather per parameter"
            )
            return "parameter"
        run.assumptions.append("ZeRO-3 gathers per module (DeepSpeed stage3 defaults)")
        return "module"
    return "layer"


MBRIDGE_DEEPSEEK_RECOMPUTE: dict[str, tuple[str, ...]] = {
    "25.09": ("mla_up_proj", "mlp"),
    "gb300": ("moe_act",),
    "gb200": ("mla_up_proj",),
    "b200": ("mla_up_proj",),
}
"""What Megatron-Bridge's DeepSeek-V3 performance runs recompute (selective granularity):
the 25.09 scripts (v0.1.0rc3/rc4: ``deepseek_v3_llm_pretrain.yaml`` sets ``recompute_granularity:
selective``, and ``run_script.py`` the modules before that YAML is merged, which names none:
``["mla_up_proj", "mlp"]`` on H100, rc3 line 89, rc4 line 91), and in 25.11 (v0.2.0
``deepseek_llm_pretrain.py`` sets selective; ``workload_base_configs.py`` the modules of each
system)."""


def _deepseek_recompute(r: dict, run: PublishedRun) -> tuple[str, ...] | None:
    """The recompute modules of a Megatron-Bridge DeepSeek-V3 row, or None for another row."""
    fw = str(r.get("framework") or "")
    if "Bridge" not in fw or "deepseek" not in str(r["model"].get("name", "")).lower():
        return None
    key = "25.09" if "25.09" in fw else str(r["hardware"]["gpu"]).lower().split()[-1]
    mods = MBRIDGE_DEEPSEEK_RECOMPUTE.get(key)
    if mods is not None:
        run.assumptions.append(
            "selective recomputation of " + ", ".join(mods) + " (Megatron-Bridge DeepSeek-V3 "
            "performance scripts)"
        )
    return mods


def _recompute(p: dict, run: PublishedRun) -> str:
    if p.get("recompute") is None and run.id.startswith("narayanan21"):
        # Narayanan et al. SC'21 §5: all runs use activation recomputation, and the paper's
        # TFLOP/s convention (eq. 3, the 96 coefficient) counts it.
        run.assumptions.append("full recomputation (Narayanan et al. §5: used in all runs)")
        return "full"
    if p.get("recompute") is None and run.id.startswith("megatron19"):
        # The Megatron-LM README of the paper's time (2019) pretrains GPT-2 with
        # `--checkpoint-activations --checkpoint-num-layers 1` (NVIDIA/Megatron-LM f86bb67,
        # README "GPT-2 Pretraining"), and without it none of these runs fits a 32 GB V100:
        # 48-54 GiB per GPU for the 8.3B model on 8 GPUs, 67 GiB for the 1.2B baseline (the
        # estimate's memory model). The paper gives no FLOP formula: its TFLOP/s are read as
        # model FLOPs (72 L h^2 ...), recomputation not counted, as for every silent source.
        run.assumptions.append(
            "full recomputation (Megatron-LM 2019 README: GPT-2 pretraining checkpoints every "
            "layer; without it the run needs 48-67 GiB per 32 GB V100)"
        )
        return "full"
    s = str(p.get("recompute") or "none").lower()
    if "per-op" in s:
        return "selective-op"
    for k in ("full", "selective"):
        if s.startswith(k):
            return k
    return "none"


BF16_OPTIMIZER_RECIPES: tuple[tuple[str, str], ...] = (("nemo2407", "nemotron-340b"),)
"""Rows whose recipe keeps Adam's moments in bf16 and no fp32 master copy (`Strategy.optimizer`
"adam-bf16"), with bf16 gradients: NeMo-Framework-Launcher at tag 24.07,
``conf/training/nemotron/nemotron_340b.yaml``, ``optim: distributed_fused_adam`` with ``dtype:
bf16`` and ``grad_sync_dtype: bf16`` (the only one of the 24.07 configs of these rows to set
either); NeMo's ``MegatronBaseModel.setup_optimization`` (v2.0.0rc0,
``megatron_base_model.py``) passes that dtype to Apex's ``DistributedFusedAdam`` and stores no
parameter copy when it equals the model's bf16, and the gradient buffer takes
``grad_sync_dtype``."""


def _bridge_a2a_overlap(fw: str, model: str, dev: Device, ep: int, run: PublishedRun) -> bool:
    """Whether a Megatron-Bridge row overlapped the expert all-to-all with another
    micro-batch's compute (``comm_overlap.overlap_moe_expert_parallel_comm``, with
    ``delay_wgrad_compute``): 25.09's ``run_script.py`` (v0.1.0rc3/rc4) sets it for DeepSeek-V3
    on H100 (``A2A_1F1B``); 25.11's ``workload_base_configs.py`` (v0.2.0, ``moe_a2a_overlap=True``)
    for the H100 Qwen3-30B-A3B, Qwen3-235B-A22B and DeepSeek-V3 configs and the B200 Qwen3-235B
    one, and for none of the GB200/GB300 or gpt-oss configs."""
    if "Bridge" not in fw or ep == 1:
        return False
    hopper = dev.architecture == "hopper"
    on = ("25.09" in fw and "deepseek" in model and hopper) or (
        "25.11" in fw
        and (
            (hopper and ("qwen3" in model or "deepseek" in model))
            or ("235b" in model and "b200" in dev.name and "gb200" not in dev.name)
        )
    )
    if on:
        run.assumptions.append(
            "expert all-to-all overlapped with another micro-batch (Megatron-Bridge "
            "overlap_moe_expert_parallel_comm)"
        )
    return on


def _optimizer(run: PublishedRun) -> str:
    """The optimizer state kind of a row: `BF16_OPTIMIZER_RECIPES`; NeMo 24.07's other rows run
    NeMo's distributed Adam in fp32 over a bf16 model, which keeps the master weights as their
    16-bit remainders (``store_param_remainders``; every 24.07 launcher config of these rows
    names ``distributed_fused_adam``); "adam" otherwise."""
    if any(run.id.startswith(src) and key in run.id for src, key in BF16_OPTIMIZER_RECIPES):
        run.assumptions.append(
            "Adam moments and gradients in bf16, no fp32 master copy (NeMo-Framework-Launcher "
            "24.07 recipe: distributed_fused_adam dtype bf16, grad_sync_dtype bf16)"
        )
        return "adam-bf16"
    if run.id.startswith("nemo2407"):
        run.assumptions.append(
            "fp32 Adam keeping 16-bit remainders of the master weights (NeMo 24.07 "
            "distributed_fused_adam over a bf16 model: store_param_remainders)"
        )
        return "adam-remainders"
    return "adam"


def _kernels(fw: str, other: dict, dev: Device, run: PublishedRun) -> tuple[str, bool, str]:
    """(attention kernel, fused elementwise, loss kernel) of the row's framework, from the
    presets of `hwtune.train.frameworks` (their sources are there)."""
    if "torchtitan" in fw:
        name = "torchtitan" if other.get("torch_compile") is False else "torchtitan-compile"
    elif "llm-foundry" in fw:
        name = "llm-foundry"
    elif "Bridge" in fw:
        name = "megatron-bridge"
        run.assumptions.append(
            "Transformer Engine's cross-entropy (Megatron-Bridge performance scripts: "
            "cross_entropy_fusion_impl te)"
        )
    else:
        name = "megatron"  # Megatron-LM, NeMo, Megatron-DeepSpeed
    f = framework_fields(name)
    if f["attention_kernel"] == "fa2" and dev.architecture in FA2_SHARE_OF_BEST:
        run.assumptions.append("FlashAttention-2 kernels (PyTorch SDPA flash / flash-attn 2)")
    if not f["fused_elementwise"]:
        run.assumptions.append("eager elementwise ops (no torch.compile)")
    return str(f["attention_kernel"]), bool(f["fused_elementwise"]), str(f["loss_kernel"])


def _mbridge_2509_h100(r: dict) -> bool:
    """A row of the Megatron-Bridge performance archive's 25.09 DGX-H100 pre-training table."""
    src = r.get("source", {})
    return "Megatron-Bridge" in str(src.get("title", "")) and "25.09 DGX-H100" in str(
        src.get("locator", "")
    )


def _fp8_recipe(r: dict) -> str:
    """Transformer Engine's scaling: rows marked ``fp8-cs`` ran current scaling (Megatron-Bridge
    tables); older fp8 rows (NeMo 24.07, llm-foundry, torchao) delayed or tensor-wise casts."""
    prec = str(r.get("precision") or "").lower()
    return "current" if re.search(r"fp8[-_ ]?cs\b|current", prec) else "delayed"


def from_row(r: dict) -> PublishedRun:
    """Translate one validation row."""
    run = PublishedRun(id=r["id"], source=r.get("source", {}).get("title", ""))
    h, p = r["hardware"], r["parallel"]
    r = _recipe_vocab(r, run)
    try:
        run.spec = _spec(r)
        fw0 = str(r.get("framework") or "")
        tp0 = (r["parallel"].get("tp") or 1) if isinstance(r.get("parallel"), dict) else 1
        if "Megatron" in fw0 or "NeMo" in fw0:
            # Megatron pads the vocabulary to a multiple of 128 x tp (--make-vocab-size-divisible-by)
            q = 128 * tp0
            padded = -(-run.spec.vocab // q) * q
            if padded != run.spec.vocab:
                run.spec = run.spec.model_copy(update={"vocab": padded})
                run.assumptions.append(
                    f"vocabulary padded to {padded} (Megatron: multiple of 128 x tp)"
                )
        dev = get_device(h["gpu"])
    except HwtuneInputError as e:
        run.skip_reason = str(e)
        return run
    n = h["n_gpus"]
    tp, pp, cp = p.get("tp"), p.get("pp") or 1, p.get("cp") or 1
    if tp is None:
        run.skip_reason = "tensor-parallel degree not stated"
        return run
    dp = p.get("dp") or n // (tp * pp * cp)
    unfused = run.id.startswith(_UNFUSED_PREFIXES)
    fw = str(r.get("framework") or "")
    mb = p.get("micro_batch")
    gb = p.get("global_batch")
    other = p.get("other") or {}
    vpp = p.get("vpp") or 1
    act_offload = int(other.get("cpu_offloading_num_layers") or 0)
    if act_offload:
        # Megatron-Core's activation offloading (--cpu-offloading-num-layers: the activations of
        # that many layers go to host memory, over NVLink-C2C on Grace parts)
        run.assumptions.append(
            f"activations of {act_offload} layers offloaded to host memory "
            "(cpu_offloading_num_layers)"
        )
    if mb is None and other.get("local_batch_size") and pp > 1:
        # torchtitan default: as many pipeline micro-batches as stages
        mb = max(1, other["local_batch_size"] // pp)
        run.assumptions.append(
            f"micro-batch {mb} = local batch / pp (torchtitan default micro-batch count)"
        )
    if mb is None and gb and run.id.startswith("megatron19"):
        # Megatron-LM 2019 has no gradient accumulation: ``--batch-size`` is each data-parallel
        # rank's batch ("Data Loader batch size", arguments.py of NVIDIA/Megatron-LM f86bb67)
        mb = gb // dp
        run.assumptions.append(
            f"micro-batch {mb} = global batch / dp (Megatron-LM 2019: no gradient accumulation)"
        )
    if mb is None:
        run.skip_reason = "micro-batch size not stated"
        return run
    if gb is None:
        local = other.get("local_batch_size") or mb * (p.get("grad_accum") or 1)
        gb = local * dp
        run.assumptions.append(f"global batch {gb} = local batch x dp")
    sched = _schedule(p, vpp)
    if "interleaved" in str(p.get("schedule") or "").lower() and vpp == 1 and pp > 1:
        run.assumptions.append(
            "interleaved schedule with unstated stages per rank: modelled as 1F1B"
        )
    if sched != "interleaved":
        vpp = 1
    zero = p.get("zero_stage")
    if zero == 3 and pp > 1 and "torchtitan" in fw:
        # torchtitan with PP keeps FSDP parameters unsharded across the micro-batches of a step
        # (reshard_after_forward=False) and reduces gradients at the last one: ZeRO-1 in memory
        # and traffic (torchtitan parallelize_llama.py, apply_fsdp)
        zero = 1
        run.assumptions.append(
            "FSDP under PP behaves as ZeRO-1 (torchtitan: no reshard after forward)"
        )
    if zero is None:
        zero = 1 if ("NeMo" in fw or "Bridge" in fw) else 0
        run.assumptions.append(
            "ZeRO-1 (NeMo/Megatron-Bridge distributed optimizer)"
            if zero
            else "no ZeRO (not stated)"
        )
    sp = p.get("sequence_parallel")
    if sp is None:
        sp = tp > 1 and ("NeMo" in fw or "Bridge" in fw)
        if sp:
            run.assumptions.append("sequence parallel on with TP (NeMo/Megatron-Bridge default)")
    stated = r.get("precision")
    if stated is None and _mbridge_2509_h100(r):
        stated = "fp8-cs"
        run.assumptions.append(
            "FP8 with current scaling: the 25.09 H100 table has no precision column, and its "
            "footnote gives the parenthesised figures for another FP8 granularity (128x128 "
            "blockwise), so the main figures are FP8 too, in the recipe the 25.11 table names"
        )
    prec_s = str(stated or "bf16").lower()
    if re.match(r"\s*(nv|mx)?fp4", prec_s):  # a 4-bit format named first: the linear layers'
        run.skip_reason = (
            "FP4 linear layers (NVFP4 or MXFP4 training): no cost model for FP4 training here"
        )
        return run
    precision = (
        "fp8"
        if "fp8" in prec_s or "float8" in prec_s
        else ("fp16" if "fp16" in prec_s and "bf16" not in prec_s else "bf16")
    )
    if stated is None:
        run.assumptions.append("precision not stated: bf16")
    ep = p.get("ep") or 1
    kernel, fused, loss = _kernels(fw, other, dev, run)
    dispatch = "alltoall"
    deepseek = "deepseek" in str(r["model"].get("name", "")).lower()
    if deepseek and ("NeMo" in fw or "Bridge" in fw) and dev.architecture == "hopper":
        # NVIDIA's H100 DeepSeek-V3 recipes dispatch with DeepEP ("For H100 we use deepEP":
        # NeMo scripts/performance/llm/*deepseek_v3*.py; Megatron MoE Model Zoo, DeepSeek-V3
        # best practice: --moe-token-dispatcher-type flex --moe-enable-deepep). The Qwen3 and
        # gpt-oss providers default to the all-to-all dispatcher (Megatron-Bridge; their H100
        # configs moved to the flex dispatcher only in 2026).
        dispatch = "deepep"
        run.assumptions.append("DeepEP dispatch (NVIDIA H100 DeepSeek-V3 recipes)")
    fp8_saved_inputs = "torchtitan" not in fw
    # fp8 weights as the run's configuration states them (Megatron-Core fp8_param_gather,
    # NeMo's fp8_params): the MLPerf rows of benchmarks/data/training_mlperf.jsonl
    said = f"{r.get('precision_detail') or ''} {other}"
    states = {m.lower() for m in re.findall(r"fp8_param(?:s|_gather)['\"]?\s*[=:]\s*['\"]?(true|false)",
                                            said, re.IGNORECASE)}  # fmt: skip
    if len(states) > 1:
        run.skip_reason = "fp8_param_gather: the row states both true and false"
        return run
    fp8_params = precision == "fp8" and states == {"true"}
    if fp8_params:
        run.assumptions.append("fp8 weights (the run's fp8_param_gather / fp8_params)")
    if precision == "fp8" and not fp8_saved_inputs:
        run.assumptions.append("fp8 through torchao Float8Linear: linear inputs kept in bf16")
    split = "layers"
    name = str(r["model"].get("name", "")).lower()
    if "Bridge" in fw and pp > 1 and ("405b" in name or "235b" in name):
        # Megatron-Bridge's Llama 3.1 405B and Qwen3-235B-A22B recipes count the embedding and
        # the loss as pipeline layers (src/megatron/bridge/recipes/llama/llama3.py
        # llama31_405b_pretrain_config and recipes/qwen/qwen3_moe.py
        # qwen3_235b_a22b_pretrain_config at v0.2.0 and v0.3.0; recipes/qwen/qwen3_235b_a22b.py
        # and llama/llama31_405b.py at v0.1.0rc4), which the performance scripts keep
        split = "layers+embedding+loss"
        run.assumptions.append(
            "embedding and loss counted as pipeline layers (Megatron-Bridge recipe: "
            "account_for_embedding/loss_in_pipeline_split)"
        )
    emb_stated = other.get("account_for_embedding_in_pipeline_split")
    loss_stated = other.get("account_for_loss_in_pipeline_split")
    if emb_stated is not None or loss_stated is not None:  # the row's own Megatron settings
        for key, v in (("embedding", emb_stated), ("loss", loss_stated)):
            if not isinstance(v, bool):  # the text "false" would count as true
                raise HwtuneInputError(
                    f"{run.id}.parallel.other.account_for_{key}_in_pipeline_split", v,
                    "true or false, beside its pair",
                )  # fmt: skip
        if emb_stated != loss_stated:
            raise HwtuneInputError(
                f"{run.id}.parallel.other.account_for_loss_in_pipeline_split", loss_stated,
                f"the same as account_for_embedding_in_pipeline_split ({emb_stated}): hwtune "
                "prices the embedding and the loss counted as layers together or not at all",
            )  # fmt: skip
        split = "layers+embedding+loss" if emb_stated else "layers"
    mtp = 0
    if "Bridge" in fw and "25.09" in fw and deepseek and dev.architecture == "hopper":
        # run_script.py of v0.1.0rc3/rc4 (25.09) builds the H100 run with layout="Et|(tt|)*30mL"
        # over PP 8 x VP 4, and the recipe's mtp_num_layers default of 1, which Megatron-Core
        # checks against the layout's m (validate_layer_layout)
        split, mtp = "Et|(tt|)*30mL", 1
        run.assumptions.append(
            "pipeline layout Et|(tt|)*30mL with one multi-token-prediction module "
            "(Megatron-Bridge 25.09 run_script.py and DeepSeek-V3 recipe)"
        )
    ds_mods = _deepseek_recompute(r, run) if p.get("recompute") is None else None
    reduce_dtype = None
    mp = other.get("fsdp_mixed_precision")
    if mp in ("DEFAULT", "FULL"):
        # Composer's FSDP mixed precision: DEFAULT keeps reduce_dtype fp32 (param and compute
        # in the autocast dtype), FULL is all fp32, PURE all 16-bit (Composer FSDP docs)
        reduce_dtype = "fp32"
        run.assumptions.append(f"gradients reduced in fp32 (Composer fsdp_mixed_precision {mp})")
    if "Bridge" in fw:
        # every Megatron-Bridge performance script sets cfg.ddp.grad_reduce_in_fp32 = False
        # (scripts/performance/configs/*: the YAMLs of v0.1.0rc3-rc4 = 25.09, the *_llm_pretrain.py
        # of v0.2.0 = 25.11 and v0.3.0 = 26.02, for Llama 3/3.1, Qwen3, DeepSeek-V3, gpt-oss),
        # so Megatron-Core's gradient buffer is bf16, not the fp32 of its --bf16 default
        reduce_dtype = "bf16"
        run.assumptions.append(
            "gradients kept and reduced in bf16 (Megatron-Bridge performance scripts: "
            "grad_reduce_in_fp32 = False)"
        )
    fp32_grads = other.get("grad_reduce_in_fp32")  # the row's own Megatron DDP setting
    if fp32_grads is not None:
        if not isinstance(fp32_grads, bool):
            raise HwtuneInputError(f"{run.id}.parallel.other.grad_reduce_in_fp32", fp32_grads,
                                   "true or false")  # fmt: skip
        reduce_dtype = "fp32" if fp32_grads else "bf16"
    optimizer = _optimizer(run)
    if optimizer == "adam-bf16":
        reduce_dtype = "bf16"
    try:
        run.cluster = make_cluster(
            dev,
            n,
            gpus_per_node=h.get("gpus_per_node"),
            nic_gbps=_nic_gbps(h.get("inter_node_per_gpu")),
        )
        run.strategy = make_strategy(
            precision=precision, dp=dp, tp=tp, pp=pp, ep=ep, cp=cp, sequence_parallel=bool(sp) and tp > 1,
            zero=zero, micro_batch=mb, global_batch=gb, seq=r["model"]["seq_len"], vpp=vpp, schedule=sched,
            recompute="selective" if ds_mods else _recompute(p, run),
            recompute_modules=ds_mods or ("core_attn",),
            flash_attention=not unfused, dropout=unfused,
            overlap_tp_comm=_tp_overlap(run, other, tp, bool(sp)), overlap_p2p_comm=not unfused,
            overlap_grad_reduce=not unfused or (zero >= 3 and "DeepSpeed" in fw) or _torch_ddp(run, dp),
            attention_kernel=kernel,
            fused_elementwise=fused, grad_reduce_dtype=reduce_dtype, loss_kernel=loss,
            moe_dispatch=dispatch, fp8_recipe=_fp8_recipe(r | {"precision": stated}),
            zero3_gather=_zero3_gather(fw, zero, run, int(r["source"].get("year") or 9999)),
            grad_accumulation=_grad_accumulation(fw, precision, zero, run),
            fp8_saved_inputs=fp8_saved_inputs, pipeline_split=split, fp8_param_gather=fp8_params,
            offload_activation_layers=act_offload, optimizer=optimizer, mtp_layers=mtp,
            overlap_moe_a2a=_bridge_a2a_overlap(fw, name, dev, ep, run),
        )  # fmt: skip
        run.strategy.validate_for(run.spec, n)
    except HwtuneInputError as e:
        run.skip_reason = str(e)
        return run
    run.targets = _targets(r, run.spec, getattr(dev.peak_tflops, dev.sixteen_bit_dtype))
    if not run.targets:
        run.skip_reason = "no throughput or memory figure the estimator predicts"
    return run


def megatron_flops_per_token(spec: ModelSpec, seq: int, recompute: bool) -> float:
    """Narayanan et al. SC'21 eq. 3 per token, the convention of the sources that report
    ``tflops_per_gpu``: 96 L h^2 (1 + s/(6h) + V/(16 L h)) with full recomputation. Without it
    the transformer part loses the repeated forward (96 -> 72) while the logit layer, which is
    never recomputed, keeps its 6 s h V per sequence (forward 2, backward 4), so the count is
    72 L h^2 (1 + s/(6h) + V/(12 L h)): Korthikanti et al. 2022's model FLOPs, whose MFU it
    reproduces (54.2% for the 530B model's 39.15 s iteration on 2240 A100s, a test)."""
    h, L = spec.d_model, spec.n_layers
    if recompute:
        return 96 * L * h * h * (1 + seq / (6 * h) + spec.vocab / (16 * L * h))
    return 72 * L * h * h * (1 + seq / (6 * h) + spec.vocab / (12 * L * h))


def _targets(r: dict, spec: ModelSpec, gpu_peak_tflops: float | None = None) -> dict[str, float]:
    meas = {m["metric"]: m for m in r["measured"]}
    t: dict[str, float] = {}
    seq = r["model"]["seq_len"]
    if "layer_forward_time" in meas:
        # Korthikanti et al. Table 4: one layer's forward and backward, milliseconds
        t["layer_forward_s"] = float(meas["layer_forward_time"]["value"]) / 1e3
        t["layer_backward_s"] = float(meas["layer_backward_time"]["value"]) / 1e3
        return t
    if "tokens_per_sec_per_gpu" in meas:
        t["tokens_per_s_per_gpu"] = float(meas["tokens_per_sec_per_gpu"]["value"])
    elif "iteration_time" in meas:
        t["step_time_s"] = float(meas["iteration_time"]["value"])
    elif "tflops_per_gpu" in meas or "weak_scaling_efficiency_vs_1gpu_baseline" in meas:
        if "tflops_per_gpu" in meas:
            tf = float(meas["tflops_per_gpu"]["value"])
        else:
            tf = 39.0 * float(meas["weak_scaling_efficiency_vs_1gpu_baseline"]["value"]) / 100
        rec = "full" in str(r["parallel"].get("recompute") or "") or r["id"].startswith(
            ("narayanan21-t2", "bloom")
        )
        # convert with the source's own FLOP formula: a convention-free tokens/s per GPU
        t["tokens_per_s_per_gpu"] = tf * 1e12 / megatron_flops_per_token(spec, seq, rec)
    elif "mfu" in meas and gpu_peak_tflops:
        # model FLOPs utilization in Korthikanti et al.'s convention (model FLOPs, no
        # recomputation counted, over the dense 16-bit peak): tokens/s per GPU
        mfu = float(meas["mfu"]["value"]) / 100
        t["tokens_per_s_per_gpu"] = (
            mfu * gpu_peak_tflops * 1e12 / megatron_flops_per_token(spec, seq, False)
        )
    if "peak_memory" in meas:
        t["peak_memory_bytes"] = float(meas["peak_memory"]["value"]) * 2**30
    return t


def load_published(path: str | Path) -> list[PublishedRun]:
    """All rows of a ``training_published.jsonl`` file, translated."""
    out = []
    for line in Path(path).read_text().splitlines():
        if line.strip():
            out.append(from_row(json.loads(line)))
    return out
