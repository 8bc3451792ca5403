"""Time of a collective: alpha-beta costs of ring, tree, hierarchical and all-to-all algorithms,
alone on one link level and placed on a two-level cluster (REFERENCES.md, *Collectives*).

Conventions (nccl-tests ``doc/PERFORMANCE.md``):

- ``nbytes`` is always the full logical buffer, as nccl-tests counts "size": the all-reduce
  buffer, the gathered output of all-gather, the input of reduce-scatter, and for all-to-all the
  bytes each rank sends in all (its own share included). Bytes, not elements.
- A `Link` is one rank's view of one level: ``bandwidth`` in bytes/s each way (already the
  achievable fraction of the datasheet) and ``latency`` α, seconds per algorithm step.
- A step that moves m bytes costs α + m/β (the Hockney alpha-beta model used by Thakur,
  Rabenseifner & Gropp 2005). No reduction term γ: on GPUs the reduction runs at HBM speed,
  far above link speed, and nccl-tests bus bandwidth already includes it.
- A group of one rank, or an empty buffer, costs 0 (NCCL launches nothing).
- The `Link` latencies are those of NCCL's Simple protocol, per step; on NVIDIA devices each
  NCCL call also pays NCCL's fixed Simple cost, 8.4 us (`_simple_base`; the formulas below
  leave it out). For small messages NCCL switches
  to its low-latency (LL) protocol, which ``all_reduce_time(algorithm="auto")``,
  `all_gather_time` and `reduce_scatter_time` (through `nccl_ring_all_gather_time`) also price
  on NVIDIA devices, with NCCL's own figures (`_ll_ring`, `_ll_all_reduce`).

These functions sit in the planner's inner loop (about 100 calls per estimate, 10^5+ estimates
per search): plain float arithmetic, each cluster link fetched at most once per call.
"""

from __future__ import annotations

import math

from hwtune.errors import HwtuneInputError
from hwtune.hardware.cluster import Cluster, GroupSpan, Link

ALL_REDUCE_ALGORITHMS: tuple[str, ...] = ("auto", "ring", "hierarchical", "tree", "nvls")

# nccl-tests PERFORMANCE.md: busbw = algbw * factor(n); the factor makes busbw comparable to the
# link bandwidth whatever the number of ranks.
_BUS_FACTOR_KINDS: tuple[str, ...] = (
    "all_reduce",
    "reduce_scatter",
    "all_gather",
    "all_to_all",
    "broadcast",
    "reduce",
    "send_recv",
)


# NCCL's low-latency (LL) protocol as NCCL's own tuning model prices it (``src/graph/tuning.cc``,
# NCCL 2.2x: ``baseLat``, ``hwLat``, ``llMaxBws``, the LL refinements of ``ncclTopoTuneModel``).
# LL moves 8-byte data words with their flags, so it needs no fence between steps (a fraction of
# a microsecond per hop instead of the ~3 us of the Simple protocol the `Link` latencies describe)
# at half the ring's bus bandwidth (1/3.8 of the tree's) under a cap per architecture.
_LL_BASE_RING_S, _LL_BASE_TREE_S = 6.6e-6, 6.8e-6  # baseLat, LL column
_SIMPLE_BASE_S = 8.4e-6  # baseLat, Simple column (ring and tree): once per NCCL call
_LL_HOP_NVLINK_S = 0.6e-6  # hwLat[NVLINK][ring or tree][LL]
_LL_HOP_NET_RING_S, _LL_HOP_NET_TREE_S = 2.7e-6, 5.0e-6  # hwLat[NET][ring, tree][LL]
_LL_NET_OVERHEAD_S = 1.0e-6  # getNetOverhead, x86 Intel host: a ring step once it leaves a node
_LL_MAX_BUSBW_ONE_NODE = {"volta": 39.0e9, "ampere": 87.7e9, "hopper": 141.0e9,
                          "blackwell": 282.0e9, "blackwell-ultra": 282.0e9}  # fmt: skip
_LL_MAX_BUSBW_NODES = (39.0e9, 20.4e9)  # llMaxBws, Intel hosts: 2 nodes, 3 or more

# NCCL's all-to-all inside one NVLink domain: one ncclSend and one ncclRecv per peer in a group
# (nccl-tests ``alltoall_perf``), scheduled on separate p2p channels, so the n-1 exchanges run
# at once instead of one after another. Each uses the LL protocol when its bytes fit one
# channel's ``NCCL_P2P_LL_THRESHOLD`` (``src/enqueue.cc``, ``addP2pToPlan``: 16 KiB; a peer's
# message under 64 KiB takes one channel on NVLink), else Simple. NCCL's tuning model has no
# p2p latencies, so the four figures below are fitted (relative least squares) to NVIDIA's
# nccl-tests timings of NCCL 2.29.2 on 2, 4 and 8 H200s (ai-dynamo/aiconfigurator,
# benchmarks/data/aiconfigurator_nccl.csv, 1 KB-1 GB) and checked on the H100 rows of the same
# file, which the fit did not see (VALIDATION.md, "NCCL all-to-all"). Groups above 8 GPUs in one
# domain (NVL72) extrapolate the per-peer terms.
_P2P_LL_THRESHOLD_B = 16384.0  # NCCL_P2P_LL_THRESHOLD, bytes per peer on one channel
_A2A_LL_BASE_S, _A2A_LL_PER_PEER_S = 5.9e-6, 0.42e-6  # fit: launch, and each peer's op
_A2A_LL_CHANNEL_BW = 6.1e9  # fit: one p2p channel's LL rate, bytes/s
_A2A_SIMPLE_BASE_S, _A2A_SIMPLE_PER_PEER_S = 12.0e-6, 0.18e-6  # fit, as the LL pair
_A2A_SIMPLE_LINK_SHARE = 0.815  # fit: all-to-all rate over NCCL's ring link (Cluster.intra_link)


def _ll_cap(cluster: Cluster, domains: int) -> float | None:
    """NCCL's LL bus-bandwidth cap for this group, or None where NCCL's LL figures do not
    apply (a device of another vendor or architecture, or a measured profile)."""
    dev = cluster.device
    if dev.vendor != "nvidia" or dev.profile is not None:
        return None
    if domains == 1:
        return _LL_MAX_BUSBW_ONE_NODE.get(dev.architecture)
    return _LL_MAX_BUSBW_NODES[0] if domains == 2 else _LL_MAX_BUSBW_NODES[1]


def _simple_base(cluster: Cluster) -> float:
    """NCCL's fixed cost of one Simple-protocol call (``baseLat``: 8.4 us for ring and tree) on
    the devices whose NCCL figures apply (`_ll_cap`), added to the per-step latencies of the
    cluster's links; 0 elsewhere (another vendor's library, or a measured profile whose fitted
    latency already holds it). Without it a 2-GPU all-gather cost one 3 us step where NVIDIA's
    nccl-tests timings measure 5-6 us (VALIDATION.md, "NCCL's Simple base latency")."""
    return _SIMPLE_BASE_S if _ll_cap(cluster, 1) is not None else 0.0


def _ll_ring(nbytes: float, span: GroupSpan, cap: float, b_slow: float, passes: int) -> float:
    """NCCL's LL ring: ``passes`` = 2 for all-reduce (2(n-1) steps, 2(d-1) of them across
    nodes), 1 for all-gather and reduce-scatter (n-1 steps, d-1 across). 6.6 us + the steps at
    max(0.6 us, 1 us across nodes) per NVLink hop and 2.7 us per network hop (5 us with one
    rank per node: tuning.cc's ``ppn == 1``), bandwidth
    min(cap, busbw/2) (``b_slow``: the Simple ring's bus bandwidth) over passes x (n-1)/n of
    the buffer (tuning.cc: ``nsteps``, ``nInterSteps``, busBw x nRanks/nsteps)."""
    d, n = span.domains, span.size
    cross = passes * (d - 1)
    hop = _LL_HOP_NVLINK_S if d == 1 else max(_LL_HOP_NVLINK_S, _LL_NET_OVERHEAD_S)
    # one rank per node: every step is exposed, NCCL charges the tree's network latency
    net = _LL_HOP_NET_TREE_S if span.local == 1 else _LL_HOP_NET_RING_S
    bw = min(cap, 0.5 * b_slow)
    return (_LL_BASE_RING_S + (passes * (n - 1) - cross) * hop + cross * net
            + passes * (n - 1) * nbytes / (n * bw))  # fmt: skip


def _ll_all_reduce(nbytes: float, span: GroupSpan, cluster: Cluster, b_slow: float) -> float:
    """The faster of NCCL's LL ring and (across domains) LL tree all-reduce; inf where LL does
    not apply. Ring: `_ll_ring` with two passes. Tree: 6.8 us + 2((l-1) 0.6 us + log2(d) 5 us),
    bandwidth min(cap, 0.92 x 0.85 x busbw / 3.8), two passes (``b_slow``: the Simple ring's
    bus bandwidth, min(beta_intra, l beta_NIC))."""
    d, local = span.domains, span.local
    cap = _ll_cap(cluster, d)
    if cap is None:
        return math.inf
    ring = _ll_ring(nbytes, span, cap, b_slow, 2)
    if d == 1:
        return ring
    tree_bw = min(cap, 0.92 * 0.85 * b_slow / 3.8)
    tree = (_LL_BASE_TREE_S
            + 2.0 * ((local - 1) * _LL_HOP_NVLINK_S + math.log2(d) * _LL_HOP_NET_TREE_S)
            + 2.0 * nbytes / tree_bw)  # fmt: skip
    return ring if ring < tree else tree


def _nvls_algbw(cluster: Cluster, n: int) -> float | None:
    """NVLink SHARP all-reduce algorithm bandwidth (bytes/s) of n GPUs of one domain, or None.

    ``cluster.nvls_allreduce_algbw_gbps`` is measured over the whole domain of D GPUs (8 on
    DGX/HGX, 72 on NVL72; systems.yaml; ``cluster.nvls_reference_gpus``, which `make_cluster`
    keeps at the system's domain for a job smaller than a node). In NCCL's NVLS all-reduce the switch reads each
    GPU's shards for all n reductions (``multimem.ld_reduce``: S out of every GPU) and
    multicasts each GPU's reduced shard to all n (``multimem.st``: S/n out, S in), so every
    GPU moves S (1 + 1/n) each way and A(n) = A_D x (n/(n+1)) / (D/(D+1)): 4 of 8 H100s at
    247 GB/s, not 275. NVIDIA's nccl-tests timings on 4 H100/H200s (aiconfigurator; VALIDATION.md,
    "NVLS on part of a node") measure 227-233 GB/s at 256-512 MB, the 8-GPU ones 254-262 GB/s:
    0.9x of each other, as this ratio says, where NCCL's own tuning model (busBw independent of
    n, so algbw x n/(2(n-1))) has 4 GPUs 1.17x faster than 8."""
    a = cluster.nvls_allreduce_algbw_gbps
    if a is None:
        return None
    # the domain the figure was measured on (a job smaller than a node keeps its system's);
    # a group never spans more than that
    d = max(cluster.nvls_reference_gpus or cluster.domain, n)
    return a * 1e9 * (n / (n + 1)) * ((d + 1) / d)


def _nccl_p2p_all_to_all(nbytes: float, n: int, b_ring: float) -> float:
    """NCCL's all-to-all of ``nbytes`` per rank over ``n`` ranks of one NVLink domain, its n-1
    send/recv pairs at once (constants above). A peer's message b = S/n up to 16 KiB goes LL:
    5.9 us + 0.42 us per peer + b / 6.1 GB/s (one channel); above, Simple: 12 us + 0.18 us per
    peer + (n-1)/n S / (0.815 ``b_ring``), the rank's NVLink shared by its n-1 sends. On 8 H200s
    a 1 KB call costs 8.9 us (measured 8.7-9.2) where n-1 Simple steps of 3 us made 21 us."""
    b = nbytes / n
    if b <= _P2P_LL_THRESHOLD_B:
        return _A2A_LL_BASE_S + (n - 1) * _A2A_LL_PER_PEER_S + b / _A2A_LL_CHANNEL_BW
    return (_A2A_SIMPLE_BASE_S + (n - 1) * _A2A_SIMPLE_PER_PEER_S
            + (n - 1) * b / (_A2A_SIMPLE_LINK_SHARE * b_ring))  # fmt: skip


# --- input errors (raised from one-comparison guards, so the happy path stays cheap) ----------
def _bad_nbytes(nbytes: object) -> HwtuneInputError:
    return HwtuneInputError("nbytes", nbytes, "a non-negative number of bytes")


def _bad_n(n: object) -> HwtuneInputError:
    return HwtuneInputError("n", n, "a number of ranks >= 1")


def _bad_link(link: Link) -> HwtuneInputError:
    return HwtuneInputError("link.bandwidth", link.bandwidth, "a positive bandwidth in bytes/s")


def _bad_span(span: GroupSpan) -> HwtuneInputError:
    return HwtuneInputError(
        "span",
        (span.size, span.local, span.domains),
        "size >= 1 ranks with size == local * domains (local, domains >= 1)",
    )


def _bad_share(share: object) -> HwtuneInputError:
    return HwtuneInputError("nic_share", share, "a positive number of flows sharing the NIC")


def _check_group(nbytes: float, span: GroupSpan, nic_share: float) -> None:
    """One-line errors for what every collective over a group span checks."""
    if not nbytes >= 0:
        raise _bad_nbytes(nbytes)
    if not _span_ok(span):
        raise _bad_span(span)
    if not nic_share > 0:
        raise _bad_share(nic_share)


def _span_ok(span: GroupSpan) -> bool:
    local, domains = span.local, span.domains
    return local >= 1 and domains >= 1 and local * domains == span.size


# --- one link level ---------------------------------------------------------------------------
def _link_bandwidth(nbytes: float, n: int, link: Link) -> float | None:
    """``link``'s bandwidth after checking the arguments; None when nothing moves (one rank or
    an empty buffer)."""
    if not nbytes >= 0:
        raise _bad_nbytes(nbytes)
    if n < 1:
        raise _bad_n(n)
    if n == 1 or nbytes == 0:
        return None
    bw = link.bandwidth
    if not bw > 0:
        raise _bad_link(link)
    return bw


def _ring_passes(nbytes: float, n: int, link: Link, passes: int) -> float:
    """``passes`` rounds of n−1 ring steps that each move S/n bytes per rank:
    passes·((n−1)·α + (n−1)/n·S/β) (Thakur, Rabenseifner & Gropp 2005)."""
    bw = _link_bandwidth(nbytes, n, link)
    if bw is None:
        return 0.0
    return passes * ((n - 1) * link.latency + (n - 1) * nbytes / (n * bw))


def ring_all_reduce(nbytes: float, n: int, link: Link) -> float:
    """Ring all-reduce of an ``nbytes`` buffer over ``n`` ranks: 2(n−1)·α + 2·(n−1)/n·S/β.

    A reduce-scatter followed by an all-gather, each n−1 steps that move S/n bytes per rank
    (Patarasuk & Yuan 2009, "Bandwidth optimal all-reduce algorithms for clusters of
    workstations"; alpha-beta costs as in Thakur, Rabenseifner & Gropp 2005). nccl-tests
    PERFORMANCE.md defines busbw = algbw·2(n−1)/n, so with α = 0 the bus bandwidth equals β.
    """
    return _ring_passes(nbytes, n, link, 2)


def tree_all_reduce(nbytes: float, n: int, link: Link) -> float:
    """Double-binary-tree all-reduce over ``n`` ranks: 2·log2(n)·α + 2·S/β.

    Two complementary binary trees each reduce then broadcast half the buffer, pipelined, so
    every rank sends (and receives) 2·S in all while the depth is log2(n) (Sanders, Speck &
    Träff 2009, "Two-tree algorithms for full bandwidth broadcast, reduction and scan"; NCCL 2.4
    double binary trees). Logarithmic latency, but a bandwidth term 2·S/β above the ring's
    2·(n−1)/n·S/β: it wins on small, latency-bound messages over many ranks.
    """
    bw = _link_bandwidth(nbytes, n, link)
    if bw is None:
        return 0.0
    return 2.0 * math.log2(n) * link.latency + 2.0 * nbytes / bw


def ring_reduce_scatter(nbytes: float, n: int, link: Link) -> float:
    """Ring reduce-scatter of an ``nbytes`` input over ``n`` ranks: (n−1)·α + (n−1)/n·S/β.

    n−1 steps of S/n bytes per rank (Thakur, Rabenseifner & Gropp 2005; recursive halving has
    the same bandwidth term with log2(n) steps, but NCCL runs rings). nccl-tests busbw =
    algbw·(n−1)/n.
    """
    return _ring_passes(nbytes, n, link, 1)


def ring_all_gather(nbytes: float, n: int, link: Link) -> float:
    """Ring all-gather of an ``nbytes`` output over ``n`` ranks: (n−1)·α + (n−1)/n·S/β.

    The ring all-gather of Thakur, Rabenseifner & Gropp 2005 (n−1 steps, each forwarding one
    S/n block); nccl-tests busbw = algbw·(n−1)/n, with S the gathered size.
    """
    return _ring_passes(nbytes, n, link, 1)


def pairwise_all_to_all(nbytes: float, n: int, link: Link) -> float:
    """Pairwise-exchange all-to-all, ``nbytes`` sent by each rank in all: (n−1)·α + (n−1)/n·S/β.

    n−1 exchanges of S/n bytes; the block a rank keeps for itself never moves (Thakur,
    Rabenseifner & Gropp 2005, pairwise exchange; nccl-tests busbw = algbw·(n−1)/n).
    """
    return _ring_passes(nbytes, n, link, 1)


def p2p(nbytes: float, link: Link) -> float:
    """One point-to-point message: α + S/β (Hockney's alpha-beta model; nccl-tests sendrecv
    busbw = algbw)."""
    if not nbytes >= 0:
        raise _bad_nbytes(nbytes)
    if nbytes == 0:
        return 0.0
    bw = link.bandwidth
    if not bw > 0:
        raise _bad_link(link)
    return link.latency + nbytes / bw


# --- on a cluster -----------------------------------------------------------------------------
def all_reduce_time(
    nbytes: float,
    span: GroupSpan,
    cluster: Cluster,
    nic_share: float = 1.0,
    algorithm: str = "auto",
    nvls: bool = True,
) -> float:
    """All-reduce of an ``nbytes`` buffer over the group ``span`` on ``cluster``.

    Notation: l = span.local ranks per scale-up domain, d = span.domains, n = l·d; intra link
    (βi, αi); inter link (βn, αn) per GPU NIC (rail-optimized: every GPU has its own NIC, so the
    group's l ranks in a domain drive l NICs, B = l·βn out of each domain).

    - One domain (d = 1): NCCL's ring over NVLink, 2(n−1)·αi + 2(n−1)/n·S/βi, for ``auto``,
      ``ring`` and ``hierarchical`` (which degenerates to the ring). ``tree`` is NCCL's
      intra-node chain, 2(n−1)·αi + 2·S/βi, never faster than the ring.
    - ``ring`` across domains: one flat ring through all n ranks, its bandwidth bounded by the
      slowest hop, 2(n−1−d)·αi + 2d·αn + 2(n−1)/n·S/min(βi, B) (nccl-tests PERFORMANCE.md:
      multi-node ring busbw is bounded by the slowest link; NCCL runs one ring per NIC). The
      latency is NCCL's own ring model (``src/graph/tuning.cc``): the pipelined ring pays the
      network latency only on its 2d node-crossing steps and NVLink latency on the others.
    - ``hierarchical``: ring reduce-scatter over l ranks inside each domain, ring all-reduce of
      S/l per rank across d domains over each rank's NIC, ring all-gather inside (NCCL/Horovod
      hierarchical all-reduce; REFERENCES.md *Collectives*):
      2(l−1)·αi + 2(l−1)/l·S/βi + 2(d−1)·αn + 2(d−1)/d·S/B.
    - ``tree``: NCCL's tree, a chain of l ranks inside each domain and a double binary tree over
      the d domains, pipelined (Sanders et al. 2009; NCCL 2.4):
      2(l−1)·αi + 2·log2(d)·αn + 2·S/min(βi, B).
    - ``nvls`` (one domain, where ``cluster.nvls_allreduce_algbw_gbps`` is known, and ``nvls``
      True): NVLink SHARP, NCCL's default all-reduce on NVSwitch systems since NCCL 2.17. The
      switch reads every GPU's buffer, reduces it and multicasts the sum back, so the time is
      S / A(n), an algorithm bandwidth that grows only slowly with n (`_nvls_algbw`: A_D x
      (n/(n+1)) / (D/(D+1)) from the domain-wide figure A_D; NCCL maintainer,
      NVIDIA/nccl-tests #212: ~275 GB/s on 8 H100s, i.e. busbw ~480 against ~370 for the ring,
      and NVIDIA/nccl #1455: NVLS busbw grows with n as the ring's stays flat), plus the ring's
      latency, 2(n−1)·αi (no small-message NVLS figure is published here, so small all-reduces
      cost what the ring does). ``nvls=False`` leaves it out: vLLM sets
      ``NCCL_CUMEM_ENABLE=0`` (``vllm/env_override.py``, NVIDIA/nccl #1234), and NVLS needs cuMem.
      Across domains NCCL's NVLS-tree is not modelled (the ring, hierarchical and tree terms
      above apply).
    - ``auto``: the fastest of these, as NCCL's tuner picks per message size, and of NCCL's
      low-latency (LL) ring and tree on NVIDIA devices (`_ll_all_reduce`: NCCL's own latency
      and bandwidth figures for that protocol; the terms above, with the cluster's α, are its
      Simple protocol). LL wins below a few hundred KB: a small all-reduce over 2 or 4 H100
      nodes costs ~25 or ~35 us, as nccl-tests #309 measured, not the 58 or 74 us of the Simple
      tree. Explicit algorithms are the Simple protocol.

    Published nccl-tests runs against these terms: VALIDATION.md, "Collectives against published
    nccl-tests runs" (`benchmarks/collectives_vs_published.py`).
    """
    if algorithm not in ALL_REDUCE_ALGORITHMS:
        raise HwtuneInputError("algorithm", algorithm, "one of " + ", ".join(ALL_REDUCE_ALGORITHMS))
    _check_group(nbytes, span, nic_share)
    n = span.size
    if n == 1 or nbytes == 0:
        return 0.0
    intra = cluster.intra_link()
    bi, ai = intra.bandwidth, intra.latency
    local, domains = span.local, span.domains
    base = _simple_base(cluster)  # one NCCL call; "hierarchical" is three
    if domains == 1:
        if algorithm == "tree":
            return base + 2.0 * (n - 1) * ai + 2.0 * nbytes / bi
        # ring: a ring reduce-scatter, then a ring all-gather of the same size, in one call
        ring = 2.0 * nccl_ring_all_gather_time(nbytes, span, cluster, nic_share, "simple") - base
        a = _nvls_algbw(cluster, n) if nvls else None
        nv = math.inf if a is None else 2.0 * (n - 1) * ai + nbytes / a
        if algorithm == "nvls":
            if a is None:
                raise HwtuneInputError("algorithm", algorithm, "a cluster with NVLink SHARP "
                                       "(nvls_allreduce_algbw_gbps) and nvls=True")  # fmt: skip
            return nv
        if algorithm != "auto":
            return ring
        if cluster.device.profile is not None:  # its fitted link already holds what NCCL ran
            nv = math.inf
        return min(ring, nv, _ll_all_reduce(nbytes, span, cluster, bi))
    if algorithm == "nvls":
        raise HwtuneInputError("algorithm", algorithm, "a group inside one NVLink domain")

    inter = cluster.inter_link(nic_share)
    b_out = local * inter.bandwidth  # per domain, over the group's l NICs
    an = inter.latency
    b_slow = bi if bi < b_out else b_out
    intra_steps = 2.0 * (local - 1) * ai

    cross = min(2 * domains, 2 * (n - 1))  # node-crossing steps of the ring (NCCL tuning.cc)
    flat = base + (2 * (n - 1) - cross) * ai + cross * an + 2.0 * (n - 1) * nbytes / (n * b_slow)
    hier = (
        3.0 * base
        + intra_steps
        + 2.0 * (local - 1) * nbytes / (local * bi)
        + 2.0 * (domains - 1) * an
        + 2.0 * (domains - 1) * nbytes / (domains * b_out)
    )
    tree = base + intra_steps + 2.0 * math.log2(domains) * an + 2.0 * nbytes / b_slow
    if algorithm == "ring":
        return flat
    if algorithm == "hierarchical":
        return hier
    if algorithm == "tree":
        return tree
    best = min(flat, hier, tree)
    ll = _ll_all_reduce(nbytes, span, cluster, b_slow)
    return ll if ll < best else best


def _rs_ag_time(nbytes: float, span: GroupSpan, cluster: Cluster, nic_share: float) -> float:
    """Shared cost of reduce-scatter and all-gather (mirror images of each other): one ring
    through every rank, or across domains on S/l per rank and then inside each domain."""
    flat = nccl_ring_all_gather_time(nbytes, span, cluster, nic_share)
    if span.domains == 1 or flat == 0.0:
        return flat
    intra, inter = cluster.intra_link(), cluster.inter_link(nic_share)
    local, domains = span.local, span.domains
    two_level = (
        2.0 * _simple_base(cluster)  # two NCCL calls
        + (local - 1) * intra.latency
        + (local - 1) * nbytes / (local * intra.bandwidth)
        + (domains - 1) * inter.latency
        + (domains - 1) * nbytes / (domains * local * inter.bandwidth)
    )
    return flat if flat < two_level else two_level


def reduce_scatter_time(
    nbytes: float, span: GroupSpan, cluster: Cluster, nic_share: float = 1.0
) -> float:
    """Reduce-scatter of an ``nbytes`` input over the group ``span`` on ``cluster``.

    One domain: ring over NVLink, (n−1)·αi + (n−1)/n·S/βi (Thakur et al. 2005). Across domains
    (notation of `all_reduce_time`, B = l·βn), the faster of
    - a flat ring bounded by its slowest hop: (n−d)·αi + (d−1)·αn + (n−1)/n·S/min(βi, B) (the
      network latency on the d−1 node-crossing steps only, NCCL's ring model in
      ``src/graph/tuning.cc``; NCCL runs all-gather and reduce-scatter as rings), and
    - two levels, the first half of the hierarchical all-reduce (REFERENCES.md *Collectives*):
      ring reduce-scatter of S over l ranks inside, then of S/l per rank across d domains,
      (l−1)·αi + (l−1)/l·S/βi + (d−1)·αn + (d−1)/d·S/B.
    On the Simple protocol a reduce-scatter plus an all-gather thus costs the flat or
    hierarchical all-reduce. The flat ring also takes NCCL's LL protocol where it is faster
    (`nccl_ring_all_gather_time`): small calls.
    """
    return _rs_ag_time(nbytes, span, cluster, nic_share)


def all_gather_time(
    nbytes: float, span: GroupSpan, cluster: Cluster, nic_share: float = 1.0
) -> float:
    """All-gather of an ``nbytes`` (gathered) output over ``span`` on ``cluster``.

    The mirror image of `reduce_scatter_time` (gather across domains on S/l per rank, then
    inside each domain), with the same cost (Thakur et al. 2005 ring all-gather; nccl-tests
    PERFORMANCE.md counts the gathered size), NCCL's LL ring included for small calls.
    """
    return _rs_ag_time(nbytes, span, cluster, nic_share)


def nccl_ring_all_gather_time(
    nbytes: float,
    span: GroupSpan,
    cluster: Cluster,
    nic_share: float = 1.0,
    protocol: str = "auto",
) -> float:
    """All-gather as one NCCL call runs it: a single ring through every rank of ``span``
    (reduce-scatter, its mirror image, costs the same).

    NCCL implements all-gather only as a ring (no tree: ``src/graph/tuning.cc``, whose latency
    model charges the ring's n-1 steps as NVLink hops except the d-1 that cross nodes); the
    two-level schedule `all_gather_time` may take needs a framework to split the call. Simple
    protocol: latency (n-d)·α_intra + (d-1)·α_inter, bandwidth term (n-1)/n · S / min(β_intra,
    l·β_NIC). ``protocol`` "auto" (NVIDIA devices) also prices NCCL's LL ring (`_ll_ring`, one
    pass) and takes the faster, as NCCL's tuner does: on 8 H100s a small all-gather costs
    6.6 + 7 x 0.6 = 10.8 us, not the Simple ring's 7 x 3 = 21 us (NVIDIA's published NCCL
    2.29 timings: 10-14 us; VALIDATION.md, "NCCL all-gather and reduce-scatter"); "simple"
    prices the Simple protocol alone."""
    _check_group(nbytes, span, nic_share)
    if protocol not in ("auto", "simple"):
        raise HwtuneInputError("protocol", protocol, "auto or simple")
    n = span.size
    if n == 1 or nbytes == 0:
        return 0.0
    intra = cluster.intra_link()
    bi, ai = intra.bandwidth, intra.latency
    d = span.domains
    base = _simple_base(cluster)
    if d == 1:
        b_slow = bi
        simple = base + (n - 1) * ai + (n - 1) * nbytes / (n * bi)
    else:
        inter = cluster.inter_link(nic_share)
        b_slow = min(bi, span.local * inter.bandwidth)
        simple = base + (n - d) * ai + (d - 1) * inter.latency + (n - 1) * nbytes / (n * b_slow)
    cap = _ll_cap(cluster, d) if protocol == "auto" else None
    if cap is None:
        return simple
    ll = _ll_ring(nbytes, span, cap, b_slow, 1)
    return ll if ll < simple else simple


def all_to_all_time(
    nbytes: float, span: GroupSpan, cluster: Cluster, nic_share: float = 1.0
) -> float:
    """All-to-all over ``span`` on ``cluster``; ``nbytes`` is what each rank sends in all.

    One domain: on NVIDIA devices NCCL's grouped send/recv, all n−1 exchanges at once, LL or
    Simple by the size of a peer's message (`_nccl_p2p_all_to_all`); elsewhere (other vendors,
    a measured profile) the pairwise exchange over NVLink, (n−1)·αi + (n−1)/n·S/βi (Thakur et
    al. 2005).
    Across domains (notation of `all_reduce_time`), the faster of
    - direct: each rank sends (l−1)/n of S over NVLink and (n−l)/n of S through its own NIC,
      both at once; the n−1 messages' latencies add up:
      (l−1)·αi + (n−l)·αn + max((l−1)/n·S/βi, (n−l)/n·S/βn);
    - two-dimensional hierarchical ("2DH", Hwang et al. 2023, "Tutel: Adaptive
      Mixture-of-Experts at Scale"; REFERENCES.md): an all-to-all inside the domain gathers the
      blocks bound for each remote domain on the rank of the matching rail, then one message per
      remote domain crosses the NIC, fewer and larger messages:
      (l−1)·αi + (l−1)/l·S/βi + (d−1)·αn + (d−1)/d·S/βn.
    Either way a rank's NIC carries (n−l)/n = (d−1)/d of S, so large all-to-alls scale with
    (size − local)/size.
    """
    _check_group(nbytes, span, nic_share)
    n = span.size
    if n == 1 or nbytes == 0:
        return 0.0
    intra = cluster.intra_link()
    bi, ai = intra.bandwidth, intra.latency
    local, domains = span.local, span.domains
    if domains == 1:
        if _ll_cap(cluster, 1) is not None:  # NVIDIA device: NCCL's grouped send/recv
            return _nccl_p2p_all_to_all(nbytes, n, bi)
        return (n - 1) * ai + (n - 1) * nbytes / (n * bi)
    inter = cluster.inter_link(nic_share)
    bn, an = inter.bandwidth, inter.latency
    t_in = (local - 1) * nbytes / (n * bi)
    t_out = (n - local) * nbytes / (n * bn)
    direct = (local - 1) * ai + (n - local) * an + (t_in if t_in > t_out else t_out)
    two_dh = (
        (local - 1) * ai
        + (local - 1) * nbytes / (local * bi)
        + (domains - 1) * an
        + (domains - 1) * nbytes / (domains * bn)
    )
    return direct if direct < two_dh else two_dh


def node_dedup_dispatch_time(
    nbytes: float,
    top_k: int,
    remote_nodes: float,
    span: GroupSpan,
    cluster: Cluster,
    nic_share: float = 1.0,
) -> float:
    """MoE dispatch (or combine) that crosses the network once per destination node and fans
    out over NVLink (DeepEP internode kernels; DeepSeek-V3 report §3.2.2). ``nbytes`` is what
    an all-to-all would send (all ``top_k`` copies of this rank's tokens); ``remote_nodes`` the
    expected distinct remote nodes per token (`hwtune.cost.moe_routing`).

    RDMA carries nbytes / top_k x remote_nodes; NVLink carries the copies bound for other GPUs
    of a node, (l-1)/l of all copies; the two run at once, with the latencies of the two-level
    all-to-all. Inside one scale-up domain it is the plain all-to-all.
    """
    _check_group(nbytes, span, nic_share)
    if span.domains == 1 or nbytes == 0:
        return all_to_all_time(nbytes, span, cluster, nic_share)
    intra = cluster.intra_link()
    inter = cluster.inter_link(nic_share)
    local, domains = span.local, span.domains
    t_rdma = nbytes / top_k * remote_nodes / inter.bandwidth
    t_nvl = (local - 1) / local * nbytes / intra.bandwidth
    return (local - 1) * intra.latency + (domains - 1) * inter.latency + max(t_rdma, t_nvl)


def send_recv_time(
    nbytes: float, cross_domain: bool, cluster: Cluster, nic_share: float = 1.0
) -> float:
    """One point-to-point message (e.g. a pipeline-parallel activation): α + S/β over the
    NVLink of ``cluster``, or over one GPU's NIC (shared by ``nic_share`` flows) when
    ``cross_domain`` (Hockney alpha-beta; nccl-tests sendrecv busbw = algbw)."""
    if not nbytes >= 0:
        raise _bad_nbytes(nbytes)
    if not nic_share > 0:
        raise _bad_share(nic_share)
    if nbytes == 0:
        return 0.0
    link = cluster.inter_link(nic_share) if cross_domain else cluster.intra_link()
    return link.latency + nbytes / link.bandwidth


def bus_bandwidth(kind: str, nbytes: float, n: int, seconds: float) -> float:
    """nccl-tests bus bandwidth (bytes/s) of a collective that moved ``nbytes`` in ``seconds``.

    algbw = S/t; busbw = algbw·2(n−1)/n for all_reduce; algbw·(n−1)/n for reduce_scatter,
    all_gather and all_to_all; algbw for broadcast, reduce and send_recv (nccl-tests
    ``doc/PERFORMANCE.md``). Returns 0 when nothing crosses the bus (n = 1 or S = 0).
    """
    if kind not in _BUS_FACTOR_KINDS:
        raise HwtuneInputError("kind", kind, "one of " + ", ".join(_BUS_FACTOR_KINDS))
    if not nbytes >= 0:
        raise _bad_nbytes(nbytes)
    if n < 1:
        raise _bad_n(n)
    if kind == "all_reduce":
        factor = 2.0 * (n - 1) / n
    elif kind in ("reduce_scatter", "all_gather", "all_to_all"):
        factor = (n - 1) / n
    else:
        factor = 1.0
    if factor == 0 or nbytes == 0:
        return 0.0
    if not seconds > 0:
        raise HwtuneInputError("seconds", seconds, "a positive duration in seconds")
    return nbytes / seconds * factor
