"""Objectives (`hwtune.train.objectives`) and hardware / network selection
(`hwtune.train.selection`): the figures are recomputed here from their definitions."""

from __future__ import annotations

import itertools

import pytest

from hwtune.errors import HwtuneInputError
from hwtune.hardware.catalog import get_device
from hwtune.hardware.cluster import make_cluster
from hwtune.model.catalog import get_model
from hwtune.train.estimator import _estimate
from hwtune.train.objectives import objective_value
from hwtune.train.selection import compare_hardware, network_whatif
from hwtune.train.strategy import Strategy

GB, SEQ = 16, 4096


@pytest.fixture(scope="module")
def spec():
    return get_model("llama3.1-8b")


@pytest.fixture(scope="module")
def est_and_cluster(spec):
    cl = make_cluster("h100-sxm-80gb", 8)
    st = Strategy(dp=8, micro_batch=1, global_batch=GB, seq=SEQ, zero=3)
    return _estimate(spec, cl, st), cl


# ------------------------------------------------------------------ objectives
def test_cost_without_a_price_raises_naming_the_price_field(est_and_cluster):
    est, _ = est_and_cluster
    cl = make_cluster("mi300x", 8)
    assert cl.device.price_per_hour_usd is None  # the catalog lists no MI300X price
    with pytest.raises(HwtuneInputError) as ei:
        objective_value("cost", est, cl)
    assert ei.value.field == "price_per_hour_usd"
    assert "price_per_hour_usd" in str(ei.value)


def test_cost_per_million_tokens_from_a_price(est_and_cluster):
    est, cl = est_and_cluster
    price = 2.5  # USD per GPU-hour
    # 8 GPUs for one step of `step_time_s` seconds cost price * 8 * step / 3600 USD and train
    # GB * SEQ tokens (counted from the job, not from the estimate)
    expected = price * 8 * est.step_time_s / 3600 / (GB * SEQ) * 1e6
    assert objective_value("cost", est, cl, price_per_gpu_hour=price) == pytest.approx(
        expected, rel=1e-12
    )
    # the catalog price (overridable per device) gives the same figure
    priced = make_cluster(
        get_device("h100-sxm-80gb").model_copy(update={"price_per_hour_usd": price}), 8
    )
    assert objective_value("cost", est, priced) == pytest.approx(expected, rel=1e-12)
    # an explicit price overrides the catalog's
    assert objective_value("cost", est, priced, price_per_gpu_hour=2 * price) == pytest.approx(
        2 * expected, rel=1e-12
    )


def test_energy_per_token_lies_between_idle_and_board_power(est_and_cluster):
    est, cl = est_and_cluster
    e = objective_value("energy", est, cl)
    assert e > 0
    # every GPU draws at most its TDP (700 W for an H100 SXM) for the whole step
    tokens = GB * SEQ
    assert e <= 700 * 8 * est.step_time_s / tokens * (1 + 1e-12)
    # and at least a tenth of it (idle draw of a datacenter GPU is ~10-20% of TDP)
    assert e >= 0.1 * 700 * 8 * est.step_time_s / tokens


def test_energy_falls_under_a_power_cap(spec):
    # a 400 W cap on 700 W boards: the power ceiling of the bound above drops by 300 W
    st = Strategy(dp=8, micro_batch=1, global_batch=GB, seq=SEQ, zero=3)
    capped = make_cluster("h100-sxm-80gb", 8, power_cap_w=400)
    est = _estimate(spec, capped, st)
    e = objective_value("energy", est, capped)
    assert 0 < e <= 400 * 8 * est.step_time_s / (GB * SEQ) * (1 + 1e-12)


def test_time_to_train_is_tokens_over_throughput(est_and_cluster):
    est, cl = est_and_cluster
    # tokens/s of the job = tokens per step / step time
    tps = GB * SEQ / est.step_time_s
    assert objective_value("time-to-train", est, cl, tokens_to_train=2e12) == pytest.approx(
        2e12 / tps, rel=1e-9
    )
    assert objective_value("throughput", est, cl) == pytest.approx(tps, rel=1e-9)


def test_unknown_objective_raises(est_and_cluster):
    est, cl = est_and_cluster
    with pytest.raises(HwtuneInputError, match="objective"):
        objective_value("latency", est, cl)


# ------------------------------------------------------------------ compare_hardware
def test_compare_hardware_orders_by_time_to_train(spec):
    small = get_device("h100-sxm-80gb").model_copy(update={"memory_gib": 1.0, "name": "h100-1gib"})
    clusters = [make_cluster(g, 8) for g in ("a100-sxm4-80gb", "h100-sxm-80gb", "h200-sxm-141gb")]
    clusters.append(make_cluster(small, 8))
    tokens, price = 1e12, 3.0
    ch = compare_hardware(spec, clusters, GB, SEQ, tokens_to_train=tokens, price_per_gpu_hour=price)
    assert len(ch) == 4
    feasible = [h for h in ch if h.time_to_train_s is not None]
    # 8B parameters in bf16 are 16 GB = 2 GB per GPU even fully sharded over 8: no fit in 1 GiB
    assert len(feasible) == 3
    assert ch[-1].cluster.device.memory_gib == 1.0
    assert (ch[-1].cost_usd, ch[-1].energy_j, ch[-1].result.top) == (None, None, [])
    times = [h.time_to_train_s for h in feasible]
    assert times == sorted(times)
    for h in feasible:
        best = h.result.top[0]
        assert h.time_to_train_s == pytest.approx(tokens / best.tokens_per_s, rel=1e-12)
        # N GPUs x hours x price
        assert h.cost_usd == pytest.approx(price * 8 * h.time_to_train_s / 3600, rel=1e-12)
        assert h.energy_j > 0
    names = [h.cluster.device.name for h in feasible]
    # an A100 has about a third of an H100's dense bf16 peak (312 vs 989 TFLOP/s): slowest
    assert names[-1] == "a100-sxm4-80gb"
    # an H200 is an H100 with more and faster HBM: never slower on the same job
    assert names.index("h200-sxm-141gb") < names.index("h100-sxm-80gb")


def test_compare_hardware_without_a_price_reports_no_cost(spec):
    ch = compare_hardware(spec, [make_cluster("mi300x", 8)], GB, SEQ)
    assert ch[0].time_to_train_s is not None and ch[0].cost_usd is None


def test_compare_hardware_cost_uses_the_catalog_price(spec):
    # the catalog's H100 price (USD per GPU-hour) times GPUs times hours to train
    ch = compare_hardware(spec, [make_cluster("h100-sxm-80gb", 8)], GB, SEQ)
    price = make_cluster("h100-sxm-80gb", 8).device.price_per_hour_usd
    assert ch[0].cost_usd == pytest.approx(price * 8 * ch[0].time_to_train_s / 3600)


# ------------------------------------------------------------------ network what-if
NICS = [50, 100, 200, 400, 800]


@pytest.fixture(scope="module")
def nic_sweep(spec):
    # 8B on 32 H100 (4 nodes) with 64 sequences: data parallelism across nodes, so the
    # gradient reduction crosses the NIC
    return network_whatif(spec, make_cluster("h100-sxm-80gb", 32), "nic", NICS, 64, SEQ,
                          target_efficiency=0.9)  # fmt: skip


def test_whatif_throughput_is_non_decreasing_in_nic_bandwidth(nic_sweep):
    pts, _ = nic_sweep
    assert [p.value for p in pts] == NICS
    thr = [p.throughput for p in pts]
    assert all(t > 0 for t in thr)
    # a faster NIC can always run the slower NIC's best strategy, at least as fast
    assert all(b >= a * (1 - 1e-9) for a, b in itertools.pairwise(thr))
    # and on this DP-heavy job, 50 Gb/s visibly hurts (all-reduce of 16 GB of bf16 gradients
    # per step at ~5.6 GB/s is seconds against a sub-second step)
    assert thr[0] < 0.95 * thr[-1]


def test_whatif_efficiencies_and_least_network(nic_sweep):
    pts, least = nic_sweep
    best = max(p.throughput for p in pts)
    for p in pts:
        assert p.efficiency == pytest.approx(p.throughput / best, rel=1e-12)
    assert max(p.efficiency for p in pts) == 1.0
    assert least is not None
    by_value = {p.value: p for p in pts}
    assert by_value[least].efficiency >= 0.9
    # the least: every smaller NIC misses the target
    assert all(p.efficiency < 0.9 for p in pts if p.value < least)


def test_whatif_oversubscription_least_is_the_largest_that_keeps_the_target(spec):
    pts, least = network_whatif(spec, make_cluster("h100-sxm-80gb", 32), "oversubscription",
                                [1, 4, 16], 64, SEQ, target_efficiency=0.5)  # fmt: skip
    thr = [p.throughput for p in pts]
    # oversubscription divides the scale-out bandwidth: throughput can only fall
    assert all(b <= a * (1 + 1e-9) for a, b in itertools.pairwise(thr))
    assert least is not None
    by_value = {p.value: p for p in pts}
    assert by_value[least].efficiency >= 0.5
    assert all(p.efficiency < 0.5 for p in pts if p.value > least)


def test_whatif_unknown_field_raises_naming_it(spec):
    with pytest.raises(HwtuneInputError, match="latency"):
        network_whatif(spec, make_cluster("h100-sxm-80gb", 16), "latency", [1, 2], 32, SEQ)


@pytest.mark.parametrize("target", [0.0, 1.5])
def test_whatif_target_efficiency_out_of_range_raises(spec, target):
    with pytest.raises(HwtuneInputError, match="target_efficiency"):
        network_whatif(spec, make_cluster("h100-sxm-80gb", 16), "nic", [100, 200], 32, SEQ,
                       target_efficiency=target)  # fmt: skip


def test_whatif_domain_that_does_not_nest_raises_naming_the_field(spec):
    # a 12-GPU NVLink domain does not nest with 8-GPU nodes
    with pytest.raises(HwtuneInputError, match="domain"):
        network_whatif(spec, make_cluster("h100-sxm-80gb", 32), "domain", [12], 64, SEQ)
