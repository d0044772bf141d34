"""The rendezvous: its pure protocol, and its server and clients on loopback (real sockets, seconds)."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from tfdist.errors import ConfigError
from tfdist.launcher.rendezvous import client, parse_endpoint, protocol
from tfdist.launcher.rendezvous.protocol import Assignment, JoinRequest
from tfdist.launcher.rendezvous.server import RendezvousServer


def request(name: str, nproc: int = 2, digest: str = "d", command: str = "train.py") -> JoinRequest:
    return JoinRequest(name=name, nproc=nproc, command=command, digest=digest, ports=(4000, 4001), pid=1)


def test_ranks_follow_host_names_not_arrival() -> None:
    arrived = [(request("node3"), "10.0.0.3"), (request("node1"), "10.0.0.1"), (request("node2"), "10.0.0.2")]
    a = protocol.assign(arrived, "node1:29400")
    assert a.names == ("node1", "node2", "node3") and a.addresses == ("10.0.0.1", "10.0.0.2", "10.0.0.3")
    assert protocol.assign(arrived[::-1], "node1:29400") == a


def test_two_nodes_with_one_name_are_refused() -> None:
    with pytest.raises(ConfigError, match="two nodes call themselves 'node1'"):
        protocol.assign([(request("node1"), "10.0.0.1"), (request("node1"), "10.0.0.2")], "e:1")


@pytest.mark.parametrize(
    ("other", "expected"),
    [
        (request("b", nproc=4), "node b was started with -n 4, but the job at this endpoint runs -n 2"),
        (request("b", digest="x", command="other.py"), "node b runs `other.py`, but the job"),
        (request("b"), None),
    ],
)
def test_mismatches_name_the_node_and_the_difference(other: JoinRequest, expected: str | None) -> None:
    why = protocol.mismatch(request("a"), other)
    assert (why is None) if expected is None else (expected in str(why))


def test_only_the_token_holder_is_admitted() -> None:
    join = {"name": "a", "nproc": 1, "command": "x", "digest": "d", "ports": [5], "pid": 1}
    good = {"join": join, "mac": protocol.mac("secret", "n1", join)}
    assert protocol.verify("secret", "n1", good).name == "a"
    with pytest.raises(ValueError, match="wrong token"):
        protocol.verify("other", "n1", good)
    with pytest.raises(ValueError, match="wrong token"):  # replayed on another connection (nonce)
        protocol.verify("secret", "n2", good)
    with pytest.raises(ValueError, match="wrong token"):  # tampered after signing
        protocol.verify("secret", "n1", {"join": {**join, "nproc": 2}, "mac": good["mac"]})


@pytest.mark.parametrize(
    "line",
    [b"\x00\xff", b"[1, 2]", b"not json", b"{" * (protocol.MAX_MESSAGE + 1)],
)
def test_garbage_is_not_a_message(line: bytes) -> None:
    with pytest.raises(ValueError):
        protocol.decode(line)


def test_loopback_next_to_remote_nodes_is_named() -> None:
    a = Assignment(0, ("node1", "node2"), ("127.0.0.1", "10.0.0.2"), ((1,), (2,)), 1, "node1:1")
    assert "node node1 reached the rendezvous through 127.0.0.1 (loopback)" in str(
        protocol.loopback_among_remote(a)
    )
    assert protocol.loopback_among_remote(Assignment(0, ("a",), ("127.0.0.1",), ((1,),), 1, "a:1")) is None


@pytest.mark.parametrize("text", ["node1", "node1:", ":29400", "node1:0", "node1:70000", "node1:x"])
def test_bad_endpoints(text: str) -> None:
    with pytest.raises(ConfigError, match="must be HOST:PORT"):
        parse_endpoint(text)


def serve(nnodes: int, timeout: float = 10.0) -> tuple[RendezvousServer, int]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    port = listener.getsockname()[1]
    return RendezvousServer(listener, "secret", nnodes, timeout, f"127.0.0.1:{port}").start(), port


def test_nodes_joining_over_loopback_get_the_same_table() -> None:
    server, port = serve(2)
    results: dict[str, Assignment] = {}

    def join(name: str) -> None:
        results[name] = client.join("127.0.0.1", port, lambda: "secret", request(name), 10)

    threads = [threading.Thread(target=join, args=(n,)) for n in ("b", "a")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    try:
        assert results["a"].node_rank == 0 and results["b"].node_rank == 1
        assert results["a"].names == results["b"].names == ("a", "b")
        with pytest.raises(ConfigError, match="already formed"):  # a second job on the same endpoint
            client.join("127.0.0.1", port, lambda: "secret", request("c"), 3)
    finally:
        server.stop()


def test_a_wrong_token_and_a_stranger_holding_a_connection() -> None:
    server, port = serve(1)
    held = socket.create_connection(("127.0.0.1", port))  # never sends: closed after the handshake time
    try:
        with pytest.raises(ConfigError, match="refused this node: its token is not this job's"):
            client.join("127.0.0.1", port, lambda: "guess", request("m"), 5)
        assert client.join("127.0.0.1", port, lambda: "secret", request("a"), 5).names == ("a",)
        held.settimeout(10)
        started = time.monotonic()
        assert held.recv(1024).startswith(b'{"hello"') and held.recv(1024) == b""  # closed by the server
        assert time.monotonic() - started < 8
    finally:
        held.close()
        server.stop()
