"""The launcher's console: workers' lines, the launcher's own messages, and one live progress line (the
chief's, at the bottom of a terminal). Every line is written whole, under one lock: lines never interleave.
"""

from __future__ import annotations

import re
import shutil
import sys
import threading
from typing import TextIO

#: Seconds between two progress lines on a console that is not a terminal (a pipe, a file), and in logs.
PIPE_EVERY_S = 10.0
_LOCK = threading.Lock()
#: Terminal control sequences (colours, cursor moves) and backspaces: kept out of log files and pipes.
_CONTROL = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x08")


class _Live:
    """The live line on the terminal now: its stream and text (None when none is shown)."""

    stream: TextIO | None = None
    text: str | None = None


_LIVE = _Live()


def plain(text: str) -> str:
    """``text`` without terminal control sequences or backspaces, trailing blanks dropped.

    >>> plain("\\x1b[1m 3/8\\x1b[0m - loss: 0.5\\x08\\x08")
    ' 3/8 - loss: 0.5'
    """
    return _CONTROL.sub("", text).rstrip()


def is_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is a terminal (a live line can be redrawn there)."""
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if isatty is not None else False
    except ValueError:  # closed
        return False


def _clear() -> None:
    if _LIVE.text is not None and _LIVE.stream is not None:
        _LIVE.stream.write("\r\x1b[K")
        _LIVE.stream.flush()


def _redraw() -> None:
    if _LIVE.text is not None and _LIVE.stream is not None:
        _LIVE.stream.write(_LIVE.text)
        _LIVE.stream.flush()


def write_line(stream: TextIO, text: str) -> None:
    """One whole line on ``stream``, above the live line if one is shown (OSError/ValueError propagate)."""
    with _LOCK:
        _clear()
        stream.write((text if is_terminal(stream) else plain(text)) + "\n")
        stream.flush()
        _redraw()


def show_live(stream: TextIO, text: str) -> None:
    """Show ``text`` as the live line of a terminal ``stream``, cut to its width (to redraw it in place)."""
    width = shutil.get_terminal_size().columns
    line = plain(text)[: max(1, width - 1)]
    with _LOCK:
        _clear()
        _LIVE.stream, _LIVE.text = stream, line
        _redraw()


def end_live(stream: TextIO) -> None:
    """Remove the live line of ``stream`` (its final state is printed as a line of its own)."""
    with _LOCK:
        if _LIVE.stream is stream:
            _clear()
            _LIVE.stream, _LIVE.text = None, None


def console_print(message: str, stream: TextIO | None = None) -> None:
    """Write a launcher message whole, above the live line, without interleaving with worker lines."""
    write_line(stream or sys.stderr, message)
