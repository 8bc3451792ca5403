"""ZeRO-Offload's CPU optimizer step at the node's host memory bandwidth, shared by its GPUs
(`Cluster.host_memory_per_gpu`, the system preset's CPUs), and its copies over the GPU's own
host link (PCIe, NVLink-C2C on Grace parts)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from hwtune.errors import HwtuneInputError
from hwtune.hardware.cluster import load_cluster_file, make_cluster
from hwtune.train.estimator import HOST_BANDWIDTH, OPTIMIZER_BYTES_MOVED, estimate
from hwtune.train.strategy import make_strategy

SMALL = dict(model="llama3.1-8b", seq=2048)


def _est(cl, **kw):
    st = make_strategy(dp=cl.n_gpus, zero=1, offload_optimizer=True, precision="bf16",
                       seq=SMALL["seq"], **kw)  # fmt: skip
    return estimate(SMALL["model"], cl, st)


def test_dgx_h100_share_is_its_cpus_memory_over_eight_gpus():
    # DGX H100: 2 sockets x 8 channels x DDR5-4800 x 8 B = 614.4 GB/s, a STREAM-like 0.75 of
    # it, over 8 GPUs
    cl = make_cluster("h100-sxm-80gb", 16)
    assert cl.host_memory_per_gpu == pytest.approx(614.4e9 * 0.75 / 8)


def test_optimizer_time_follows_host_memory():
    slow = make_cluster("h100-sxm-80gb", 8)
    fast = slow.model_copy(update={"host_memory_gbps_per_node": 2 * 614.4})
    a, b = _est(slow), _est(fast)
    assert a.breakdown["optimizer"] == pytest.approx(2 * b.breakdown["optimizer"], rel=1e-9)
    # the rest of the step does not move
    assert a.breakdown["forward"] == b.breakdown["forward"]


def test_optimizer_time_is_the_bytes_over_the_share():
    from hwtune.model.catalog import get_model
    from hwtune.model.params import total_params

    # dense model, ZeRO-1 over 8: each GPU's CPU step moves its eighth of the parameters' Adam
    # bytes at its 0.75 x 614.4 / 8 GB/s
    e = _est(make_cluster("h100-sxm-80gb", 8))
    p = total_params(get_model(SMALL["model"]))
    want = p / 8 * OPTIMIZER_BYTES_MOVED["adam"] / (614.4e9 * 0.75 / 8)
    assert e.breakdown["optimizer"] == pytest.approx(want, rel=0.02)


def test_unknown_host_memory_is_the_stated_assumption_and_noted():
    cl = make_cluster("l40s", 8)
    assert cl.host_memory_per_gpu is None
    e = _est(cl)
    assert any(f"assumed {HOST_BANDWIDTH / 1e9:.0f} GB/s" in n for n in e.notes)
    known = _est(make_cluster("h100-sxm-80gb", 8))
    assert any("614.4 GB/s host memory shared by its 8 GPUs" in n for n in known.notes)


def test_grace_copies_cross_c2c_not_pcie():
    # GB200: 450 GB/s each way over NVLink-C2C; a B200 over PCIe Gen5 x16 has 64
    gb200 = _est(make_cluster("gb200", 8))
    b200 = _est(make_cluster("b200", 8))
    assert b200.breakdown["offload"] / gb200.breakdown["offload"] == pytest.approx(450 / 64)


@settings(max_examples=25, deadline=None)
@given(bw=hs.floats(50, 5000), eff=hs.floats(0.1, 1.0), per_node=hs.sampled_from([1, 2, 4, 8]))
def test_share_is_node_bandwidth_over_its_gpus(bw, eff, per_node):
    cl = make_cluster("h100-sxm-80gb", per_node * 2, gpus_per_node=per_node,
                      host_memory_gbps_per_node=bw, host_memory_efficiency=eff)  # fmt: skip
    assert cl.host_memory_per_gpu * per_node == pytest.approx(bw * 1e9 * eff)


def test_bad_host_memory_is_named(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("system: dgx-h100\nn_gpus: 8\nhost_memory_gbps_per_node: -5\n")
    with pytest.raises(HwtuneInputError) as e:
        load_cluster_file(f)
    assert "host_memory_gbps_per_node" in str(e.value)
    f.write_text("system: dgx-h100\nn_gpus: 8\nhost_memory_efficiency: 1.5\n")
    with pytest.raises(HwtuneInputError) as e:
        load_cluster_file(f)
    assert "host_memory_efficiency" in str(e.value)


def test_preset_cluster_file_keeps_the_figure(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("system: dgx-a100\nn_gpus: 16\n")
    cl = load_cluster_file(f)
    assert cl.host_memory_gbps_per_node == pytest.approx(409.6)
