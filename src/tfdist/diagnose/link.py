"""The link between two nodes, measured once per bench (no TensorFlow): ``python -m tfdist.diagnose.link
serve|measure --port P --out FILE`` writes JSON (interface, speed, MTU; ``rtt_ms`` and ``gbit_s``)."""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import struct
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

CHUNK = 1 << 20
PING, BULK = b"p", b"b"


def interface_of(address: str) -> dict[str, Any]:
    """The network interface that holds ``address`` (this end of a connection), with its speed and MTU."""
    import psutil

    stats = psutil.net_if_stats()
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.address == address for a in addrs):
            st = stats.get(name)
            return {
                "interface": name,
                "address": address,
                "speed_mbit": st.speed if st else 0,
                "mtu": st.mtu if st else 0,
            }
    return {"interface": "?", "address": address, "speed_mbit": 0, "mtu": 0}


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        part = sock.recv(n - len(data))
        if not part:
            raise ConnectionError("the peer closed the probe early")
        data += part
    return data


def serve(port: int, timeout: float) -> dict[str, Any]:
    """Answer one probe: echo pings, then count bulk bytes until the sender closes and confirm the count."""
    with socket.create_server(("", port), reuse_port=False) as server:
        server.settimeout(timeout)
        conn, _ = server.accept()
    with conn:
        conn.settimeout(timeout)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        side = interface_of(conn.getsockname()[0])
        while (kind := _recv_exact(conn, 1)) == PING:
            conn.sendall(PING)
        if kind != BULK:
            raise ConnectionError(f"unexpected probe message {kind!r}")
        received, buffer = 0, bytearray(CHUNK)
        while n := conn.recv_into(buffer):
            received += n
        conn.sendall(struct.pack("!Q", received))
    return {**side, "received_bytes": received}


def _connect(peer: str, port: int, timeout: float) -> socket.socket:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return socket.create_connection((peer, port), timeout=min(5.0, timeout))
        except OSError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.1)  # the server is still starting on its node


def measure(peer: str, port: int, pings: int, seconds: float, timeout: float) -> dict[str, Any]:
    """Median round trip of one byte, then bandwidth of ``seconds`` of bulk sending, to ``peer``."""
    with _connect(peer, port, timeout) as sock:
        sock.settimeout(timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        side = interface_of(sock.getsockname()[0])
        rtts = []
        for _ in range(pings):
            started = time.perf_counter()
            sock.sendall(PING)
            _recv_exact(sock, 1)
            rtts.append(time.perf_counter() - started)
        sock.sendall(BULK)
        payload = memoryview(bytes(CHUNK))
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)
        (received,) = struct.unpack("!Q", _recv_exact(sock, 8))  # every byte arrived: the link carried it
        elapsed = time.perf_counter() - started
    return {
        **side,
        "peer": peer,
        "rtt_ms": statistics.median(rtts) * 1e3,
        "gbit_s": received * 8 / elapsed / 1e9,
        "bytes": received,
        "seconds": elapsed,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m tfdist.diagnose.link``."""
    parser = argparse.ArgumentParser(prog="python -m tfdist.diagnose.link")
    sub = parser.add_subparsers(dest="side", required=True)
    srv = sub.add_parser("serve")
    msr = sub.add_parser("measure")
    msr.add_argument("--peer", required=True)
    msr.add_argument("--pings", type=int, default=200)
    msr.add_argument("--seconds", type=float, default=1.0)
    for p in (srv, msr):
        p.add_argument("--port", type=int, required=True)
        p.add_argument("--out", required=True)
        p.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    if args.side == "serve":
        result = serve(args.port, args.timeout)
    else:
        result = measure(args.peer, args.port, args.pings, args.seconds, args.timeout)
    result["hostname"] = socket.gethostname()
    Path(args.out).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
