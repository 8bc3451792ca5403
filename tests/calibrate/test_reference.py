"""The reference training loop: the torch model is what its ModelSpec says, it runs (1 and 2
gloo processes), and the estimator predicts it (torch needed)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from hwtune.calibrate.reference import (  # noqa: E402
    GPT,
    RefConfig,
    count_params,
    main,
    predict,
    run_reference,
    to_model_spec,
)
from hwtune.errors import HwtuneInputError  # noqa: E402
from hwtune.model import params as P  # noqa: E402
from hwtune.model.lowering import Shard, lower_head, lower_layer  # noqa: E402


@pytest.mark.parametrize(
    "cfg",
    [
        RefConfig(layers=2, hidden=64, heads=2, seq=32, vocab=512),
        RefConfig(layers=3, hidden=96, heads=4, seq=48, vocab=1000),
    ],  # fmt: skip
)
def test_spec_matches_the_torch_model(cfg):
    spec = to_model_spec(cfg)
    assert count_params(GPT(cfg)) == P.total_params(spec)
    # the forward FLOPs of lowering are the torch model's matmul FLOPs
    sh = Shard(tokens=cfg.micro_batch * cfg.seq, seq=cfg.seq, act_bytes=4.0)
    ops = list(lower_layer(spec, "full", False, sh)) + list(lower_head(spec, sh))
    gemms = {op.name: (op.m, op.n, op.k) for op in ops if op.kind == "gemm"}
    t, h = cfg.micro_batch * cfg.seq, cfg.hidden
    assert gemms == {
        "qkv_proj": (t, 3 * h, h), "o_proj": (t, h, h), "mlp_up": (t, 4 * h, h),
        "mlp_down": (t, h, 4 * h), "lm_head": (t, cfg.vocab, h),
    }  # fmt: skip


def test_one_process_run_and_prediction():
    cfg = RefConfig(layers=2, hidden=64, heads=2, seq=64, micro_batch=2, vocab=512, threads=1,
                    steps=3, warmup=1)  # fmt: skip
    r = run_reference(cfg)
    assert len(r.steps_wall_s) == 3 and r.median_s > 0 and r.clock == "cpu"
    assert r.params == P.total_params(to_model_spec(cfg))
    from hwtune.hardware.catalog import get_device

    assert predict(cfg, get_device("h100-sxm-80gb")) > 0


def test_two_process_gloo_run():
    cfg = RefConfig(layers=1, hidden=32, heads=2, seq=32, micro_batch=1, vocab=256,
                    processes=2, threads=1, steps=2, warmup=1)  # fmt: skip
    r = run_reference(cfg)
    assert r.config["processes"] == 2 and r.tokens_per_step == 64
    assert r.median_s > 0 and len(r.steps_cpu_s) == 2


def test_bad_config():
    with pytest.raises(HwtuneInputError, match="heads"):
        run_reference(RefConfig(hidden=100, heads=3))
    with pytest.raises(HwtuneInputError, match="layers"):
        run_reference(RefConfig(layers=0))
    assert main(["--hidden", "100", "--heads", "3"]) == 2
