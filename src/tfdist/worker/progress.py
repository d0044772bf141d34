"""A launched process's progress (its ``tf.function`` calls: every front end's steps) and, when asked, its
stacks, written by a daemon thread once a second: what lets the launcher end a hung job and say where
each worker was. It also passes on a resize request (:mod:`tfdist.resize`).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from tfdist import files, resize, variables
from tfdist.mpi.stack import MPI_RANK
from tfdist.worker.contract import AttemptFiles
from tfdist.worker.imports import after_import

#: The module whose ``Function.__call__`` runs every ``tf.function`` call.
TARGET = "tensorflow.python.eager.polymorphic_function.polymorphic_function"
#: Seconds between the thread's looks: the record's freshness and how soon a stack request is answered.
TICK_S = 1.0


def worker_rank(environ: Mapping[str, str] = os.environ) -> str | None:
    """The process's training rank: TFDIST_RANK, else the MPI launcher's rank variable; None without one."""
    candidates = [variables.raw("TFDIST_RANK", environ), *(environ.get(var) for var in MPI_RANK)]
    return next((value for value in candidates if value and value.lstrip("-").isdigit()), None)


class Progress:
    """Counts ``tf.function`` calls; the thread publishes them (cheap: two clock reads per call)."""

    def __init__(self, attempt: AttemptFiles, rank: str) -> None:
        self.attempt, self.rank = attempt, rank
        self.steps = 0
        self.inside = 0  # calls in progress (nested calls and other threads count too)
        self.last = time.time()  # wall clock of the last call's start or end
        self.started: float | None = None
        self.longest = 0.0  # longest time between two calls' starts
        self.done = False
        self._answered = False
        self._writing = threading.Lock()  # the thread's writes and the one at exit

    def enter(self) -> None:
        now = time.time()
        if self.started is not None:
            self.longest = max(self.longest, now - self.started)
        self.started = self.last = now
        self.steps += 1
        self.inside += 1

    def leave(self) -> None:
        self.inside -= 1
        self.last = time.time()

    def record(self) -> dict[str, Any]:
        """What the launcher reads (``rank<R>.progress.json``)."""
        return {
            "steps": self.steps,
            "inside": self.inside > 0,
            "last": self.last,
            "longest": round(self.longest, 3),
            "done": self.done,
            "resize": resize.offered(),
        }

    def publish(self) -> None:
        """Write the record (a full or vanished run directory must not end the training)."""
        with self._writing, contextlib.suppress(OSError):
            files.write_json(self.attempt.record("progress", self.rank), self.record())

    def answer(self) -> None:
        """Write every thread's stack once the launcher asks for them."""
        if not self._answered and os.path.exists(self.attempt.stacks_request):
            self._answered = True
            with contextlib.suppress(OSError):
                files.write_text(self.attempt.stacks(self.rank), stacks())

    def run(self) -> None:
        published: dict[str, Any] | None = None
        while True:
            record = self.record()
            if record != published:
                self.publish()
                published = record
            self.answer()
            if not resize.requested() and os.path.exists(self.attempt.resize_request):
                resize.ask()
            time.sleep(TICK_S)

    def finish(self) -> None:
        self.done = True
        self.publish()


def stacks() -> str:
    """Every thread's Python stack, the main thread's first, most recent call last."""
    frames = sys._current_frames()
    main = threading.main_thread().ident
    names = {t.ident: t.name for t in threading.enumerate()}
    order = sorted(frames, key=lambda ident: (ident != main, names.get(ident, "")))
    parts = []
    for ident in order:
        if ident == threading.get_ident():
            continue  # this thread, writing
        parts.append(f"Thread {names.get(ident, ident)} (most recent call last):")
        parts.append("".join(traceback.format_stack(frames[ident])).rstrip("\n"))
    return "\n".join(parts) + "\n"


def _count_calls(progress: Progress) -> Callable[[ModuleType], None]:
    def patch(module: ModuleType) -> None:
        from tensorflow.python.util import traceback_utils

        call = module.Function.__call__
        inner = getattr(call, "__wrapped__", call)

        def counted(self: Any, *args: Any, **kwds: Any) -> Any:
            progress.enter()
            try:
                return inner(self, *args, **kwds)
            finally:
                progress.leave()

        # TensorFlow leaves its own frames out of tracebacks: this frame goes with them, so an error
        # in a step reads as it does without tfdist.
        traceback_utils._EXCLUDED_PATHS = (*traceback_utils._EXCLUDED_PATHS, __file__)
        module.Function.__call__ = traceback_utils.filter_traceback(counted)

    return patch


def install(environ: Mapping[str, str] = os.environ) -> None:
    """Count steps and answer stack requests, in a process the launcher started with a rank."""
    directory, rank = variables.raw("TFDIST_ATTEMPT_DIR", environ), worker_rank(environ)
    if not directory or rank is None:
        return
    progress = Progress(AttemptFiles(directory), rank)
    after_import(TARGET, _count_calls(progress))
    threading.Thread(target=progress.run, name="tfdist-progress", daemon=True).start()
    atexit.register(progress.finish)
