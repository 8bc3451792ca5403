"""Read a Hugging Face ``config.json`` (or a plain dict of its keys) into a `ModelSpec`.

Key meanings follow the configuration classes of Hugging Face *transformers*
(``configuration_llama.py``, ``configuration_mixtral.py``, ``configuration_qwen2_moe.py``,
``configuration_qwen3_moe.py``, ``configuration_deepseek_v3.py``, ``configuration_gpt_oss.py``,
``configuration_olmoe.py``, ``configuration_gpt2.py``, ``configuration_gpt_neox.py``,
``configuration_llama4.py``, ``configuration_qwen3_next.py``) and the ``configuration_*.py`` files
shipped with the checkpoints that define their own (DeepSeek-V2/V3, Kimi-K2, MiniMax-M2, GLM-5).

Families read explicitly: llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, deepseek_v2,
deepseek_v3, kimi_k2 / kimi_k25, glm_moe_dsa, minimax_m2, gpt_oss, olmoe, gpt2, gpt_neox, llama4,
qwen3_next, qwen3_5_moe. Any other decoder-only family is read from the common keys. A dict in
hwtune's own vocabulary (``n_layers``, ``d_model``, ... as in ``validation/training_published.jsonl``,
e.g. the Megatron GPT shapes of Narayanan et al. SC'21) is accepted as well.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from hwtune.errors import HwtuneInputError, from_validation_error
from hwtune.model.spec import MLA, LinearAttention, ModelSpec, MoE

# Families whose MLP is a plain two-matrix MLP (no gate), with LayerNorm and biases by default.
_PLAIN_MLP = {
    "gpt2",
    "gpt_neox",
    "gptj",
    "gpt_neo",
    "gpt_bigcode",
    "opt",
    "bloom",
    "falcon",
    "mpt",
    "phi",
    "starcoder2",
    "codegen",
    "megatron_gpt",
}
# Families whose config class defaults ``tie_word_embeddings`` to False (PretrainedConfig: True).
_UNTIED_DEFAULT = {
    "llama",
    "mistral",
    "mixtral",
    "qwen2_moe",
    "qwen3_moe",
    "qwen3_next",
    "qwen3_5_moe",
    "deepseek_v2",
    "deepseek_v3",
    "kimi_k2",
    "kimi_k25",
    "glm_moe_dsa",
    "minimax_m2",
    "gpt_oss",
    "olmoe",
    "gpt_neox",
    "llama4",
}
_LAYER_TYPES = {
    "full_attention": "full",
    "attention": "full",
    "global": "full",
    "sliding_attention": "sliding",
    "local": "sliding",
    "linear_attention": "linear",
    "chunked_attention": "chunked",
}


class _Reader:
    """Typed look-ups in one config dict, with one-line errors that name the key."""

    def __init__(self, cfg: Mapping[str, Any], label: str) -> None:
        self.cfg = cfg
        self.label = label

    def has(self, *keys: str) -> bool:
        return any(self.cfg.get(k) is not None for k in keys)

    def raw(self, *keys: str) -> Any:
        for k in keys:
            v = self.cfg.get(k)
            if v is not None:
                return v
        return None

    def _key(self, keys: tuple[str, ...]) -> str:
        found = next((k for k in keys if self.cfg.get(k) is not None), keys[0])
        return f"{self.label}: '{found}'"

    def integer(self, *keys: str, default: int | None = None, minimum: int = 1) -> int:
        v = self.raw(*keys)
        if v is None:
            if default is not None:
                return default
            alts = " / ".join(keys[1:])
            field = f"{self.label}: missing '{keys[0]}'" + (f" (or {alts})" if alts else "")
            raise HwtuneInputError(field, None, "an integer; the key is required for this model")
        if (
            isinstance(v, bool)
            or not isinstance(v, int | float)
            or not math.isfinite(v)
            or int(v) != v
            or v < minimum
        ):
            raise HwtuneInputError(self._key(keys), v, f"an integer >= {minimum}")
        return int(v)

    def opt_integer(self, *keys: str, minimum: int = 1) -> int | None:
        return self.integer(*keys, minimum=minimum) if self.has(*keys) else None

    def flag(self, *keys: str, default: bool) -> bool:
        v = self.raw(*keys)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise HwtuneInputError(self._key(keys), v, "true or false")
        return v

    def text(self, *keys: str, default: str) -> str:
        v = self.raw(*keys)
        if v is None:
            return default
        if not isinstance(v, str):
            raise HwtuneInputError(self._key(keys), v, "a string")
        return v


def load_hf_config(
    path_or_dict: str | os.PathLike[str] | Mapping[str, Any], name: str | None = None
) -> ModelSpec:
    """A `ModelSpec` from a Hugging Face ``config.json`` (a file, its folder, or the parsed dict).

    Nested multimodal configs (``text_config``: Llama 4, Kimi-K2.5, Qwen3.5) are read for their
    language model only; the vision tower is not part of the spec. Multi-token-prediction modules
    (``num_nextn_predict_layers``, ``num_mtp_modules``, ``mtp_num_hidden_layers``) go to
    ``mtp_layers`` and stay out of the main parameter count (DeepSeek-V3 report §2.2: 671B main
    model + 14B MTP module).
    """
    if isinstance(path_or_dict, Mapping):
        cfg = dict(path_or_dict)
        label = "config.json"
        default_name = str(
            cfg.get("_name_or_path") or cfg.get("name") or cfg.get("model_type") or "custom"
        )
    else:
        path = Path(path_or_dict)
        if path.is_dir():
            path = path / "config.json"
        label = path.name
        cfg = _read_json(path)
        default_name = path.parent.name if path.name == "config.json" else path.stem
        if path.name == "config.json" and isinstance(cfg, Mapping):
            cfg = _with_modelopt_file(cfg, path.parent / "hf_quant_config.json")
    if not isinstance(cfg, Mapping):
        raise HwtuneInputError(label, type(cfg).__name__, "a JSON object of config keys")
    try:
        fields = _native_fields(cfg, label) if _is_native(cfg) else _hf_fields(cfg, label)
        fields["name"] = name or fields.get("name") or default_name
        return ModelSpec(**fields)
    except ValidationError as e:
        raise from_validation_error(e, where=label) from None


def _read_json(path: Path) -> Any:
    from hwtune.structured_file import loads_json, read_utf8

    if not path.exists():
        raise HwtuneInputError("model", str(path), "an existing config.json file")
    text = read_utf8(path, "model")
    try:
        return loads_json(text, "model", path)  # a key given twice is refused, not the last kept
    except json.JSONDecodeError as e:
        raise HwtuneInputError(
            str(path),
            f"malformed JSON at line {e.lineno}, column {e.colno}: {e.msg}",
            "a valid JSON object",
        ) from None


# --- Hugging Face configs ---------------------------------------------------------------------
def _hf_fields(top: Mapping[str, Any], label: str) -> dict[str, Any]:
    family = str(top.get("model_type") or "unknown")
    cfg: Mapping[str, Any] = top
    text = top.get("text_config")
    if isinstance(text, Mapping) and not _Reader(top, label).has(
        "hidden_size", "n_embd", "d_model"
    ):
        # Multimodal wrapper: the language model's keys live in text_config; a few (tying) may
        # sit at the top level only.
        cfg = {**{k: v for k, v in top.items() if k in ("tie_word_embeddings",)}, **text}
        label = f"{label}: text_config"
    r = _Reader(cfg, label)

    d_model = r.integer("hidden_size", "n_embd", "d_model", "model_dim")
    n_layers = r.integer("num_hidden_layers", "n_layer", "num_layers", "n_layers")
    n_heads = r.integer("num_attention_heads", "n_head", "num_heads", "n_heads")
    n_kv = r.opt_integer(
        "num_key_value_heads", "num_kv_heads", "n_kv_heads", "multi_query_group_num"
    )
    if family == "falcon" and n_kv is None and r.flag("multi_query", default=False):
        n_kv = 1
    plain = family in _PLAIN_MLP
    fields: dict[str, Any] = {
        "family": family,
        "n_layers": n_layers,
        "d_model": d_model,
        "n_heads": n_heads,
        "n_kv_heads": n_kv,
        "vocab": r.integer("vocab_size", "padded_vocab_size", "n_vocab"),
        "tied_embeddings": r.flag("tie_word_embeddings", default=family not in _UNTIED_DEFAULT),
        "norm": _norm_kind(r, plain),
    }

    # Attention shapes.
    mla = _mla(r)
    fields["mla"] = mla
    if mla is None:
        head_dim = r.opt_integer("head_dim", "attention_head_dim", "kv_channels")
        if head_dim is not None and head_dim * n_heads == d_model:
            head_dim = None
        fields["head_dim"] = head_dim

    # Positions.
    if family in ("gpt2", "opt", "gpt_bigcode", "gpt_neo", "megatron_gpt"):
        fields["pos_emb"] = "learned"
        rows = r.integer("n_positions", "max_position_embeddings", "seq_length")
        # OPT's learned table has two extra rows (modeling_opt.py: OPTLearnedPositionalEmbedding).
        fields["max_position"] = rows + (2 if family == "opt" else 0)
    elif family in ("bloom",) or r.flag("alibi", default=False):
        fields["pos_emb"] = "alibi"
    else:
        fields["pos_emb"] = "rope"
    fields["max_context"] = _context_length(r, family)

    # Biases and norms inside attention.
    attn_bias = r.flag("attention_bias", "bias", "use_bias", default=plain)
    if family in ("qwen2", "qwen2_moe"):
        # modeling_qwen2.py / modeling_qwen2_moe.py: biases on q, k, v; none on o_proj.
        fields["qkv_bias"], fields["out_bias"] = True, False
    else:
        fields["qkv_bias"] = fields["out_bias"] = attn_bias
    fields["mlp_bias"] = r.flag("mlp_bias", default=plain)
    fields["qk_norm"] = _qk_norm(r, family)

    # FFN activation.
    act = r.text(
        "hidden_act", "activation_function", "hidden_activation", "ffn_act", default="silu"
    ).lower()
    fields["ffn_act"] = _act(act, plain, r)

    # Attention layer kinds.
    fields.update(_layer_kinds(r, family, n_layers))

    # Feed-forward widths and MoE.
    moe = _moe(r, family, n_layers)
    fields["moe"] = moe
    if family == "llama4":
        ffn = r.integer("intermediate_size_mlp", "intermediate_size")
    elif moe is not None and r.has("moe_intermediate_size"):
        ffn = r.integer("intermediate_size", default=moe.expert_ffn_hidden)
    elif moe is not None:
        ffn = moe.expert_ffn_hidden
    elif plain:
        ffn = r.integer(
            "intermediate_size",
            "n_inner",
            "ffn_hidden_size",
            "ffn_dim",
            "d_ff",
            default=4 * d_model,
        )
    else:
        ffn = r.integer("intermediate_size", "ffn_hidden_size", "ffn_dim", "d_ff", "n_inner")
    fields["ffn_hidden"] = ffn

    fields["mtp_layers"] = _mtp(r)
    fields["quantized_weights"] = _quantized_weights(top)
    fields["checkpoint_precision"] = checkpoint_precision(top)
    fields["checkpoint_quantization"] = unsupported_quantization(top)
    fields["weight_group_size"] = weight_group_size(top)
    fields["checkpoint_kv_precision"] = checkpoint_kv_precision(top)
    return fields


def _quantization_config(top: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The checkpoint's ``quantization_config``: at the top level, or in ``text_config`` of a
    multimodal wrapper."""
    for cfg in (top, top.get("text_config")):
        if isinstance(cfg, Mapping) and isinstance(cfg.get("quantization_config"), Mapping):
            return cfg["quantization_config"]
    return None


def _quantized_weights(top: Mapping[str, Any]) -> str:
    """ "experts" when the checkpoint's ``quantization_config`` keeps the attention in 16 bits,
    in ``modules_to_not_convert`` (gpt-oss: ``model.layers.*.self_attn``, the router, embeddings
    and LM head stay bf16; only the MoE experts are MXFP4) or in compressed-tensors' ``ignore``
    (Kimi-K2.5: ``re:.*self_attn.*``, the shared experts and the dense MLPs stay bf16; only the
    routed experts are int4), else "all"."""
    q = _quantization_config(top)
    if q is None:
        return "all"
    for key in ("modules_to_not_convert", "ignore"):
        keep = q.get(key)
        if isinstance(keep, list) and any("self_attn" in str(m) for m in keep):
            return "experts"
    return "all"


def _with_modelopt_file(cfg: Mapping[str, Any], path: Path) -> Mapping[str, Any]:
    """``cfg`` with the quantization of a NVIDIA TensorRT Model Optimizer checkpoint's
    ``hf_quant_config.json`` beside it (``{"producer": {"name": "modelopt"}, "quantization":
    {"quant_algo": "FP8", ...}}``; nvidia/Llama-3.1-70B-Instruct-FP8, whose ``config.json`` has
    no ``quantization_config``) as ``quantization_config: {quant_method: "modelopt", quant_algo}``,
    the form newer exports write into ``config.json`` and vLLM reads from either file (its
    ``kv_cache_quant_algo``, ``group_size`` and the rest come along: `checkpoint_kv_precision`,
    `weight_group_size`). A config
    that has its own ``quantization_config``, or a file that cannot be read as that shape, is
    left as it is."""
    if "quantization_config" in cfg or not path.is_file():
        return cfg
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return cfg
    quant = doc.get("quantization") if isinstance(doc, Mapping) else None
    if not isinstance(quant, Mapping) or not isinstance(quant.get("quant_algo"), str):
        return cfg
    return {**cfg, "quantization_config": {"quant_method": "modelopt", **quant}}


# quant_method values whose weights are 8-bit floats (e4m3) or 4-bit floats, by name alone
_FP8_METHODS = {"fp8", "fbgemm_fp8"}
_FP4_METHODS = {"mxfp4", "nvfp4"}
# quant_method values of integer weight-only checkpoints with a ``bits`` width
_INT_METHODS = {"gptq", "awq"}


def _bits(q: Mapping[str, Any]) -> int | None:
    """A GPTQ/AWQ config's ``bits`` as a whole number (``4`` or ``"4"``), else None."""
    v = q.get("bits")
    if isinstance(v, str) and v.strip().isdigit():
        return int(v)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def checkpoint_precision(top: Mapping[str, Any]) -> str | None:
    """The weight format a checkpoint ships, as one of the serving precisions (fp8, fp4 or
    int4), read from its ``config.json`` ``quantization_config`` (Hugging Face *transformers*
    ``utils/quantization_config.py``); None for an unquantized checkpoint or one this cannot name.

    - ``quant_method: "fp8"`` (``FineGrainedFP8Config``: DeepSeek-V3/R1 ``fmt: e4m3``,
      ``weight_block_size: [128, 128]``; Qwen3-*-FP8, MiniMax-M2) and ``"fbgemm_fp8"``
      (``FbgemmFp8Config``): "fp8".
    - ``quant_method: "mxfp4"`` (``Mxfp4Config``: gpt-oss, experts only, see
      `_quantized_weights`) and ``"nvfp4"``: "fp4".
    - ``quant_method: "modelopt"`` (NVIDIA TensorRT Model Optimizer, ``ModelOptConfig``):
      ``quant_algo`` "FP8" is "fp8", "NVFP4" is "fp4", "W4A16_AWQ" is "int4"; other algorithms
      (W4A8_AWQ, W8A8_SQ_PER_CHANNEL, ...) None.
    - ``quant_method: "compressed-tensors"`` (vLLM's llm-compressor; ``config_groups.*.weights``
      with ``num_bits`` and ``type``): 8-bit ``"float"`` weights are "fp8", 4-bit ``"float"``
      weights (NVFP4) "fp4", 4-bit ``"int"`` weights with no quantized input activations
      (W4A16: Kimi-K2.5, ``group_size: 32``) "int4"; groups that disagree give None.
    - ``quant_method: "gptq"`` (``GPTQConfig``) and ``"awq"`` (``AwqConfig``) with ``bits: 4``:
      "int4" (both W4A16 kernels: Marlin / Machete / the AWQ GEMM dequantize to 16 bits).
    - Integer weights of other widths (int8 W8A8 or W8A16, 3- or 2-bit GPTQ) and int4 weights
      with int8 activations (W4A8) are None: hwtune's serving precisions have no such format.
      int4 is weight-only: its math runs in bf16 on dequantized tiles on every GPU, never on
      FP4 tensor cores (`hwtune.cost.quantized_gemm.WEIGHT_ONLY_FORMATS`).
    - Any other ``quant_method`` (bitsandbytes, HQQ, ...): None; `unsupported_quantization`
      describes it, and serving such a checkpoint asks for an explicit precision.

    A ModelOpt checkpoint that keeps its quantization in a separate ``hf_quant_config.json``
    (nvidia/Llama-3.1-70B-Instruct-FP8, whose ``config.json`` has no ``quantization_config``)
    is read when `load_hf_config` is given its folder or its ``config.json`` with that file
    beside it (`_with_modelopt_file`); its ``config.json`` alone reads None.
    """
    q = _quantization_config(top)
    if q is None:
        return None
    method = str(q.get("quant_method") or "").lower()
    if method in _FP8_METHODS:
        return "fp8"
    if method in _FP4_METHODS:
        return "fp4"
    if method == "modelopt":
        algos = {"FP8": "fp8", "NVFP4": "fp4", "W4A16_AWQ": "int4"}
        return algos.get(str(q.get("quant_algo") or "").upper())
    if method in _INT_METHODS:
        return "int4" if _bits(q) == 4 else None
    if method == "compressed-tensors":
        groups = q.get("config_groups")
        if not isinstance(groups, Mapping) or not groups:
            return None
        found = set()
        for g in groups.values():
            w = g.get("weights") if isinstance(g, Mapping) else None
            if not isinstance(w, Mapping):
                return None
            kind = str(w.get("type")).lower()
            if kind == "float":
                found.add({8: "fp8", 4: "fp4"}.get(w.get("num_bits")))
            elif kind == "int" and w.get("num_bits") == 4 and not g.get("input_activations"):
                found.add("int4")
            else:
                return None
        return found.pop() if len(found) == 1 else None
    return None


_CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length",
                 "model_max_length", "max_sequence_length", "max_seq_length", "seq_len")  # fmt: skip
# RoPE scalings whose max_position_embeddings already states the extended context
_CONTEXT_STATED_ROPE = ("su", "longrope", "llama3", "default", "mrope")


def _context_length(r: _Reader, family: str) -> int | None:
    """The longest sequence (prompt + output) a serving engine admits for this config, as vLLM
    derives ``max_model_len`` from it (``_get_and_verify_max_len`` in ``vllm/config``): the
    smallest of the length keys present (`_CONTEXT_KEYS`), then, for a RoPE scaling that
    extends it (``rope_scaling``, or transformers v5's ``rope_parameters``: linear, dynamic,
    yarn, ...; not llama3 or longrope, whose ``max_position_embeddings`` is the extended length
    already, nor Gemma 3's, which vLLM leaves as stated), times its ``factor`` (absent or null:
    1), from ``original_max_position_embeddings`` for yarn. DeepSeek-V3: yarn 4096 x 40 =
    163840; Llama-3.1: llama3, 131072; Qwen3-8B: 40960 (its model card enables yarn 4x by
    editing ``rope_scaling`` into config.json, which this then reads as 131072).

    None when no length key is present (vLLM then assumes 2048 with a warning): nothing is
    checked then, and the config still loads (training plans do not need it). A length key
    that is not a positive whole number (``max_position_embeddings: 0``) or a scaling factor
    that is not a positive number is refused, naming it: vLLM would take it as the context and
    refuse every request, or fail on it."""

    found = [n for k in _CONTEXT_KEYS if (n := r.opt_integer(k)) is not None]
    if not found:
        return None
    n: float = min(found)
    rope_key = "rope_scaling" if r.has("rope_scaling") else "rope_parameters"
    rope = r.raw(rope_key)
    if isinstance(rope, Mapping) and not family.startswith("gemma3"):
        kind = str(rope.get("rope_type") or rope.get("type") or "default").lower()
        if kind not in _CONTEXT_STATED_ROPE:
            scaling = _Reader(rope, f"{r.label}: '{rope_key}'")
            given = scaling.raw("factor")
            try:  # a number, or a number written as text ("2")
                factor = 1.0 if given is None or isinstance(given, bool) else float(given)
            except (TypeError, ValueError):
                factor = math.nan
            if isinstance(given, bool) or not (math.isfinite(factor) and factor > 0):
                raise HwtuneInputError(scaling._key(("factor",)), given, "a positive number")
            original = scaling.opt_integer("original_max_position_embeddings")
            if kind == "yarn" and original is not None:
                n = original
            n *= factor
    return int(n)


def unsupported_quantization(top: Mapping[str, Any]) -> str | None:
    """What a checkpoint's ``quantization_config`` quantizes its weights to, described in a few
    words, when that is a format `checkpoint_precision` cannot name ("gptq 3-bit weights",
    "bitsandbytes", "modelopt W4A8_AWQ"); None for an unquantized checkpoint, one whose format
    it names, or one whose config quantizes only the KV cache (ModelOpt with no ``quant_algo``,
    compressed-tensors with no ``config_groups``: 16-bit weights).

    A serving engine loads such a checkpoint in its own format (vLLM and SGLang take
    ``--quantization`` from ``quantization_config``), which none of hwtune's serving
    precisions is; simulating it as 16-bit weights would double or quadruple its weight memory
    and traffic without a word, so serving asks for an explicit precision instead
    (`hwtune.serve.config.weight_format`)."""
    q = _quantization_config(top)
    if not q or checkpoint_precision(top) is not None:  # none, empty, or a format named
        return None
    method = str(q.get("quant_method") or "").lower() or "unnamed"
    if method in _FP8_METHODS | _FP4_METHODS:
        return None
    if method == "modelopt":
        algo = q.get("quant_algo")
        return f"modelopt {algo}" if algo else None
    if method in _INT_METHODS:
        bits = _bits(q)
        return f"{method} {bits}-bit weights" if bits else f"{method} weights of no stated width"
    if method == "compressed-tensors":
        groups = q.get("config_groups")
        if not isinstance(groups, Mapping) or not groups:
            return None
        return "compressed-tensors weights of a scheme other than fp8, fp4 or W4A16 int4"
    return method


def checkpoint_kv_precision(top: Mapping[str, Any]) -> str | None:
    """The KV-cache format a checkpoint is quantized for, as a serving KV precision (fp8 or
    fp4), from its ``quantization_config``; None when it names none (or one hwtune has not).

    - ModelOpt (``quant_method: "modelopt"``, also from a ``hf_quant_config.json`` beside
      ``config.json``, `_with_modelopt_file`): ``kv_cache_quant_algo`` "FP8" is "fp8",
      "NVFP4" is "fp4"; null (weights-only exports) or anything else None.
    - compressed-tensors: ``kv_cache_scheme`` ``{"num_bits": 8, "type": "float"}`` (llm-
      compressor's FP8 KV cache) is "fp8"; null (Kimi-K2.5) or any other scheme None.

    TensorRT-LLM serves such a checkpoint with that KV cache unless told otherwise
    (``KvCacheConfig(dtype="auto")`` inherits the checkpoint's ``kv_cache_quant_algo``, FP8 or
    NVFP4; TensorRT-LLM docs, "Quantization": "FP8 KV Cache", "NVFP4 KV Cache")."""
    q = _quantization_config(top)
    if q is None:
        return None
    method = str(q.get("quant_method") or "").lower()
    if method == "modelopt":
        algo = str(q.get("kv_cache_quant_algo") or "").upper()
        return {"FP8": "fp8", "NVFP4": "fp4"}.get(algo)
    scheme = q.get("kv_cache_scheme")
    if method == "compressed-tensors" and isinstance(scheme, Mapping):
        float8 = str(scheme.get("type")).lower() == "float" and scheme.get("num_bits") == 8
        return "fp8" if float8 else None
    return None


def weight_group_size(top: Mapping[str, Any]) -> int | None:
    """Weights per scale of a 4-bit checkpoint. int4 (`checkpoint_precision` "int4"), from its
    ``quantization_config``: GPTQ/AWQ ``group_size`` (-1: one scale per output channel),
    compressed-tensors ``config_groups.*.weights.group_size`` (Kimi-K2.5: 32; strategy
    ``"channel"``: -1), ModelOpt's ``group_size``; None when the checkpoint is not int4 or
    does not say (`hwtune.cost.quantized_gemm.INT4_GROUP_SIZE` then applies).

    For an fp4 checkpoint, the block of values sharing one 8-bit scale: 32 for MXFP4
    (``quant_method: "mxfp4"``, gpt-oss; OCP MX v1.0 §5), else the ``group_size`` it states
    (ModelOpt NVFP4 and compressed-tensors write 16), else None
    (`hwtune.cost.quantized_gemm.FP4_GROUP_SIZE`, NVFP4's 16)."""
    fmt = checkpoint_precision(top)
    if fmt not in ("int4", "fp4"):
        return None
    q = _quantization_config(top)
    assert q is not None
    if fmt == "fp4" and str(q.get("quant_method")).lower() == "mxfp4":
        return 32
    sizes: list[Any] = [q.get("group_size")]
    if str(q.get("quant_method")).lower() == "compressed-tensors":
        sizes = []
        for g in q["config_groups"].values():
            w = g["weights"]
            channel = str(w.get("strategy")).lower() == "channel"
            sizes.append(-1 if channel else w.get("group_size"))
    known = {g for g in sizes if isinstance(g, int) and not isinstance(g, bool)}
    if len(known) != 1 or None in sizes:
        return None
    g = known.pop()
    return g if g == -1 or g >= 1 else None


def _norm_kind(r: _Reader, plain: bool) -> str:
    if r.has("rms_norm_eps", "rms_norm_epsilon"):
        return "rmsnorm"
    if r.has("layer_norm_eps", "layer_norm_epsilon", "layernorm_epsilon"):
        return "layernorm"
    return "layernorm" if plain else "rmsnorm"


def _act(act: str, plain: bool, r: _Reader) -> str:
    """Map ``hidden_act`` to an FFN kind: gated (SwiGLU/GeGLU) unless the family has a plain MLP."""
    if act.startswith("gelu") or act == "quick_gelu":
        return "gelu" if plain else "geglu"
    if act in ("silu", "swish", "swiglu"):
        return "silu" if plain else "swiglu"
    if act == "relu":
        return "relu"
    if act in ("relu2", "squared_relu"):
        return "squared_relu"
    raise HwtuneInputError(
        f"{r.label}: 'hidden_act'", act, "one of silu, swish, gelu*, relu, relu2"
    )


def _qk_norm(r: _Reader, family: str) -> bool:
    """Whether attention normalises q and k with learned weights.

    Qwen3 (``modeling_qwen3.py``), OLMoE (``modeling_olmoe.py``), Qwen3-Next/3.5 full-attention
    layers and MiniMax-M2 (``use_qk_norm``) do. Llama 4's ``use_qk_norm`` is a weightless L2 norm
    (``modeling_llama4.py``: ``Llama4TextL2Norm``), so it adds no parameters and is left out.
    """
    if family in ("qwen3", "qwen3_moe", "olmoe", "qwen3_next", "qwen3_5_moe"):
        return True
    if family == "llama4":
        return False
    return r.flag("use_qk_norm", "qk_layernorm", "qk_norm", default=False)


def _mla(r: _Reader) -> MLA | None:
    """Multi-head latent attention (DeepSeek-V2 §2.1): ``kv_lora_rank`` and its companions."""
    if not r.has("kv_lora_rank"):
        return None
    return MLA(
        q_lora_rank=r.opt_integer("q_lora_rank"),
        kv_lora_rank=r.integer("kv_lora_rank"),
        qk_nope_head_dim=r.integer("qk_nope_head_dim"),
        qk_rope_head_dim=r.integer("qk_rope_head_dim", minimum=0),
        v_head_dim=r.integer("v_head_dim"),
    )


def _layer_kinds(r: _Reader, family: str, n_layers: int) -> dict[str, Any]:
    """``layer_types`` / ``sliding_window`` / linear-attention shapes.

    Llama 4 (``modeling_llama4.py``): layers with RoPE use chunked local attention of
    ``attention_chunk_size``; every ``no_rope_layer_interval``-th layer (default 4) is global NoPE.
    Qwen2 (``configuration_qwen2.py``): with ``use_sliding_window``, layers from
    ``max_window_layers`` on use the window.
    """
    out: dict[str, Any] = {}
    window = r.opt_integer("sliding_window", "attention_window")
    if r.flag("use_sliding_window", default=True) is False:
        window = None
    raw_types = r.raw("layer_types")
    types: list[str] | None = None
    if raw_types is not None:
        if not isinstance(raw_types, list) or len(raw_types) != n_layers:
            raise HwtuneInputError(
                f"{r.label}: 'layer_types'", raw_types, f"a list of {n_layers} layer kinds"
            )
        types = []
        for t in raw_types:
            if t not in _LAYER_TYPES:
                raise HwtuneInputError(
                    f"{r.label}: 'layer_types'", t, f"one of {', '.join(_LAYER_TYPES)}"
                )
            types.append(_LAYER_TYPES[t])
    elif family == "llama4" and r.has("attention_chunk_size"):
        interval = r.integer("no_rope_layer_interval", default=4)
        no_rope = r.raw("no_rope_layers")
        if isinstance(no_rope, list) and len(no_rope) == n_layers:
            types = ["chunked" if use_rope else "full" for use_rope in no_rope]
        else:
            types = ["full" if (i + 1) % interval == 0 else "chunked" for i in range(n_layers)]
    elif family == "qwen2" and window is not None:
        first = r.integer("max_window_layers", default=n_layers, minimum=0)
        types = ["sliding" if i >= first else "full" for i in range(n_layers)]
    elif family == "qwen3_next" and r.has("full_attention_interval"):
        every = r.integer("full_attention_interval")
        types = ["full" if (i + 1) % every == 0 else "linear" for i in range(n_layers)]
    if types is not None:
        if "sliding" not in types:
            window = None
        if set(types) == {"full"}:
            types = None
    out["layer_types"] = tuple(types) if types is not None else None
    out["sliding_window"] = window
    if types is not None and "chunked" in types:
        out["attention_chunk_size"] = r.integer("attention_chunk_size")
    if r.flag("attn_output_gate", default=False):
        out["attn_output_gate"] = True
    if (types is not None and "linear" in types) or r.has("linear_num_value_heads"):
        out["linear_attention"] = LinearAttention(
            n_key_heads=r.integer("linear_num_key_heads"),
            n_value_heads=r.integer("linear_num_value_heads"),
            key_head_dim=r.integer("linear_key_head_dim"),
            value_head_dim=r.integer("linear_value_head_dim"),
            conv_kernel=r.integer("linear_conv_kernel_dim", default=4, minimum=0),
        )
    return out


def _moe(r: _Reader, family: str, n_layers: int) -> MoE | None:
    """The MoE block, from whichever of the usual key spellings the family uses.

    Layer placement: ``first_k_dense_replace`` (DeepSeek), ``decoder_sparse_step`` and
    ``mlp_only_layers`` (Qwen2/3-MoE), ``interleave_moe_layer_step`` / ``moe_layers`` (Llama 4).
    DeepSeek's ``moe_layer_freq`` makes layer ``i`` sparse when ``i % freq == 0``
    (``modeling_deepseek.py``), which differs from ``decoder_sparse_step``'s ``(i+1) % step == 0``;
    it is translated exactly into ``mlp_only_layers``.
    """
    n_experts = r.opt_integer(
        "num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts", minimum=0
    )
    if not n_experts:  # absent, or 0 experts: a dense model
        return None
    top_k = r.integer(
        "num_experts_per_tok", "experts_per_token", "num_experts_per_token", "moe_top_k"
    )
    if family == "llama4" or not r.has("moe_intermediate_size"):
        expert = r.integer("intermediate_size", "moe_intermediate_size")
    else:
        expert = r.integer("moe_intermediate_size")

    n_shared, shared_width = 0, None
    if r.has("n_shared_experts"):
        n_shared = r.integer("n_shared_experts", minimum=0)
    elif r.has("shared_expert_intermediate_size", "shared_intermediate_size"):
        shared_width = r.integer(
            "shared_expert_intermediate_size", "shared_intermediate_size", minimum=0
        )
        n_shared = 1 if shared_width else 0
        shared_width = shared_width or None
    elif family == "llama4":
        n_shared = 1  # modeling_llama4.py: Llama4TextMoe always has one shared expert

    first_dense = r.integer("first_k_dense_replace", default=0, minimum=0)
    freq = 1
    mlp_only: list[int] = []
    raw_only = r.raw("mlp_only_layers")
    if raw_only is not None:
        if not isinstance(raw_only, list) or not all(isinstance(i, int) for i in raw_only):
            raise HwtuneInputError(
                f"{r.label}: 'mlp_only_layers'", raw_only, "a list of layer indices"
            )
        mlp_only = list(raw_only)
    if family.startswith(("deepseek", "kimi", "glm")) and r.has("moe_layer_freq"):
        dsf = r.integer("moe_layer_freq")
        mlp_only += [i for i in range(first_dense, n_layers) if i % dsf]
    elif r.has("moe_layers") and isinstance(r.raw("moe_layers"), list):
        sparse = set(r.raw("moe_layers"))
        mlp_only += [i for i in range(n_layers) if i not in sparse]
    else:
        freq = r.integer(
            "decoder_sparse_step", "interleave_moe_layer_step", "moe_layer_freq", default=1
        )

    router_bias = family == "gpt_oss" or (
        r.text("topk_method", default="") == "noaux_tc" or r.flag("use_routing_bias", default=False)
    )
    groups = topk_groups = None
    if r.has("n_group") and r.has("topk_group"):
        # group-limited routing (DeepSeek-V2/V3 "device/node-limited routing"); 1 group = no limit
        groups = r.integer("n_group", minimum=1)
        topk_groups = r.integer("topk_group", minimum=1)
        if groups == 1:
            groups = topk_groups = None
    return MoE(
        n_routed_experts=n_experts,
        top_k=top_k,
        expert_ffn_hidden=expert,
        n_shared_experts=n_shared,
        shared_expert_ffn_hidden=shared_width,
        first_k_dense_layers=first_dense,
        moe_layer_freq=freq,
        mlp_only_layers=tuple(sorted(set(mlp_only))),
        router_bias=router_bias,
        expert_bias=family == "gpt_oss",  # modeling_gpt_oss.py: gate_up_proj_bias, down_proj_bias
        n_groups=groups,
        topk_groups=topk_groups,
    )


def _mtp(r: _Reader) -> int:
    if r.has("num_nextn_predict_layers"):
        return r.integer("num_nextn_predict_layers", minimum=0)
    if r.has("mtp_num_hidden_layers"):
        return r.integer("mtp_num_hidden_layers", minimum=0)
    if r.flag("use_mtp", default=False):
        return r.integer("num_mtp_modules", default=1, minimum=0)
    return 0


# --- hwtune's own vocabulary (validation data, Megatron shapes) -------------------------------
_NATIVE_KEYS = {"n_layers", "d_model"}


def _is_native(cfg: Mapping[str, Any]) -> bool:
    return "model_type" not in cfg and set(cfg) >= _NATIVE_KEYS


_COUNT = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([KMBT]?)\s*$", re.IGNORECASE)
_SCALE = {"": 1.0, "K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}


def parse_count(text: str | float | int) -> float:
    """A parameter count written as ``8.03B``, ``1T``, ``175e9`` or a plain number."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        return float(text)
    m = _COUNT.match(str(text))
    if not m:
        try:
            return float(str(text))
        except ValueError:
            raise HwtuneInputError(
                "params_published", text, "a count such as 8.03B or 1T"
            ) from None
    return float(m.group(1)) * _SCALE[m.group(2).upper()]


def count_resolution(text: str | float | int) -> float:
    """Half a unit of the last digit of a count as written (``"1.7B"`` -> 0.05e9, ``"671B"`` ->
    0.5e9): how far the true value may lie from a rounded published figure."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        return 0.5
    m = _COUNT.match(str(text))
    if not m:
        return 0.5
    decimals = len(m.group(1).split(".")[1]) if "." in m.group(1) else 0
    return 0.5 * 10.0**-decimals * _SCALE[m.group(2).upper()]


def _native_fields(cfg: Mapping[str, Any], label: str) -> dict[str, Any]:
    """ModelSpec fields from hwtune's vocabulary, as written in ``validation/training_published.jsonl``.

    Shapes named there in prose are normalised (``squared-relu`` -> ``squared_relu``,
    ``layernorm1p`` -> ``layernorm``, ``rope (yarn)`` -> ``rope``). A model with learned positions
    gets a table of ``seq_len`` rows, and a GELU/LayerNorm GPT gets Megatron's biases
    (Megatron-LM ``add_bias_linear`` default True; Narayanan et al. SC'21 §5.1 parameter formula).
    """
    r = _Reader(cfg, label)
    skip = {
        "seq_len",
        "n_params_reported",
        "attention",
        "other",
        "moe",
        "ffn_act",
        "norm",
        "pos_emb",
        "n_kv_heads",
        "head_dim",
        "tied_embeddings",
    }
    fields: dict[str, Any] = {
        k: v for k, v in cfg.items() if k in ModelSpec.model_fields and k not in skip
    }
    fields["family"] = str(cfg.get("family") or "megatron_gpt")
    fields["vocab"] = r.integer("vocab")
    moe = cfg.get("moe")
    if isinstance(moe, Mapping) and cfg.get("ffn_hidden") is None:
        # an MoE model without dense layers: the dense width is never used; take the experts'
        fields["ffn_hidden"] = _Reader(moe, f"{label}: moe").integer("expert_ffn_hidden")
    else:
        fields["ffn_hidden"] = r.integer("ffn_hidden")
    n_heads = r.integer("n_heads")
    fields["n_kv_heads"] = r.opt_integer("n_kv_heads")
    head_dim = r.opt_integer("head_dim")
    fields["head_dim"] = (
        None if head_dim is None or head_dim * n_heads == r.integer("d_model") else head_dim
    )
    fields["tied_embeddings"] = r.flag("tied_embeddings", default=False)
    act = r.text("ffn_act", default="swiglu").lower().split(" ")[0].replace("-", "_")
    fields["ffn_act"] = {"silu": "swiglu", "gelu_new": "gelu", "relu2": "squared_relu"}.get(
        act, act
    )
    norm = r.text("norm", default="rmsnorm").lower()
    fields["norm"] = "layernorm" if norm.startswith("layernorm") else "rmsnorm"
    pos = r.text("pos_emb", default="rope").lower().split(" ")[0]
    fields["pos_emb"] = pos
    if pos == "learned" and "max_position" not in cfg:
        fields["max_position"] = r.integer("seq_len")
    if "qkv_bias" not in cfg and fields["ffn_act"] == "gelu" and fields["norm"] == "layernorm":
        fields["qkv_bias"] = fields["out_bias"] = fields["mlp_bias"] = True
    other = cfg.get("other")
    if isinstance(other, Mapping) and isinstance(other.get("mla"), Mapping):
        fields["mla"] = MLA(**other["mla"])
    if isinstance(moe, Mapping):
        known = set(MoE.model_fields)
        fields["moe"] = MoE(**{k: v for k, v in moe.items() if k in known})
    elif moe is not None:
        raise HwtuneInputError(f"{label}: 'moe'", moe, "null or a mapping of MoE fields")
    if isinstance(other, Mapping) and isinstance(other.get("mtp_depth"), int):
        fields["mtp_layers"] = other["mtp_depth"]
    if cfg.get("n_params_reported") is not None and "n_params_published" not in cfg:
        reported = str(cfg["n_params_reported"]).split("/")[0].replace("total", "")
        with contextlib.suppress(HwtuneInputError):
            fields["n_params_published"] = parse_count(reported)
    return fields
