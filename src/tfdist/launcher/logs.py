"""Per-process output: a file per process and attempt, and prefixed lines on the launcher's console.

Local pipes are all read by one thread (:class:`PipePump`); a stream that only offers ``readline`` (a Ray
worker's) gets a thread of its own (:class:`LogPump`). Each process's lines go through one :class:`LogSink`.
"""

from __future__ import annotations

import contextlib
import os
import re
import selectors
import threading
import time
from collections import OrderedDict, deque
from typing import IO, TextIO

from tfdist.launcher.console import (
    PIPE_EVERY_S,
    console_print,
    end_live,
    is_terminal,
    plain,
    show_live,
    write_line,
)
from tfdist.worker.contract import AttemptFiles

#: Lines kept in memory per process for the failure report.
TAIL_LINES = 20
#: A line longer than this without a newline is written out in pieces (the launcher's memory stays bounded).
MAX_LINE_BYTES = 1 << 20
#: Rank files the MPI launcher's pump keeps open at once (:class:`RankFiles`).
MAX_OPEN_RANK_FILES = 64
#: The start of what a stopped worker prints because it was stopped: a traceback (KeyboardInterrupt), or
#: TensorFlow's C++ error log of the collective a stopped peer left ("E0000 00:00:... Aborting RingReduce").
_CONSEQUENCE = re.compile(r"Traceback \(most recent call|WARNING: All log messages before absl|[EF]\d{4} ")
#: Bytes read from a pipe at a time (a pipe holds 64 KiB by default on Linux).
READ_BYTES = 1 << 16


class LogSink:
    """Where one process's merged output goes: its log file, the console (prefixed), the last lines for the
    failure report, and the time of the last line (the watchdog's sign of progress)."""

    def __init__(
        self, name: str, log_path: str, console: TextIO | None, prefix: bool, console_rank: str | None = None
    ) -> None:
        #: For the MPI launcher's pipe: show only this rank's lines (untagged) on the console.
        self.console_rank = console_rank
        self.label = name
        self.log_path = log_path
        self.console = console
        self.prefix = f"[{name}]: " if prefix else ""
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self.last_line_at = time.monotonic()
        self.finished = threading.Event()
        self._log: IO[str] | None = None
        self._ranks: RankFiles | None = None
        #: Lines kept off the console since :meth:`mute` (None: not muted).
        self.muted: int | None = None
        self._mute_at_traceback = False
        #: The chief's progress bar is the job's live line; the others' go to their logs.
        self.live = name in ("w0", "chief")
        self._progress_at = 0.0  # when a progress state last went to the log (and to a pipe)

    def mute(self, at_traceback: bool = False) -> None:
        """Keep the rest of this output off the console (``at_traceback``: from its next traceback on)."""
        if at_traceback:
            self._mute_at_traceback = True
        elif self.muted is None:
            self.muted = 0

    def open(self) -> None:
        """Open the log file (and, for the MPI launcher, the per-rank files)."""
        self._log = open(self.log_path, "w", encoding="utf-8", buffering=1)  # noqa: SIM115 - closed in close()
        if self.label == "mpi":
            self._ranks = RankFiles(AttemptFiles(os.path.dirname(self.log_path)))

    def line(self, raw: bytes) -> None:
        """One line of the process's output (of a line redrawn in place, its final state). A file that cannot
        be written is reported once, then left out: the pipe is still read, or the worker would block."""
        line = final_state(raw.decode("utf-8", errors="replace").rstrip("\n"))
        self.last_line_at = time.monotonic()
        self._write_log(plain(line) if "\x1b" in line or "\x08" in line else line)
        if self.live and self.console is not None:
            end_live(self.console)
        if self._mute_at_traceback and self.muted is None and _CONSEQUENCE.match(line):
            self.muted = 0
        if self.muted is not None:
            self.muted += 1
        elif self.console is not None:
            shown: str | None = line
            if self.console_rank is not None:
                rank, text = RankFiles.split(line)
                shown = text if rank == self.console_rank else None
            if shown is not None:
                self._show(f"{self.prefix}{shown}")

    def progress(self, raw: bytes) -> None:
        """The current state of a redrawn progress line (the chief's live line; plain now and then)."""
        text = plain(raw.decode("utf-8", errors="replace"))
        now = time.monotonic()
        self.last_line_at = now
        if not text:
            return
        due = now - self._progress_at >= PIPE_EVERY_S
        if due:
            self._progress_at = now
            self._write_log(text)
        if not self.live or self.muted is not None or self.console is None or self.console_rank is not None:
            return
        if is_terminal(self.console):
            try:
                show_live(self.console, f"{self.prefix}{text}")
            except (OSError, ValueError):
                self.console = None
        elif due:
            self._show(f"{self.prefix}{text}")

    def _write_log(self, line: str) -> None:
        self.tail.append(line)
        if self._log is None:
            return
        try:
            self._log.write(line + "\n")
            if self._ranks is not None:
                self._ranks.write(line)
        except OSError as exc:
            self._close_files()
            console_print(f"tfdist: {self.label}'s output no longer reaches {self.log_path}: {exc}")

    def _show(self, text: str) -> None:
        if self.console is None:
            return
        try:
            write_line(self.console, text)
        except (OSError, ValueError):  # the console's reader left (a closed pipe)
            self.console = None

    def close(self) -> None:
        """The process closed its output: close the files and wake whoever waits in :meth:`join`."""
        try:
            self._close_files()
        finally:
            self.finished.set()

    def _close_files(self) -> None:
        ranks, log, self._ranks, self._log = self._ranks, self._log, None, None
        for handle in (ranks, log):  # one that could not be written was reported; closing may fail alike
            with contextlib.suppress(OSError):
                if handle is not None:
                    handle.close()

    def join(self, timeout: float | None = None) -> None:
        """Wait until the process's output ended and every line was written (or ``timeout`` seconds)."""
        self.finished.wait(timeout)


class LogPump(LogSink):
    """A sink fed by a thread of its own reading ``stream.readline``: for a stream no selector can watch."""

    def __init__(
        self,
        name: str,
        stream: IO[bytes],
        log_path: str,
        console: TextIO | None,
        prefix: bool,
        console_rank: str | None = None,
    ) -> None:
        super().__init__(name, log_path, console, prefix, console_rank)
        self.stream = stream
        self.thread = threading.Thread(target=self.run, name=f"tfdist-log-{name}", daemon=True)

    def start(self) -> None:
        """Start pumping."""
        self.thread.start()

    def run(self) -> None:
        """Pump until the process closes its output."""
        try:
            self.open()
            for raw in iter(self.stream.readline, b""):
                self.line(raw)
        finally:
            self.close()
            self.stream.close()


class PipePump:
    """Every local process's output pipe, read by ONE thread through a selector: it starts with the first
    pipe, ends when every pipe has; a pipe added while it waits wakes it through a pipe of its own."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[tuple[LogSink, IO[bytes]]] = []
        self._thread: threading.Thread | None = None
        self._wake: tuple[int, int] | None = None

    def add(self, sink: LogSink, stream: IO[bytes]) -> None:
        """Pump ``stream`` (a process's stdout pipe) into ``sink`` (opened) until the stream's end."""
        with self._lock:
            self._pending.append((sink, stream))
            if self._thread is None:
                self._wake = os.pipe()
                os.set_blocking(self._wake[1], False)
                self._thread = threading.Thread(
                    target=self._run, args=(self._wake[0],), name="tfdist-log-pump", daemon=True
                )
                self._thread.start()
            else:
                assert self._wake is not None
                with contextlib.suppress(BlockingIOError):  # full: the thread has a wake-up to read already
                    os.write(self._wake[1], b"+")

    def _take_pending(self, selector: selectors.BaseSelector) -> bool:
        """Register what was added; False (and the thread's end recorded) when nothing is left to pump."""
        with self._lock:
            for sink, stream in self._pending:
                selector.register(stream.fileno(), selectors.EVENT_READ, (sink, stream, bytearray()))
            self._pending.clear()
            if len(selector.get_map()) > 1:  # the wake-up pipe is always registered
                return True
            assert self._wake is not None
            for fd in self._wake:
                os.close(fd)
            self._thread, self._wake = None, None
            return False

    def _run(self, wake: int) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(wake, selectors.EVENT_READ, None)
            while self._take_pending(selector):
                for key, _ in selector.select():
                    if key.data is None:
                        os.read(wake, 4096)
                        continue
                    sink, stream, buffer = key.data
                    try:
                        chunk = os.read(key.fd, READ_BYTES)
                        buffer += chunk
                        _feed(sink, buffer, final=not chunk)
                    except Exception as exc:  # one stream's failure must not stop the others' pumping
                        console_print(f"tfdist: {sink.label}'s output is no longer read: {exc!r}")
                        chunk = b""
                    if not chunk:
                        selector.unregister(key.fd)
                        sink.close()
                        stream.close()


def _feed(sink: LogSink, buffer: bytearray, final: bool) -> None:
    """Hand ``sink`` the complete lines at the start of ``buffer`` (and the rest at the ``final`` end); an
    open line a progress bar redraws goes as its latest state."""
    start = 0
    while (end := buffer.find(b"\n", start)) >= 0:
        sink.line(bytes(buffer[start : end + 1]))
        start = end + 1
    redrawn = buffer.rfind(b"\r", start)
    if start <= redrawn < len(buffer) - 1:  # a state begun after the last carriage return
        sink.progress(bytes(buffer[redrawn + 1 :]))
        start = redrawn  # the open state stays: the line's end (or the next state) completes it
    while len(buffer) - start >= MAX_LINE_BYTES:
        sink.line(bytes(buffer[start : start + MAX_LINE_BYTES]))
        start += MAX_LINE_BYTES
    if final and start < len(buffer):
        sink.line(bytes(buffer[start:]))
        start = len(buffer)
    del buffer[:start]


def final_state(line: str) -> str:
    """What a line redrawn in place (carriage returns) shows last; a line without them as it is.

    >>> final_state("\\r 1/8 loss: 3.1\\r 8/8 loss: 0.9"), final_state("plain\\r")
    (' 8/8 loss: 0.9', 'plain')
    """
    text = line[:-1] if line.endswith("\r") else line
    return text[text.rfind("\r") + 1 :] if "\r" in text else text


class RankFiles:
    """Per-rank log files (``rank<R>.log``) from the MPI launcher's rank-tagged lines (``[R] text``);
    untagged lines stay in ``mpi.log`` only. At most ``max_open`` stay open (least recently written closed
    first, reopened to append): one launcher may carry more ranks than a process may hold files."""

    _TAG = re.compile(r"^\[(\d+)\] ?|^\[\d+,(\d+)\]<\w+>: ?")  # MPICH "[1] ", Open MPI "[1,1]<stdout>: "

    def __init__(self, attempt: AttemptFiles | str, max_open: int = MAX_OPEN_RANK_FILES) -> None:
        self.attempt = attempt if isinstance(attempt, AttemptFiles) else AttemptFiles(attempt)
        self.max_open = max(1, max_open)
        #: Open files, the most recently written last.
        self.files: OrderedDict[str, IO[str]] = OrderedDict()
        #: Every rank that has a file (truncated at its first line, appended to after).
        self.started: set[str] = set()

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
        handle = self.files.get(rank)
        if handle is None:
            if len(self.files) >= self.max_open:
                self.files.popitem(last=False)[1].close()
            mode = "a" if rank in self.started else "w"
            handle = open(self.attempt.rank_log(rank), mode, encoding="utf-8", buffering=1)  # noqa: SIM115
            self.files[rank] = handle  # closed when evicted or in close()
            self.started.add(rank)
        else:
            self.files.move_to_end(rank)
        handle.write(text + "\n")

    def close(self) -> None:
        """Close every rank's file."""
        while self.files:
            self.files.popitem()[1].close()
