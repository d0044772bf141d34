"""Name-matched collectives: Horovod's coordinator, as one background thread per process.

Why: TensorFlow may run two independent collectives of one ``tf.function`` in either order, and a
program may issue them in another order on each rank (several gradient buckets, Horovod's ops).
Pairing collectives by execution order then makes ranks exchange different tensors (or wait for each
other forever). As in Horovod, every collective has a name, and the ranks agree on which tensor is which
before any data moves. The MPI synchroniser (:mod:`tfdist.sync.mpi`) owns the process's one
coordinator; what a request of each kind does once matched is up to the executor of its kind (its own
packed sums, Horovod's collectives in :mod:`tfdist.horovod.ops`).

How: an op *submits* a request (its name, what it is about to do, its arrays) and returns at once; the
request's key is its name plus how many requests of that name this rank submitted before, so a name used
every step pairs step k with step k on every rank. The thread runs *rounds*: each rank that has requests
waiting sends an 8-byte hash of each key it submitted since its last round with an 8-byte digest of each
(kind, dtypes, shapes, arguments), in ONE all-gather of a fixed 2 KiB per rank (up to 127 keys; more
wait for the next round); every rank adds them to the same table, in the same order, so every rank
computes the same list of keys now submitted everywhere. Those run in that order, the float32 sums of a
round fused into ONE packed all-reduce (tensor fusion). A key whose digests differ fails on every rank
with ``tf.errors.FailedPreconditionError`` naming what rank 0 and the first differing rank sent (a second
exchange, only then).

A rank enters a round when it has something new to announce, or, after a round that ran nothing, when
its announced requests still wait (backing off up to 20 ms, so ranks waiting for each other's next op do
not spin). A rank with nothing to do stays out: the others wait for it in the round (MPI's non-blocking
calls, polled without burning the core).

:meth:`Coordinator.abandon` is a collective way out of ranks that no longer agree (a test suite that
must go on after one test left a rank waiting): once every rank called it, every collective not yet run
fails on every rank, and all start again from an empty table.
"""

from __future__ import annotations

import hashlib
import pickle
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tfdist._log import get_logger

log = get_logger(__name__)

STALL_WARNING_S = 60.0  # Horovod's stall inspector warns after a minute, too
MAX_UNCLAIMED = 1024  # results of ops whose output TensorFlow pruned: dropped oldest first
ABANDON = "ABANDON"  # the kind of :meth:`Coordinator.abandon`'s request
# Announcements per rank and round: a round is ONE all-gather of a fixed 2 KiB per rank (no second
# exchange of lengths), since every rendezvous costs on a machine whose cores are all busy.
MAX_PER_ROUND = 127


def _hash64(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


class Request:
    """One collective of one rank: what it sends, and (once run) what it received or why it failed."""

    def __init__(
        self,
        name: str,
        kind: str,
        arrays: Sequence[np.ndarray],
        args: Any = None,
        local: Any = None,
        free_first_dim: bool = False,
    ) -> None:
        self.name, self.kind, self.arrays = name, kind, [np.asarray(a) for a in arrays]
        self.args = args  # must agree across ranks (reduce op and scales, root rank)
        self.local = local  # may differ across ranks (alltoall's splits)
        self.free_first_dim = free_first_dim  # allgather / alltoall: first dimensions may differ
        self.key = ""
        self.key_hash = 0  # 8 bytes standing for ``key`` in a round
        self.done = threading.Event()
        self.result: list[np.ndarray] = []
        self.error: str = ""

    def signature(self) -> tuple[Any, ...]:
        """What every rank must agree on."""
        shapes = tuple(
            (a.dtype.str, a.shape[1:] if self.free_first_dim else a.shape, a.ndim) for a in self.arrays
        )
        return (self.kind, self.args, shapes)

    def digest(self) -> int:
        """8 bytes standing for :meth:`signature`."""
        return _hash64(repr(self.signature()))

    def describe(self) -> str:
        """``float32[3, 4], int64[2]``: the arrays as error messages name them."""
        return ", ".join(f"{a.dtype}{list(a.shape)}" for a in self.arrays)


def mismatch_message(name: str, theirs: list[tuple[str, Any, str, list[str]]]) -> str:
    """The error every rank raises for a key whose ranks disagree: rank 0 against the first other rank.

    ``theirs[r]`` is rank r's (kind, args, description, dtypes).
    """
    kind0, args0, desc0, dtypes0 = theirs[0]
    for rank, (kind, args, desc, dtypes) in enumerate(theirs[1:], start=1):
        if kind != kind0:
            what = f"Mismatched operations: rank 0 did an {kind0}, but rank {rank} did an {kind}"
        elif args != args0:
            label = "root ranks" if kind0 == "BROADCAST" else "arguments"
            what = f"Mismatched {kind0} {label}: rank 0 passed {args0}, but rank {rank} passed {args}"
        elif dtypes != dtypes0:
            what = f"Mismatched {kind0} data types: rank 0 sent {desc0}, but rank {rank} sent {desc}"
        elif desc != desc0:
            what = f"Mismatched {kind0} tensor shapes: rank 0 sent {desc0}, but rank {rank} sent {desc}"
        else:
            continue
        return (
            f"{what} (collective {name!r}). Every rank must call the same collectives with the same "
            "dtypes and shapes."
        )
    return f"Mismatched collective {name!r}: the ranks disagree."


class Coordinator:
    """Submits, matches by name, fuses and runs the collectives of this process (see the module).

    ``comm``: the job's communicator (duplicated: the thread's MPI calls never interleave with the
    caller's), None in a one-process job; ``waiter`` completes non-blocking MPI requests
    (:class:`tfdist.sync.reduce.Waiter`); ``execute(requests)`` runs one round's matched requests, the same
    list in the same order on every rank, setting each one's ``result`` (or ``error``).
    """

    def __init__(self, comm: Any, mpi: Any, waiter: Any, execute: Callable[[list[Request]], None]) -> None:
        self.mpi, self.waiter, self._execute = mpi, waiter, execute
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
            request.key_hash = _hash64(request.key)
            ticket = self._next_ticket
            self._next_ticket += 1
            self._tickets[ticket] = request
            while len(self._tickets) > MAX_UNCLAIMED:
                self._tickets.popitem(last=False)
            if self.size == 1:
                if request.kind == ABANDON:
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
        """The finished request of ``ticket`` (its ``error`` set when the ranks disagreed)."""
        with self._cond:
            request = self._tickets.pop(ticket)
        started = time.monotonic()
        while not request.done.wait(STALL_WARNING_S):
            log.warning(
                "collective %r has waited %.0f s for the other ranks: one of them has not called it "
                "(a rank-dependent branch, or a rank stuck elsewhere)",
                request.key,
                time.monotonic() - started,
            )
        return request

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
        while True:
            with self._cond:
                while not self._new and not self._waiting:
                    self._cond.wait()
                if not self._new and backoff:
                    self._cond.wait(backoff)
                new, self._new = self._new[:MAX_PER_ROUND], self._new[MAX_PER_ROUND:]
            try:
                progressed = self._round(new)
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
        ready = [key for key, digests in self._table.items() if None not in digests]
        if not ready:
            return False
        bad = {key for key in ready if len(set(self._table[key])) > 1}
        for key in ready:
            del self._table[key]
        requests = [self._waiting.pop(key) for key in ready]
        abandon = [r for r in requests if r.kind == ABANDON and r.key_hash not in bad]
        if abandon:  # the same round on every rank: the tables stay equal
            self._abandon(abandon[0].local, [r for r in requests if r.kind != ABANDON])
            for request in abandon:
                request.done.set()
            return True
        if bad:
            self._fail_mismatched([r for r in requests if r.key_hash in bad])
        self._run([r for r in requests if r.key_hash not in bad])
        return True

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
        everyone = [pickle.loads(b) for b in self._allgather_bytes(pickle.dumps(mine))]
        for request in requests:
            request.error = mismatch_message(request.name, [theirs[request.key] for theirs in everyone])
            request.done.set()

    def _abandon(self, reason: str, ready: list[Request]) -> None:
        with self._cond:
            pending = [*ready, *self._waiting.values(), *self._new]
            self._waiting.clear()
            self._new.clear()
            self._table.clear()
            self._seq.clear()
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

    def _allgather_bytes(self, payload: bytes) -> list[bytes]:
        """Every rank's bytes (two non-blocking collectives: the lengths, then the bytes)."""
        mpi = self.mpi
        counts = np.empty(self.size, np.int64)
        self.waiter.wait(self.comm.Iallgather(np.array([len(payload)], np.int64), counts))
        data = np.empty(int(counts.sum()), np.uint8)
        offsets = np.concatenate([[0], np.cumsum(counts)[:-1]])
        sendbuf = np.frombuffer(payload, np.uint8) if payload else np.empty(0, np.uint8)
        self.waiter.wait(self.comm.Iallgatherv(sendbuf, [data, counts.tolist(), offsets.tolist(), mpi.BYTE]))
        return [data[o : o + c].tobytes() for o, c in zip(offsets, counts, strict=True)]
