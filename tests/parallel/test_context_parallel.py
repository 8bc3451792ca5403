"""Context parallelism's pieces in one process: the load-balanced layout (chunks i and
2cp-1-i), exact causal attention of a rank's queries over the all-gathered keys, rotary at the
chunks' positions, and the one-line refusals of the compiler and the runtime. The runs on gloo
are in `test_runtime.py` (``cp2-*``, ``dp2-cp2-*``, ``pp2-cp2-*``)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from hwtune.errors import HwtuneInputError  # noqa: E402
from hwtune.hardware.cluster import make_cluster  # noqa: E402
from hwtune.model.catalog import get_model  # noqa: E402
from hwtune.parallel.compiler import compile_plan  # noqa: E402
from hwtune.parallel.runtime.context_parallel import (  # noqa: E402
    attend,
    causal_pairs,
    positions,
    shard_sequence,
)
from hwtune.parallel.runtime.launch import run_config  # noqa: E402
from hwtune.parallel.runtime.models import rotary  # noqa: E402
from hwtune.parallel.spec import make_spec  # noqa: E402


@pytest.mark.parametrize("cp", [1, 2, 4])
def test_layout_covers_the_sequence_once_and_balances_causal_work(cp):
    seq = 32
    held = [positions(seq, cp, r) for r in range(cp)]
    assert sorted(torch.cat(held).tolist()) == list(range(seq))
    m = seq // (2 * cp)
    assert held[0][:m].tolist() == list(range(m))  # rank 0: the first chunk ...
    assert held[0][m:].tolist() == list(range(seq - m, seq))  # ... and the last
    # every rank attends to the same number of (query, key) pairs under the causal mask:
    # (2cp-1) m^2 + m (m+1), where contiguous blocks would give rank r (2r+1) ... pairs
    pairs = {causal_pairs(seq, cp, r) for r in range(cp)}
    assert pairs == {(2 * cp - 1) * m * m + m * (m + 1)}
    assert sum(causal_pairs(seq, cp, r) for r in range(cp)) == seq * (seq + 1) // 2


@pytest.mark.parametrize("flash", [True, False])
@pytest.mark.parametrize("cp", [2, 4])
def test_local_queries_over_all_keys_equal_full_causal_attention(cp, flash):
    """What each rank computes after the all-gather (its queries, every key in token order,
    the mask key <= query position) is its rows of the single-process attention, with rotary
    applied at the tokens' global positions; local positions 0..s/cp-1 would not be."""
    g = torch.Generator().manual_seed(0)
    b, h, s, d = 2, 4, 16, 8
    q, k, v = (torch.randn(b, h, s, d, generator=g) for _ in range(3))
    full_pos = torch.arange(s)
    qr, kr = rotary(q, full_pos), rotary(k, full_pos)
    full = torch.nn.functional.scaled_dot_product_attention(qr, kr, v, is_causal=True)
    for r in range(cp):
        pos = positions(s, cp, r)
        q_local = shard_sequence(q.transpose(1, 2), cp, r).transpose(1, 2)  # (b, h, s/cp, d)
        out = attend(rotary(q_local, pos), kr, v, pos, flash)
        assert torch.allclose(out, full[:, :, pos], atol=1e-6)
        wrong = attend(rotary(q_local, torch.arange(len(pos))), kr, v, pos, flash)
        assert not torch.allclose(wrong, full[:, :, pos], atol=1e-3)


def test_compiler_refuses_a_sequence_that_does_not_split_into_2cp_chunks():
    m = get_model("llama3.1-8b")
    with pytest.raises(HwtuneInputError, match=r"^seq: got 4100; expected a multiple of 2\*cp = 8"):
        compile_plan(make_spec(cp=4, seq=4100), m, make_cluster("h100-sxm-80gb", 4))
    # also for an explicit action list (which skips the estimator's schedule checks)
    explicit = make_spec(
        pp=2, cp=2, seq=4098, global_batch=1,
        schedule={"actions": {0: ["0F0", "0B0"], 1: ["1F0", "1B0"]}},
    )  # fmt: skip
    with pytest.raises(HwtuneInputError, match=r"^seq: got 4098; expected a multiple of 2\*cp = 4"):
        compile_plan(explicit, m, make_cluster("h100-sxm-80gb", 4))
    assert compile_plan(make_spec(cp=4, seq=4096), m, make_cluster("h100-sxm-80gb", 4)).pp == 1


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (dict(cp=16), r"^mesh.cp: got 16; expected a degree with 2\*cp dividing the runtime model's 16 tokens"),
        (dict(cp=2, tp=2, pp=2, zero=3, global_batch=8, micro_batch=2), r"^mesh.cp: got 2; expected tp = 1, or pp = 1, with context"),
        (dict(cp=2, dp=2, ep=2, zero=0), r"^mesh.cp: got 2; expected ep = 1 with context parallelism"),
        (dict(cp=2, pp=2, global_batch=8, micro_batch=2, schedule="dualpipe"),
         r"^schedule.name: got 'dualpipe'; expected cp = 1 for a DualPipe run"),
    ],
)  # fmt: skip
def test_runtime_refuses_context_parallel_layouts_it_cannot_run(fields, message):
    with pytest.raises(HwtuneInputError, match=message) as e:
        run_config(make_spec(**fields), moe=fields.get("ep", 1) > 1)
    assert "\n" not in str(e.value)


def test_runtime_config_of_a_context_parallel_spec():
    cfg = run_config(make_spec(dp=2, cp=2, zero=1))
    assert (cfg.dp, cfg.cp, cfg.world, cfg.global_batch) == (2, 2, 4, 4)
    assert cfg.model.rope  # positions matter: a rank's tokens are not 0..s/cp-1
    assert not run_config(make_spec(dp=2, zero=1)).model.rope


def test_context_and_tensor_parallel_at_zero_0_and_1():
    """cp 2 x tp 2 at ZeRO-0/1 (refused before, when only FSDP2 took the TP DTensors): the
    local shards' gradients reduced over the cp ranks by hand (ZeRO-0: one all-reduce per step)
    or by the distributed optimizer (ZeRO-1: one reduce-scatter and one all-gather more than
    cp's own K/V collectives); the losses match the single process's."""
    from hwtune.parallel.runtime.launch import launch_many, losses_agree

    cfgs = [run_config(make_spec(cp=2, tp=2, zero=z, global_batch=4, micro_batch=2), steps=2)
            for z in (0, 1)]  # fmt: skip
    z0, z1 = launch_many(cfgs)
    for res in (z0, z1):
        assert losses_agree(res["losses"], res["reference"]), res
    for rank in z0["collectives"]:
        for a, b in zip(z0["collectives"][rank], z1["collectives"][rank], strict=True):
            assert a["all_reduce"]["calls"] == 1 and "all_reduce" not in b
            for kind in ("all_gather_single", "reduce_scatter_single"):
                assert b[kind]["calls"] == a[kind]["calls"] + 1
