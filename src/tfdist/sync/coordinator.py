"""Name-matched collectives (Horovod's coordinator), one background thread per process: TensorFlow may run
independent collectives in either order and ranks may issue them in different orders (buckets, Horovod's
ops), so the ranks agree by name on which is which before any data moves.

An op *submits* a :class:`~tfdist.sync.request.Request` and returns at once; its key is its name plus how
many of that name this rank submitted before. Each *round* is ONE all-gather of a fixed 2 KiB per rank (a
hash of each new key and of what it does); the keys announced everywhere run in the same order on every
rank, a round's sums fused into one packed all-reduce, and a key whose ranks disagree fails on all of them.
:meth:`Coordinator.join` is ``hvd.join()``; every wait ends after ``TFDIST_COLLECTIVE_TIMEOUT``.
"""

from __future__ import annotations

import pickle
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from tfdist._log import get_logger
from tfdist.errors import CollectiveError
from tfdist.sync.reduce import allgather_bytes
from tfdist.sync.request import (
    ABANDON,
    JOIN,
    JOIN_DIGEST,
    JOIN_NAME,
    Request,
    hash64,
    join_unsupported,
    mismatch_message,
)
from tfdist.sync.watch import CHECK_S, Watch

log = get_logger(__name__)

STALL_WARNING_S = 60.0  # Horovod's stall inspector warns after a minute, too
MAX_UNCLAIMED = 1024  # results of ops whose output TensorFlow pruned: dropped oldest first
# Announcements per rank and round: a round is ONE all-gather of a fixed 2 KiB per rank (no second
# exchange of lengths), since every rendezvous costs on a machine whose cores are all busy.
MAX_PER_ROUND = 127


class Coordinator:
    """Submits, matches by name, fuses and runs the collectives of this process.

    ``comm``: the job's communicator (duplicated here), None in a job of one; ``execute(requests)`` runs a
    round's matched requests, the same list in the same order on every rank, setting each one's ``result``
    (or ``error``); ``watch``: the collective timeout (None: none).
    """

    def __init__(
        self,
        comm: Any,
        mpi: Any,
        waiter: Any,
        execute: Callable[[list[Request]], None],
        watch: Watch | None = None,
    ) -> None:
        self.mpi, self.waiter, self._execute, self.watch = mpi, waiter, execute, watch
        #: Kinds a joined rank takes part in with zeros (sums); the others fail while a rank is joined.
        self.joinable: set[str] = set()
        self._joined: list[int] = []  # ranks joined, in the order their join was read (the same everywhere)
        self.size = comm.Get_size() if comm is not None else 1
        self._cond = threading.Condition()
        self._new: list[Request] = []  # submitted, not yet announced
        self._waiting: dict[int, Request] = {}  # announced, not yet run (the thread's own), by key hash
        self._table: dict[int, list[int | None]] = {}  # key hash -> each rank's digest; same on every rank
        self._seq: dict[str, int] = {}
        self._tickets: OrderedDict[int, Request] = OrderedDict()
        self._next_ticket = 0
        self._thread: threading.Thread | None = None
        self._failed = ""
        self.comm = comm.Dup() if self.size > 1 else comm

    # ---- the callers' side (any thread) ----

    def submit(self, request: Request) -> int:
        """Queue ``request``; returns its ticket for :meth:`wait` (runs it at once in a job of one)."""
        with self._cond:
            seq = self._seq.get(request.name, 0)
            self._seq[request.name] = seq + 1
            request.key = f"{request.name}#{seq}"
            request.key_hash = hash64(request.key)
            request.number = self.watch.count() if self.watch is not None else 0
            ticket = self._next_ticket
            self._next_ticket += 1
            self._tickets[ticket] = request
            while len(self._tickets) > MAX_UNCLAIMED:
                self._tickets.popitem(last=False)
            if self.size == 1:
                if request.kind in (ABANDON, JOIN):
                    request.result = [np.array(0, np.int32)] if request.kind == JOIN else []
                    request.done.set()
                else:
                    self._run([request])
                return ticket
            if self._failed:
                request.error = self._failed
                request.done.set()
                return ticket
            self._new.append(request)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="tfdist-coordinator", daemon=True)
                self._thread.start()
            self._cond.notify()
        return ticket

    def wait(self, ticket: int) -> Request:
        """The finished request of ``ticket`` (its ``error`` set when the ranks disagreed).

        CollectiveError once it waited longer than the collective timeout (a join waits as long as the
        others train), or when this process's collectives timed out meanwhile.
        """
        with self._cond:
            request = self._tickets.pop(ticket)
        if not request.done.is_set():
            self._wait_slowly(request)
        if request.error and self.watch is not None and self.watch.failed is not None:
            raise CollectiveError(str(self.watch.failed))
        return request

    def _wait_slowly(self, request: Request) -> None:
        started = time.perf_counter()
        warn_at = started + STALL_WARNING_S
        expires = request.kind != JOIN
        try:
            while not request.done.wait(CHECK_S):
                if self.watch is None:
                    now = time.perf_counter()
                else:  # the label is made only now: most waits end within CHECK_S
                    now = self.watch.check(started, lambda: (request.label(), request.number), expires)
                if now >= warn_at and request.kind != JOIN:
                    warn_at = now + STALL_WARNING_S
                    log.warning(
                        "collective %r has waited %.0f s for the other ranks: one of them has not called it "
                        "(a rank-dependent branch, or a rank stuck elsewhere)",
                        request.key,
                        now - started,
                    )
        finally:
            if self.watch is not None:
                self.watch.leave()

    def join(self) -> int:
        """Horovod's ``hvd.join()``: take part in the others' sums with zeros until every rank joined;
        returns the rank that joined last (see the module)."""
        done = self.wait(self.submit(Request(JOIN_NAME, JOIN, [])))
        if done.error:
            raise RuntimeError(done.error)
        return int(done.result[0])

    def abandon(self, name: str, reason: str) -> None:
        """A collective: once every rank called ``abandon(name, ...)``, every collective not yet run fails
        on every rank (``error`` = ``reason``) and sequence numbers start again from 0.

        For a caller that must go on after the ranks fell out of step (e.g. one rank raised between two
        collectives); collectives submitted while it waits are abandoned too.
        """
        # The reason may differ across ranks: ``local``, not part of what must agree.
        self.wait(self.submit(Request(f"{ABANDON}/{name}", ABANDON, [], local=reason)))

    # ---- the thread ----

    def _loop(self) -> None:
        backoff = 0.0
        if self.watch is not None:
            # This thread's waits are rounds (its executors start no collective of their own): a timeout
            # names what this rank waits for, not the round.
            self.watch.label(self._pending)
        while True:
            with self._cond:
                while not self._new and not self._waiting:
                    self._cond.wait()
                if not self._new and backoff:
                    self._cond.wait(backoff)
                new, self._new = self._new[:MAX_PER_ROUND], self._new[MAX_PER_ROUND:]
            try:
                progressed = self._round(new)
            except CollectiveError as exc:  # a timeout: its line, for every op waiting on this rank
                self._fail_all(str(exc))
                return
            except Exception as exc:  # an MPI failure: every waiting op fails instead of hanging
                self._fail_all(f"the collectives' coordinator failed: {exc!r}")
                return
            backoff = 0.0 if progressed else min(max(2 * backoff, 0.0005), 0.02)

    def _round(self, new: list[Request]) -> bool:
        for request in new:
            self._waiting[request.key_hash] = request
        mine = np.zeros((MAX_PER_ROUND + 1, 2), np.uint64)  # row 0: the count; then (key hash, digest)
        mine[0, 0] = len(new)
        for row, request in enumerate(new, start=1):
            mine[row] = (request.key_hash, request.digest())
        everyone = np.empty((self.size, MAX_PER_ROUND + 1, 2), np.uint64)
        self.waiter.wait(self.comm.Iallgather(mine, everyone))
        for rank in range(self.size):
            for key, digest in everyone[rank, 1 : 1 + int(everyone[rank, 0, 0])].tolist():
                self._table.setdefault(key, [None] * self.size)[rank] = digest
                if digest == JOIN_DIGEST and rank not in self._joined:
                    self._joined.append(rank)  # in rank order within a round, as Horovod reads them
        ready = self._ready()
        if not ready:
            return False
        digests = {key: self._table.pop(key) for key in ready}
        if not self._joined and all(len(set(d)) == 1 for d in digests.values()):  # the usual round
            requests = [self._waiting[key] for key in ready]
            if all(r.kind != ABANDON for r in requests):
                for key in ready:
                    del self._waiting[key]
                self._run(requests)
                return True
        bad = {key for key, d in digests.items() if len({x for x in d if x is not None}) > 1}
        # Keys ready only because the ranks missing from them joined: those ranks learn what they are.
        partial = [key for key, d in digests.items() if None in d and key not in bad]
        blanks = self._blanks(partial) if partial else {}
        own = {key: self._waiting.pop(key) for key in ready if key in self._waiting}
        abandon = [r for k, r in own.items() if r.kind == ABANDON and k not in bad and k not in blanks]
        if abandon:  # the same round on every rank: the tables stay equal
            self._abandon(abandon[0].local, [r for r in own.values() if r.kind != ABANDON])
            for request in abandon:
                request.done.set()
            return True
        if bad:
            self._fail_mismatched([own[key] for key in ready if key in bad and key in own])
        runs: list[Request] = []
        joins: list[Request] = []
        for key in ready:
            part: Request | None = own.get(key)
            if key in bad:
                continue
            if key in blanks:
                part = self._joined_part(key, blanks[key], digests[key], part)
            if part is None:
                continue
            (joins if part.kind == JOIN else runs).append(part)
        self._run(runs)
        if joins:
            self._end_join(joins)
        return True

    def _ready(self) -> list[int]:
        """The keys every rank announced, or every rank but joined ones."""
        if not self._joined:
            return [key for key, digests in self._table.items() if None not in digests]
        joined = set(self._joined)
        return [
            key
            for key, digests in self._table.items()
            if all(d is not None or r in joined for r, d in enumerate(digests))
        ]

    def _pending(self) -> tuple[str, int]:
        """What this rank's coordinator waits for: its oldest requests (label, number)."""
        pending = list(self._waiting.values())
        if not pending:
            return "a round of the collectives' coordinator", 0
        if any(r.kind == JOIN for r in pending):
            return "hvd.join()", max(r.number for r in pending)
        more = f" (and {len(pending) - 3} more)" if len(pending) > 3 else ""
        return ", ".join(r.label() for r in pending[:3]) + more, pending[0].number

    def _blanks(self, keys: list[int]) -> dict[int, tuple[str, str, Any, list[Any]]]:
        """Each key's (name, kind, args, layout) from the lowest rank that announced it (one exchange, every
        rank: the keys are the same everywhere)."""
        own = {key: self._waiting[key].blank() for key in keys if key in self._waiting}
        everyone = [
            pickle.loads(b) for b in allgather_bytes(self.comm, self.mpi, self.waiter, pickle.dumps(own))
        ]
        return {key: next(theirs[key] for theirs in everyone if key in theirs) for key in keys}

    def _joined_part(
        self,
        key: int,
        blank: tuple[str, str, Any, list[Any]],
        digests: list[int | None],
        request: Request | None,
    ) -> Request | None:
        """The request this rank runs for a key that joined ranks did not announce: its own, zeros of the
        same layout when it joined, or None when the kind cannot run with joined ranks (its own request
        then fails with Horovod's message)."""
        name, kind, args, arrays = blank
        if kind not in self.joinable:
            if request is not None:
                absent = [r for r, d in enumerate(digests) if d is None]
                request.error = join_unsupported(kind, name, absent)
                request.done.set()
            return None
        if request is None:  # this rank joined: zeros, as Horovod's joined ranks contribute
            request = Request(name, kind, [np.zeros(shape, dtype) for dtype, shape in arrays], args, local=0)
            request.key_hash = key
        return request

    def _end_join(self, joins: list[Request]) -> None:
        """Every rank joined: each gets the last one; every name counts from 0 again on every rank."""
        last = self._joined[-1]
        with self._cond:
            self._joined.clear()
            self._seq.clear()
        for request in joins:
            request.result = [np.array(last, np.int32)]
            request.done.set()

    def _run(self, requests: list[Request]) -> None:
        if not requests:
            return
        try:
            self._execute(requests)
        except Exception as exc:  # a local failure of one batch (e.g. memory): its ops fail
            for request in requests:
                if not request.done.is_set():
                    request.error = f"{type(exc).__name__}: {exc}"
        for request in requests:
            request.done.set()

    def _fail_mismatched(self, requests: list[Request]) -> None:
        mine = {r.key: (r.kind, r.args, r.describe(), [a.dtype.str for a in r.arrays]) for r in requests}
        payloads = allgather_bytes(self.comm, self.mpi, self.waiter, pickle.dumps(mine))
        everyone = [pickle.loads(b) for b in payloads]
        for request in requests:
            request.error = mismatch_message(request.name, [theirs.get(request.key) for theirs in everyone])
            request.done.set()

    def _abandon(self, reason: str, ready: list[Request]) -> None:
        with self._cond:
            pending = [*ready, *self._waiting.values(), *self._new]
            self._waiting.clear()
            self._new.clear()
            self._table.clear()
            self._seq.clear()
            self._joined.clear()
        for request in pending:
            request.error = reason
            request.done.set()

    def _fail_all(self, message: str) -> None:
        with self._cond:
            self._failed = message
            pending = [*self._waiting.values(), *self._new]
            self._waiting.clear()
            self._new.clear()
        for request in pending:
            request.error = message
            request.done.set()
