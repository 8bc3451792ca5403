"""Distinct nodes per token under uniform and group-limited routing (hwtune.cost.moe_routing),
and the node-deduplicating dispatch built on it."""

from __future__ import annotations

from math import comb

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwtune.cost import collectives as coll
from hwtune.cost.moe_routing import expected_nodes_per_token, remote_nodes_per_token
from hwtune.hardware.cluster import make_cluster


def test_two_nodes_closed_form():
    """Mixtral (8 experts, top-2) over 2 nodes: P(both on one node) = 2 C(4,2) / C(8,2) = 12/28,
    so E[nodes] = 2 - 12/28 = 11/7."""
    assert expected_nodes_per_token(8, 2, 2) == pytest.approx(11 / 7)


def test_deepseek_v3_node_limit():
    """DeepSeek-V3: 256 experts, top-8, 8 groups, at most 4 per token, one group per node (EP
    over 8 nodes). A node counts when its group is picked (1/2) and one of the 8 draws from the
    128 experts of the picked groups lands in its 32: 8 * 1/2 * (1 - C(96, 8) / C(128, 8))."""
    want = 8 * 0.5 * (1 - comb(96, 8) / comb(128, 8))
    assert expected_nodes_per_token(256, 8, 8, 8, 4) == pytest.approx(want)
    assert want <= 4  # the report's "at most 4 nodes"
    assert remote_nodes_per_token(256, 8, 8, 8, 4) == pytest.approx(want * 7 / 8)


@settings(max_examples=60, deadline=None)
@given(
    log_nodes=st.integers(0, 5),
    log_groups=st.integers(0, 5),
    top_k=st.integers(1, 8),
    m=st.integers(1, 32),
)
def test_bounds_and_monotonicity(log_nodes, log_groups, top_k, m):
    nodes, groups = 2**log_nodes, 2**log_groups
    experts = 256
    topk_groups = min(groups, m)
    free = expected_nodes_per_token(experts, top_k, nodes)
    limited = expected_nodes_per_token(experts, top_k, nodes, groups, topk_groups)
    assert 1.0 - 1e-9 <= limited <= min(nodes, top_k) + 1e-9
    assert limited <= free + 1e-9  # a group limit never spreads a token wider
    assert 0 <= remote_nodes_per_token(experts, top_k, nodes, groups, topk_groups) <= limited


def test_dedup_dispatch_is_the_all_to_all_inside_a_node_and_cheaper_across():
    cl = make_cluster("h100-sxm-80gb", 64, gpus_per_node=8)
    one_node, eight_nodes = cl.span(8, 1), cl.span(64, 1)
    s = 256e6
    assert coll.node_dedup_dispatch_time(s, 8, 0.0, one_node, cl) == coll.all_to_all_time(
        s, one_node, cl
    )
    remote = remote_nodes_per_token(256, 8, 8, 8, 4)
    assert coll.node_dedup_dispatch_time(s, 8, remote, eight_nodes, cl) < coll.all_to_all_time(
        s, eight_nodes, cl
    )
    with pytest.raises(Exception, match="nbytes"):
        coll.node_dedup_dispatch_time(-1.0, 8, 1.0, eight_nodes, cl)
