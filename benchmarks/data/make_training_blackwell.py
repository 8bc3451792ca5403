"""Write benchmarks/data/training_blackwell.jsonl: the Blackwell rows of Megatron-Bridge's
performance summary (docs/performance-summary-archive.md, NeMo 25.11 and 26.02 containers), in
the schema of shared/validation/training_published.jsonl.

Each row takes its model block from the H100 row of the same table in the shared file (the same
model names) and its hardware, parallel layout, precision and measured figures from the Blackwell
table. Only rows in BF16 or FP8 with current scaling (MXFP8 and NVFP4 have no cost model here).

    python benchmarks/data/make_training_blackwell.py
"""

import copy
import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHARED = (
    Path(os.environ.get("HWTUNE_VALIDATION_DIR", ROOT.parent / "shared" / "validation"))
    / "training_published.jsonl"
)
OUT = ROOT / "benchmarks" / "data" / "training_blackwell.jsonl"
shared = [json.loads(line) for line in SHARED.open()]
h100 = {r["id"]: r for r in shared if r["id"].startswith("mbridge")}
base = {
    "llama3-8b": h100["mbridge-25.11-h100-llama3-8b-fp8-cs-8gpu"],
    "llama3-70b": h100["mbridge-25.11-h100-llama3-70b-fp8-cs-64gpu"],
    "llama3.1-405b": h100["mbridge-25.11-h100-llama3.1-405b-fp8-cs-1024gpu"],
    "gpt-oss-120b": h100["mbridge-25.11-h100-gpt-oss-120b-bf16-64gpu"],
    "qwen3-235b-a22b": h100["mbridge-25.11-h100-qwen3-235b-a22b-fp8-cs-256gpu"],
    "deepseek-v3": h100["mbridge-25.09-h100-deepseek-v3-na-1024gpu"],
}
GPU = {
    "DGX-B200": ("NVIDIA B200", 180, 8, "NVLink5 + NVSwitch (DGX B200)"),
    "DGX-GB200": ("NVIDIA GB200", 186, 4, "NVLink5, 72-GPU NVL72 domain"),
    "DGX-GB300": ("NVIDIA GB300", 288, 4, "NVLink5, 72-GPU NVL72 domain"),
    "DGX-B300": ("NVIDIA B300", 288, 8, "NVLink5 + NVSwitch (DGX B300)"),
}
# (system, model, gpus, precision, gbs, mbs, seq, fsdp, tp, pp, cp, vp, ep, tokens/s/GPU, model TFLOP/s/GPU)
ROWS_2511 = [
    ("DGX-GB300", "llama3-8b", 8, "fp8-cs", 128, 2, 8192, 0, 1, 1, 1, None, 1, 37556, 1933),
    ("DGX-GB300", "llama3-70b", 64, "fp8-cs", 256, 2, 8192, 64, 1, 1, 1, 1, 1, 4520, 2030),
    ("DGX-GB300", "llama3.1-405b", 256, "fp8-cs", 1536, 1, 8192, 0, 2, 8, 2, 4, 1, 999, 2522),
    ("DGX-GB300", "gpt-oss-120b", 64, "bf16", 1280, 2, 8192, 0, 1, 1, 1, 1, 64, 18347, 565),
    ("DGX-GB300", "qwen3-235b-a22b", 256, "bf16", 8192, 2, 4096, 0, 1, 4, 1, 12, 16, 6131, 907),
    ("DGX-GB300", "deepseek-v3", 256, "bf16", 4096, 1, 4096, 0, 1, 2, 1, 4, 32, 3848, 961),
    ("DGX-GB200", "llama3-8b", 8, "fp8-cs", 128, 2, 8192, 0, 1, 1, 1, None, 1, 31508, 1622),
    ("DGX-GB200", "llama3-70b", 64, "fp8-cs", 256, 2, 8192, 64, 1, 1, 1, 1, 1, 4312, 1937),
    ("DGX-GB200", "llama3.1-405b", 256, "fp8-cs", 1536, 1, 8192, 0, 4, 16, 1, 4, 1, 813, 2053),
    ("DGX-GB200", "gpt-oss-120b", 64, "bf16", 1280, 1, 8192, 0, 1, 1, 1, 1, 64, 15876, 488),
    ("DGX-GB200", "qwen3-235b-a22b", 256, "bf16", 8192, 1, 4096, 0, 1, 8, 1, 3, 32, 4916, 728),
    ("DGX-GB200", "deepseek-v3", 256, "bf16", 4096, 1, 4096, 0, 1, 4, 1, 4, 64, 3139, 782),
    ("DGX-B200", "llama3-8b", 8, "fp8-cs", 128, 2, 8192, 0, 1, 1, 1, None, 1, 30624, 1576),
    ("DGX-B200", "llama3.1-405b", 128, "fp8-cs", 64, 1, 8192, 0, 4, 8, 2, 8, 1, 661, 1667),
    ("DGX-B200", "gpt-oss-120b", 64, "bf16", 512, 4, 4096, 0, 1, 1, 1, 1, 8, 8213, 223),
]
FP8_2602 = "FP8 (the 26.02 table says FP8 beside MXFP8 and NVFP4; taken as current scaling, the 25.11 FP8-CS recipe)"
ROWS_2602 = [
    ("DGX-GB300", "llama3-70b", 64, FP8_2602, 256, 2, 8192, 64, 1, 1, 1, None, 1, 5003, 2248),
    ("DGX-GB200", "llama3-70b", 64, FP8_2602, 256, 2, 8192, 64, 1, 1, 1, None, 1, 4040, 1815),
    ("DGX-GB300", "llama3.1-405b", 256, FP8_2602, 1536, 1, 8192, 0, 4, 8, 1, 4, 1, 988, 2495),
    ("DGX-GB200", "llama3.1-405b", 256, FP8_2602, 1536, 1, 8192, 0, 4, 16, 1, 4, 1, 793, 2004),
    ("DGX-GB300", "gpt-oss-120b", 64, "bf16", 1280, 4, 4096, 0, 1, 1, 1, None, 64, 19412, 527),
    ("DGX-GB200", "gpt-oss-120b", 64, "bf16", 1280, 4, 4096, 0, 1, 1, 1, None, 64, 15784, 428),
    ("DGX-B300", "gpt-oss-120b", 64, "bf16", 1280, 4, 4096, 0, 1, 1, 1, None, 64, 8359, 228),
    ("DGX-B200", "gpt-oss-120b", 64, "bf16", 1280, 4, 4096, 0, 1, 1, 1, None, 64, 8047, 219),
]
out = []
ALL = [("25.11", r) for r in ROWS_2511] + [("26.02", r) for r in ROWS_2602]
for release, (sysname, model, n, prec, gbs, mbs, seq, fsdp, tp, pp, cp, vp, ep, tok, tfl) in ALL:
    b = base[model]
    r = copy.deepcopy(b)
    gpu, mem, gpn, intra = GPU[sysname]
    short = "fp8" if prec.startswith("FP8") else prec
    r["id"] = f"mbridge-{release}-{sysname.lower().replace('dgx-', '')}-{model}-{short}-{n}gpu"
    r["source"] = {
        "title": f"Megatron-Bridge performance summary (NeMo {release} container), {sysname}",
        "locator": (
            f"25.11 NeMo Container, Pre-Training Performance, System: {sysname}"
            if release == "25.11"
            else f"26.02 NeMo Container, Pre-Training Performance, Model table, row {sysname}"
        ),
        "url": "https://github.com/NVIDIA-NeMo/Megatron-Bridge/blob/main/docs/performance-summary-archive.md",
        "year": 2025 if release == "25.11" else 2026,
    }
    r["model"] = copy.deepcopy(b["model"])
    r["model"]["seq_len"] = seq
    r["hardware"] = {
        "gpu": gpu,
        "gpu_memory_gb": mem,
        "n_gpus": n,
        "gpus_per_node": gpn,
        "n_nodes": max(1, n // gpn),
        "intra_node": intra,
        "inter_node_per_gpu": None,
        "system": sysname,
        "other": None,
    }
    p = copy.deepcopy(b["parallel"])
    dp = n // (tp * pp * cp)
    p.update(
        {
            "tp": tp,
            "pp": pp,
            "cp": cp,
            "dp": dp,
            "vpp": vp,
            "micro_batch": mbs,
            "global_batch": gbs,
            "global_batch_tokens": gbs * seq,
            "grad_accum": gbs // (mbs * dp),
            "ep": ep if ep > 1 else None,
            "zero_stage": 3 if fsdp else None,
        }
    )
    p["other"] = dict(p.get("other") or {}, fsdp_column=fsdp)
    if model == "llama3-70b" and fsdp:
        # Megatron-Bridge scripts/performance/configs/llama/llama3_workload_base_configs.py
        # (commit 00919dcf): LLAMA3_70B_PRETRAIN_CONFIG_{GB300,GB200}_FP8_CS_V2 use Megatron-FSDP
        # with cpu_offloading_num_layers 20 (GB300) and 40 (GB200)
        p["other"]["cpu_offloading_num_layers"] = 20 if sysname == "DGX-GB300" else 40
    r["parallel"] = p
    r["precision"] = prec
    r["framework"] = f"Megatron-Bridge / Megatron-Core (NeMo {release} container)"
    r["measured"] = [
        {
            "metric": "tokens_per_sec_per_gpu",
            "value": tok,
            "unit": "tokens/s per GPU",
            "kind": "measured",
        },
        {
            "metric": "model_tflops_per_gpu",
            "value": tfl,
            "unit": "TFLOP/s per GPU",
            "kind": "measured",
        },
    ]
    r["notes"] = (
        "Blackwell row of the same table as the H100 row it copies the model from "
        f"({b['id']}); MoE rows force-balance the routing and are token-dropless "
        "(table footnote)."
    )
    out.append(r)
with OUT.open("w") as f:
    for r in out:
        f.write(json.dumps(r) + "\n")
print(len(out))
