"""No silent hang on the MPI backend: a collective that waits longer than ``TFDIST_COLLECTIVE_TIMEOUT``
ends the job with ONE line naming the collective, the step, how long it waited and where the other ranks
are (MPI pairs collectives by order and has no timeout: a rank that skips one leaves the others waiting).

Every rank counts the collectives it starts (a number and a label). A wait past the timeout holds a *roll
call* on a communicator of its own: each rank waiting in a collective answers (its waiters look for
questions every :data:`CHECK_S` on their slow path), so a rank that does not answer is busy elsewhere or
stopped. :func:`timeout_line` composes the line (pure). Nothing costs while collectives complete in time.

After a timeout the process must not reach ``MPI_Finalize``: MPICH's waits for every rank (measured: a rank
finalising with an unfinished ``MPI_Ibarrier`` returned only when its peer finalised), and the peers are
stuck. The error is raised (``finally`` blocks run, the worker records it), then an ``atexit`` handler ends
the process with ``os._exit(1)`` before mpi4py finalises MPI.
"""

from __future__ import annotations

import atexit
import itertools
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, NoReturn

from tfdist import files
from tfdist._log import get_logger
from tfdist.errors import CollectiveError

log = get_logger(__name__)

#: Seconds between two looks at the roll call (and at the clock) of a waiting thread.
CHECK_S = 0.25
#: Seconds a rank whose collective timed out waits for the others' answers (every waiting rank answers
#: within ~CHECK_S; a busy machine may take longer to schedule it).
GRACE_S = 2.0
QUESTION, ANSWER = 7301, 7302  # tags on the roll call's own communicator
MAX_GROUPS = 4  # distinct whereabouts named in one line; the rest are counted

#: A wait's (label, collective number), or what computes it: evaluated only when the wait is slow.
What = tuple[str, int] | Callable[[], tuple[str, int]]


class Answer(NamedTuple):
    """One rank's whereabouts, as it answers a roll call."""

    step: int | None
    #: (label, collective number, seconds waited) of each of its threads waiting in a collective.
    waits: tuple[tuple[str, int, float], ...]
    #: Its own collective timed out too (it is holding its own roll call).
    timed_out: bool = False
    #: Why it could not be asked (an MPI error), instead of an answer.
    unreachable: str = ""


_STEP: list[int | None] = [None]
_FATAL: list[CollectiveError] = []


def set_step(step: int | None) -> None:
    """Tell the MPI backend which training step runs now: a timeout's line then says ``at step N``.

    ``tfdist.fit`` numbers steps as its other messages do (the global step being run, 1-based); None:
    no step (set-up, after training). One list item written: cheap enough to call before every step.
    """
    _STEP[0] = step


def current_step() -> int | None:
    """The training step :func:`set_step` told (None: none)."""
    return _STEP[0]


def different_gathers(labels: Sequence[str], step: int | None) -> str:
    """The line for ranks whose gathers met although they were different collectives (rank order).

    Input/Output: ``(["an allgather", "a barrier", "a barrier"], 9)`` -> ``"the ranks ran different
    collectives at step 9: rank 0 was in an allgather; ranks 1, 2 were in a barrier. A rank took ..."``.
    """
    by_label: dict[str, list[int]] = {}
    for rank, label in enumerate(labels):
        by_label.setdefault(label, []).append(rank)
    where = "; ".join(
        f"{rank_list(ranks)} {'was' if len(ranks) == 1 else 'were'} in {label}"
        for label, ranks in by_label.items()
    )
    at = f" at step {step}" if step is not None else ""
    return (
        f"the ranks ran different collectives{at}: {where}. A rank took another branch: a callback, data or "
        "a condition on some ranks only. Hint: give every rank the same collective program (tfdist.fit "
        "agrees on its own; check code that reads tfdist.rank())."
    )


def fatal() -> CollectiveError | None:
    """This process's collective timeout, if one happened: the worker's failure record prefers its line to
    the exception that reached the top (TensorFlow wraps an error raised inside a step in an
    ``UnknownError`` of many lines)."""
    return _FATAL[0] if _FATAL else None


def rank_list(ranks: Sequence[int]) -> str:
    """``rank 1``, ``ranks 1, 3``, ``ranks 0-3, 7``.

    Input/Output: ``[5, 1, 2, 3]`` -> ``"ranks 1-3, 5"``.
    """
    ordered = sorted(set(ranks))
    runs: list[list[int]] = []
    for rank in ordered:
        if runs and rank == runs[-1][-1] + 1:
            runs[-1].append(rank)
        else:
            runs.append([rank])
    text = ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in runs)
    return f"rank {text}" if len(ordered) == 1 else f"ranks {text}"


def whereabouts(answer: Answer | None, grace_s: float) -> str:
    """What one rank's answer says, as a verb phrase of the line.

    Input/Output: ``Answer(7, (("a barrier", 12, 5.4),))`` -> ``"is waiting in a barrier (collective
    #12) since 5 s"``; ``None`` -> ``"did not answer within 2 s: busy outside any collective ..."``.
    """
    if answer is None:
        return (
            f"did not answer within {grace_s:g} s: busy outside any collective (a callback, data loading, "
            "a save) or stopped"
        )
    if answer.unreachable:
        return f"cannot be reached ({answer.unreachable}): its process is gone"
    if not answer.waits:
        return "waits in no collective"
    parts = [f"{label} (collective #{seq}) since {seconds:.0f} s" for label, seq, seconds in answer.waits]
    return "is waiting in " + " and in ".join(parts) + (" (timed out too)" if answer.timed_out else "")


def timeout_line(
    rank: int,
    size: int,
    wait: tuple[str, int, float],
    step: int | None,
    timeout_s: float,
    answers: Mapping[int, Answer],
    grace_s: float = GRACE_S,
) -> str:
    """The one line of a collective timeout on ``rank``: its ``wait`` (label, number, seconds), the
    step, the ranks that had not arrived (those not waiting in the same collective) and where they are.

    ``answers``: the other ranks' answers to the roll call (a rank missing did not answer). Pure.
    """
    label, seq, waited = wait
    at_step = f" at step {step}" if step is not None else ""
    limit = f"TFDIST_COLLECTIVE_TIMEOUT={timeout_s:g}"
    head = f"{label} waited {waited:.0f} s on rank {rank}{at_step} (collective #{seq}, {limit})"
    others = [r for r in range(size) if r != rank]
    arrived = [r for r in others if r in answers and any(w[0] == label for w in answers[r].waits)]
    missing = [r for r in others if r not in arrived]
    if not missing:
        who = f"every other rank waits in it too ({rank_list(arrived)}): an MPI link or process is stuck"
    else:
        groups: dict[str, list[int]] = {}
        for r in missing:
            groups.setdefault(whereabouts(answers.get(r), grace_s), []).append(r)
        if len(groups) == 1:
            (text,) = groups
            said = [f"{'it' if len(missing) == 1 else 'they'} {text}"]
        else:
            said = [f"{rank_list(ranks)} {text}" for text, ranks in list(groups.items())[:MAX_GROUPS]]
            left = sum(len(ranks) for ranks in list(groups.values())[MAX_GROUPS:])
            said += [f"{left} more rank(s) elsewhere"] if left else []
        who = f"{rank_list(missing)} had not arrived: " + "; ".join(said)
        if arrived:
            who += f"; {rank_list(arrived)} waited in it too"
    return (
        f"{head}: {who}. Hint: every rank must run the same collectives in the same order (a branch on the "
        "rank, a callback or data on some ranks only; uneven Horovod batches need hvd.join()); raise "
        "TFDIST_COLLECTIVE_TIMEOUT if a rank is only slow."
    )


class Watch:
    """The collective timeout and the roll call of one process (see the module).

    ``comm``: a duplicate of the job's communicator, used for nothing else (None in a job of one);
    ``timeout_s``: 0 for none.
    """

    def __init__(
        self, comm: Any, mpi: Any, rank: int, size: int, timeout_s: float, grace_s: float = GRACE_S
    ) -> None:
        self.comm, self.mpi, self.rank, self.size = comm, mpi, rank, size
        self.timeout_s, self.grace_s = timeout_s, grace_s
        self._numbers = itertools.count(1)
        self._here = threading.local()  # this thread's (label, number) of the collective it runs
        self._waits: dict[int, tuple[str, int, float]] = {}  # thread -> (label, number, started): slow waits
        self._poll = threading.Lock()  # one thread reads the questions at a time
        self._expiring = threading.Lock()  # one roll call per process
        self._sends: list[Any] = []  # answers in flight: their buffers must live until sent
        self.failed: CollectiveError | None = None
        self.number = 0  # the last collective this rank started
        # No goodbye at exit from a rank that finished its script (it cannot answer a roll call): a message
        # nobody receives makes MPICH's MPI_Finalize fail across nodes ("OFI poll failed" in
        # flush_send_queue) when its peer finalised first, so a job that succeeded would end as failed.

    # ---- the fast path: what a collective's start costs ----

    def count(self) -> int:
        """The number of the collective this rank starts now (1, 2, ...)."""
        self.number = next(self._numbers)
        return self.number

    def begin(self, label: str) -> None:
        """A collective starts on this thread (``label`` names it in a timeout); raises the timeout
        again once one happened: MPI's state is lost, and the next collective could pair with an old one."""
        if self.failed is not None:
            raise CollectiveError(str(self.failed))
        self.number = next(self._numbers)
        self._here.what = (label, self.number)

    def label(self, what: What) -> None:
        """Name what this thread waits for next without counting a collective (the coordinator's rounds:
        a callable, evaluated only if the wait is slow)."""
        self._here.what = what

    # ---- the slow path: a thread that has waited CHECK_S ----

    def check(self, started: float, what: What | None = None, expires: bool = True) -> float:
        """Called by a waiting thread every :data:`CHECK_S`: answers roll calls; once the wait that began
        at ``started`` (``time.perf_counter``) is older than the timeout, holds the roll call and raises
        :class:`CollectiveError` (also when another thread of this process timed out meanwhile).

        ``what``: (label, number) of this wait, else this thread's last :meth:`begin`; ``expires``:
        False for a wait with no time limit (``hvd.join()``, which waits for the others to finish).
        Returns the time now.
        """
        if self.failed is not None:
            raise CollectiveError(str(self.failed))
        now = time.perf_counter()
        ident = threading.get_ident()
        if ident not in self._waits:
            named: What = what if what is not None else getattr(self._here, "what", ("a collective", 0))
            label, number = named() if callable(named) else named
            self._waits[ident] = (label, number, started)
        self._answer()
        if expires and self.timeout_s and now - started >= self.timeout_s and self.size > 1:
            self._expire(ident)
        return now

    def leave(self) -> None:
        """This thread's slow wait ended (it no longer answers as waiting)."""
        self._waits.pop(threading.get_ident(), None)

    def _whereabouts(self) -> Answer:
        now = time.perf_counter()
        waits = tuple((label, number, now - started) for label, number, started in list(self._waits.values()))
        return Answer(_STEP[0], waits, timed_out=self._expiring.locked() or self.failed is not None)

    def _answer(self) -> None:
        """Answer every question waiting on the roll call's communicator."""
        if self.comm is None or not self._poll.acquire(blocking=False):
            return
        try:
            self._sends = [s for s in self._sends if not s.Test()]
            while True:
                status = self.mpi.Status()
                # A matched probe: the message is this thread's even if another thread probes too.
                message = self.comm.improbe(source=self.mpi.ANY_SOURCE, tag=QUESTION, status=status)
                if message is None:
                    return
                message.recv()
                self._sends.append(self.comm.isend(self._whereabouts(), dest=status.Get_source(), tag=ANSWER))
        except self.mpi.Exception as exc:  # a peer gone: answering is best effort
            log.debug("roll call: could not answer (%s)", exc)
        finally:
            self._poll.release()

    def _roll_call(self) -> dict[int, Answer]:
        """Ask every other rank where it is; their answers within :attr:`grace_s`."""
        answers: dict[int, Answer] = {}
        for other in range(self.size):
            if other == self.rank:
                continue
            try:
                self._sends.append(self.comm.isend(("where are you?", self.rank), dest=other, tag=QUESTION))
            except self.mpi.Exception as exc:
                answers[other] = Answer(None, (), unreachable=str(exc).splitlines()[0])
        deadline = time.perf_counter() + self.grace_s
        while len(answers) < self.size - 1 and time.perf_counter() < deadline:
            self._answer()  # others may be holding their own roll call: answer them meanwhile
            try:
                got = self._receive(ANSWER)
            except self.mpi.Exception as exc:
                log.debug("roll call: %s", exc)
                break
            if got is None:
                time.sleep(0.02)
                continue
            source, _, message = got
            answers.setdefault(source, Answer(*message))
        return answers

    def _receive(self, tag: int) -> tuple[int, int, Any] | None:
        status = self.mpi.Status()
        message = self.comm.improbe(source=self.mpi.ANY_SOURCE, tag=tag, status=status)
        return None if message is None else (status.Get_source(), tag, message.recv())

    def _expire(self, ident: int) -> NoReturn:
        with self._expiring:
            if self.failed is None:
                label, number, started = self._waits[ident]
                waited = time.perf_counter() - started
                answers = self._roll_call()
                line = timeout_line(
                    self.rank,
                    self.size,
                    (label, number, waited),
                    _STEP[0],
                    self.timeout_s,
                    answers,
                    self.grace_s,
                )
                self.failed = CollectiveError(line)
                _FATAL.append(self.failed)
                log.error("%s", line)
                atexit.register(end_without_finalize)
        raise CollectiveError(str(self.failed))


def end_without_finalize() -> None:
    """``atexit``: end a process whose collective timed out before mpi4py's ``MPI_Finalize`` (registered
    later than mpi4py's, so it runs first), which would wait for ranks that never get there."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        files.remove_scratch_dirs()  # os._exit skips the other exit handlers
    finally:
        os._exit(1)
