"""`hwtune.workers` follow-ups: a Ray address that nobody answers fails within seconds with a
one-line error, not after Ray's own retries; a malformed one before any work."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from hwtune.errors import HwtuneInputError
from hwtune.workers import check_workers, probe_ray, ray_endpoint, run_all

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


def _serve_once(reply: bytes | None) -> tuple[int, threading.Thread]:
    """A one-connection TCP server on a free local port: it reads what the client sends first,
    then sends ``reply`` (None: says nothing and holds the connection for 3 s)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]

    def run() -> None:
        with srv:
            conn, _ = srv.accept()
            with conn:
                conn.settimeout(3)
                try:
                    conn.recv(64)
                    if reply is None:
                        time.sleep(3)
                    else:
                        conn.sendall(reply)
                except OSError:
                    pass

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return port, t


# RFC 9113 §3.4: a server's preface is a SETTINGS frame (9-byte header: length 0, type 0x4,
# flags 0, stream 0), which every gRPC server, Ray's GCS and client server among them, sends
SERVER_SETTINGS = bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
HTTP1_REPLY = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"


def test_an_http2_server_passes_the_ray_probe():
    port, t = _serve_once(SERVER_SETTINGS)
    probe_ray(f"ray://127.0.0.1:{port}", timeout_s=3)
    t.join(5)


@pytest.mark.parametrize(
    ("reply", "why"),
    [(HTTP1_REPLY, "not a gRPC one"), (b"", "closed the connection"),
     (None, "no answer within 1 s")],
)  # fmt: skip
def test_another_service_at_the_ray_address_is_refused_quickly(reply, why):
    """Something else listening there (a web server, a service that hangs up, one that says
    nothing) is refused within the probe's time, not left to Ray's retries."""
    port, t = _serve_once(reply)
    address = f"127.0.0.1:{port}"
    start = time.monotonic()
    with pytest.raises(HwtuneInputError) as e:
        probe_ray(address, timeout_s=1)
    assert time.monotonic() - start < 2.5
    msg = str(e.value)
    assert msg.startswith(f"--ray: got '{address}'; expected a reachable Ray cluster (")
    assert why in msg and "\n" not in msg
    t.join(5)


def test_with_ray_tls_the_probe_checks_the_connection_only(monkeypatch):
    """A TLS endpoint waits for a ClientHello, not an HTTP/2 preface (Ray's RAY_USE_TLS)."""
    monkeypatch.setenv("RAY_USE_TLS", "1")
    port, t = _serve_once(HTTP1_REPLY)
    probe_ray(f"127.0.0.1:{port}", timeout_s=1)
    t.join(5)
