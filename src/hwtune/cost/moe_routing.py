"""How many nodes a token's experts live on: the traffic of node-deduplicating MoE dispatch.

A dispatcher such as DeepEP sends a token across the network once per destination node and fans
it out to that node's experts over NVLink (DeepSeek-AI 2024, "DeepSeek-V3 Technical Report",
§3.2.2: "tokens are first transmitted via IB to the GPUs with the same in-node index on their
target nodes ... instantly forwarded via NVLink"; DeepEP's internode "normal" kernels). Its
inter-node bytes per token are therefore (distinct remote nodes among the token's top-k experts)
x hidden x bytes, not top-k copies. Group-limited routing (DeepSeek-V2 §2.1.2, V3 §2.1.2: each
token goes to at most ``topk_groups`` of ``n_groups`` expert groups) bounds that count further.

Routing is taken as uniform (the estimator's balanced default): the selected groups are a
uniform subset, and the k experts a uniform subset of the selected groups' experts. Experts are
placed contiguously, ``n_experts / nodes`` per node (expert parallelism ranks node-major).
"""

from __future__ import annotations

from math import comb


def _none_hit(pool: float, hits: float, k: int) -> float:
    """P(none of k draws without replacement from ``pool`` items falls in ``hits`` of them)."""
    p = 1.0
    for i in range(k):
        if pool - i <= 0:
            return 0.0
        p *= max(0.0, pool - hits - i) / (pool - i)
    return p


def expected_nodes_per_token(
    n_experts: int,
    top_k: int,
    nodes: int,
    n_groups: int | None = None,
    topk_groups: int | None = None,
) -> float:
    """E[number of nodes holding at least one of a token's ``top_k`` experts].

    Without a group limit: ``nodes * (1 - C(E - E/nodes, k) / C(E, k))``. With groups aligned to
    nodes (several groups per node, or several nodes per group) the selected groups' experts are
    the pool, and a node counts when it holds a selected group and one of the k draws lands there.
    Groups that do not align with nodes fall back to the unlimited formula (an upper bound)."""
    if nodes <= 1:
        return 1.0
    per_node = n_experts / nodes
    unlimited = nodes * (1.0 - _none_hit(n_experts, per_node, top_k))
    if n_groups is None or topk_groups is None or topk_groups >= n_groups:
        return unlimited
    if n_groups % nodes and nodes % n_groups:  # groups and nodes do not align
        return unlimited
    pool = topk_groups * n_experts / n_groups
    if nodes % n_groups == 0:  # a group spans nodes // n_groups whole nodes
        touched = topk_groups * (nodes // n_groups)
        return touched * (1.0 - _none_hit(pool, per_node, top_k))
    g = n_groups // nodes  # groups per node; j of them selected ~ hypergeometric
    total = comb(n_groups, topk_groups)
    out = 0.0
    for j in range(1, min(g, topk_groups) + 1):
        pj = comb(g, j) * comb(n_groups - g, topk_groups - j) / total
        out += pj * (1.0 - _none_hit(pool, j * n_experts / n_groups, top_k))
    return nodes * out


def remote_nodes_per_token(
    n_experts: int,
    top_k: int,
    nodes: int,
    n_groups: int | None = None,
    topk_groups: int | None = None,
) -> float:
    """Expected distinct nodes other than the token's own: a token's source node is independent
    of its (uniform) routing, so (nodes - 1) / nodes of the touched nodes are remote."""
    if nodes <= 1:
        return 0.0
    e = expected_nodes_per_token(n_experts, top_k, nodes, n_groups, topk_groups)
    return e * (nodes - 1) / nodes


__all__ = ["expected_nodes_per_token", "remote_nodes_per_token"]
