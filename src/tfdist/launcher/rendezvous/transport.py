"""The rendezvous server's transport: one selector, connections bounded in number, bytes and time, and
answers sent without blocking (a peer that does not read within :data:`SEND_S` is dropped). What the job
does with a node's lines is the server's (:mod:`tfdist.launcher.rendezvous.server`)."""

from __future__ import annotations

import contextlib
import errno
import os
import selectors
import socket
import threading
import time
from collections.abc import Sequence

from tfdist._log import get_logger
from tfdist.launcher.rendezvous import protocol
from tfdist.launcher.rendezvous.admission import Admission
from tfdist.launcher.rendezvous.connection import Connection, open_files_for

log = get_logger(__name__)

#: Seconds a connection has to send an authenticated join (a stranger holding one open is closed then).
HANDSHAKE_S = 5.0
#: Seconds a peer has to read what it was sent (the assignment of a large job included).
SEND_S = 30.0
#: Connections accepted per wake-up: a burst of nodes is taken in a few passes, reads interleaved.
ACCEPTS_PER_WAKE = 64


class Transport:
    """The listener and every connection of one server thread; :meth:`_forget` is the server's hook."""

    def __init__(self, listener: socket.socket, nnodes: int) -> None:
        self.listener = listener
        self.selector = selectors.DefaultSelector()
        self.conns: dict[int, Connection] = {}
        self.admission: Admission[int] = Admission()  # connections still to send a verified join
        self.sending: set[int] = set()  # connections with output the kernel did not take yet
        self.rejected = 0
        self._stop = threading.Event()
        self._accepting_from = 0.0  # out of file descriptors: accept again from then
        self._checked_sends = 0.0
        self.files = open_files_for(nnodes)
        listener.setblocking(False)
        self.selector.register(listener, selectors.EVENT_READ)

    def _forget(self, conn: Connection) -> None:
        """What the server keeps of a connection that closed."""

    def _accept(self) -> None:
        now = time.monotonic()
        for _ in range(ACCEPTS_PER_WAKE):
            try:
                sock, peer = self.listener.accept()
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE):
                    self._out_of_files(now)
                return
            nonce = os.urandom(16).hex()
            conn = Connection(sock, sock.fileno(), str(peer[0]), nonce)
            try:
                sock.setblocking(False)
                sock.send(protocol.encode({"hello": protocol.VERSION, "nonce": nonce}))
            except OSError:
                sock.close()
                continue
            # Room is made before the newcomer counts: the table never holds more than the bound.
            for fd in self.admission.admit(conn.fd, conn.address, now + HANDSHAKE_S):
                self.rejected += 1  # the oldest stranger's connection makes room
                self._close(self.conns[fd])
            self.conns[conn.fd] = conn
            self.selector.register(sock, selectors.EVENT_READ)

    def _out_of_files(self, now: float) -> None:
        """No descriptor left: drop the oldest stranger, or stop accepting for a moment (no spinning)."""
        oldest = self.admission.oldest()
        if oldest is not None:
            self.rejected += 1
            self._close(self.conns[oldest])
            return
        log.warning("the rendezvous ran out of open files (limit %d): not accepting for 0.5 s", self.files)
        self.selector.unregister(self.listener)
        self._accepting_from = now + 0.5

    def _expire_connections(self, now: float) -> None:
        """Accept again after running out of files; close strangers past their handshake and slow readers."""
        if self._accepting_from and now >= self._accepting_from:
            self._accepting_from = 0.0
            self.selector.register(self.listener, selectors.EVENT_READ)
        for fd in self.admission.expired(now):
            self.rejected += 1
            self._close(self.conns[fd])
        if self.sending and now - self._checked_sends > 0.5:  # a scan of the slow readers, twice a second
            self._checked_sends = now
            for fd in list(self.sending):
                conn = self.conns.get(fd)
                if conn is not None and conn.send_by < now:
                    self._close(conn)  # it does not read what it was sent

    def _shut(self, until: float) -> None:
        """Send what is queued until ``until``, then close every connection and the listener."""
        while self.sending and time.monotonic() < until:
            for key, mask in self.selector.select(timeout=0.1):
                reader = self.conns.get(key.fd)
                if reader is not None and mask & selectors.EVENT_WRITE:
                    self._flush(reader)
        for conn in list(self.conns.values()):
            self._close(conn)
        if self._accepting_from == 0.0:
            self.selector.unregister(self.listener)
        self.listener.close()
        self.selector.close()

    def _reply(self, conn: Connection, message: dict[str, object]) -> None:
        """Send ``message`` and close the connection once it is sent."""
        conn.close_when_sent = True
        self._send(conn, message)

    def _send(self, conn: Connection, message: dict[str, object]) -> None:
        self._send_pieces(conn, (protocol.encode(message),))

    def _send_pieces(self, conn: Connection, pieces: Sequence[bytes]) -> None:
        """Queue ``pieces`` (one line; shared pieces not copied) and send what the kernel takes now."""
        if not conn.closed:
            conn.queue(pieces, time.monotonic() + SEND_S)
            self._flush(conn)

    def _flush(self, conn: Connection) -> None:
        try:
            conn.send_some()
        except OSError:
            self._close(conn)
            return
        if conn.out and conn.fd not in self.sending:
            self.sending.add(conn.fd)
            self.selector.modify(conn.sock, selectors.EVENT_READ | selectors.EVENT_WRITE)
        elif not conn.out:
            if conn.fd in self.sending:
                self.sending.discard(conn.fd)
                self.selector.modify(conn.sock, selectors.EVENT_READ)
            if conn.close_when_sent:
                self._close(conn)

    def _close(self, conn: Connection) -> None:
        if conn.closed:
            return
        conn.closed = True
        self.conns.pop(conn.fd, None)
        self.admission.remove(conn.fd)
        self.sending.discard(conn.fd)
        self._forget(conn)
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(conn.sock)
        conn.sock.close()
