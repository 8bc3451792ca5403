"""`hwtune.workers` follow-ups: a Ray address that nobody answers fails within seconds with a
one-line error, not after Ray's own retries; a malformed one before any work."""

from __future__ import annotations

import socket
import time

import pytest

from hwtune.errors import HwtuneInputError
from hwtune.workers import check_workers, ray_endpoint, run_all

BOUND_S = 30.0  # generous: the probe gives up after 5 s, Ray's client alone after 30 s or more


def _square(x: int) -> int:
    return x * x


def unused_port() -> int:
    """A local TCP port that was free a moment ago (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("scheme", ["ray://", ""])
def test_run_all_at_a_silent_ray_address_fails_fast(scheme):
    """``ray://127.0.0.1:PORT`` (Ray client) and ``127.0.0.1:PORT`` (a GCS address) with nothing
    listening: an error naming --ray, the address and 'reachable', well before Ray's retries."""
    pytest.importorskip("ray")
    address = f"{scheme}127.0.0.1:{unused_port()}"
    start = time.monotonic()
    with pytest.raises(HwtuneInputError) as e:
        list(run_all(_square, [1, 2, 3], ray_address=address))
    assert time.monotonic() - start < BOUND_S
    msg = str(e.value)
    assert msg.startswith(f"--ray: got '{address}'; expected a reachable Ray cluster (")
    assert "\n" not in msg


def test_study_cli_at_a_silent_ray_address_exits_2_quickly(rejects, tmp_path):
    pytest.importorskip("ray")
    address = f"ray://127.0.0.1:{unused_port()}"
    start = time.monotonic()
    rejects(["study", "--models", "llama3.1-8b", "--scales", "8", "--output",
             str(tmp_path / "out"), "--ray", address, "--json"], "--ray",
            f"got '{address}'", "expected a reachable Ray cluster")  # fmt: skip
    assert time.monotonic() - start < BOUND_S


@pytest.mark.parametrize(
    ("address", "endpoint"),
    [("ray://head.example:10002", ("head.example", 10002)),
     ("ray://head.example", ("head.example", 10001)),
     ("10.0.0.5:6379", ("10.0.0.5", 6379)),
     ("ray://[::1]:10001", ("::1", 10001)),
     ("local", None), ("auto", None)],
)  # fmt: skip
def test_ray_endpoint_is_the_host_and_port_connected_to(address, endpoint):
    assert ray_endpoint(address) == endpoint


@pytest.mark.parametrize("address", ["ray://head:port", "ray://head:0", "ray://head:70000",
                                     "ray://:10001", "head:-1"])  # fmt: skip
def test_a_malformed_ray_port_is_refused_before_any_work(address):
    with pytest.raises(HwtuneInputError, match="--ray"):
        check_workers(None, address)
    with pytest.raises(HwtuneInputError, match="--ray"):
        list(run_all(_square, [1, 2], ray_address=address))
