"""One connection of the rendezvous server, and the socket settings of a member's connection."""

from __future__ import annotations

import contextlib
import itertools
import socket
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from tfdist.launcher.rendezvous.admission import MAX_PENDING
from tfdist.launcher.rendezvous.protocol import JoinRequest

#: TCP keep-alive on a member's connection: a cut node is found gone after ``idle + interval * probes`` s.
KEEPALIVE = (2, 1, 3)


def keepalive(sock: socket.socket) -> None:
    """Turn on :data:`KEEPALIVE` for ``sock`` (either side of a member's connection)."""
    idle, interval, probes = KEEPALIVE
    with contextlib.suppress(OSError, AttributeError):  # not Linux: a cut node is waited for (last call)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, idle)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, interval)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, probes)


def open_files_for(nnodes: int) -> int:
    """Raise the soft limit of open files towards what a job of ``nnodes`` needs; the limit in force."""
    need = 2 * nnodes + MAX_PENDING + 256
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and soft < need:
            target = need if hard == resource.RLIM_INFINITY else min(need, hard)
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        return int(soft) if soft != resource.RLIM_INFINITY else need
    except (ImportError, ValueError, OSError):
        return need


@dataclass(eq=False)
class Connection:
    """One peer of the server (a stranger until its join is verified), and what it is still to be sent."""

    sock: socket.socket
    fd: int
    address: str
    nonce: str
    buffer: bytearray = field(default_factory=bytearray)
    request: JoinRequest | None = None
    leave: dict[str, object] | None = None  # what a member said before closing (see protocol step 4)
    silent: bool = False  # its connection timed out (keep-alive): host or link down, not a closed launcher
    out: deque[memoryview] = field(default_factory=deque)
    send_by: float = float("inf")  # when the peer must have read what is in ``out``
    close_when_sent: bool = False
    closed: bool = False

    def who(self) -> str:
        """The launcher behind the connection, for messages: ``10.0.0.5 pid 4242``."""
        pid = self.request.pid if self.request is not None else "?"
        return f"{self.address} pid {pid}"

    def gone(self) -> bool:
        """Whether the peer closed the connection (not yet read here): a launcher that was replaced."""
        try:
            return self.sock.recv(1, socket.MSG_PEEK) == b""
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True

    def queue(self, pieces: Sequence[bytes], send_by: float) -> None:
        """Add a line (in pieces) to what is to be sent; ``send_by``: when the peer must have read it."""
        if not self.out:
            self.send_by = send_by
        self.out.extend(memoryview(piece) for piece in pieces)

    def send_some(self) -> None:
        """Send what the kernel takes now (never blocks); OSError when the connection broke."""
        while self.out:
            try:
                sent = self.sock.sendmsg(list(itertools.islice(self.out, 64)))
            except (BlockingIOError, InterruptedError):
                return
            while sent and self.out:
                first = self.out[0]
                if sent >= len(first):
                    sent -= len(first)
                    self.out.popleft()
                else:
                    self.out[0] = first[sent:]
                    sent = 0
