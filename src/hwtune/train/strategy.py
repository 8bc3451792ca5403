"""`Strategy`: how one training step is laid out on the cluster.

Degrees follow Megatron-LM's rank order (tensor innermost, then context, then data, then
pipeline); expert parallelism folds over the tensor x context x data ranks of a pipeline stage
(Megatron-Core "MoE parallel folding", Liu et al. 2025, with expert tensor parallelism 1), so
``ep`` must divide ``tp * cp * dp`` (`expert_data_parallel`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from hwtune.errors import HwtuneInputError, from_validation_error
from hwtune.model.spec import ModelSpec
from hwtune.train.pipeline_layout import is_layout, parse_layout, split_error, split_key

Schedule = Literal["gpipe", "1f1b", "interleaved", "zb-h1", "zbv", "dualpipe", "dualpipev"]
Recompute = Literal["none", "selective", "selective-op", "full"]
RecomputeModule = Literal["core_attn", "mla_up_proj", "mlp", "moe_act"]
Precision = Literal["fp32", "fp16", "bf16", "fp8"]
Optimizer = Literal[
    "adam",
    "adam-bf16",
    "adam-remainders",
    "adam-8bit",
    "adam-8bit-release",
    "adam-8bit-amsgrad",
    "adam-8bit-release-amsgrad",
    "sgd",
]
"""adam-remainders = fp32 Adam whose master weights are the 16-bit weights plus the 16 low bits
kept apart (Apex DistributedFusedAdam / TE FusedAdam ``store_param_remainders``: NeMo's
distributed Adam with a bf16 model); adam-8bit* = `hwtune.optim.AdamW` (``-release``:
``gradient_release=True``; ``-amsgrad``: ``amsgrad=True``, a third 8-bit state); bytes per
parameter: `hwtune.cost.memory.state_bytes_per_param`."""
SCHEDULES: tuple[str, ...] = (
    "gpipe",
    "1f1b",
    "interleaved",
    "zb-h1",
    "zbv",
    "dualpipe",
    "dualpipev",
)


def expert_data_parallel(tp: int, cp: int, dp: int, ep: int) -> int:
    """Replicas of each expert: the expert-data-parallel degree ``tp * cp * dp / ep``.

    Megatron-Core MoE parallel folding (Liu et al. 2025, "MoE Parallel Folding"): the expert
    layers regroup the ``tp * cp * dp`` ranks of a pipeline stage as expert-TP x EP x expert-DP
    (``parallel_state`` builds them with ``RankGenerator(order="tp-ep-dp-pp")``). Expert TP is 1
    here, as the NeMo recipes of DeepSeek-V3 and Qwen3 set (``expert_tensor_parallel_size=1``),
    so an EP group is ``ep`` consecutive ranks (stride 1) and an expert-DP group strides by
    ``ep``; the expert GEMMs keep their full width (`hwtune.model.lowering.ffn_ops`)."""
    return max(1, tp * cp * dp // ep)


def check_schedule(schedule: str, pp: int, vpp: int) -> None:
    """One-line errors for a pipeline schedule that does not fit ``pp`` and ``vpp``.

    The one rule for `Strategy.validate_for` and the compile spec (`hwtune.parallel.spec`): a
    schedule other than 1F1B, and model chunks (``vpp > 1``), need pipeline parallelism
    (``pp > 1``); ``vpp > 1`` needs the interleaved schedule; and the interleaved schedule needs
    ``pp > 1`` and at least 2 chunks per rank (one chunk per rank is plain 1F1B: taking it
    silently would mislabel the estimate). Checked in this order, so that following each error
    leads to a valid layout (``--schedule interleaved --vpp 2`` at ``pp=1`` names vpp first,
    then the schedule), never back to the previous error."""
    if pp == 1 and vpp > 1:
        raise HwtuneInputError(
            "vpp", vpp, "1 without pipeline parallelism (pp=1; more chunks need pp > 1 and the "
            "interleaved schedule)",
        )  # fmt: skip
    if pp == 1 and schedule != "1f1b":
        raise HwtuneInputError(
            "schedule", schedule, "1f1b (the default) without pipeline parallelism (pp=1)"
        )
    if vpp > 1 and schedule != "interleaved":
        raise HwtuneInputError("vpp", vpp, "1 unless the schedule is interleaved")
    if schedule == "interleaved" and vpp < 2:
        raise HwtuneInputError(
            "vpp", vpp, "at least 2 model chunks per rank for the interleaved schedule"
        )


class Strategy(BaseModel):
    """A composite parallel strategy and its switches."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    precision: Precision = "bf16"
    dp: int = Field(default=1, gt=0)
    tp: int = Field(default=1, gt=0)
    pp: int = Field(default=1, gt=0)
    ep: int = Field(default=1, gt=0)
    cp: int = Field(default=1, gt=0)
    sequence_parallel: bool = False
    zero: int = Field(
        default=-1,
        ge=-1,
        le=3,
        description="ZeRO stage; 3 = FSDP full shard; default (-1): 3 without pipeline "
        "parallelism, 1 (distributed optimizer) with it, as torchtitan and Megatron-LM run",
    )
    micro_batch: int = Field(default=1, gt=0)
    global_batch: int | None = Field(default=None, gt=0, description="sequences per step")
    seq: int = Field(default=4096, gt=0)
    vpp: int = Field(default=1, gt=0, description="virtual stages (model chunks) per pipeline rank")
    schedule: Schedule = "1f1b"
    recompute: Recompute = "none"
    recompute_modules: tuple[RecomputeModule, ...] = Field(
        default=("core_attn",),
        description="with recompute selective, what is recomputed (Megatron-Core "
        "--recompute-modules): core_attn = the attention core; mla_up_proj = MLA's "
        "up-projections and rotary (the latents kept); mlp = a dense layer's MLP; moe_act = the "
        "experts' activation function",
    )
    optimizer: Optimizer = "adam"
    offload_optimizer: bool = False
    offload_activation_layers: int = Field(
        default=0,
        ge=0,
        description="layers whose activations go to host memory during the forward and come "
        "back for the backward (Megatron-Core --cpu-offloading --cpu-offloading-num-layers, "
        "Transformer Engine's CPU offload context), the copies overlapped with compute; "
        "without pipeline parallelism or recomputation, as Megatron-Core requires",
    )
    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = True
    overlap_tp_comm: bool = False
    overlap_moe_a2a: bool = False
    overlap_p2p_comm: bool = Field(
        default=True,
        description="interleaved schedule: each stage-boundary send/recv runs behind the next "
        "chunk's compute, warmup and flush excepted (Megatron-Core --overlap-p2p-communication, "
        "on by default)",
    )
    flash_attention: bool = True
    attention_kernel: Literal["best", "fa2", "flex"] = Field(
        default="best",
        description="fused attention kernel: best = the device's fastest (FA3/cuDNN on Hopper); "
        "fa2 = FlashAttention-2 (PyTorch SDPA's flash backend); flex = FlexAttention's "
        "compiled Triton kernel (torchtitan's language models)",
    )
    fused_elementwise: bool = Field(
        default=True,
        description="norms, activations and rotary embeddings as fused kernels (Megatron/TE, "
        "torch.compile); False = eager PyTorch, one kernel per elementary op",
    )
    fused_norm: bool = Field(
        default=False,
        description="with eager elementwise ops, RMSNorm still one fused kernel: PyTorch's "
        "nn.RMSNorm since its native fused kernel (aten _fused_rms_norm, PyTorch PR #153666, "
        "2025), as torchtitan of 2026 calls it; rotary and SwiGLU stay eager",
    )
    fp8_recipe: Literal["delayed", "current"] = Field(
        default="delayed",
        description="fp8 scaling (with precision fp8): delayed = scale from the amax history, one "
        "fused cast; current = amax of the tensor itself first (TE Float8CurrentScaling)",
    )
    fp8_saved_inputs: bool = Field(
        default=True,
        description="with precision fp8, each linear layer keeps its input for the weight "
        "gradient in fp8, 1 byte per element (Transformer Engine's Linear, LayerNormLinear and "
        "GroupedLinear keep only the quantized copy: TE 2.x module/linear.py); False = in 16-bit "
        "(torchao's Float8Linear keeps the high-precision input and casts it again in backward)",
    )
    fp8_param_gather: bool = Field(
        default=False,
        description="with precision fp8, ZeRO 1 (Megatron's distributed optimizer) or 2 "
        "(Megatron-FSDP optim_grads) and adam: the linear layers' weights are fp8 tensors, 1 "
        "byte per parameter (the embedding, output head and norms stay 16-bit), gathered in fp8 "
        "(Megatron-Core --fp8-param-gather: 'keep the compute param in fp8 (do not use any "
        "other intermediate dtype) and perform the param all-gather in fp8'); the fp32 main "
        "weights stay in the optimizer",
    )
    pipeline_split: str = Field(
        default="layers",
        description="how the layers are split over pipeline stages: layers = evenly, the "
        "remainder to the first chunks; layers+embedding+loss = the input embedding and the "
        "loss count as one layer each, so the first and last chunk build one layer fewer "
        "(Megatron-Core --account-for-embedding-in-pipeline-split "
        "--account-for-loss-in-pipeline-split; needs n_layers + 2 divisible by pp x vpp); or a "
        "Megatron-Core layout (--pipeline-model-parallel-layout) such as 'Et|(tt|)*30tL': E "
        "embedding, t transformer layer, L loss, '|' between the pp x vpp chunks in model "
        "order (`hwtune.train.pipeline_layout`)",
    )
    mtp_layers: int = Field(
        default=0,
        ge=0,
        description="multi-token-prediction modules trained beside the model (DeepSeek-V3 "
        "report §2.2; Megatron-Core --mtp-num-layers): each a block shaped as the last layer, a "
        "d x 2d projection and the shared head and loss, on the last pipeline stage or where a "
        "layout puts its m",
    )
    moe_dispatch: Literal["alltoall", "deepep"] = Field(
        default="alltoall",
        description="MoE token dispatch across nodes: alltoall = one copy per routed expert; "
        "deepep = one network copy per destination node, fanned out over NVLink (DeepEP)",
    )
    loss_kernel: Literal["fused", "te", "flash", "pytorch", "chunked"] = Field(
        default="fused",
        description="cross-entropy: fused = Megatron's in-place vocab-parallel kernel (6 B per "
        "logit at peak); te = Transformer Engine's online-softmax kernel, the gradient written "
        "into the 16-bit logits (2 B; Megatron-Bridge); flash = flash-attn's kernel, a new 16-bit "
        "gradient beside the saved logits (4 B; llm-foundry); pytorch = F.cross_entropy on an fp32 upcast (12 B); chunked = "
        "torchtitan's ChunkedLossWrapper: LM head and that loss over 8 slices of the tokens in "
        "turn (14 B per logit of one slice, plus an fp32 gradient of the hidden states)",
    )
    dropout: bool = False
    grad_reduce_dtype: Literal["fp32", "bf16"] | None = None
    zero3_gather: Literal["layer", "module", "parameter"] = Field(
        default="layer",
        description="ZeRO-3 gather unit: layer = FSDP/FSDP2/Megatron-FSDP (a transformer block "
        "gathered, the next prefetched); module = DeepSpeed (per nn.Module, capped by "
        "stage3_max_live_parameters and stage3_prefetch_bucket_size); parameter = DeepSpeed "
        "of 2021 (v0.3.13-v0.5: one synchronous all-gather per parameter, none overlapped)",
    )
    grad_accumulation: Literal["fused", "fp32-copy"] = Field(
        default="fused",
        description="how each micro-batch's gradients join the step's: fused = the weight-"
        "gradient GEMM accumulates into the main gradient buffer (Megatron-Core "
        "gradient_accumulation_fusion, TE fuse_wgrad_accumulation; no extra pass); fp32-copy = "
        "DeepSpeed's BF16_Optimizer, which after every micro-batch's backward casts each bf16 "
        "gradient to fp32 and adds it to an fp32 buffer (18 B per parameter)",
    )
    moe_imbalance: float = Field(default=1.0, ge=1.0, description="busiest expert load / mean")

    @field_validator("pipeline_split")
    @classmethod
    def _known_split(cls, v: str) -> str:
        if is_layout(v):
            try:
                parse_layout(v)
            except HwtuneInputError as e:
                raise ValueError(e.expected) from None
        return v

    @model_validator(mode="after")
    def _default_zero(self) -> Strategy:
        if self.zero == -1:
            object.__setattr__(self, "zero", 3 if self.pp == 1 else 1)
        if self.fp8_param_gather and not (
            self.precision == "fp8" and self.zero in (1, 2) and self.optimizer == "adam"
            and not self.offload_optimizer and self.fp8_saved_inputs
        ):  # fmt: skip
            # checked here, not in validate_for, so that no entry point (the search's
            # candidates included) builds such a strategy
            raise HwtuneInputError(
                "fp8_param_gather", True, "precision fp8 with ZeRO 1 or 2, adam, no optimizer "
                "offload and Transformer Engine's fp8 layers (Megatron-Core's distributed "
                "optimizer keeps the fp32 main weights of fp8 parameters; hwtune models no "
                "other combination)",
            )  # fmt: skip
        return self

    @property
    def split_key(self) -> str:
        """The pipeline split as the estimator prices it, multi-token prediction included
        (`hwtune.train.pipeline_layout.split_key`)."""
        return split_key(self.pipeline_split, self.mtp_layers)

    @property
    def n_gpus(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def grad_accum(self) -> int:
        gb = self.global_batch or self.micro_batch * self.dp
        return gb // (self.micro_batch * self.dp)

    @property
    def global_batch_seqs(self) -> int:
        return self.global_batch or self.micro_batch * self.dp

    def _check_recompute_modules(self, model: ModelSpec) -> None:
        mods = self.recompute_modules
        if not mods or len(set(mods)) != len(mods):
            raise HwtuneInputError(
                "recompute_modules", ",".join(mods), "one or more distinct modules"
            )
        if self.recompute != "selective" and mods != ("core_attn",):
            raise HwtuneInputError(
                "recompute_modules", ",".join(mods),
                f"core_attn (the default) unless recompute is selective (here {self.recompute})",
            )  # fmt: skip
        needs = {
            "mla_up_proj": (model.mla is not None, "a model with multi-latent attention"),
            "moe_act": (model.moe is not None, "a MoE model"),
            "mlp": (
                any(not model.is_moe_layer(i) for i in range(model.n_layers)),
                "a model with dense MLP layers",
            ),
        }
        for mod in mods:
            ok, what = needs.get(mod, (True, ""))
            if not ok:
                raise HwtuneInputError("recompute_modules", mod, f"a module of this model ({mod} "
                                       f"needs {what})")  # fmt: skip

    def validate_for(self, model: ModelSpec, n_gpus: int | None = None) -> None:
        """One-line errors for combinations that cannot run."""
        if n_gpus is not None and self.n_gpus != n_gpus:
            raise HwtuneInputError("dp*tp*pp*cp", self.n_gpus, f"the cluster's GPU count {n_gpus}")
        if model.n_heads % self.tp:
            raise HwtuneInputError(
                "tp", self.tp, f"a divisor of the {model.n_heads} attention heads"
            )
        kv = model.kv_heads
        if model.mla is None and kv % self.tp and self.tp % kv:
            raise HwtuneInputError("tp", self.tp, f"a divisor or multiple of the {kv} KV heads")
        if self.moe_imbalance > 1.0:
            if model.moe is None:
                raise HwtuneInputError("moe_imbalance", self.moe_imbalance, "1 for a dense model")
            most = model.moe.n_routed_experts / model.moe.top_k
            if self.moe_imbalance > most:
                # a token reaches an expert at most once, so the busiest of E experts takes at
                # most every token: E / top_k times the mean load
                raise HwtuneInputError(
                    "moe_imbalance", self.moe_imbalance, f"at most experts / top-k = "
                    f"{model.moe.n_routed_experts} / {model.moe.top_k} = {most:g} (the busiest "
                    "expert taking every token)",
                )  # fmt: skip
        if self.ep > 1:
            if model.moe is None:
                raise HwtuneInputError("ep", self.ep, "1 for a dense model")
            if model.moe.n_routed_experts % self.ep:
                raise HwtuneInputError(
                    "ep", self.ep, f"a divisor of the {model.moe.n_routed_experts} experts"
                )
            fold = self.tp * self.cp * self.dp
            if fold % self.ep:
                raise HwtuneInputError("ep", self.ep, f"a divisor of tp x cp x dp (= {fold})")
        if self.seq % self.cp:
            raise HwtuneInputError("cp", self.cp, f"a divisor of the sequence length {self.seq}")
        if self.cp > 1 and (self.seq // self.cp) % 2:
            raise HwtuneInputError("cp", self.cp, "a degree that leaves an even chunk per rank")
        if self.sequence_parallel and self.tp == 1:
            raise HwtuneInputError("sequence_parallel", True, "tp > 1 (it shards the TP region)")
        if self.mtp_layers > model.n_layers:  # each is a whole layer beside the model's
            raise HwtuneInputError("mtp_layers", self.mtp_layers, f"at most the model's "
                                   f"{model.n_layers} layers (DeepSeek-V3 trains 1)")  # fmt: skip
        gb = self.global_batch_seqs
        if gb % (self.micro_batch * self.dp):
            raise HwtuneInputError(
                "global_batch", gb,
                f"a multiple of micro_batch x dp (= {self.micro_batch} x {self.dp} = {self.micro_batch * self.dp})",
            )  # fmt: skip
        chunks = self.pp * self.vpp
        if self.pp > 1 and model.n_layers < chunks:
            raise HwtuneInputError("pp*vpp", chunks, f"at most the {model.n_layers} layers")
        check_schedule(self.schedule, self.pp, self.vpp)
        self._check_recompute_modules(model)
        n_off = self.offload_activation_layers
        if n_off:
            # Megatron-Core TransformerConfig.__post_init__: "CPU offloading can be done only
            # for layers less than num_layers", "no support for Pipeline parallelism with CPU
            # offloading", "CPU offloading does not work when activation recomputation is enabled"
            if n_off >= model.n_layers:
                raise HwtuneInputError("offload_activation_layers", n_off,
                                       f"fewer than the model's {model.n_layers} layers")  # fmt: skip
            if self.pp > 1:
                raise HwtuneInputError("offload_activation_layers", n_off, "0 with pipeline "
                                       "parallelism (Megatron-Core offloads only without it)")  # fmt: skip
            if self.recompute != "none":
                raise HwtuneInputError("offload_activation_layers", n_off, f"0 with recompute "
                                       f"{self.recompute} (Megatron-Core offloads only without "
                                       "recomputation)")  # fmt: skip
        # a layout is checked at every depth (its t and m counts too); a named split needs pp
        if is_layout(self.pipeline_split) or (self.pipeline_split != "layers" and self.pp > 1):
            v = self.vpp if self.schedule == "interleaved" else 1
            why = split_error(self.pipeline_split, model.n_layers, self.pp, v, self.mtp_layers)
            if why is not None:
                raise HwtuneInputError("pipeline_split", self.pipeline_split, why)
        if self.schedule == "interleaved" and self.pp > 1 and self.grad_accum % self.pp:
            raise HwtuneInputError(
                "global_batch", gb,
                f"micro-batches per step ({self.grad_accum}) divisible by pp (= {self.pp}) (interleaved 1F1B)",
            )  # fmt: skip
        if self.schedule in ("dualpipe", "dualpipev", "zbv") and self.pp > 1:
            if self.schedule == "dualpipe" and self.pp % 2:
                raise HwtuneInputError("pp", self.pp, "an even degree for DualPipe")
            if self.grad_accum < 2 * self.pp and self.schedule == "dualpipe":
                raise HwtuneInputError(
                    "global_batch",
                    gb,
                    f"at least 2 x pp (= {2 * self.pp}) micro-batches per step for DualPipe "
                    f"(it gives {self.grad_accum}: global batch / (micro-batch x dp = "
                    f"{self.micro_batch} x {self.dp}))",
                )
        if self.offload_optimizer and self.zero == 0:
            # DeepSpeed's offload_optimizer needs ZeRO stage 1-3 (its ZeRO-Offload runs on the
            # partitioned optimizer, Ren et al. 2021 §4); Megatron-LM's --optimizer-cpu-offload
            # needs --use-precision-aware-optimizer, which runs only with its distributed
            # optimizer (megatron/core/optimizer/__init__.py:1057 at d98e8a64)
            raise HwtuneInputError(
                "offload_optimizer", True, "ZeRO stage 1, 2 or 3 beside it (frameworks offload "
                "the sharded optimizer)",
            )  # fmt: skip
        if self.precision == "fp32" and self.optimizer != "adam":
            raise HwtuneInputError("optimizer", self.optimizer, "adam with fp32 training")
        # switches that would change nothing here are errors, not silently ignored
        if self.fp8_recipe != "delayed" and self.precision != "fp8":
            raise HwtuneInputError("fp8_recipe", self.fp8_recipe, "delayed unless precision is fp8")
        if model.moe is None:
            for name, default in (
                ("moe_imbalance", 1.0),
                ("overlap_moe_a2a", False),
                ("moe_dispatch", "alltoall"),
            ):
                if getattr(self, name) != default:
                    raise HwtuneInputError(
                        name, getattr(self, name), f"{default!r} for a dense model (no experts)"
                    )


def make_strategy(**fields: object) -> Strategy:
    """A strategy from keyword fields, with pydantic errors turned into one-line errors."""
    try:
        return Strategy(**{k: v for k, v in fields.items() if v is not None})
    except ValidationError as e:
        raise from_validation_error(e, where="strategy") from None
