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

:meth:`Coordinator.join` is Horovod's ``hvd.join()``, for ranks with uneven numbers of batches: a rank that
joined keeps entering rounds, and a key every other rank announced is ready without it. It adds zeros to
the sums of those keys (an Average still divides by every rank, as Horovod's does) and takes no part in
the others (allgather, broadcast, ...: they fail on the ranks that called them, with Horovod's message).
Once every rank joined, each gets the rank that joined last, and every name's count starts again from 0 on
every rank (the joined ranks ran fewer of them).

A wait longer than ``TFDIST_COLLECTIVE_TIMEOUT`` (the coordinator's rounds and a request's own wait, which
ends when the names never meet: ranks waiting for different ones) fails the job with one line
(:mod:`tfdist.sync.watch`).
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
from tfdist.errors import CollectiveError
from tfdist.sync.reduce import allgather_bytes
from tfdist.sync.watch import CHECK_S, Watch, rank_list

log = get_logger(__name__)

STALL_WARNING_S = 60.0  # Horovod's stall inspector warns after a minute, too
MAX_UNCLAIMED = 1024  # results of ops whose output TensorFlow pruned: dropped oldest first
ABANDON = "ABANDON"  # the kind of :meth:`Coordinator.abandon`'s request
JOIN, JOIN_NAME = "JOIN", "join.noname"  # :meth:`Coordinator.join`'s request (Horovod's name for it)
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
        self.number = 0  # the rank's count of collectives when it was submitted (a timeout's line)
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

    def label(self) -> str:
        """The collective as a timeout's line names it: ``allreduce 'HorovodAllreduce_x_0'``,
        ``the gradient all-reduce (bucket b0)``, ``hvd.join()``."""
        if self.kind == JOIN:
            return "hvd.join()"
        if self.name.startswith("tfdist.grads"):  # the MPI backend's gradient buckets
            return f"the gradient all-reduce (bucket {self.name.rsplit('/', 1)[-1]})"
        return f"{KIND_WORDS.get(self.kind, self.kind.lower())} {self.name!r}"

    def blank(self) -> tuple[str, str, Any, list[tuple[Any, tuple[int, ...]]]]:
        """What a joined rank needs to take part with zeros: (name, kind, args, (dtype, shape) of each)."""
        return self.name, self.kind, self.args, [(a.dtype, a.shape) for a in self.arrays]


KIND_WORDS = {"SUM": "all-reduce"}  # the MPI backend's own named sums
JOIN_DIGEST = Request(JOIN_NAME, JOIN, []).digest()  # a rank that announces it has joined


def mismatch_message(name: str, theirs: list[tuple[str, Any, str, list[str]] | None]) -> str:
    """The error every rank raises for a key whose ranks disagree: the first rank that sent it (rank 0,
    unless it joined) against the first other rank that differs.

    ``theirs[r]`` is rank r's (kind, args, description, dtypes), None for a joined rank that did not send it.
    """
    sent = [(rank, mine) for rank, mine in enumerate(theirs) if mine is not None]
    first, (kind0, args0, desc0, dtypes0) = sent[0]
    for rank, (kind, args, desc, dtypes) in sent[1:]:
        if kind != kind0:
            what = f"Mismatched operations: rank {first} did an {kind0}, but rank {rank} did an {kind}"
        elif args != args0:
            label = "root ranks" if kind0 == "BROADCAST" else "arguments"
            what = f"Mismatched {kind0} {label}: rank {first} passed {args0}, but rank {rank} passed {args}"
        elif dtypes != dtypes0:
            what = f"Mismatched {kind0} data types: rank {first} sent {desc0}, but rank {rank} sent {desc}"
        elif desc != desc0:
            what = f"Mismatched {kind0} tensor shapes: rank {first} sent {desc0}, but rank {rank} sent {desc}"
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
    list in the same order on every rank, setting each one's ``result`` (or ``error``); ``watch``: the
    collective timeout (:class:`tfdist.sync.watch.Watch`), None for none.
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
            request.key_hash = _hash64(request.key)
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


def join_unsupported(kind: str, name: str, joined: list[int]) -> str:
    """The error of a collective other than a sum while ranks are joined (Horovod's first sentence)."""
    hint = " Specify sparse_to_dense=True if using DistributedOptimizer." if kind == "ALLGATHER" else ""
    return (
        f"{kind.capitalize()} is not supported with Join at this time.{hint} (collective {name!r}: "
        f"{rank_list(joined)} already called hvd.join(); only allreduce runs while ranks are joined.)"
    )
