"""A launched process's uncaught exception, written where the launcher's failure report finds it.

TensorFlow's exceptions carry messages hundreds of lines long (tensor dumps, graph traces): the tail of
a log is rarely the line that matters. The worker records the exception type, the first line of its
message and the innermost frame of the user's own code, as JSON in the attempt directory.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import traceback
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from tfdist import files, variables
from tfdist.errors import ConfigError
from tfdist.mpi.stack import MPI_RANK
from tfdist.worker.contract import AttemptFiles

#: A worker's exit code for a user mistake, as the CLI's (the launcher does not restart it).
USER_ERROR_CODE = 2

#: Longest first line kept (a whole tensor can sit on one line).
MAX_LINE = 400


def record_name(environ: Mapping[str, str]) -> str:
    """``rank<R>.error.json`` by training rank (TFDIST_RANK, else the MPI launcher's rank variable)."""
    candidates = [variables.raw("TFDIST_RANK", environ)]
    candidates += [environ.get(var) for var in MPI_RANK]
    for value in candidates:
        if value and value.lstrip("-").isdigit():
            return AttemptFiles.record_name("error", value)
    return AttemptFiles.unranked_record_name("error", os.getpid())


def first_line(message: str) -> str:
    """The first non-empty line, cut at :data:`MAX_LINE` characters.

    Input/Output: ``"\\nbad shape\\n[[1, 2], ...]"`` -> ``"bad shape"``.
    """
    for line in message.splitlines():
        if line.strip():
            line = line.strip()
            return line if len(line) <= MAX_LINE else line[:MAX_LINE] + " …"
    return ""


def _library_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    dirs = {paths.get(k, "") for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    dirs.add(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tfdist itself
    return tuple(sorted(d for d in dirs if d))


def user_frame(tb: TracebackType | None) -> dict[str, Any] | None:
    """The innermost frame outside the standard library, installed packages and tfdist."""
    libraries = _library_dirs()
    found = None
    for frame in traceback.extract_tb(tb):
        path = os.path.abspath(frame.filename)
        if frame.filename.startswith("<") or path.startswith(libraries):
            continue
        found = {"file": frame.filename, "line": frame.lineno, "function": frame.name}
    return found


def describe(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> dict[str, Any]:
    """What the failure report shows of an exception."""
    return {
        "type": exc_type.__name__,
        "message": first_line(str(exc)),
        "where": user_frame(tb),
    }


def collective_timeout() -> BaseException | None:
    """The MPI backend's collective timeout in this process, if one happened (:mod:`tfdist.sync.watch`).

    Read from ``sys.modules``, not imported: a process that never loaded it had no MPI collective. It is
    the cause whatever reached the top: raised inside a training step, it arrives wrapped in TensorFlow's
    ``UnknownError`` (a first line of graph names), or as the Horovod op's own error.
    """
    watch = sys.modules.get("tfdist.sync.watch")
    return watch.fatal() if watch is not None else None


def user_error_exit(exc: BaseException) -> None:
    """End the process as the CLI ends on a user mistake: its one line, exit code 2, no traceback.

    ``os._exit``: after an uncaught exception the interpreter's own exit code is 1, and a process of a
    multi-worker job may otherwise wait at TensorFlow's shutdown barrier for peers that hit the same error.
    """
    try:
        sys.stdout.flush()
        sys.stderr.write(f"{type(exc).__name__}: {first_line(str(exc))}\n")
        sys.stderr.flush()
        files.remove_scratch_dirs()  # os._exit skips atexit: a worker's private files would stay behind
    finally:
        os._exit(USER_ERROR_CODE)


def install(environ: Mapping[str, str] = os.environ) -> None:
    """Record uncaught exceptions in ``$TFDIST_ATTEMPT_DIR`` (chaining the existing excepthook); a
    tfdist ConfigError ends the process with its one line and exit code 2 (:func:`user_error_exit`)."""
    directory = variables.raw("TFDIST_ATTEMPT_DIR", environ)
    if not directory:
        return
    previous = sys.excepthook
    path = os.path.join(directory, record_name(environ))

    def hook(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        timeout = collective_timeout()
        try:
            if not issubclass(exc_type, (KeyboardInterrupt, SystemExit)):
                os.makedirs(directory, exist_ok=True)
                shown = (
                    describe(type(timeout), timeout, tb)
                    if timeout is not None
                    else describe(exc_type, exc, tb)
                )
                files.write_json(path, shown)
        except Exception:  # never hide the user's own traceback behind ours
            pass
        if issubclass(exc_type, ConfigError):
            user_error_exit(exc)
        previous(exc_type, exc, tb)
        if timeout is not None and str(timeout) != str(exc):  # the log's last line: the cause, not a wrapper
            sys.stderr.write(f"{type(timeout).__name__}: {timeout}\n")
        if several:
            failed_exit()

    # One of several workers ends at once after its traceback: TensorFlow's exit handlers would otherwise
    # wait at the coordination service's shutdown for peers that are themselves waiting in the next
    # collective for this one (measured: 10 s until the heartbeats time out), and the launcher, which
    # stops the job at its first failure, would learn of it only then.
    several = int(variables.raw("TFDIST_WORLD_SIZE", environ) or "1") > 1
    sys.excepthook = hook


def record_exit(exc: SystemExit, environ: Mapping[str, str] = os.environ) -> None:
    """Record a non-zero ``sys.exit`` as the rank's error record (``SystemExit: exited with code N``).

    Only for a process the MPI launcher started (:mod:`tfdist.worker.mpirun`): one launcher process stands
    for every rank there, and its report names the failed rank from this record. Never raises.
    """
    code = exc.code
    directory = variables.raw("TFDIST_ATTEMPT_DIR", environ)
    if not directory or code in (None, 0):
        return
    message = f"exited with code {code}" if isinstance(code, int) else first_line(str(code))
    try:
        os.makedirs(directory, exist_ok=True)
        shown = describe(SystemExit, exc, exc.__traceback__)
        files.write_json(os.path.join(directory, record_name(environ)), {**shown, "message": message})
    except Exception:  # the rank's exit code matters more than its record
        pass


def failed_exit() -> None:
    """End a failed worker now, exit code 1 (an uncaught exception's), its output flushed."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        files.remove_scratch_dirs()  # os._exit skips atexit: a worker's private files would stay behind
    finally:
        os._exit(1)
