"""A stranger floods the rendezvous while 256 nodes join: 1,000 connections from 16 other addresses,
reopened as fast as the server drops them, a third idle, a third sending garbage lines, a third holding
half a join open. Every node joins; the server stays one thread and its memory bounded.

The flood runs in its own process (this file run as a script), so that it costs the server what a
stranger's machine would: packets, not this interpreter's lock."""

from __future__ import annotations

import selectors
import socket
import subprocess
import sys
import threading
import time
import tracemalloc

import psutil

from tfdist.errors import ConfigError
from tfdist.launcher.rendezvous import client
from tfdist.launcher.rendezvous.admission import MAX_PENDING
from tfdist.launcher.rendezvous.protocol import Assignment, JoinRequest
from tfdist.launcher.rendezvous.server import RendezvousServer

NODES = 256
STRANGERS = 1000
ADDRESSES = 16
SERVER_FILES = ("*/rendezvous/server.py", "*/rendezvous/admission.py", "*/rendezvous/connection.py")


def flood(port: int, count: int, addresses: int) -> None:
    """Keep ``count`` connections open to ``port`` from 127.0.1.1 ... (one of three kinds each), each
    reopened when the server drops it; print how many were opened, every half second."""
    selector = selectors.DefaultSelector()
    kinds = (b"", b"garbage\n\x00\xff{not json}\n", b'{"join": {"name": "x", "nproc": 1, "ports": [')
    opened = 0

    def open_one(i: int) -> None:
        nonlocal opened
        sock = socket.socket()
        sock.setblocking(False)
        sock.bind((f"127.0.1.{1 + i % addresses}", 0))
        sock.connect_ex(("127.0.0.1", port))
        selector.register(sock, selectors.EVENT_WRITE, (i, True))
        opened += 1

    for i in range(count):
        open_one(i)
    printed = 0.0
    while True:
        for key, _ in selector.select(timeout=0.1):
            sock, (i, connecting) = key.fileobj, key.data
            assert isinstance(sock, socket.socket)
            try:
                if connecting:
                    sock.send(kinds[i % 3]) if kinds[i % 3] else None
                    selector.modify(sock, selectors.EVENT_READ, (i, False))
                    continue
                if sock.recv(65536):
                    continue  # the hello, or an error line: the connection is still open
            except OSError:
                pass
            selector.unregister(sock)
            sock.close()
            open_one(i)
        if time.monotonic() - printed > 0.5:
            printed = time.monotonic()
            print(opened, flush=True)


def server_bytes() -> int:
    """What the server's own code holds now (tracemalloc, its files only)."""
    filters = [tracemalloc.Filter(True, pattern) for pattern in SERVER_FILES]
    return sum(
        stat.size for stat in tracemalloc.take_snapshot().filter_traces(filters).statistics("filename")
    )


def join_all(
    port: int, names: list[str], held: list[socket.socket]
) -> tuple[dict[str, Assignment], list[str]]:
    met: dict[str, Assignment] = {}
    errors: list[str] = []

    def one(name: str) -> None:
        request = JoinRequest(name, 8, "train.py", "d", tuple(range(20000, 20008)), 1)
        try:
            met[name] = client.join("127.0.0.1", port, lambda: "s", request, 60, hold=held, max_nodes=NODES)
        except ConfigError as exc:
            errors.append(str(exc))

    threads = [threading.Thread(target=one, args=(name,)) for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=90)
    return met, errors


def test_a_stranger_flood_keeps_no_node_out_and_the_server_bounded() -> None:
    """The server's memory is read with tracemalloc (its own files) while only the flood runs -- tracing
    256 joining threads would slow them tenfold -- and the process's resident memory across the joins."""
    process = psutil.Process()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4096)
    port = listener.getsockname()[1]
    tracemalloc.start()
    server = RendezvousServer(listener, "s", NODES, 60.0, f"127.0.0.1:{port}").start()
    threads, rss = threading.active_count(), process.memory_info().rss
    stranger = subprocess.Popen(
        [sys.executable, __file__, str(port), str(STRANGERS), str(ADDRESSES)],
        stdout=subprocess.PIPE,
        text=True,
    )
    held: list[socket.socket] = []
    try:
        assert stranger.stdout is not None
        assert int(stranger.stdout.readline()) >= STRANGERS
        time.sleep(1.5)  # the flood at its height
        assert threading.active_count() == threads  # the server started no thread for strangers
        assert len(server.conns) <= MAX_PENDING and len(server.admission) <= MAX_PENDING
        assert process.num_fds() < MAX_PENDING + 64
        during = server_bytes()
        tracemalloc.stop()
        started = time.monotonic()
        met, errors = join_all(port, [f"node{i:04d}" for i in range(NODES)], held)
        took = time.monotonic() - started
        assert not errors and len(met) == NODES, errors[:3]
        assert {len(a.names) for a in met.values()} == {NODES}
        assert stranger.poll() is None  # the flood went on throughout
        grown = process.memory_info().rss - rss
        print(
            f"{NODES} nodes joined in {took:.2f} s under the flood ({server.rejected} stranger connections "
            f"dropped); the server's code held {during / 2**20:.2f} MiB during the flood, the process grew "
            f"{grown / 2**20:.1f} MiB"
        )
        assert server.rejected > STRANGERS and took < 20
        assert during < 12 * 2**20  # 512 strangers x 16 KiB at most, and nothing per dropped connection
        assert grown < 200 * 2**20  # 256 joining threads and their sockets included
    finally:
        stranger.kill()
        stranger.wait(timeout=10)
        for sock in held:
            sock.close()
        server.stop()
        tracemalloc.stop()


if __name__ == "__main__":
    flood(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
