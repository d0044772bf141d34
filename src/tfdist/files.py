"""Atomic writes: a reader (another worker, the launcher, a user's script) never sees half a file.

Every file tfdist writes goes to a temporary name in the same directory, then ``os.replace`` puts it in
place (atomic on POSIX within one filesystem).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def atomic_path(path: str | os.PathLike[str], suffix: str = "") -> Iterator[str]:
    """Yield a temporary path next to ``path``; on success it replaces ``path``, on error it is removed.

    ``suffix`` keeps the extension for writers that choose the format from it (``savefig(".png")``).
    """
    target = os.fspath(path)
    directory, name = os.path.split(target)
    tmp = os.path.join(directory, f".{name}.{os.getpid()}.tmp{suffix}")
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
