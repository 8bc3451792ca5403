"""The serving reference (HF Llama with random weights) and the serve iteration model in fp32."""

from __future__ import annotations

import pytest
import yaml

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from calib_profile_data import make_doc  # noqa: E402

from hwtune.calibrate.serving_reference import (  # noqa: E402
    LlamaRefConfig,
    ServingReference,
    build_model,
    model_spec,
)
from hwtune.hardware.device import load_device_file  # noqa: E402
from hwtune.model import params as P  # noqa: E402
from hwtune.serve.config import ReplicaConfig  # noqa: E402
from hwtune.serve.iteration import IterationModel, StepShape  # noqa: E402

TINY = LlamaRefConfig(hidden=128, layers=2, heads=4, kv_heads=2, intermediate=384, vocab=1024)
RATE = 2.0e10  # synthetic GEMM rate, FLOP/s, every shape
BW = 1.0e10  # synthetic elementwise bandwidth, bytes/s


@pytest.fixture(scope="module")
def ref():
    return ServingReference(TINY, threads=1, warmup=1, reps=3)


def test_spec_matches_the_hf_model():
    spec = model_spec(TINY)
    assert (spec.n_layers, spec.d_model, spec.n_heads, spec.kv_heads) == (2, 128, 4, 2)
    assert spec.ffn_hidden == 384 and spec.gated and not spec.tied_embeddings
    n = sum(p.numel() for p in build_model(TINY).parameters())
    assert n == P.total_params(spec)


def test_reference_times_are_positive_and_grow(ref):
    short, long_ = ref.prefill(2, 16), ref.prefill(2, 512)
    assert short.median_s > 0 and short.clock == "cpu" and len(short.reps_s) == 3
    assert long_.median_s > 2.0 * short.median_s  # 32x the tokens
    d_short, d_long = ref.decode(8, 16), ref.decode(8, 2048)
    assert 0 < d_short.median_s < long_.median_s
    # 128x the cached keys: attention (and DynamicCache's concatenation) over 8 x 2048 tokens
    assert d_long.median_s > 1.3 * d_short.median_s


@pytest.fixture
def synthetic(tmp_path):
    """Tier 1 / tier 2 devices of a synthetic CPU profile: GEMMs at RATE for every shape
    (including decode-size m=1), elementwise ops at BW."""
    doc = make_doc()
    doc["gemm"] = [
        {"dtype": "fp32", "m": m, "n": n, "k": k, "batch": 1, "seconds": 2.0 * m * n * k / RATE}
        for m in (1, 16, 256, 4096) for n in (128, 1024, 8192) for k in (128, 1024)
    ]  # fmt: skip
    doc["elementwise"] = [{"op": "add", "bytes": b, "seconds": b / BW} for b in (1e3, 1e6, 1e8)]
    p = tmp_path / "prof.yaml"
    p.write_text(yaml.safe_dump(doc))
    t2 = load_device_file(p)
    return t2.model_copy(update={"profile": None}), t2


def _decode(batch: int, ctx: int) -> StepShape:
    c = batch * (ctx + 1)
    return StepShape(tokens=batch, seqs=batch, sampled=batch, dec_n=batch, dec_ctx=c, dec_ctx_w=c)


def test_decode_step_uses_the_profile(synthetic):
    """A decode step's GEMMs are 2 x (weights in the layers and the LM head) x batch FLOPs at
    RATE; on top come the norms/rotary/residual ops (kilobytes at BW: microseconds), decode
    attention over the KV cache (8 x 1025 x 512 B per layer at 12 GB/s: ~0.35 ms per layer)
    and the engine's host overhead (0.2 ms + 5 us per sequence). So tier 2 must lie between
    the GEMM time and it plus 2 ms: a tight band that fails if the profile is not used."""
    _t1, t2 = synthetic
    spec = model_spec(TINY)
    it = IterationModel(ReplicaConfig(model=spec, device=t2), dtype="fp32")
    b = 8
    gemm_params = P.total_params(spec) - spec.vocab * spec.d_model  # all but the embedding table
    gemm_params -= (2 * TINY.layers + 1) * spec.d_model  # norm weights are not GEMMs
    floor = 2.0 * gemm_params * b / RATE
    got = it.step_time(_decode(b, 1024))
    assert floor < got < floor + 2e-3
    br = it.breakdown(_decode(b, 1024))
    assert br["gemm"] + br["lm_head"] == pytest.approx(floor, rel=0.05)


def test_fp32_mode_on_a_cpu_device(synthetic):
    """The 16-bit default cannot run on an fp32-only device; ``dtype="fp32"`` can, and its
    decode time grows with the context and its prefill time with the prompt."""
    t1, t2 = synthetic
    spec = model_spec(TINY)
    for dev in (t1, t2):
        it = IterationModel(ReplicaConfig(model=spec, device=dev), dtype="fp32")
        assert it.step_time(_decode(4, 2048)) > it.step_time(_decode(4, 128))
        pf = [it.step_time(StepShape(tokens=n, seqs=1, sampled=1, pf_pairs=n * n / 2,
                                     pf_kv=n, pf_tokens=n, pf_pairs_w=n * n / 2, pf_kv_w=n))
              for n in (128, 1024)]  # fmt: skip
        assert pf[1] > 4 * pf[0]
    it16 = IterationModel(ReplicaConfig(model=spec, device=t2))
    with pytest.raises(Exception, match="bf16"):
        it16.step_time(_decode(4, 128))
