"""Horovod's elastic state and ``run`` (``horovod.common.elastic``) on tfdist.

Horovod re-forms a job inside its processes when a rank is lost or a host comes; tfdist's launcher
restarts every process instead (``tfdist launch --max-restarts N``, ``--nnodes MIN:MAX``). So here
``commit()`` keeps the state in memory for ``restore()``, as Horovod's does, and under a run directory
(``TFDIST_RUN_DIR``) also on disk: rank 0 replaces one file per state at each commit, and ``run`` on a
restarted attempt (or a requeued Slurm job) loads it on rank 0 before it syncs every rank from there. A
job that is never restarted behaves as Horovod's without ``--elastic``: ``run`` syncs the state from rank
0 and calls the function.
"""

from __future__ import annotations

import functools
import itertools
import os
import pickle
from collections.abc import Callable, Mapping
from typing import Any

from tfdist import files, resize, variables
from tfdist._log import get_logger
from tfdist.horovod import runtime

log = get_logger(__name__)

#: The committed state of the script's K-th state object (creation order, the same on every attempt),
#: written by rank 0 in the run directory.
COMMIT_FILE = "hvd-elastic-state-{index}.pkl"

_STATE_INDEX = itertools.count()


class HorovodInternalError(RuntimeError):
    """A collective failed: ``run`` restores the last commit, runs the reset callbacks and calls the
    function again (tfdist's own collectives never raise it: a lost rank restarts the job)."""


class HostsUpdatedInterrupt(RuntimeError):
    """The job's hosts changed: ``run`` calls the function again, without restoring the last commit."""

    def __init__(self, skip_sync: bool) -> None:
        super().__init__(skip_sync)
        self.skip_sync = skip_sync


def commit_path(index: int, environ: Mapping[str, str] | None = None) -> str | None:
    """Where rank 0 keeps the commit of state ``index``: in the launcher's run directory, or None when
    no launcher may restart this process (``TFDIST_RUN_DIR`` unset)."""
    run_dir = variables.get("TFDIST_RUN_DIR", environ)
    return None if run_dir is None else os.path.join(run_dir, COMMIT_FILE.format(index=index))


def write_commit(path: str, payload: dict[str, Any]) -> None:
    """``payload`` pickled to ``path`` atomically: a restart finds the last commit whole or the one
    before it, never half of one."""
    with files.atomic_path(path) as tmp, open(tmp, "wb") as fh:
        pickle.dump(payload, fh, protocol=pickle.HIGHEST_PROTOCOL)


def read_commit(path: str) -> dict[str, Any] | None:
    """What :func:`write_commit` wrote to ``path``, or None when nothing was committed there."""
    try:
        with open(path, "rb") as fh:
            payload: dict[str, Any] = pickle.load(fh)
    except FileNotFoundError:
        return None
    return payload


class State:
    """State kept the same on every rank: ``commit()`` at points the ranks reach together, ``restore()``
    to go back to the last commit, ``sync()`` to take rank 0's.

    Args:
        bcast_object: broadcasts a Python object from rank 0.
        get_rank: this process's rank.
    """

    def __init__(self, bcast_object: Callable[[Any], Any], get_rank: Callable[[], int]) -> None:
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._reset_callbacks: list[Callable[[], Any]] = []
        self._index = next(_STATE_INDEX)
        self._resumed = False

    def register_reset_callbacks(self, callbacks: list[Callable[[], Any]]) -> None:
        """Functions to call after a reset event (a worker added or removed), e.g. to scale the learning
        rate to the new number of ranks. A restart on another number of ranks is one."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self) -> None:
        """:meth:`reset`, then the reset callbacks."""
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def commit(self) -> None:
        """Save the state (in memory; on disk on rank 0 when the job may restart), then
        :meth:`check_host_updates`. Commits copy every variable: commit every few batches rather than
        every one where a step is short."""
        self.save()
        path = commit_path(self._index)
        if path is not None and self._rank() == 0:
            write_commit(path, {"size": _size(), "state": self._committed()})
        self.check_host_updates()

    def check_host_updates(self) -> None:
        """Raise :class:`HostsUpdatedInterrupt` when nodes wait to join and the launcher asked the job to
        grow (:mod:`tfdist.resize`): rank 0's view, broadcast so every rank raises at the same point, as
        Horovod does. A lost rank never reaches here: the launcher restarts the job instead."""
        if commit_path(self._index) is not None and self._bcast_object(resize.requested()):
            raise HostsUpdatedInterrupt(skip_sync=False)

    def save(self) -> None:
        """Save the state in memory."""
        raise NotImplementedError()

    def restore(self) -> None:
        """Go back to the last commit, undoing what changed since."""
        raise NotImplementedError()

    def sync(self) -> None:
        """Take rank 0's state on every rank."""
        raise NotImplementedError()

    def reset(self) -> None:
        """Reset objects and variables after a reset event (before the sync)."""

    def _committed(self) -> dict[str, Any]:
        """The last commit as plain values (what rank 0 writes to disk)."""
        raise NotImplementedError()

    def _load(self, committed: dict[str, Any]) -> None:
        """Make ``committed`` (from :meth:`_committed`) the current and the committed state."""
        raise NotImplementedError()

    def _resume(self) -> None:
        """Once, at the first ``run``: rank 0 loads the last commit in the run directory (a restarted
        attempt's, a requeued Slurm job's, or a launch's given the ``--run-dir`` of an earlier one) before
        ``run`` syncs the other ranks from it; the reset callbacks run when the number of ranks changed."""
        path, restart = commit_path(self._index), variables.get("TFDIST_RESTART_COUNT")
        if self._resumed or path is None:  # the same on every rank of a launch
            return
        self._resumed = True
        payload = read_commit(path) if self._rank() == 0 else None
        if payload is not None:
            try:
                self._load(payload["state"])
            except ValueError as exc:
                raise ValueError(f"{exc} (the commit in {path}). Hint: remove it to start afresh.") from exc
            log.info("hvd.elastic: resuming from the last commit, %s (restart %s)", path, restart)
        elif restart and self._rank() == 0:
            log.info(
                "hvd.elastic: restart %s found no commit in %s: the state starts as the script made it",
                restart,
                path,
            )
        committed_size = self._bcast_object(payload["size"] if payload is not None else None)
        if committed_size is not None and committed_size != _size():
            self.on_reset()


class ObjectState(State):
    """State of Python objects, each given as a keyword argument and kept as an attribute.

    Args:
        bcast_object: broadcasts a Python object from rank 0.
        get_rank: this process's rank.
        kwargs: the objects (their values at construction are the first commit).
    """

    def __init__(
        self, bcast_object: Callable[[Any], Any], get_rank: Callable[[], int], **kwargs: Any
    ) -> None:
        self._saved_state = kwargs
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self) -> None:
        self._saved_state = {attr: getattr(self, attr) for attr in self._saved_state}

    def restore(self) -> None:
        self._set_attrs()

    def sync(self) -> None:
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self) -> None:
        for attr, value in self._saved_state.items():
            setattr(self, attr, value)

    def _committed(self) -> dict[str, Any]:
        return {"objects": self._saved_state}

    def _load(self, committed: dict[str, Any]) -> None:
        self._saved_state = dict(committed["objects"])
        self._set_attrs()


def _size() -> int:
    return runtime.world().size if runtime.is_initialized() else 1


def run(func: Callable[..., Any]) -> Callable[..., Any]:
    """Horovod's ``hvd.elastic.run``: ``func(state, ...)`` after the state is synced from rank 0 (on a
    restarted attempt, from the last commit). A :class:`HorovodInternalError` restores the last commit,
    a :class:`HostsUpdatedInterrupt` keeps the state; both run the reset callbacks and call ``func``
    again. The function must not start with a collective (Horovod's rule)."""

    @functools.wraps(func)
    def wrapper(state: State, *args: Any, **kwargs: Any) -> Any:
        state._resume()
        skip_sync = False
        while True:
            if commit_path(state._index) is not None:  # the commit on disk resumes it: a job may grow
                resize.offer("hvd.elastic.run")
            try:
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except HorovodInternalError:
                state.restore()
                skip_sync = False
            except HostsUpdatedInterrupt as exc:
                if resize.requested():  # new nodes join: the processes restart with them, from the commit
                    if state._rank() == 0:
                        log.warning("hvd.elastic: the job grows; it resumes from the last commit.")
                    raise SystemExit(resize.EXIT_CODE) from None
                skip_sync = exc.skip_sync
            finally:
                resize.withdraw()
            state.on_reset()

    return wrapper
