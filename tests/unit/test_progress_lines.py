"""Progress bars through the launcher's pipe: a line redrawn in place (Keras' verbose=1, tqdm) reaches the
log as its final state without control characters, and its states in between as progress, never as one
ever-growing line (real LogSinks and files; the console is a pipe-like buffer)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from tfdist.launcher import console
from tfdist.launcher.logs import LogSink, _feed, final_state
from tfdist.launcher.outcome import FailureInfo, report

#: What Keras 3's progress bar writes for a 3-step epoch: each state after backspaces and a carriage
#: return, colours in ANSI sequences, the last state ended by a newline.
BAR = b"\x1b[1m%d/3\x1b[0m \x1b[32m\xe2\x94\x81\x1b[0m - loss: %.1f"


def keras_epoch() -> list[bytes]:
    writes = [b"Epoch 1/1\n"]
    for step in (1, 2, 3):
        writes.append(b"\x08" * 20 + b"\r" + BAR % (step, 4.0 - step))
    writes[-1] += b"\n"
    return writes


def sink(tmp_path: Path, name: str, shown: io.StringIO) -> LogSink:
    out = LogSink(name, str(tmp_path / f"{name}.log"), shown, prefix=True)
    out.open()
    return out


def test_a_redrawn_line_is_logged_as_its_final_state_without_control_characters(tmp_path: Path) -> None:
    shown = io.StringIO()
    chief = sink(tmp_path, "w0", shown)
    states: list[str] = []
    chief.progress = lambda raw: states.append(console.plain(raw.decode()))  # type: ignore[method-assign]
    buffer = bytearray()
    for write in keras_epoch():  # one read per write, as a pipe delivers Keras' flushed writes
        buffer += write
        _feed(chief, buffer, final=False)
    _feed(chief, buffer, final=True)
    chief.close()
    assert states == ["1/3 ━ - loss: 3.0", "2/3 ━ - loss: 2.0"]  # the third ends with its newline
    log = (tmp_path / "w0.log").read_text()
    assert log == "Epoch 1/1\n3/3 ━ - loss: 1.0\n", repr(log)
    assert shown.getvalue() == "[w0]: Epoch 1/1\n[w0]: 3/3 ━ - loss: 1.0\n"  # a pipe: no control characters
    assert not buffer


def test_the_chiefs_progress_reaches_a_pipe_every_few_seconds_and_the_others_stay_off(tmp_path: Path) -> None:
    shown = io.StringIO()
    chief, other = sink(tmp_path, "w0", shown), sink(tmp_path, "w1", shown)
    for worker in (chief, other):
        worker.progress(b"\x1b[1m1/3\x1b[0m - loss: 3.0")
        worker.progress(b"\x1b[1m2/3\x1b[0m - loss: 2.0")  # within PIPE_EVERY_S of the first: not shown
    assert shown.getvalue() == "[w0]: 1/3 - loss: 3.0\n"
    chief.close(), other.close()
    assert (tmp_path / "w1.log").read_text() == "1/3 - loss: 3.0\n"  # in each log, as often


def test_a_line_split_at_its_carriage_return_keeps_its_text(tmp_path: Path) -> None:
    """``text\\r\\n`` arriving as ``text\\r`` then ``\\n`` is the line ``text``."""
    shown = io.StringIO()
    worker = sink(tmp_path, "w1", shown)
    buffer = bytearray(b"hello\r")
    _feed(worker, buffer, final=False)
    buffer += b"\n"
    _feed(worker, buffer, final=False)
    worker.close()
    assert (tmp_path / "w1.log").read_text() == "hello\n"
    assert final_state("a\rb\rc") == "c" and final_state("plain\r") == "plain"


def test_a_stopped_workers_lines_go_to_its_log_only_and_the_report_counts_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """After a failure a peer is muted at once; after a signal only from its traceback on."""
    shown = io.StringIO()
    peer, interrupted = sink(tmp_path, "w0", shown), sink(tmp_path, "w2", shown)
    peer.mute()
    interrupted.mute(at_traceback=True)
    for raw in (b"stop requested: checkpoint written at step 7\n", b"Traceback (most recent call last):\n"):
        peer.line(raw)
        interrupted.line(raw)
    peer.close(), interrupted.close()
    assert shown.getvalue() == "[w2]: stop requested: checkpoint written at step 7\n"
    assert (peer.muted, interrupted.muted) == (2, 1)
    assert (tmp_path / "w0.log").read_text().count("\n") == 2  # the log keeps every line
    report(FailureInfo("w1", 1, "exited with code 1", "w1.log", (), None, "w0 (2 lines)"), final=True)
    assert capsys.readouterr().err.splitlines() == [
        "tfdist launch: w1 failed first: exited with code 1",
        "  log: w1.log",
        "  the others' output since the stop is in their logs: w0 (2 lines)",
    ]
