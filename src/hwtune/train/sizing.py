"""Hardware-aware model sizing (`hwtune size`).

Two services, after Anthony et al. 2024, "The Case for Co-Designing Model Architectures with
Hardware" (rules: vocabulary a multiple of 64, b*s, h/a and h/t divisible by large powers of
two, (b*a)/t an integer, small t; SwiGLU width 10,922 vs 10,944 on an H100) and the AMD
MI300X MoE sizing guidance (expert widths and token counts that fill the 304 CUs):

- `check`: every GEMM of a layer on one TP rank is costed with the roofline and quantization
  model of `cost.compute`; the time lost to tile, wave and alignment quantization (against
  the same GEMM at full quantization efficiency) is reported per dimension, in seconds per step.
- `propose`: shapes for a target parameter count (dense or MoE) that keep the count within a
  tolerance and maximize predicted throughput on the device, next to the naive shape.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import get_args

from hwtune.cost.compute import alignment_efficiency, gemm_time, quantization_efficiency
from hwtune.errors import HwtuneInputError
from hwtune.hardware.device import Device
from hwtune.model import params as P
from hwtune.model.lowering import Shard, layer_classes, lower_head, lower_layer
from hwtune.model.spec import MAX_LAYERS, ModelSpec, MoE
from hwtune.train.estimator import default_precision


@dataclass
class SizeIssue:
    where: str  # the GEMM and the model dimension behind it
    shape: tuple[int, int, int]  # per-rank (m, n, k)
    efficiency: float  # quantization x alignment efficiency of the GEMM
    lost_s_per_step: float  # time lost per training step on this rank (all layers, fwd + bwd)
    advice: str


def check_job(dev: Device, dtype: str, **sizes: int) -> None:
    """One-line errors for sizes below 1 and a precision the device has no peak for."""
    from hwtune.train.strategy import Precision

    for name, v in sizes.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise HwtuneInputError(name, v, "a positive integer")
    if dtype not in get_args(Precision):
        raise HwtuneInputError("precision", dtype, f"one of {', '.join(get_args(Precision))}")
    from hwtune.train.estimator import check_training_precision

    check_training_precision(dtype, dev)  # names the precisions this device trains in


def _gemm_loss(m: int, n: int, k: int, batch: int, dev: Device, dtype: str) -> tuple[float, float]:
    """(efficiency, seconds lost) of one forward GEMM against its perfectly quantized twin."""
    eff = quantization_efficiency(m, n, dev, batch, k) * alignment_efficiency(n, k, dtype)
    t = gemm_time(m, n, k, dev, dtype, batch)
    return eff, t * (1.0 - eff)


_DIM_OF = {
    "qkv_proj": "attention heads x head_dim (n) / hidden (k)",
    "o_proj": "hidden (n) / heads x head_dim per TP rank (k)",
    "mlp_up": "FFN width per TP rank (n)",
    "mlp_down": "hidden (n) / FFN width per TP rank (k)",
    "expert_up": "expert width (n) / routed tokens per expert (m)",
    "expert_down": "hidden (n) / expert width (k)",
    "shared_up": "shared-expert width per TP rank (n)",
    "shared_down": "shared-expert width per TP rank (k)",
    "lm_head": "vocabulary per TP rank (n)",
    "router": "number of experts (n)",
}


def check(
    spec: ModelSpec, dev: Device, tp: int = 1, micro_batch: int = 1, seq: int = 4096,
    dtype: str | None = None, threshold: float = 0.97,
) -> list[SizeIssue]:  # fmt: skip
    """GEMMs below ``threshold`` quantization x alignment efficiency, worst loss first
    (``dtype`` None: `default_precision`, bf16 or fp16 on V100)."""
    dtype = dtype or default_precision(dev)
    check_job(dev, dtype, tp=tp, micro_batch=micro_batch, seq=seq)
    if spec.n_heads % tp:
        raise HwtuneInputError("tp", tp, f"a divisor of the {spec.n_heads} attention heads")
    sh = Shard(tokens=micro_batch * seq, seq=seq, tp=tp)
    issues: dict[str, SizeIssue] = {}
    for (lt, moe), idx in layer_classes(spec).items():
        for op in lower_layer(spec, lt, moe, sh):
            if op.kind != "gemm" or op.attention_core:
                continue
            eff, lost = _gemm_loss(op.m, op.n, op.k, op.batch, dev, dtype)
            if eff >= threshold:
                continue
            # forward + backward (3x the forward GEMM work) for every layer of this class
            total = 3 * lost * len(idx)
            prev = issues.get(op.name)
            issues[op.name] = SizeIssue(
                f"{op.name}: {_DIM_OF.get(op.name, op.name)}", (op.m, op.n, op.k), eff,
                total + (prev.lost_s_per_step if prev else 0.0), _advice(op.name, op.m, op.n, op.k, dev, dtype),
            )  # fmt: skip
    for op in lower_head(spec, sh):
        if op.kind == "gemm":
            eff, lost = _gemm_loss(op.m, op.n, op.k, op.batch, dev, dtype)
            if eff < threshold:
                issues[op.name] = SizeIssue(f"{op.name}: {_DIM_OF['lm_head']}", (op.m, op.n, op.k), eff,
                                            3 * lost, _advice(op.name, op.m, op.n, op.k, dev, dtype))  # fmt: skip
    return sorted(issues.values(), key=lambda i: -i.lost_s_per_step)


def _advice(name: str, m: int, n: int, k: int, dev: Device, dtype: str) -> str:
    tm, tn = dev.gemm_tile
    tips = []
    if alignment_efficiency(n, k, dtype) < 1:
        tips.append("make n and k multiples of 8 (16 B): the misaligned kernel runs ~31% slower")
    if n % tn:
        tips.append(
            f"n={n} is not a multiple of the {tn}-wide tile: pad to {math.ceil(n / tn) * tn}"
        )
    if m % tm:
        tips.append(f"m={m} (tokens) is not a multiple of {tm}: change micro-batch x sequence")
    tiles = math.ceil(m / tm) * math.ceil(n / tn)
    if tiles % dev.sm_count and tiles < 8 * dev.sm_count:
        tips.append(
            f"{tiles} tiles on {dev.sm_count} SMs leave the last wave {tiles % dev.sm_count / dev.sm_count:.0%} full"
        )
    return "; ".join(tips) or "quantization loss"


# ---------------------------------------------------------------------------- proposals
@dataclass
class Proposal:
    spec: ModelSpec
    params: int
    tokens_per_s: float  # predicted training tokens/s on one device (per-rank layer costs)
    note: str


def _round(x: float, q: int) -> int:
    return max(q, int(round(x / q)) * q)


def layer_time_per_token(
    spec: ModelSpec, dev: Device, tokens: int, dtype: str | None = None
) -> float:
    """Forward + backward seconds per token of the whole model on one device (no parallelism;
    ``dtype`` None: `hwtune.train.estimator.default_precision`)."""
    from hwtune.train.estimator import _layer_times

    dtype = dtype or default_precision(dev)

    sh = Shard(tokens=tokens, seq=tokens)
    t = 0.0
    for (lt, moe), idx in layer_classes(spec).items():
        x = _layer_times(spec, lt, moe, sh, dev, dtype)
        t += (x.fwd + x.dgrad + x.wgrad) * len(idx)
    for op in lower_head(spec, sh):
        if op.kind == "gemm":
            t += 3 * gemm_time(op.m, op.n, op.k, dev, dtype)
    return t / tokens


def naive_shape(base: ModelSpec, target: float) -> ModelSpec:
    """The textbook shape for ``target`` parameters: the base's depth-to-width ratio and FFN
    ratio, head count scaled with the width, nothing rounded to hardware-friendly sizes: what a
    co-design pass starts from."""
    rho = base.d_model / base.n_layers
    ratio = (base.moe.expert_ffn_hidden if base.moe else base.ffn_hidden) / base.d_model
    best: tuple[float, ModelSpec] | None = None
    for L in range(2, 400):
        h = int(round(rho * L))
        heads = max(1, round(h / base.hd))
        kv = math.gcd(heads, base.kv_heads) if base.kv_heads < base.n_heads else heads
        f = int(h * ratio)
        upd: dict = {"n_layers": L, "d_model": h, "n_heads": heads, "n_kv_heads": kv,
                     "head_dim": max(1, h // heads), "layer_types": None,
                     "name": f"naive-{target / 1e9:.3g}B"}  # fmt: skip
        if base.moe:
            upd["moe"] = MoE(
                **{**base.moe.__dict__, "expert_ffn_hidden": f, "shared_expert_ffn_hidden": None}
            )
            upd["ffn_hidden"] = int(h * base.ffn_hidden / base.d_model)
        else:
            upd["ffn_hidden"] = f
        s = base.model_copy(update=upd)
        err = abs(P.total_params(s) / target - 1)
        if best is None or err < best[0]:
            best = (err, s)
        if P.total_params(s) > target * 1.5:
            break
    assert best is not None
    return best[1]


def propose(
    base: ModelSpec, target: float, dev: Device, tolerance: float = 0.02, tokens: int = 8192,
    dtype: str | None = None, top: int = 5,
) -> tuple[Proposal, list[Proposal]]:  # fmt: skip
    """Shapes near ``target`` parameters (within ``tolerance``), fastest first, and the naive one.

    Searched: hidden size (multiples of 256 within 15% of the naive width, so the depth-to-width
    ratio stays the base's), head dim the base's (128 under MLA) where it divides that width, else
    128 or 64, layers, FFN or expert
    width (multiples of 256) around the base's FFN/hidden ratio, the base's number of KV heads, the
    vocabulary padded to a multiple of 128. MoE keeps the base's expert count and top-k."""
    if not (math.isfinite(target) and target > 0):
        raise HwtuneInputError("target", target, "a positive finite parameter count")
    if not 0 < tolerance < 0.5:
        raise HwtuneInputError("tolerance", tolerance, "a fraction in (0, 0.5)")
    dtype = dtype or default_precision(dev)  # bf16, fp16 on V100
    check_job(dev, dtype, tokens=tokens, top=top)
    hd_base = base.hd if base.mla is None else 128
    vocab = -(-base.vocab // 128) * 128
    kv_fixed = base.kv_heads if base.kv_heads < base.n_heads else None  # GQA: keep the KV heads
    moe = base.moe
    ffn_ratio = (moe.expert_ffn_hidden if moe else base.ffn_hidden) / base.d_model
    cands: list[Proposal] = []
    seen: set[str] = set()
    base_kw = {k: v for k, v in base.__dict__.items() if not k.startswith("_")}
    nv = naive_shape(base, target)
    lo, hi = int(nv.d_model * 0.85), int(nv.d_model * 1.15)
    for h in range((lo // 256 + 1) * 256, hi + 1, 256):
        # the base's head dim where it divides the width, else the power of two that does (a
        # base of head dim 96, GPT-3's, has no width among the multiples of 256 it splits)
        hd = next((d for d in (hd_base, 128, 64) if h % d == 0 and not (kv_fixed and (h // d) % kv_fixed)), 0)  # fmt: skip
        if not hd:
            continue
        heads = h // hd
        for fr in (ffn_ratio * x for x in (0.9, 1.0, 1.1)):
            f = _round(h * fr, 256)
            upd = dict(base_kw, d_model=h, n_heads=heads, n_kv_heads=kv_fixed or heads, head_dim=hd,
                       vocab=vocab, mla=None if base.mla is None else base.mla, layer_types=None,
                       name=f"proposed-h{h}-f{f}")  # fmt: skip
            if moe:
                upd["moe"] = MoE(**{**moe.__dict__, "expert_ffn_hidden": f,
                                    "shared_expert_ffn_hidden": None})  # fmt: skip
                upd["ffn_hidden"] = _round(base.ffn_hidden / base.d_model * h, 256)
            else:
                upd["ffn_hidden"] = f
            # the base's leading dense layers (DeepSeek's first_k_dense_replace) stay; the
            # layer count grows by the repeated (MoE) layer beyond them
            k = moe.first_k_dense_layers if moe else 0
            per1 = P.total_params(ModelSpec(**{**upd, "n_layers": k + 1}))
            per2 = P.total_params(ModelSpec(**{**upd, "n_layers": k + 2}))
            layer = per2 - per1
            n_lay = k + 1 + round((target - per1) / layer)
            if n_lay < max(2, k + 1) or n_lay > MAX_LAYERS:
                continue
            s = ModelSpec(**{**upd, "n_layers": n_lay})
            n = P.total_params(s)
            if abs(n / target - 1) > tolerance:
                continue
            tps = 1.0 / layer_time_per_token(s, dev, tokens, dtype)
            note = f"h={h} heads={heads} L={n_lay} ffn={f}"
            if note not in seen:  # width ratios that round to the same width propose one shape
                seen.add(note)
                cands.append(Proposal(s, n, tps, note))
    if not cands:
        raise HwtuneInputError(
            "target",
            target,
            f"a parameter count reachable within {tolerance:.0%} with at most "
            f"{MAX_LAYERS:,} layers around the base model's width",
        )
    # equal-quality proxy: rank by predicted throughput at equal parameter count
    cands.sort(key=lambda p: -p.tokens_per_s * p.params / target)
    naive = Proposal(nv, P.total_params(nv), 1.0 / layer_time_per_token(nv, dev, tokens, dtype),
                     f"h={nv.d_model} heads={nv.n_heads} L={nv.n_layers} ffn={nv.ffn_hidden} (unrounded)")  # fmt: skip
    return naive, cands[:top]
