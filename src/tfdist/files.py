"""Atomic writes (a temporary name beside the file, then ``os.replace``), and scratch directories removed
when the process ends."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def atomic_path(path: str | os.PathLike[str], suffix: str = "") -> Iterator[str]:
    """Yield a temporary path next to ``path``; on success it replaces ``path``, on error it is removed.
    ``suffix`` keeps the extension for writers that choose the format from it (``savefig(".png")``)."""
    target = os.fspath(path)
    directory, name = os.path.split(target)
    tmp = os.path.join(directory, f".{name}.{os.getpid()}.{threading.get_ident()}.tmp{suffix}")  # per writer
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` atomically (UTF-8)."""
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)


def write_json(path: str | os.PathLike[str], payload: Any, **dump_options: Any) -> None:
    """Write ``payload`` as JSON to ``path`` atomically."""
    write_text(path, json.dumps(payload, **dump_options))


_SCRATCH: list[str] = []


def scratch_dir(prefix: str) -> str:
    """A fresh temporary directory that is removed when this process exits (also through ``os._exit``
    when the caller runs :func:`remove_scratch_dirs` first)."""
    path = tempfile.mkdtemp(prefix=prefix)
    if not _SCRATCH:
        atexit.register(remove_scratch_dirs)
    _SCRATCH.append(path)
    return path


def remove_scratch_dirs() -> None:
    """Remove every directory :func:`scratch_dir` made (idempotent)."""
    while _SCRATCH:
        shutil.rmtree(_SCRATCH.pop(), ignore_errors=True)
