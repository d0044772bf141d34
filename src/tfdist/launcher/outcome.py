"""What the launcher says about an attempt that ended: the first failure, its one line, the report on the
console and the record in the run directory (``attempt-K/ended.json``); what a launch returns."""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from tfdist import files
from tfdist.launcher.console import console_print
from tfdist.launcher.policy import Outcome
from tfdist.launcher.records import error_lines, lost_contact
from tfdist.worker.contract import RunFiles

#: The exception a worker records for a user mistake (tfdist.worker.errors exits 2 with its one line).
_USER_ERROR = "ConfigError"


@dataclass(frozen=True)
class FailureInfo:
    """The first process that failed in an attempt, and how."""

    name: str
    code: int
    how: str
    log_path: str
    tail: tuple[str, ...]
    error: dict[str, Any] | None = None  # the worker's uncaught exception (tfdist.worker.errors)
    muted: str = ""  # the other workers' output after the stop, kept off the console: "w0 (25 lines)"
    stack: tuple[str, ...] = ()  # a hang: where the stuck worker was (a title, then its frames)


@dataclass(frozen=True)
class RunResult:
    """Outcome of a launch: exit code (0 = success), attempts made, run directory and first failure."""

    exit_code: int
    attempts: int
    run_dir: str
    duration_s: float
    failure: FailureInfo | None = None
    failures: tuple[FailureInfo, ...] = field(default_factory=tuple)


def new_run_id() -> str:
    """Sortable and unique: ``20261121-101500-3fa2``."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def failure_line(failure: FailureInfo) -> str:
    """One line for the failure: the recorded exception (``ConfigError: …``), else how the process ended."""
    if failure.error and failure.error.get("type"):
        return f"{failure.error['type']}: {failure.error.get('message', '')}".rstrip()
    return failure.how


#: Exceptions of a program's own logic, which a restart meets again (not OSError, TensorFlow's errors of a
#: lost peer or device, MemoryError or RuntimeError, which a restart can cure).
_PROGRAM_ERRORS = frozenset({
    "ValueError", "TypeError", "AttributeError", "NameError", "UnboundLocalError", "KeyError", "IndexError",
    "ZeroDivisionError", "AssertionError", "NotImplementedError", "SyntaxError", "IndentationError",
    "ImportError", "ModuleNotFoundError",
})  # fmt: skip


def user_error(failure: FailureInfo | None) -> bool:
    """A worker's user mistake: exit 2 with a ConfigError, whose one line ends the launcher's output."""
    return failure is not None and failure.code == 2 and (failure.error or {}).get("type") == _USER_ERROR


def deterministic(failure: FailureInfo | None) -> bool:
    """A failure a restart gives again: a user error, or an exception of the program's own logic."""
    return user_error(failure) or (
        failure is not None and (failure.error or {}).get("type") in _PROGRAM_ERRORS
    )


def record_end(
    run_dir: str, attempt: int, outcome: Outcome, failure: FailureInfo | None, detected_at: float | None
) -> None:
    """``attempt-K/ended.json``: how, why and when the attempt ended here, and when it was learnt."""
    record = {
        "outcome": outcome.value,
        "detected_at": detected_at,
        "ended_at": time.time(),
        "failure": None if failure is None else {"name": failure.name, "line": failure_line(failure)},
    }
    attempt_files = RunFiles(run_dir).attempt(attempt)
    with contextlib.suppress(OSError):  # the record helps a reader; a full disk must not end the launch
        os.makedirs(attempt_files.directory, exist_ok=True)
        files.write_json(attempt_files.ended, record)


def report(failure: FailureInfo, final: bool) -> None:
    """The failure report on the console (``final``: with the tail of the failed process's log)."""
    if not failure.log_path:  # another node's failure, told through the rendezvous
        console_print(f"tfdist launch: {failure.how}; this node's workers were stopped at once.")
        return
    lost = lost_contact(failure.log_path)
    code = "" if failure.how == f"exited with code {failure.code}" else f" (exit code {failure.code})"
    lines = [
        f"tfdist launch: {failure.name} failed first: {failure.how}{code}",
        *error_lines(failure.error, failure.how),
        *([f"  {lost}"] if lost else []),
        f"  log: {failure.log_path}",
    ]
    if failure.muted:
        lines.append(f"  the others' output since the stop is in their logs: {failure.muted}")
    lines.extend(f"  {line}" for line in failure.stack)
    # A recorded exception is named above with its frame: its traceback is in the log (and was shown).
    if final and not failure.stack and failure.tail and not (failure.error and failure.error.get("type")):
        lines.append(f"  last {len(failure.tail)} line(s) of {failure.name}:")
        lines.extend(f"    {line}" for line in failure.tail)
    console_print("\n".join(lines))
