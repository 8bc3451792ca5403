"""Workloads for the energy examples and benchmarks: a small transformer, the CPU-side time per
step that the foundation estimator does not model, and the step model of a profile."""

from __future__ import annotations

from hwtune.energy.profiles import Profile
from hwtune.energy.step_model import StepTimeModel, step_model_from_estimator
from hwtune.model.spec import ModelSpec

GPT2_SMALL = ModelSpec(
    name="gpt2-124m",
    family="gpt2",
    n_layers=12,
    d_model=768,
    n_heads=12,
    ffn_hidden=3072,
    ffn_act="gelu",
    vocab=50304,
    tied_embeddings=True,
    norm="layernorm",
    pos_emb="learned",
    max_position=1024,
    qkv_bias=True,
    out_bias=True,
    mlp_bias=True,
)
"""GPT-2 small (Radford et al. 2019, Table 2: 12 layers, d_model 768, 117M-124M parameters,
1024 context), vocabulary padded 50257 -> 50304 as in nanoGPT."""

HOST_S = (0.030, 0.0005)
"""CPU time per step that the GPU waits on, (fixed s, s per sample): ASSUMPTION for eager
PyTorch on a Jetson's Cortex-A78AE cores — ~10^3 kernel launches per GPT-2-small step at
~20-30 µs of Python/dispatch each where the GPU does not hide them, plus batch collation.
Measure it (the online tuner does, from GPU utilization) rather than trust it."""


HOST_DC_S = (0.010, 0.0001)
"""CPU time per step the GPU waits on for a data-center host, (fixed s, s per sample):
ASSUMPTION (~10^3 kernel launches at ~10 µs each on a server CPU, plus collation)."""


def default_host_s(profile: Profile) -> tuple[float, float]:
    """`HOST_S` for an edge module's CPU, `HOST_DC_S` for a data-center host."""
    return HOST_DC_S if profile.kind == "data-center" else HOST_S


def edge_step_model(
    profile: Profile,
    model: ModelSpec | str = GPT2_SMALL,
    seq: int = 256,
    host_s: tuple[float, float] | None = None,
    precision: str | None = None,
    gpus: int = 1,
) -> StepTimeModel:
    """The step model of ``model`` on ``profile``'s GPU from the foundation estimator (edge or
    data center: the compute part scales with the SM clock from the profile's
    ``reference_clock_hz``, the memory-bound part does not). ``host_s`` None: the profile's
    `default_host_s`. ``gpus`` > 1: one GPU of a ZeRO-3 data-parallel job, per-GPU batches
    (`step_model_from_estimator`)."""
    return step_model_from_estimator(
        model, profile.to_device(), seq, batches=(1, 2, 4, 8, 16), precision=precision,
        host_s=default_host_s(profile) if host_s is None else host_s,
        f_ref_hz=profile.reference_clock_hz, gpus=gpus,
    )  # fmt: skip
