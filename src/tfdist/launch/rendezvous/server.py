"""The rendezvous server: one thread, one selector, bounded in connections, bytes and time.

Written here rather than taken from a coordination service (etcd, torch's TCPStore, Ray's GCS) because the
job needs only "wait for N authenticated nodes, hand each the same table", none of those is a dependency
a TensorFlow user has, and a small server can be bounded exactly: at most :data:`MAX_CONNECTIONS` open
connections (more are closed on accept), :data:`~tfdist.launch.rendezvous.protocol.MAX_MESSAGE` bytes per
connection, :data:`HANDSHAKE_S` seconds to authenticate, and one thread whatever strangers do.
"""

from __future__ import annotations

import errno
import os
import selectors
import socket
import threading
import time
from dataclasses import dataclass, field

from tfdist._log import get_logger
from tfdist.errors import ConfigError
from tfdist.launch.rendezvous import protocol
from tfdist.launch.rendezvous.protocol import JoinRequest

log = get_logger(__name__)

MAX_CONNECTIONS = 64
#: Seconds a connection has to send an authenticated join (a stranger holding one open is closed then).
HANDSHAKE_S = 5.0
#: Seconds a round with enough nodes (elastic) waits for more before it forms without them.
LAST_CALL_S = 10.0


#: TCP keep-alive on a member's connection: a node whose link is cut is found gone after about
#: ``idle + interval * probes`` seconds, without a heartbeat in the protocol.
KEEPALIVE = (2, 1, 3)


def keepalive(sock: socket.socket) -> None:
    """Turn on :data:`KEEPALIVE` for ``sock`` (either side of a member's connection)."""
    idle, interval, probes = KEEPALIVE
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, idle)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, interval)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, probes)
    except (OSError, AttributeError):  # not Linux: a cut node is then waited for until the last call
        pass


@dataclass
class _Conn:
    sock: socket.socket
    address: str
    nonce: str
    deadline: float
    buffer: bytearray = field(default_factory=bytearray)
    request: JoinRequest | None = None
    leave: dict[str, object] | None = None  # what a member said before closing (see protocol step 4)
    silent: bool = False  # its connection timed out (keep-alive): host or link down, not a closed launcher


class RendezvousServer:
    """Waits for ``nnodes`` nodes presenting ``token``, then sends each its :class:`Assignment`."""

    def __init__(
        self,
        listener: socket.socket,
        token: str,
        nnodes: int,
        timeout: float,
        endpoint: str,
        *,
        min_nodes: int | None = None,
        rounds: int = 1,
        last_call: float = LAST_CALL_S,
    ) -> None:
        """``nnodes`` is the most nodes a round takes, ``min_nodes`` the fewest (elastic when fewer);
        ``rounds``: how many times the job may form (1 + its restarts); ``last_call``: seconds a round
        with at least ``min_nodes`` waits for more (see :func:`protocol.ready`)."""
        self.listener, self.token, self.nnodes, self.endpoint = listener, token, nnodes, endpoint
        self.min_nodes = min_nodes or nnodes
        self.rounds, self.last_call = rounds, last_call
        self.round = 0
        self.deadline = time.monotonic() + timeout
        self.timeout = timeout
        self.first_join: float | None = None  # when the first node of the round being formed arrived
        # The formed round's nodes, each holding its connection open while its launcher lives (a node
        # whose connection closes is gone: the next round does not wait for it).
        self.members: dict[str, _Conn] = {}
        self.selector = selectors.DefaultSelector()
        self.conns: dict[int, _Conn] = {}
        self.joined: dict[str, _Conn] = {}  # by node name
        self.formed: protocol.Assignment | None = None
        self.failed: str | None = None
        self.rejected = 0
        # Whether the running round's other members were told of a failure (once a round: the first
        # failure starts the next round; the rest is the same news).
        self.noticed = False
        self._farewell: dict[str, object] = {"bye": True}
        self._stop = threading.Event()
        listener.setblocking(False)
        self.selector.register(listener, selectors.EVENT_READ)
        self.thread = threading.Thread(target=self._serve, name="tfdist-rendezvous", daemon=True)

    def start(self) -> RendezvousServer:
        """Serve in a daemon thread (it lives as long as the launcher: later joiners are told the job
        already formed)."""
        self.thread.start()
        return self

    def stop(self, farewell: protocol.Notice | None = None) -> None:
        """Close every connection and the listener, telling the members first: ``farewell`` (this node
        ends the job for good), else that the endpoint closes in order (``{"bye": true}``)."""
        self._farewell = {"notice": farewell.to_dict()} if farewell is not None else {"bye": True}
        self._stop.set()
        if self.thread.is_alive():
            self.thread.join(timeout=5)

    def _serve(self) -> None:
        try:
            while not self._stop.is_set():
                for key, _ in self.selector.select(timeout=0.2):
                    if key.fileobj is self.listener:
                        self._accept()
                    elif key.fd in self.conns:  # not closed earlier in this round
                        self._read(self.conns[key.fd])
                self._expire()
        finally:
            for conn in list(self.members.values()):
                self._send(conn, self._farewell)  # what the members' launchers make of the closing
            notice = self._farewell.get("notice")
            for conn in list(self.joined.values()):  # nodes waiting for the next round: it will not form
                why = (
                    protocol.Notice.from_dict(notice).line()
                    if isinstance(notice, dict)
                    else f"the job at {self.endpoint} ended before a restart could take this node"
                )
                self._send(conn, {"error": why})
            for conn in list(self.conns.values()):
                self._close(conn)
            self.selector.unregister(self.listener)
            self.listener.close()

    def _accept(self) -> None:
        try:
            sock, peer = self.listener.accept()
        except OSError:
            return
        if len(self.conns) >= MAX_CONNECTIONS:
            self.rejected += 1
            sock.close()  # a flood costs one accept and one close per connection, nothing kept
            return
        nonce = os.urandom(16).hex()
        conn = _Conn(sock, peer[0], nonce, time.monotonic() + HANDSHAKE_S)
        try:
            sock.setblocking(False)
            sock.send(protocol.encode({"hello": protocol.VERSION, "nonce": nonce}))
        except OSError:
            sock.close()
            return
        self.conns[sock.fileno()] = conn
        self.selector.register(sock, selectors.EVENT_READ)

    def _read(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(protocol.MAX_MESSAGE + 1)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            conn.silent = exc.errno in (errno.ETIMEDOUT, errno.EHOSTUNREACH)
            data = b""
        if not data:
            self._close(conn)
            return
        if conn.request is not None:
            self._member_said(conn, data)
            return
        conn.buffer += data
        if b"\n" not in conn.buffer:
            if len(conn.buffer) > protocol.MAX_MESSAGE:
                self._close(conn)
            return
        line = bytes(conn.buffer.split(b"\n", 1)[0])
        try:
            request = protocol.verify(self.token, conn.nonce, protocol.decode(line))
        except ValueError as exc:
            self.rejected += 1
            reason = "its token is not this job's" if "token" in str(exc) else "it did not send a join"
            self._reply(conn, {"error": f"the rendezvous at {self.endpoint} refused this node: {reason}."})
            return
        self._join(conn, request)

    def _member_said(self, conn: _Conn, data: bytes) -> None:
        """A member's leave line (protocol step 4); anything else a joined node sends is ignored."""
        if self.members.get(conn.request.name if conn.request else "") is not conn:
            return
        conn.buffer += data
        if len(conn.buffer) > protocol.MAX_MESSAGE:
            self._close(conn)
            return
        while b"\n" in conn.buffer:
            line, _, rest = bytes(conn.buffer).partition(b"\n")
            conn.buffer = bytearray(rest)
            try:
                leave = protocol.decode(line).get("leave")
            except ValueError:
                continue
            if isinstance(leave, dict):
                conn.leave = leave

    def _notify(self, notice: protocol.Notice) -> None:
        """Tell every other member of the running round, once: their launchers stop their workers at once
        instead of waiting for a collective to time out."""
        if self.noticed or self._stop.is_set():
            return
        self.noticed = True
        log.debug("telling the job: %s", notice.line())
        for name, conn in list(self.members.items()):
            if name != notice.by:
                self._send(conn, {"notice": notice.to_dict()})

    def _join(self, conn: _Conn, request: JoinRequest) -> None:
        if self.formed is not None and self.round >= self.rounds:
            self._reply(
                conn,
                {
                    "error": f"the rendezvous at {self.endpoint} belongs to a job that already formed "
                    f"({self.formed.nnodes} node(s): {', '.join(self.formed.names)}). Hint: another --rdzv "
                    "port for another job."
                },
            )
            return
        if self.failed is not None:
            self._reply(conn, {"error": self.failed})
            return
        first = next(iter(self.joined.values())).request if self.joined else None
        why = protocol.mismatch(first, request) if first is not None else None
        if why:
            self._reply(conn, {"error": why})
            return
        member = self.members.get(request.name)
        if member is not None and member is not conn and member.leave is None:
            # A node of the running round meets again: its workers failed. The others are still running.
            self._notify(protocol.Notice(request.name, "its workers failed; it is meeting the others again"))
        old = self.joined.pop(request.name, None)
        if old is not None:  # the same node again (its launcher retried): the newer connection counts
            self._close(old)
        live = set(self.members)
        if request.name not in live and len(set(self.joined) - live) >= self.nnodes - len(live):
            # Room is kept for every node of the running round: newcomers fill only what MAX leaves.
            self._reply(conn, {"error": f"the job at {self.endpoint} already has its {self.nnodes} node(s)."})
            return
        conn.request = request
        conn.deadline = float("inf")
        if self.first_join is None and (not live or request.name in live):
            # The first node of a round: at the start, or the first of the running round back after a
            # failure (a restart). A newcomer while the round runs starts no clock: it waits for the next
            # restart, as long as its own --rdzv-timeout lets it.
            self.first_join = time.monotonic()
            if self.formed is not None:
                self.deadline = self.first_join + self.timeout
        self.joined[request.name] = conn
        log.debug("node %s joined from %s (%d/%d)", request.name, conn.address, len(self.joined), self.nnodes)
        self._maybe_form()

    def _maybe_form(self) -> None:
        if not self.joined or self.first_join is None:
            return
        live = list(self.members)
        waited = time.monotonic() - self.first_join
        if protocol.ready(self.joined, live, self.min_nodes, self.nnodes, waited, self.last_call):
            self._form()

    def _form(self) -> None:
        members = [(c.request, c.address) for c in self.joined.values() if c.request is not None]
        try:
            assignment = protocol.assign(members, self.endpoint, self.round)
            problem = protocol.loopback_among_remote(assignment)
        except ConfigError as exc:
            problem = str(exc)
        if problem:
            self.failed = problem
            for conn in list(self.joined.values()):
                self._reply(conn, {"error": problem})
            self.joined.clear()
            return
        self.formed = assignment
        # Members hold their connections while the job runs, in the last round too: a node that fails or
        # leaves is told to the others at once (the next round, or the end of the job without a timeout).
        old_members, self.members = self.members, {}
        for conn in list(self.joined.values()):
            assert conn.request is not None
            rank = assignment.names.index(conn.request.name)
            self._send(conn, {"assignment": assignment.to_dict(rank)})
            keepalive(conn.sock)
            self.members[conn.request.name] = conn
        self.joined.clear()
        for conn in old_members.values():
            if conn.request is not None and self.members.get(conn.request.name) is not conn:
                self._close(conn)  # the node's connection of the round before (it rejoined on a new one)
        self.round += 1
        self.first_join = None
        self.noticed = False

    def _expire(self) -> None:
        now = time.monotonic()
        for conn in [c for c in self.conns.values() if c.deadline < now]:
            self.rejected += 1
            self._close(conn)
        self._maybe_form()  # an elastic round whose last call ran out
        waiting = self.formed is None or self.first_join is not None  # a round is being formed
        if waiting and self.failed is None and now > self.deadline:
            arrived = sorted(self.joined)
            missing = self.min_nodes - len(arrived)
            gone = sorted(set(self.formed.names) - set(arrived)) if self.formed is not None else []
            which = f" ({', '.join(gone)} of the last round)" if gone else ""
            wanted = f"{self.min_nodes}" if self.min_nodes == self.nnodes else f"at least {self.min_nodes}"
            problem = (
                f"only {len(arrived)} of {wanted} node(s) arrived at the rendezvous {self.endpoint} "
                f"within {self.timeout:g} s ({', '.join(arrived) or 'none'}); {missing} missing{which}. "
                "Hint: start the same command on every node, or raise --rdzv-timeout."
            )
            if self.formed is None:
                self.failed = problem  # the job never formed: later joiners are told the same
            for conn in list(self.joined.values()):
                self._reply(conn, {"error": problem})
            self.joined.clear()
            self.first_join = None

    def _reply(self, conn: _Conn, message: dict[str, object]) -> None:
        self._send(conn, message)
        self._close(conn)

    def _send(self, conn: _Conn, message: dict[str, object]) -> None:
        try:
            conn.sock.setblocking(True)
            conn.sock.settimeout(2.0)  # a peer that does not read its answer is dropped, not waited for
            conn.sock.sendall(protocol.encode(message))
            conn.sock.setblocking(False)
        except OSError:
            pass

    def _close(self, conn: _Conn) -> None:
        self.conns.pop(conn.sock.fileno(), None)
        if conn.request is not None and self.joined.get(conn.request.name) is conn:
            del self.joined[conn.request.name]  # a joined node that went away is no longer counted
        if conn.request is not None and self.members.get(conn.request.name) is conn:
            del self.members[conn.request.name]  # a member that went away: the next round goes on without it
            notice = protocol.leave_notice(conn.request.name, conn.leave, silent=conn.silent)
            if notice is not None:
                self._notify(notice)
            if not self.members and self.joined and self.first_join is None:
                # Every node of the round is gone while newcomers wait: they are the next round.
                self.first_join = time.monotonic()
                self.deadline = self.first_join + self.timeout
        try:
            self.selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()
