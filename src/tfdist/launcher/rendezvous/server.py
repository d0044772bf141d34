"""The rendezvous server: rounds of authenticated nodes, each handed the same table, and notices to the
running round when a member fails or leaves (not etcd or torch's TCPStore: neither is a TensorFlow user's
dependency, and a small server can be bounded exactly)."""

from __future__ import annotations

import errno
import selectors
import socket
import threading
import time

from tfdist._log import get_logger
from tfdist.errors import ConfigError
from tfdist.launcher.rendezvous import protocol
from tfdist.launcher.rendezvous.connection import KEEPALIVE as KEEPALIVE
from tfdist.launcher.rendezvous.connection import Connection, keepalive
from tfdist.launcher.rendezvous.protocol import JoinRequest
from tfdist.launcher.rendezvous.transport import Transport

log = get_logger(__name__)

#: Seconds a round with enough nodes (elastic) waits for more before it forms without them.
LAST_CALL_S = 10.0


class RendezvousServer(Transport):
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
        grow_after: float | None = 0.0,
    ) -> None:
        """``nnodes``/``min_nodes``: the most and fewest nodes of a round; ``rounds``: 1 + the restarts;
        ``last_call``: see :func:`protocol.ready`; ``grow_after``: seconds a round runs before newcomers make
        it grow (None: never; they wait for a restart)."""
        super().__init__(listener, nnodes)
        self.token, self.nnodes, self.endpoint = token, nnodes, endpoint
        self.min_nodes = min_nodes or nnodes
        self.rounds, self.last_call, self.grow_after = rounds, last_call, grow_after
        self.round = 0
        self.deadline = time.monotonic() + timeout
        self.timeout = timeout
        self.first_join: float | None = None  # when the first node of the round being formed arrived
        # The formed round's nodes, each holding its connection open while its launcher lives.
        self.members: dict[str, Connection] = {}
        self.joined: dict[str, Connection] = {}  # by node name
        self.back = 0  # how many of the joined are members of the running round (kept as they come and go)
        self.formed: protocol.Assignment | None = None
        self.failed: str | None = None
        self.twins: str | None = None  # the last refusal of two launchers with one name (timeout line)
        # Whether the running round was told of a failure (once a round: the rest is the same news).
        self.noticed = False
        self.formed_at = 0.0  # when the running round formed (monotonic)
        # Whether the running round was told that nodes wait to join (once a round).
        self.grow_told = False
        self._farewell: dict[str, object] = {"bye": True}
        self.thread = threading.Thread(target=self._serve, name="tfdist-rendezvous", daemon=True)

    def start(self) -> RendezvousServer:
        """Serve in a daemon thread (as long as the launcher lives: later joiners are told the job formed)."""
        self.thread.start()
        return self

    def stop(self, farewell: protocol.Notice | None = None) -> None:
        """Close every connection and the listener, telling the members ``farewell`` or ``{"bye": true}``."""
        self._farewell = {"notice": farewell.to_dict()} if farewell is not None else {"bye": True}
        self._stop.set()
        if self.thread.is_alive():
            self.thread.join(timeout=5)

    def _serve(self) -> None:
        try:
            while not self._stop.is_set():
                listening = False
                for key, mask in self.selector.select(timeout=0.2):
                    conn = self.conns.get(key.fd)
                    listening |= key.fileobj is self.listener
                    if conn is not None and mask & selectors.EVENT_WRITE:
                        self._flush(conn)
                    if conn is not None and not conn.closed and mask & selectors.EVENT_READ:
                        self._read(conn)
                if listening:  # after the joins that arrived: a newcomer never drops one that was ready
                    self._accept()
                self._expire()
        finally:
            self._goodbye()

    def _goodbye(self) -> None:
        """Tell the members and the waiting nodes that the endpoint closes (2 s to read it), close all."""
        for conn in list(self.members.values()):
            self._send(conn, self._farewell)  # what the members' launchers make of the closing
        notice = self._farewell.get("notice")
        why = protocol.Notice.from_dict(notice).line() if isinstance(notice, dict) else None
        why = why or f"the job at {self.endpoint} ended before a restart could take this node"
        for conn in list(self.joined.values()):  # nodes waiting for the next round: it will not form
            self._send(conn, {"error": why})
        self._shut(until=time.monotonic() + 2.0)

    def _read(self, conn: Connection) -> None:
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
        if conn.request is not None or conn.close_when_sent:
            self._member_said(conn, data)
            return
        conn.buffer += data
        if b"\n" not in conn.buffer:
            if len(conn.buffer) > protocol.MAX_MESSAGE:
                self.rejected += 1
                self._close(conn)
            return
        line = bytes(conn.buffer.split(b"\n", 1)[0])
        conn.buffer.clear()
        self.admission.remove(conn.fd)  # answered either way: no longer a stranger's slot
        try:
            request = protocol.verify(self.token, conn.nonce, protocol.decode(line))
        except ValueError as exc:
            self.rejected += 1
            reason = "its token is not this job's" if "token" in str(exc) else "it did not send a join"
            self._reply(conn, {"error": f"the rendezvous at {self.endpoint} refused this node: {reason}."})
            return
        self._join(conn, request)

    def _member_said(self, conn: Connection, data: bytes) -> None:
        """A member's leave line (protocol step 4) or its refusal to grow now; anything else is ignored."""
        if conn.request is None or self.members.get(conn.request.name) is not conn:
            return
        conn.buffer += data
        if len(conn.buffer) > protocol.MAX_MESSAGE:
            self._close(conn)
            return
        while b"\n" in conn.buffer:
            line, _, rest = bytes(conn.buffer).partition(b"\n")
            conn.buffer = bytearray(rest)
            try:
                message = protocol.decode(line)
            except ValueError:
                continue
            leave, declined = message.get("leave"), message.get("decline")
            if isinstance(leave, dict):
                conn.leave = leave
            if isinstance(declined, str):
                self._declined(conn.request.name, declined[:400])

    def _declined(self, member: str, why: str) -> None:
        """A member cannot grow now: the waiting newcomers are told why and not taken; the round runs on."""
        self.noticed = False
        for name, conn in list(self.joined.items()):
            if name not in self.members:
                self._reply(conn, {"error": protocol.not_grown(self.endpoint, name, member, why)})
                self._forget(conn)

    def _maybe_grow(self) -> None:
        """Tell the running round, once, that nodes wait to join (they stop at a step boundary and meet)."""
        live = len(self.members)
        if self.grow_after is None or self.grow_told or self.noticed or not live or self._stop.is_set():
            return
        waiting = [name for name in self.joined if name not in self.members]
        if not waiting or self.first_join is not None:  # a round being formed takes them anyway
            return
        if time.monotonic() - self.formed_at < self.grow_after:
            return
        # Told, like a failure: the members' old connections close as they meet again, which is no news.
        self.grow_told = self.noticed = True
        self.rounds += 1
        nodes = min(self.nnodes, live + len(waiting))
        notice = protocol.Notice(waiting[0], f"the job grows to {nodes} node(s)", grow=nodes)
        log.debug("telling the job: %s", notice.line())
        line = protocol.encode({"notice": notice.to_dict()})
        for conn in list(self.members.values()):
            self._send_pieces(conn, (line,))

    def _notify(self, notice: protocol.Notice) -> None:
        """Tell every other member of the running round, once, rather than let a collective time out."""
        if self.noticed or self._stop.is_set():
            return
        self.noticed = True
        log.debug("telling the job: %s", notice.line())
        line = protocol.encode({"notice": notice.to_dict()})  # encoded once for every member
        for name, conn in list(self.members.items()):
            if name != notice.by:
                self._send_pieces(conn, (line,))

    def _join(self, conn: Connection, request: JoinRequest) -> None:
        live = len(self.members)
        growable = self.grow_after is not None and 0 < live < self.nnodes and request.name not in self.members
        if self.formed is not None and self.round >= self.rounds and not growable:
            self._reply(
                conn, {"error": protocol.formed_without(self.endpoint, request.name, self.formed.names)}
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
        if self._twin(conn, request):
            return
        name = request.name
        member = self.members.get(name)
        if member is not None and member.leave is None:
            # A node of the running round meets again: its workers failed. The others are still running.
            self._notify(protocol.Notice(name, "its workers failed; it is meeting the others again"))
        old = self.joined.get(name)
        if old is not None:  # the same launcher again (it retried): the newer connection counts
            self._close(old)
        if name not in self.members and len(self.joined) - self.back >= self.nnodes - live:
            # Room is kept for every node of the running round: newcomers fill only what MAX leaves.
            waiting = len(self.joined) - self.back
            self._reply(conn, {"error": protocol.job_full(self.endpoint, self.nnodes, live, waiting, name)})
            return
        conn.request = request
        keepalive(conn.sock)  # a waiting node whose host is cut is found gone, as a member is
        if self.first_join is None and (not live or name in self.members):
            # The first node of a round (at the start, or back after a failure); a newcomer while the
            # round runs starts no clock: it waits for the next restart.
            self.first_join = time.monotonic()
            if self.formed is not None:
                self.deadline = self.first_join + self.timeout
        self.joined[name] = conn
        self.back += name in self.members
        log.debug("node %s joined from %s (%d/%d)", name, conn.address, len(self.joined), self.nnodes)
        self._maybe_form()
        self._maybe_grow()

    def _twin(self, conn: Connection, request: JoinRequest) -> bool:
        """Whether another live launcher already calls itself ``request.name`` (then refused, with one line):
        before a round forms neither joins (which one the job meant is not known); in a running round only
        the newcomer is refused. The same launcher again (a retry) is no twin."""
        for other in (self.joined.get(request.name), self.members.get(request.name)):
            if other is None or other.request is None or other.request.who == request.who:
                continue
            if other.leave is not None or other.gone():
                self._close(other)
                continue
            running = other is self.members.get(request.name)
            conn.request = request  # for the line's pid
            line = protocol.twins(self.endpoint, request.name, other.who(), conn.who(), running)
            conn.request = None
            self.rejected += 1
            self.twins = line
            self._reply(conn, {"error": line})
            if not running:
                self._reply(other, {"error": line})
            return True
        return False

    def _maybe_form(self) -> None:
        if not self.joined or self.first_join is None:
            return
        waited = time.monotonic() - self.first_join
        joined, live = len(self.joined), len(self.members)
        if protocol.forms(joined, self.back, live, self.min_nodes, self.nnodes, waited, self.last_call):
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
            self._clear_joined()
            return
        self.formed = assignment
        head, tail = protocol.assignment_lines(assignment)  # the table encoded once for every node
        ranks = {name: rank for rank, name in enumerate(assignment.names)}
        # Members hold their connections while the job runs, in the last round too (notices).
        old_members, self.members = self.members, {}
        joined = list(self.joined.values())
        self._clear_joined()
        for conn in joined:
            assert conn.request is not None
            self.members[conn.request.name] = conn
            self._send_pieces(conn, (head, str(ranks[conn.request.name]).encode(), tail))
        for conn in old_members.values():
            if conn.request is not None and self.members.get(conn.request.name) is not conn:
                self._close(conn)  # the node's connection of the round before (it rejoined on a new one)
        self.round += 1
        self.first_join = None
        self.noticed = self.grow_told = False
        self.formed_at = time.monotonic()

    def _clear_joined(self) -> None:
        self.joined.clear()
        self.back = 0

    def _expire(self) -> None:
        now = time.monotonic()
        self._expire_connections(now)
        self._maybe_form()  # an elastic round whose last call ran out
        self._maybe_grow()  # nodes that waited for the growth policy's interval
        waiting = self.formed is None or self.first_join is not None  # a round is being formed
        if waiting and self.failed is None and now > self.deadline:
            self._time_out()

    def _time_out(self) -> None:
        gone = sorted(set(self.formed.names) - set(self.joined)) if self.formed is not None else []
        problem = protocol.too_few(
            self.endpoint, sorted(self.joined), (self.min_nodes, self.nnodes), self.timeout, gone, self.twins
        )
        if self.formed is None:
            self.failed = problem  # the job never formed: later joiners are told the same
        for conn in list(self.joined.values()):
            self._reply(conn, {"error": problem})
        self._clear_joined()
        self.first_join = None

    def _forget(self, conn: Connection) -> None:
        """A closed connection's node: no longer waiting, no longer a member (the others are told)."""
        name = conn.request.name if conn.request is not None else None
        if name is not None and self.joined.get(name) is conn:
            del self.joined[name]  # a joined node that went away is no longer counted
            self.back -= name in self.members
        if name is not None and self.members.get(name) is conn:
            del self.members[name]  # a member that went away: the next round goes on without it
            self.back -= name in self.joined
            notice = protocol.leave_notice(name, conn.leave, silent=conn.silent)
            if notice is not None:
                self._notify(notice)
            if not self.members and self.joined and self.first_join is None:
                # Every node of the round is gone while newcomers wait: they are the next round.
                self.first_join = time.monotonic()
                self.deadline = self.first_join + self.timeout
