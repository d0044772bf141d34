"""Keras' progress bar (verbose=1) under `tfdist launch` in a real terminal (tmux): the chief's bar is one
live line with the step, the ETA and the loss while the epoch runs; the log files hold plain lines."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parent.parent / "helpers" / "progress_fit.py"
#: The chief's live line mid-epoch: "[w0]: 12/40 ━━━━━━ 1s 55ms/step - loss: 3.1".
LIVE = re.compile(r"^\[w0\]: +(\d+)/40 \S+ +\d+s \d+ms/step - loss: [\d.e+-]+\s*$")


def tmux(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, timeout=30, check=False)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed: no terminal to look at")
def test_keras_progress_bar_is_one_live_line_in_a_terminal(tmp_path: Path) -> None:
    session = f"tfdist-progress-{os.getpid()}"
    run_dir = tmp_path / "run"
    command = " ".join(
        shlex.quote(part)
        for part in [sys.executable, "-m", "tfdist", "launch", "-n", "2", "--cpu", "--run-dir", str(run_dir)]
    )
    # A tmux server already running gives new sessions its own environment: the command sets its own.
    quiet = "env TF_CPP_MIN_LOG_LEVEL=2 TF_ENABLE_ONEDNN_OPTS=0 TERM=xterm"
    shell = f"{quiet} {command} {shlex.quote(str(SCRIPT))}; echo EXIT=$?; sleep 60"
    started = subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-x", "160", "-y", "40", shell],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert started.returncode == 0, started.stderr
    live: list[int] = []
    screen = ""
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and "EXIT=" not in screen:
            screen = tmux("capture-pane", "-p", "-t", session).stdout
            rows = [row for row in screen.splitlines() if row.strip()]
            if rows and (match := LIVE.match(rows[-1])) and int(match.group(1)) < 40:
                live.append(int(match.group(1)))
            time.sleep(0.2)
    finally:
        tmux("kill-session", "-t", session)
    assert "EXIT=0" in screen, screen
    assert len(set(live)) >= 2, screen  # a line redrawn in place as the steps went by, seen mid-epoch
    finals = [row for row in screen.splitlines() if row.startswith("[w0]: 40/40")]
    assert len(finals) == 3, screen  # each epoch's last state stays on screen, one line each
    for log in (run_dir / "attempt-0").glob("worker*.log"):
        text = log.read_text()
        assert not re.search(r"[\x1b\r\x08]", text), repr(text[:500])  # plain lines, no control characters
        bars = [line for line in text.splitlines() if "/40 " in line]
        assert text.count("40/40") == 3 and max(len(line) for line in bars) < 200, bars
