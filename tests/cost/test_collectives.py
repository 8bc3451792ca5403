"""Collective cost models: hand-computed numbers, nccl-tests busbw identities, invariants."""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from hwtune.cost.collectives import (
    ALL_REDUCE_ALGORITHMS,
    all_gather_time,
    all_reduce_time,
    all_to_all_time,
    bus_bandwidth,
    p2p,
    pairwise_all_to_all,
    reduce_scatter_time,
    ring_all_gather,
    ring_all_reduce,
    ring_reduce_scatter,
    send_recv_time,
    tree_all_reduce,
)
from hwtune.errors import HwtuneInputError
from hwtune.hardware.cluster import Cluster, GroupSpan, Link
from hwtune.hardware.device import Device, PeakTflops

GiB = 2**30
MiB = 2**20


def make_device(scaleup_gbps: float = 450.0) -> Device:
    """H100-SXM-like figures (NVLink 4: 450 GB/s each way per GPU)."""
    return Device(
        name="test-h100",
        peak_tflops=PeakTflops(bf16=989),
        memory_gib=80,
        memory_bandwidth_tbps=3.35,
        sm_count=132,
        boost_clock_mhz=1980,
        tdp_w=700,
        scaleup_gbps_per_direction=scaleup_gbps,
    )


H100 = make_device()


def dgx(nodes: int = 2, nic_gbps: float = 400.0) -> Cluster:
    """DGX H100 pods: 8 GPUs per node, one NIC per GPU, default efficiencies and latencies:
    intra 450e9*0.80 = 360e9 B/s, alpha 3 us; inter 400e9/8*0.90 = 45e9 B/s, alpha 8 us."""
    return Cluster(device=H100, n_gpus=8 * nodes, gpus_per_node=8, nic_gbps_per_gpu=nic_gbps)


def si_cluster(
    intra_bw: float, inter_bw: float, intra_lat: float, inter_lat: float, per_node: int = 8
) -> Cluster:
    """A cluster whose links are exactly the given SI figures (efficiencies 1)."""
    return Cluster(
        device=make_device(intra_bw / 1e9),
        n_gpus=per_node * 4,
        gpus_per_node=per_node,
        nic_gbps_per_gpu=inter_bw * 8 / 1e9,
        intra_efficiency=1.0,
        inter_efficiency=1.0,
        intra_latency_s=intra_lat,
        inter_latency_s=inter_lat,
    )


# --- strategies ---------------------------------------------------------------------------------
sizes = st.floats(min_value=0, max_value=1e11, allow_nan=False, allow_infinity=False)
positive_sizes = st.floats(min_value=1.0, max_value=1e11)  # at least one byte
ranks = st.integers(min_value=1, max_value=4096)
bandwidths = st.floats(min_value=1e8, max_value=2e12)
latencies = st.floats(min_value=0, max_value=1e-4)
links = st.builds(Link, bandwidths, latencies)
SUBNORMAL_SLACK_S = 1e-300  # far below any time a collective takes; see its uses


@st.composite
def clusters(draw: st.DrawFn, zero_latency: bool = False) -> Cluster:
    lat = st.just(0.0) if zero_latency else latencies
    c = si_cluster(
        draw(st.floats(min_value=1e9, max_value=2e12)),
        draw(st.floats(min_value=1e8, max_value=2e12)),
        draw(lat),
        draw(lat),
        draw(st.sampled_from([1, 2, 4, 8])),
    )
    nvls = draw(st.one_of(st.none(), st.floats(min_value=1.0, max_value=2000.0)))
    return c.model_copy(update={"nvls_allreduce_algbw_gbps": nvls})


@st.composite
def spans(draw: st.DrawFn, min_domains: int = 1) -> GroupSpan:
    local = draw(st.integers(min_value=1, max_value=72))
    domains = draw(st.integers(min_value=min_domains, max_value=512))
    return GroupSpan(local * domains, local, domains)


PRIMITIVES = [
    ring_all_reduce,
    tree_all_reduce,
    ring_reduce_scatter,
    ring_all_gather,
    pairwise_all_to_all,
]


def on_cluster(nbytes: float, span: GroupSpan, cluster: Cluster) -> dict[str, float]:
    """Every cluster-level collective for one case."""
    nvls = span.domains == 1 and cluster.nvls_allreduce_algbw_gbps is not None
    out = {
        f"all_reduce:{a}": all_reduce_time(nbytes, span, cluster, algorithm=a)
        for a in ALL_REDUCE_ALGORITHMS
        if a != "nvls" or nvls
    }
    out["reduce_scatter"] = reduce_scatter_time(nbytes, span, cluster)
    out["all_gather"] = all_gather_time(nbytes, span, cluster)
    out["all_to_all"] = all_to_all_time(nbytes, span, cluster)
    return out


# --- known numbers ------------------------------------------------------------------------------
def test_ring_all_reduce_1gib_8_ranks():
    # 2*7/8 * 2^30 = 1,879,048,192 B; / 360e9 = 5.219578e-3 s; + 14 * 3 us = 42e-6 s
    t = ring_all_reduce(GiB, 8, Link(360e9, 3e-6))
    assert t == pytest.approx(5.219578311e-3 + 42e-6, rel=1e-9)


def test_tree_all_reduce_1mib_16_ranks():
    # depth log2(16) = 4: 2*4*8 us = 64 us; 2 * 2^20 / 45e9 = 2,097,152 / 45e9 = 46.6034 us
    t = tree_all_reduce(MiB, 16, Link(45e9, 8e-6))
    assert t == pytest.approx(64e-6 + 46.60338e-6, rel=1e-6)


def test_ring_reduce_scatter_and_all_gather_1gib_8_ranks():
    # 7/8 * 2^30 = 939,524,096 B; / 360e9 = 2.609789e-3 s; + 7 * 3 us
    link = Link(360e9, 3e-6)
    assert ring_reduce_scatter(GiB, 8, link) == pytest.approx(2.609789156e-3 + 21e-6, rel=1e-9)
    assert ring_all_gather(GiB, 8, link) == pytest.approx(2.609789156e-3 + 21e-6, rel=1e-9)


def test_pairwise_all_to_all_8mib_8_ranks():
    # 7 * 3 us = 21 us; 7/8 * 8 MiB = 7,340,032 B; / 360e9 = 20.38898 us
    t = pairwise_all_to_all(8 * MiB, 8, Link(360e9, 3e-6))
    assert t == pytest.approx(21e-6 + 20.38898e-6, rel=1e-6)


def test_p2p_1mb():
    # 8 us + 1e6 / 45e9 = 8 us + 22.2222 us
    assert p2p(1e6, Link(45e9, 8e-6)) == pytest.approx(30.22222e-6, rel=1e-6)


def test_cluster_links_are_what_the_hand_numbers_assume():
    c = dgx()
    assert c.intra_link() == Link(360e9, 3e-6)
    assert c.inter_link() == Link(45e9, 8e-6)


def test_all_reduce_inside_one_node_is_the_nvlink_ring():
    c = dgx(nodes=1)
    span = c.span(8, 1)
    assert span == GroupSpan(8, 8, 1)
    expected = ring_all_reduce(GiB, 8, Link(360e9, 3e-6))
    for algorithm in ("auto", "ring", "hierarchical"):
        assert all_reduce_time(GiB, span, c, algorithm=algorithm) == expected
    # NCCL's tree inside a node is a chain: 14 * 3 us + 2 * 2^30 / 360e9
    assert all_reduce_time(GiB, span, c, algorithm="tree") == pytest.approx(
        42e-6 + 5.965232356e-3, rel=1e-9
    )


def test_all_reduce_two_dgx_nodes_1gib():
    c = dgx(nodes=2)
    span = c.span(16, 1)
    assert span == GroupSpan(16, 8, 2)
    # flat (NCCL's ring latency model, tuning.cc: network latency on the 2d node-crossing
    # steps, 2 x 15 steps in all): 26*3 + 4*8 = 110 us; 2*15/16 * 2^30 / min(360e9, 8*45e9)
    # = 5.592405 ms
    flat = 110e-6 + 5.592405333e-3
    # hierarchical: 2*7*3 us + 2*7/8*2^30/360e9 (5.219578 ms) + 2*1*8 us
    #               + 2*1/2 * (2^30/8) / 45e9 (2.982616 ms)
    hier = 42e-6 + 5.219578311e-3 + 16e-6 + 2.982616178e-3
    # tree: chain 2*7*3 us + 2*log2(2)*8 us + 2 * 2^30 / 360e9 (5.965232 ms)
    tree = 42e-6 + 16e-6 + 5.965232356e-3
    assert all_reduce_time(GiB, span, c, algorithm="ring") == pytest.approx(flat, rel=1e-9)
    assert all_reduce_time(GiB, span, c, algorithm="hierarchical") == pytest.approx(hier, rel=1e-9)
    assert all_reduce_time(GiB, span, c, algorithm="tree") == pytest.approx(tree, rel=1e-9)
    assert all_reduce_time(GiB, span, c) == pytest.approx(flat, rel=1e-9)


def test_tree_wins_small_all_reduce_over_64_nodes():
    c = dgx(nodes=64)
    span = c.span(512, 1)
    assert span == GroupSpan(512, 8, 64)
    # flat: (2*511 - 128)*3 + 128*8 us = 3.706 ms + 2*511/512*2^20/360e9 (5.814 us)
    flat = 3.706e-3 + 5.81404e-6
    # hier: 42 us + 1,835,008/360e9 (5.0972 us) + 2*63*8 us (1.008 ms) + 2,064,384/360e9 (5.7344 us)
    hier = 42e-6 + 5.09724e-6 + 1.008e-3 + 5.73440e-6
    # tree: 42 us + 2*6*8 us (96 us) + 2,097,152/360e9 (5.8254 us)
    tree = 42e-6 + 96e-6 + 5.82542e-6
    assert all_reduce_time(MiB, span, c, algorithm="ring") == pytest.approx(flat, rel=1e-5)
    assert all_reduce_time(MiB, span, c, algorithm="hierarchical") == pytest.approx(hier, rel=1e-5)
    assert all_reduce_time(MiB, span, c) == pytest.approx(tree, rel=1e-5)


def test_hierarchical_wins_large_all_reduce_on_slow_nics():
    c = dgx(nodes=2, nic_gbps=100)  # 100e9/8*0.9 = 11.25e9 B/s per NIC, 90e9 per node
    span = GroupSpan(16, 8, 2)
    # flat: 110 us + 2*15/16 * 2^30 / 90e9 = 22.369621 ms
    # hier: 42 us + 5.219578 ms + 16 us + 2^30 / 90e9 (11.930465 ms)
    assert all_reduce_time(GiB, span, c, algorithm="ring") == pytest.approx(
        110e-6 + 22.369621333e-3, rel=1e-9
    )
    hier = 58e-6 + 5.219578311e-3 + 11.930464711e-3
    assert all_reduce_time(GiB, span, c) == pytest.approx(hier, rel=1e-9)


def test_reduce_scatter_plus_all_gather_is_the_all_reduce_without_tree():
    c = dgx(nodes=2, nic_gbps=100)
    span = GroupSpan(16, 8, 2)
    rs = reduce_scatter_time(GiB, span, c)
    ag = all_gather_time(GiB, span, c)
    assert rs == ag
    assert rs + ag == pytest.approx(all_reduce_time(GiB, span, c, algorithm="hierarchical"))


def test_all_to_all_two_dgx_nodes():
    c = dgx(nodes=2)
    span = GroupSpan(16, 8, 2)
    # direct: 7*3 us + 8*8 us = 85 us; NVLink 7/16 * 2^30 / 360e9 = 1.304895 ms,
    #         NIC 8/16 * 2^30 / 45e9 = 11.930465 ms -> max is the NIC
    direct = 85e-6 + 11.930464711e-3
    # 2DH: 21 us + 7/8*2^30/360e9 (2.609789 ms) + 8 us + 1/2*2^30/45e9 (11.930465 ms) - slower
    assert all_to_all_time(GiB, span, c) == pytest.approx(direct, rel=1e-9)


def test_all_to_all_small_messages_take_2dh_over_many_nodes():
    c = dgx(nodes=32)
    span = GroupSpan(256, 8, 32)
    s = 64 * 1024
    # direct: 7*3 us + 248*8 us = 2.005 ms + 248/256*65536/45e9 (1.4108 us)
    # 2DH:    21 us + 7/8*65536/360e9 (0.1593 us) + 31*8 us + 31/32*65536/45e9 (1.4108 us)
    two_dh = 21e-6 + 0.159289e-6 + 248e-6 + 1.410844e-6
    assert all_to_all_time(s, span, c) == pytest.approx(two_dh, rel=1e-5)


def test_send_recv_picks_the_level():
    c = dgx(nodes=2)
    # intra: 3 us + 1e8/360e9 = 277.78 us; inter: 8 us + 1e8/45e9 = 2222.22 us
    assert send_recv_time(1e8, False, c) == pytest.approx(3e-6 + 277.7778e-6, rel=1e-6)
    assert send_recv_time(1e8, True, c) == pytest.approx(8e-6 + 2222.2222e-6, rel=1e-6)
    # two flows on the NIC halve its bandwidth
    assert send_recv_time(1e8, True, c, nic_share=2) == pytest.approx(8e-6 + 4444.4444e-6, rel=1e-6)


def test_nic_share_slows_only_the_cross_domain_part():
    c = dgx(nodes=2)
    one = GroupSpan(8, 8, 1)
    assert all_reduce_time(GiB, one, c, nic_share=4) == all_reduce_time(GiB, one, c)
    two = GroupSpan(16, 8, 2)
    assert all_to_all_time(GiB, two, c, nic_share=2) > all_to_all_time(GiB, two, c)


# --- nccl-tests busbw ---------------------------------------------------------------------------
def test_bus_bandwidth_factors():
    # algbw = 1e9 B / 1 s; all-reduce factor 2*7/8, others 7/8, p2p 1
    assert bus_bandwidth("all_reduce", 1e9, 8, 1.0) == pytest.approx(1.75e9)
    for kind in ("reduce_scatter", "all_gather", "all_to_all"):
        assert bus_bandwidth(kind, 1e9, 8, 1.0) == pytest.approx(0.875e9)
    for kind in ("broadcast", "reduce", "send_recv"):
        assert bus_bandwidth(kind, 1e9, 8, 1.0) == pytest.approx(1e9)
    assert bus_bandwidth("all_reduce", 1e9, 1, 0.0) == 0.0
    assert bus_bandwidth("all_gather", 0, 8, 0.0) == 0.0


@given(positive_sizes, st.integers(min_value=2, max_value=4096), bandwidths)
def test_busbw_equals_link_bandwidth_without_latency(nbytes, n, bw):
    link = Link(bw, 0.0)
    cases = {
        "all_reduce": ring_all_reduce,
        "reduce_scatter": ring_reduce_scatter,
        "all_gather": ring_all_gather,
        "all_to_all": pairwise_all_to_all,
    }
    for kind, fn in cases.items():
        assert bus_bandwidth(kind, nbytes, n, fn(nbytes, n, link)) == pytest.approx(bw, rel=1e-9)
    assert bus_bandwidth("send_recv", nbytes, 2, p2p(nbytes, link)) == pytest.approx(bw, rel=1e-9)


def test_busbw_of_a_cross_node_flat_ring_is_its_slowest_hop():
    c = dgx(nodes=2, nic_gbps=200).model_copy(update={"intra_latency_s": 0, "inter_latency_s": 0})
    # per node 8 NICs * 200e9/8*0.9 = 180e9 B/s < 360e9 NVLink
    t = all_reduce_time(GiB, GroupSpan(16, 8, 2), c, algorithm="ring")
    assert bus_bandwidth("all_reduce", GiB, 16, t) == pytest.approx(180e9, rel=1e-9)


# --- invariants ---------------------------------------------------------------------------------
@given(sizes, sizes, ranks, links)
def test_primitives_nonnegative_and_monotone_in_nbytes(a, b, n, link):
    lo, hi = min(a, b), max(a, b)
    for fn in PRIMITIVES:
        assert 0 <= fn(lo, n, link) <= fn(hi, n, link)
    assert 0 <= p2p(lo, link) <= p2p(hi, link)


@given(sizes, ranks, ranks, links)
def test_primitives_monotone_in_ranks(nbytes, a, b, link):
    lo, hi = min(a, b), max(a, b)
    for fn in PRIMITIVES:
        assert fn(nbytes, lo, link) <= fn(nbytes, hi, link) * (1 + 1e-12)


@given(sizes, links)
def test_one_rank_or_no_bytes_costs_nothing(nbytes, link):
    for fn in PRIMITIVES:
        assert fn(nbytes, 1, link) == 0.0
        assert fn(0, 4096, link) == 0.0
    assert p2p(0, link) == 0.0


@given(sizes, sizes, spans(), clusters())
def test_cluster_times_nonnegative_and_monotone_in_nbytes(a, b, span, cluster):
    lo, hi = min(a, b), max(a, b)
    small, large = on_cluster(lo, span, cluster), on_cluster(hi, span, cluster)
    for key in small:
        assert 0 <= small[key] <= large[key], key


@given(sizes, clusters())
def test_cluster_one_rank_or_no_bytes_costs_nothing(nbytes, cluster):
    assert set(on_cluster(nbytes, GroupSpan(1, 1, 1), cluster).values()) == {0.0}
    assert set(on_cluster(0, GroupSpan(64, 8, 8), cluster).values()) == {0.0}
    assert send_recv_time(0, True, cluster) == 0.0


@given(sizes, spans(), clusters())
def test_auto_is_no_slower_than_any_algorithm(nbytes, span, cluster):
    auto = all_reduce_time(nbytes, span, cluster)
    for key, t in on_cluster(nbytes, span, cluster).items():
        if key.startswith("all_reduce:"):
            assert auto <= t, key


@given(sizes, spans(), clusters())
def test_one_domain_is_the_intra_ring(nbytes, span, cluster):
    one = GroupSpan(span.size, span.size, 1)
    intra = cluster.intra_link()
    ring = ring_all_reduce(nbytes, span.size, intra)
    plain = cluster.model_copy(update={"nvls_allreduce_algbw_gbps": None})
    assert all_reduce_time(nbytes, one, plain) == ring
    assert all_reduce_time(nbytes, one, cluster, nvls=False) == ring
    a = cluster.nvls_allreduce_algbw_gbps
    if a is not None and span.size > 1 and nbytes > 0:
        # NVLink SHARP: the ring's latency steps, the buffer once at the switch's rate for a
        # group of this size: n/(n+1) of what it is per GPU, scaled from the domain-wide figure
        # (the domain here never smaller than the group)
        n, dom = span.size, max(cluster.domain, span.size)
        nv = 2 * (n - 1) * intra.latency + nbytes / (a * 1e9 * n / (n + 1) * (dom + 1) / dom)
        assert all_reduce_time(nbytes, one, cluster) == pytest.approx(min(ring, nv), rel=1e-12)
    assert reduce_scatter_time(nbytes, one, cluster) == ring_reduce_scatter(
        nbytes, span.size, intra
    )
    assert all_gather_time(nbytes, one, cluster) == ring_all_gather(nbytes, span.size, intra)
    assert all_to_all_time(nbytes, one, cluster) == pairwise_all_to_all(nbytes, span.size, intra)


@given(positive_sizes, spans(min_domains=2), clusters(zero_latency=True))
def test_crossing_domains_is_never_faster_at_equal_per_rank_bandwidth(nbytes, span, cluster):
    # Bandwidth terms only (alpha = 0): a rank's NIC is no faster than its NVLink, so moving
    # ranks out of the domain cannot help. (With alpha > 0 the hierarchical and tree algorithms
    # take fewer latency steps than a flat ring of n ranks, a real effect of the algorithms.)
    intra, inter = cluster.intra_link(), cluster.inter_link()
    assume(inter.bandwidth <= intra.bandwidth)
    one = GroupSpan(span.size, span.size, 1)
    tol = 1 + 1e-12
    slack = SUBNORMAL_SLACK_S
    assert all_reduce_time(nbytes, span, cluster) * tol + slack >= all_reduce_time(
        nbytes, one, cluster
    )
    assert reduce_scatter_time(nbytes, span, cluster) * tol + slack >= reduce_scatter_time(
        nbytes, one, cluster
    )
    assert all_gather_time(nbytes, span, cluster) * tol + slack >= all_gather_time(
        nbytes, one, cluster
    )
    # All-to-all drives NVLink and the NIC at once, so its per-rank bandwidth is their sum.
    both = Link(intra.bandwidth + inter.bandwidth, 0.0)
    assert all_to_all_time(nbytes, span, cluster) * tol + slack >= pairwise_all_to_all(
        nbytes, span.size, both
    )


@given(sizes, spans(min_domains=2), clusters())
def test_flat_ring_across_domains_is_never_faster_than_inside_one(nbytes, span, cluster):
    # Holds with latencies too: the flat ring takes the same 2(n-1) steps, 2d of them at the
    # (slower) network latency.
    assume(cluster.inter_link().bandwidth <= cluster.intra_link().bandwidth)
    assume(cluster.inter_latency_s >= cluster.intra_latency_s)
    one = GroupSpan(span.size, span.size, 1)
    ring = all_reduce_time(nbytes, span, cluster, algorithm="ring")
    # the absolute slack only absorbs rounding of subnormal times (hypothesis drew
    # ~1e-316 s for a sub-byte buffer over zero-latency links)
    assert ring * (1 + 1e-12) + SUBNORMAL_SLACK_S >= all_reduce_time(nbytes, one, cluster)


@given(
    positive_sizes,
    st.integers(min_value=2, max_value=72),
    st.integers(min_value=2, max_value=512),
    clusters(),
)
def test_hierarchical_beats_flat_ring_when_nics_are_slow(nbytes, local, domains, cluster):
    n = local * domains
    nic = cluster.inter_link().bandwidth
    slow = si_cluster(
        intra_bw=1.01 * n * nic,  # NVLink more than n times a NIC
        inter_bw=nic,
        intra_lat=cluster.intra_latency_s,
        inter_lat=cluster.inter_latency_s,
    )
    span = GroupSpan(n, local, domains)
    hier = all_reduce_time(nbytes, span, slow, algorithm="hierarchical")
    assert hier < all_reduce_time(nbytes, span, slow, algorithm="ring")


@given(positive_sizes, spans(min_domains=2), clusters(zero_latency=True))
def test_all_to_all_nic_part_scales_with_remote_fraction(nbytes, span, cluster):
    assume(cluster.inter_link().bandwidth <= cluster.intra_link().bandwidth)
    n, local = span.size, span.local
    nic = cluster.inter_link().bandwidth
    expected = (n - local) / n * nbytes / nic
    assert all_to_all_time(nbytes, span, cluster) == pytest.approx(expected, rel=1e-9)
    # half the flows' bandwidth on each NIC: twice the time
    assert all_to_all_time(nbytes, span, cluster, nic_share=2) == pytest.approx(
        2 * expected, rel=1e-9
    )


def test_all_to_all_fraction_over_the_nic_examples():
    c = si_cluster(360e9, 45e9, 0.0, 0.0)
    s = GiB
    # 16 ranks: 8 per domain -> 8/16 of S over the NIC; 4 per domain -> 12/16; 1 -> 15/16
    for local, frac in ((8, 8 / 16), (4, 12 / 16), (2, 14 / 16), (1, 15 / 16)):
        t = all_to_all_time(s, GroupSpan(16, local, 16 // local), c)
        assert t == pytest.approx(frac * s / 45e9, rel=1e-12)


# --- bad input ----------------------------------------------------------------------------------
def _one_line_error(call, field: str) -> None:
    with pytest.raises(HwtuneInputError) as info:
        call()
    assert info.value.field == field
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("fn", PRIMITIVES)
def test_primitives_reject_bad_input(fn):
    link = Link(1e9, 1e-6)
    _one_line_error(lambda: fn(-1, 8, link), "nbytes")
    _one_line_error(lambda: fn(math.nan, 8, link), "nbytes")
    _one_line_error(lambda: fn(1e6, 0, link), "n")
    _one_line_error(lambda: fn(-1, 1, link), "nbytes")
    _one_line_error(lambda: fn(1e6, 8, Link(0.0, 1e-6)), "link.bandwidth")


def test_cluster_functions_reject_bad_input():
    c = dgx()
    span = GroupSpan(16, 8, 2)
    for fn in (all_reduce_time, reduce_scatter_time, all_gather_time, all_to_all_time):
        _one_line_error(lambda fn=fn: fn(-1.0, span, c), "nbytes")
        _one_line_error(lambda fn=fn: fn(1e6, GroupSpan(0, 1, 1), c), "span")
        _one_line_error(lambda fn=fn: fn(1e6, GroupSpan(16, 4, 2), c), "span")
        _one_line_error(lambda fn=fn: fn(1e6, span, c, nic_share=0), "nic_share")
    _one_line_error(lambda: all_reduce_time(1e6, span, c, algorithm="butterfly"), "algorithm")
    _one_line_error(lambda: all_reduce_time(1e6, GroupSpan(1, 1, 1), c, algorithm="x"), "algorithm")
    _one_line_error(lambda: send_recv_time(-5, True, c), "nbytes")
    _one_line_error(lambda: p2p(-5, Link(1e9, 0)), "nbytes")
    _one_line_error(lambda: bus_bandwidth("allreduce", 1e6, 8, 1.0), "kind")
    _one_line_error(lambda: bus_bandwidth("all_reduce", -1, 8, 1.0), "nbytes")
    _one_line_error(lambda: bus_bandwidth("all_reduce", 1e6, 0, 1.0), "n")
    _one_line_error(lambda: bus_bandwidth("all_reduce", 1e6, 8, 0.0), "seconds")


@given(spans(min_domains=2), clusters())
def test_ring_latency_pays_the_network_only_on_node_crossings(span, cluster):
    # NCCL's ring model (src/graph/tuning.cc): of the 2(n-1) all-reduce steps, the 2d that cross
    # a node boundary pay the network latency, the rest NVLink's. With a vanishing buffer the
    # ring therefore costs between all-NVLink and all-network latency, and exactly their mix.
    ai, an = cluster.intra_latency_s, cluster.inter_latency_s
    n, d = span.size, span.domains
    t = all_reduce_time(1e-9, span, cluster, algorithm="ring")
    cross = min(2 * d, 2 * (n - 1))
    assert t == pytest.approx((2 * (n - 1) - cross) * ai + cross * an, rel=1e-6, abs=1e-12)
    lo, hi = sorted((2 * (n - 1) * ai, 2 * (n - 1) * an))
    assert lo * (1 - 1e-9) <= t <= hi * (1 + 1e-9) + 1e-12


@given(spans(min_domains=2), clusters())
def test_gather_ring_latency_mixes_nvlink_and_network_steps(span, cluster):
    # All-gather and reduce-scatter run as one ring (NCCL has no tree for them): n-1 steps, of
    # which d-1 cross a node boundary. With a vanishing buffer the flat ring costs exactly that
    # mix, and the collective (the faster of ring and two levels) never more; either way the
    # data crosses d-1 node boundaries one after another, each at the network latency.
    ai, an = cluster.intra_latency_s, cluster.inter_latency_s
    n, d = span.size, span.domains
    ring = (n - d) * ai + (d - 1) * an
    for fn in (all_gather_time, reduce_scatter_time):
        t = fn(1e-9, span, cluster)
        assert t <= ring * (1 + 1e-9) + 1e-12
        assert t >= (d - 1) * an * (1 - 1e-9)


# --- one NCCL all-gather call: a single ring ------------------------------------------------------
def test_nccl_ring_all_gather_pays_nvlink_latency_inside_nodes_and_network_latency_across():
    """NCCL's ring latency model (src/graph/tuning.cc): of the n-1 steps, the d-1 that cross
    nodes pay the network latency and the rest the NVLink latency; the bandwidth term is the
    ring's (n-1)/n · S over the slower of NVLink and the node's NICs."""
    from hwtune.cost.collectives import nccl_ring_all_gather_time

    cl = si_cluster(300e9, 25e9, 3e-6, 8e-6)  # 8 GPUs a node, NICs 8 x 25 GB/s = 200 GB/s
    span = GroupSpan(size=32, local=8, domains=4)
    lat = (32 - 4) * 3e-6 + 3 * 8e-6
    assert nccl_ring_all_gather_time(1e-9, span, cl) == pytest.approx(lat, rel=1e-6)
    s = 1e9
    want = lat + 31 / 32 * s / 200e9
    assert nccl_ring_all_gather_time(s, span, cl) == pytest.approx(want, rel=1e-9)


@given(positive_sizes, st.sampled_from([(16, 8, 2), (64, 8, 8), (1536, 8, 192), (8, 8, 1)]))
def test_one_nccl_ring_is_never_faster_than_the_best_schedule(nbytes, shape):
    """`all_gather_time` takes the better of the ring and the two-level schedule."""
    from hwtune.cost.collectives import nccl_ring_all_gather_time

    n, local, domains = shape
    cl = Cluster(device=H100, n_gpus=n, gpus_per_node=8, nic_gbps_per_gpu=400)
    span = GroupSpan(size=n, local=local, domains=domains)
    assert nccl_ring_all_gather_time(nbytes, span, cl) >= all_gather_time(nbytes, span, cl)
