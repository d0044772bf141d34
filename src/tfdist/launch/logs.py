"""Per-process output: a file per process and attempt, and prefixed lines on the launcher's console."""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping
from typing import IO, Any, TextIO

from tfdist import variables
from tfdist.worker.contract import AttemptFiles

#: Lines kept in memory per process for the failure report.
TAIL_LINES = 20
_CONSOLE_LOCK = threading.Lock()


class LogPump(threading.Thread):
    """Copies one process's merged stdout/stderr to its log file and (optionally) the console.

    Records when the last line arrived, which the watchdog reads as a sign of progress.
    """

    def __init__(
        self,
        name: str,
        stream: IO[bytes],
        log_path: str,
        console: TextIO | None,
        prefix: bool,
        console_rank: str | None = None,
    ) -> None:
        super().__init__(name=f"tfdist-log-{name}", daemon=True)
        #: For the MPI launcher's pipe: show only this rank's lines (untagged) on the console.
        self.console_rank = console_rank
        self.label = name
        self.stream = stream
        self.log_path = log_path
        self.console = console
        self.prefix = f"[{name}]: " if prefix else ""
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self.last_line_at = time.monotonic()

    def run(self) -> None:
        """Pump until the process closes its output."""
        ranks = RankFiles(AttemptFiles(os.path.dirname(self.log_path))) if self.label == "mpi" else None
        with open(self.log_path, "w", encoding="utf-8", buffering=1) as log:
            for raw in iter(self.stream.readline, b""):
                line = raw.decode("utf-8", errors="replace").rstrip("\n")
                self.last_line_at = time.monotonic()
                self.tail.append(line)
                log.write(line + "\n")
                if ranks is not None:
                    ranks.write(line)
                if self.console is not None:
                    shown: str | None = line
                    if self.console_rank is not None:
                        rank, text = RankFiles.split(line)
                        shown = text if rank == self.console_rank else None
                    if shown is not None:
                        with _CONSOLE_LOCK:
                            self.console.write(f"{self.prefix}{shown}\n")
                            self.console.flush()
        if ranks is not None:
            ranks.close()
        self.stream.close()


class RankFiles:
    """Per-rank log files (``rank<R>.log``) from the MPI launcher's rank-tagged lines (``[R] text``).

    Every rank shares the launcher's one pipe; its tags (``-prepend-rank``, ``--tag-output``) tell
    the lines apart. Untagged lines (the launcher's own) stay in ``mpi.log`` only.
    """

    _TAG = re.compile(r"^\[(\d+)\] ?|^\[\d+,(\d+)\]<\w+>: ?")  # MPICH "[1] ", Open MPI "[1,1]<stdout>: "

    def __init__(self, attempt: AttemptFiles | str) -> None:
        self.attempt = attempt if isinstance(attempt, AttemptFiles) else AttemptFiles(attempt)
        self.files: dict[str, IO[str]] = {}

    @classmethod
    def split(cls, line: str) -> tuple[str | None, str]:
        """(rank, text without its tag) of a launcher line; (None, line) for an untagged one."""
        match = cls._TAG.match(line)
        if match is None:
            return None, line
        return match.group(1) or match.group(2), line[match.end() :]

    def write(self, line: str) -> None:
        """Append ``line`` (without its tag) to its rank's file."""
        rank, text = self.split(line)
        if rank is None:
            return
        if rank not in self.files:
            self.files[rank] = open(  # noqa: SIM115 - open for the life of the pump, closed in close()
                self.attempt.rank_log(rank), "w", encoding="utf-8", buffering=1
            )
        self.files[rank].write(text + "\n")

    def close(self) -> None:
        """Close every rank's file."""
        for handle in self.files.values():
            handle.close()


def console_print(message: str, stream: TextIO | None = None) -> None:
    """Write a launcher message without interleaving with worker lines."""
    out = stream or sys.stderr
    with _CONSOLE_LOCK:
        out.write(message + "\n")
        out.flush()


def read_error_record(env: Mapping[str, str]) -> dict[str, Any] | None:
    """The uncaught exception a failed process recorded (see :mod:`tfdist.worker.errors`), or None.

    A worker's own record is ``rank<R>.error.json`` in its attempt directory; for the MPI launcher, which
    starts every rank, the earliest record of any rank (the first to fail).
    """
    directory = variables.raw("TFDIST_ATTEMPT_DIR", env)
    if not directory or not os.path.isdir(directory):
        return None
    attempt = AttemptFiles(directory)
    rank = variables.raw("TFDIST_RANK", env)
    if rank is not None:
        paths = {rank: attempt.record("error", rank)}
    else:  # the MPI launcher: the first of its ranks to fail
        listed = {
            owner: os.path.join(directory, name)
            for name in os.listdir(directory)
            if (owner := attempt.record_owner(name, "error")) is not None
        }
        paths = dict(sorted(listed.items(), key=lambda item: os.path.getmtime(item[1]))[:1])
    for owner, path in paths.items():
        try:
            with open(path, encoding="utf-8") as fh:
                record = json.load(fh)
        except (OSError, ValueError):
            continue
        if isinstance(record, dict):
            if rank is None:  # one launcher process for every rank: say which rank failed
                record["mpi_rank"] = owner
            return record
    return None


def error_lines(record: Mapping[str, Any] | None, how: str) -> list[str]:
    """The report lines for a recorded exception: ``  ValueError: …`` and ``  at train.py:42 in step``."""
    if not record:
        return []
    rank = f"[r{record['mpi_rank']}] " if "mpi_rank" in record else ""
    lines = [f"  {rank}{record.get('type', 'Exception')}: {record.get('message', '')}".rstrip()]
    where = record.get("where")
    if isinstance(where, Mapping):
        lines.append(f"  at {where.get('file')}:{where.get('line')} in {where.get('function')}")
    if record.get("type") == "ModuleNotFoundError" and "'horovod" in str(record.get("message", "")):
        lines.append(
            "  hint: Horovod's last release does not build against TensorFlow 2.21. Run the script unchanged "
            "with tfdist launch --backend horovod -n N train.py (tfdist's Horovod API stands in for it), "
            "or import tfdist.horovod.tensorflow as hvd under any MPI launcher."
        )
    return lines


#: What a worker's lost-peer report starts with (tfdist.diagnose.peers.report).
LOST_CONTACT = "lost contact with "


def lost_contact(log_path: str) -> str | None:
    """The last lost-peer report in a worker's log (which peer stopped answering, at which step), or None.

    It comes before the exception's traceback, so the log's tail alone may not show it.
    """
    try:
        with open(log_path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 256 * 1024))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return None
    found = [line[line.index(LOST_CONTACT) :] for line in text.splitlines() if LOST_CONTACT in line]
    return found[-1].strip() if found else None
