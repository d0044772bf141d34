"""Per-process output: a file per process and attempt, and prefixed lines on the launcher's console."""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from typing import IO, TextIO

#: Lines kept in memory per process for the failure report.
TAIL_LINES = 20
_CONSOLE_LOCK = threading.Lock()


class LogPump(threading.Thread):
    """Copies one process's merged stdout/stderr to its log file and (optionally) the console.

    Records when the last line arrived, which the watchdog reads as a sign of progress.
    """

    def __init__(
        self, name: str, stream: IO[bytes], log_path: str, console: TextIO | None, prefix: bool
    ) -> None:
        super().__init__(name=f"tfdist-log-{name}", daemon=True)
        self.label = name
        self.stream = stream
        self.log_path = log_path
        self.console = console
        self.prefix = f"[{name}]: " if prefix else ""
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self.last_line_at = time.monotonic()

    def run(self) -> None:
        """Pump until the process closes its output."""
        with open(self.log_path, "w", encoding="utf-8", buffering=1) as log:
            for raw in iter(self.stream.readline, b""):
                line = raw.decode("utf-8", errors="replace").rstrip("\n")
                self.last_line_at = time.monotonic()
                self.tail.append(line)
                log.write(line + "\n")
                if self.console is not None:
                    with _CONSOLE_LOCK:
                        self.console.write(f"{self.prefix}{line}\n")
                        self.console.flush()
        self.stream.close()


def console_print(message: str, stream: TextIO | None = None) -> None:
    """Write a launcher message without interleaving with worker lines."""
    out = stream or sys.stderr
    with _CONSOLE_LOCK:
        out.write(message + "\n")
        out.flush()
