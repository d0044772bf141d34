"""Scratch directories that live until the process ends, removed also on an exit that skips atexit."""

from __future__ import annotations

import os

from tfdist import files


def test_scratch_dirs_are_removed_on_request_and_only_once() -> None:
    first, second = files.scratch_dir("tfdist-test-"), files.scratch_dir("tfdist-test-")
    assert os.path.isdir(first) and os.path.isdir(second) and first != second
    files.remove_scratch_dirs()
    assert not os.path.exists(first) and not os.path.exists(second)
    files.remove_scratch_dirs()  # nothing left: no error
