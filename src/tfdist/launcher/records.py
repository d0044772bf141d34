"""What the workers leave for the launcher: their records in the attempt directory, each one's uncaught
exception (recorded by :mod:`tfdist.worker.errors`) and a lost-peer line in its log."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from typing import Any

from tfdist import variables
from tfdist.worker.contract import AttemptFiles


def read_records(directory: str, kind: str) -> dict[str, Any]:
    """Every complete record of ``kind`` in an attempt directory, by owner (rank); others are left out."""
    try:
        names = os.listdir(directory)
    except OSError:
        return {}
    found: dict[str, Any] = {}
    for name in names:
        owner = AttemptFiles.record_owner(name, kind)
        if owner is not None:
            with contextlib.suppress(OSError, ValueError), open(os.path.join(directory, name), "rb") as fh:
                found[owner] = json.load(fh)
    return found


def read_error_record(env: Mapping[str, str]) -> dict[str, Any] | None:
    """The uncaught exception a failed process recorded, or None (the MPI launcher: its ranks' first)."""
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


def error_record_time(env: Mapping[str, str]) -> float | None:
    """When a worker (``TFDIST_RANK`` in ``env``) recorded its uncaught exception, or None."""
    directory, rank = variables.raw("TFDIST_ATTEMPT_DIR", env), variables.raw("TFDIST_RANK", env)
    if not directory or rank is None:
        return None
    try:
        return os.path.getmtime(AttemptFiles(directory).record("error", rank))
    except OSError:
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
    """The last lost-peer report in a worker's log (before the traceback, so maybe not in the tail)."""
    try:
        with open(log_path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 256 * 1024))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return None
    found = [line[line.index(LOST_CONTACT) :] for line in text.splitlines() if LOST_CONTACT in line]
    return found[-1].strip() if found else None
