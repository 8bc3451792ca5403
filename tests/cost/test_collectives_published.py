"""The all-reduce model against published nccl-tests runs (`benchmarks/collectives_vs_published.py`,
``benchmarks/data/nccl_published.csv``; VALIDATION.md, "Collectives against published nccl-tests
runs"). Nothing in the catalog's link efficiencies was fitted to these rows; the NVLink SHARP
figures come from the maintainer's statement and the vendors' tables named in systems.yaml."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from hwtune.cost.collectives import all_reduce_time, bus_bandwidth

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "collectives_vs_published.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("collectives_vs_published", _PATH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _run(bench, url_part: str, nodes: int, env_part: str = "") -> list[dict[str, str]]:
    for (url, _gpu, n, _nic, env), rows in bench.runs().items():
        if url_part in url and int(n) == nodes and env_part in env:
            return [r for r in rows if float(r["size_bytes"]) >= bench.LARGE]
    raise AssertionError(f"no run {url_part} x{nodes}")


def _errors(bench, rows):
    return [bench.predicted_busbw(r) / float(r["busbw_gbs"]) - 1 for r in rows]


def test_eight_h100s_all_reduce_at_nvlink_sharp_speed(bench):
    """nccl-tests #290 (8 H100s, NCCL defaults, 474 GB/s busbw at 4 GiB, 'in the expected range'
    for NVIDIA): within 5% with NVLS; the ring alone is ~24% slow."""
    rows = _run(bench, "nccl-tests/issues/290", 1)
    assert all(abs(e) < 0.05 for e in _errors(bench, rows))
    r = rows[-1]
    cl = bench.cluster_of(r)
    size = float(r["size_bytes"])
    ring = all_reduce_time(size, cl.span(8, 1), cl, nvls=False)
    assert bus_bandwidth("all_reduce", size, 8, ring) / 1e9 / float(r["busbw_gbs"]) < 0.8


def test_eight_a100s_ring_within_ten_percent(bench):
    """OCI BM.GPU4.8 (8 A100-40GB on NVSwitch, no NVLink SHARP): 232 GB/s busbw at 10 GiB."""
    assert all(abs(e) < 0.10 for e in _errors(bench, _run(bench, "run-nccltests-ubuntu", 1)))


@pytest.mark.parametrize(
    ("url", "nodes", "env"),
    [
        ("nccl-tests/issues/309", 4, "NCCL_TOPO_FILE"),  # 366 GB/s, "a good number" (NVIDIA)
        ("nccl-tests/issues/309", 8, "NCCL_MIN_CTAS=24"),  # 391 GB/s tuned
        ("nccl-tests/issues/309", 2, "NCCL_ALGO=Ring"),  # 393 GB/s, NVIDIA's advice for 2 nodes
        ("coreweave/nccl-tests/blob/fb4787", 8, ""),  # 387 GB/s with SHARP
        ("run-nccltests-ubuntu", 2, ""),  # A100, 16x 100G RoCE per node, 192 GB/s
    ],
)
def test_multi_node_rings_within_fifteen_percent(bench, url, nodes, env):
    """Across 2-8 HGX nodes with a NIC per GPU the ring / hierarchical terms hold within 15%
    where NCCL runs rings (NVIDIA's engineers in #309: a 400 GB/s peak with 8 x 400G NICs)."""
    assert all(abs(e) < 0.15 for e in _errors(bench, _run(bench, url, nodes, env)))


def test_a_tiny_all_reduce_over_two_h100_nodes_is_nccls_ll_tree():
    """NCCL's LL tree over 2 nodes x 8 H100s (tuning.cc): 6.8 us + 2 x (7 NVLink hops x 0.6 us
    + 1 network hop x 5 us) = 25.2 us, not the Simple tree's 8.4 + 2 x (7 x 3 + 8) = 66.4 us
    (NCCL's fixed Simple cost per call, baseLat, and the cluster's per-step latencies)."""
    from hwtune.hardware.cluster import make_cluster

    cl = make_cluster("h100-sxm-80gb", 16)
    assert all_reduce_time(32, cl.span(16, 1), cl) == pytest.approx(25.2e-6, rel=1e-3)
    assert all_reduce_time(32, cl.span(16, 1), cl, algorithm="tree") == pytest.approx(
        66.4e-6, rel=1e-3
    )


@pytest.mark.parametrize("nodes", [2, 4])
def test_small_all_reduces_over_ib_within_a_quarter(bench, nodes):
    """nccl-tests #309, 2 and 4 HGX H100 nodes, NCCL defaults, 32 B to 128 KB: the median
    predicted / measured time within 25%, and most points too (the tables hold one-off spikes,
    94-108 us at 256 B between 25-36 us neighbours). The Simple terms alone gave 1.5-2.3x."""
    import statistics

    url = "nccl-tests/issues/309"
    for (u, _gpu, n, _nic, env), rows in bench.runs().items():
        if url in u and int(n) == nodes and "defaults" in env and len(rows) > 20:
            cl = bench.cluster_of(rows[0])
            span = cl.span(cl.n_gpus, 1)
            ratios = [
                all_reduce_time(float(r["size_bytes"]), span, cl) * 1e6 / float(r["time_us"])
                for r in rows
                if 32 <= float(r["size_bytes"]) <= 131072
            ]
            assert len(ratios) == 13
            assert 0.75 < statistics.median(ratios) < 1.25
            assert sum(0.75 < x < 1.25 for x in ratios) >= 10
            return
    raise AssertionError(f"no {nodes}-node run")
