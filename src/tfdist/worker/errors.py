"""A launched process's uncaught exception (type, first line, the user's innermost frame), written as JSON
where the launcher's failure report finds it: a TensorFlow message's tail is rarely the line that matters."""

from __future__ import annotations

import contextlib
import os
import sys
import sysconfig
import traceback
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from tfdist import files, variables
from tfdist.errors import ConfigError
from tfdist.worker.contract import AttemptFiles
from tfdist.worker.progress import worker_rank

#: A worker's exit code for a user mistake, as the CLI's (the launcher does not restart it).
USER_ERROR_CODE = 2

#: Longest first line kept (a whole tensor can sit on one line).
MAX_LINE = 400


def record_name(environ: Mapping[str, str]) -> str:
    """``rank<R>.error.json`` by training rank (TFDIST_RANK, else the MPI launcher's rank variable)."""
    rank = worker_rank(environ)
    if rank is not None:
        return AttemptFiles.record_name("error", rank)
    return AttemptFiles.unranked_record_name("error", os.getpid())


def first_line(message: str) -> str:
    """The first non-empty line, cut at :data:`MAX_LINE` characters.

    Input/Output: ``"\\nbad shape\\n[[1, 2], ...]"`` -> ``"bad shape"``.
    """
    line = next((line.strip() for line in message.splitlines() if line.strip()), "")
    return line if len(line) <= MAX_LINE else line[:MAX_LINE] + " …"


def library_dirs() -> tuple[str, ...]:
    """The standard library, installed packages and tfdist: where a frame is not the user's own."""
    paths = sysconfig.get_paths()
    dirs = {paths.get(k, "") for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    dirs.add(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tfdist itself
    return tuple(sorted(d for d in dirs if d))


def user_frame(tb: TracebackType | None) -> dict[str, Any] | None:
    """The innermost frame outside the standard library, installed packages and tfdist."""
    libraries = library_dirs()
    found = None
    for frame in traceback.extract_tb(tb):
        path = os.path.abspath(frame.filename)
        if frame.filename.startswith("<") or path.startswith(libraries):
            continue
        found = {"file": frame.filename, "line": frame.lineno, "function": frame.name}
    return found


def describe(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> dict[str, Any]:
    """What the failure report shows of an exception."""
    return {"type": exc_type.__name__, "message": first_line(str(exc)), "where": user_frame(tb)}


def collective_timeout() -> BaseException | None:
    """The MPI backend's collective timeout in this process, if one happened (:mod:`tfdist.sync.watch`, not
    imported: a process that never loaded it had none): the cause, whatever wrapper reached the top."""
    watch = sys.modules.get("tfdist.sync.watch")
    return watch.fatal() if watch is not None else None


def user_error_exit(exc: BaseException) -> None:
    """End the process as the CLI ends on a user mistake: its one line, exit code 2, no traceback
    (``os._exit``: TensorFlow's shutdown barrier may wait for peers that hit the same error)."""
    try:
        sys.stdout.flush()
        sys.stderr.write(f"{type(exc).__name__}: {first_line(str(exc))}\n")
        sys.stderr.flush()
        files.remove_scratch_dirs()  # os._exit skips atexit: a worker's private files would stay behind
    finally:
        os._exit(USER_ERROR_CODE)


def install(environ: Mapping[str, str] = os.environ) -> None:
    """Record uncaught exceptions in ``$TFDIST_ATTEMPT_DIR``; a ConfigError ends the process with exit 2."""
    directory = variables.raw("TFDIST_ATTEMPT_DIR", environ)
    if not directory:
        return
    previous = sys.excepthook
    path = os.path.join(directory, record_name(environ))

    def hook(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        timeout = collective_timeout()
        with contextlib.suppress(Exception):  # never hide the user's own traceback behind ours
            if not issubclass(exc_type, (KeyboardInterrupt, SystemExit)):
                os.makedirs(directory, exist_ok=True)
                shown = (
                    describe(exc_type, exc, tb) if timeout is None else describe(type(timeout), timeout, tb)
                )
                files.write_json(path, shown)
        if issubclass(exc_type, ConfigError):
            user_error_exit(exc)
        previous(exc_type, exc, tb)
        if timeout is not None and str(timeout) != str(exc):  # the log's last line: the cause, not a wrapper
            sys.stderr.write(f"{type(timeout).__name__}: {timeout}\n")
        if several:
            failed_exit()

    # One of several workers ends at once after its traceback: TensorFlow's exit handlers would wait at the
    # coordination service's shutdown for peers that wait in their next collective for this one.
    several = int(variables.raw("TFDIST_WORLD_SIZE", environ) or "1") > 1
    sys.excepthook = hook


def record_exit(exc: SystemExit, environ: Mapping[str, str] = os.environ) -> None:
    """Record a non-zero ``sys.exit`` of a rank the MPI launcher started (never raises)."""
    code = exc.code
    directory = variables.raw("TFDIST_ATTEMPT_DIR", environ)
    if not directory or code in (None, 0):
        return
    message = f"exited with code {code}" if isinstance(code, int) else first_line(str(code))
    with contextlib.suppress(Exception):  # the rank's exit code matters more than its record
        os.makedirs(directory, exist_ok=True)
        shown = describe(SystemExit, exc, exc.__traceback__)
        files.write_json(os.path.join(directory, record_name(environ)), {**shown, "message": message})


def failed_exit() -> None:
    """End a failed worker now, exit code 1 (an uncaught exception's), its output flushed."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        files.remove_scratch_dirs()  # os._exit skips atexit: a worker's private files would stay behind
    finally:
        os._exit(1)
