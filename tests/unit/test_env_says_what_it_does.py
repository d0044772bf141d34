"""`tfdist env` on a terminal says what it is doing at once, before TensorFlow's import ends."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time


def test_env_on_a_terminal_shows_a_line_within_a_second() -> None:
    leader, follower = pty.openpty()
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tfdist", "env"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=follower,
        env={**os.environ, "TERM": "xterm"},
    )
    os.close(follower)
    seen = b""
    try:
        while b"importing TensorFlow" not in seen and time.monotonic() - started < 30:
            ready, _, _ = select.select([leader], [], [], 0.1)
            if ready:
                seen += os.read(leader, 4096)
        still_working = proc.poll() is None
    finally:
        proc.kill()
        proc.wait(timeout=30)
        os.close(leader)
    assert b"importing TensorFlow" in seen, seen
    assert still_working  # the line came while TensorFlow was still being imported, not with the report
