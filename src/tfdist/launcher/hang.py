"""The hang check: when a job's workers stop making progress (no step started or ended for longer than the
bound: ``--watchdog-timeout``, else :data:`AUTO_FACTOR` times the longest gap between steps, within
[:data:`AUTO_MIN_S`, :data:`AUTO_MAX_S`]), which one the others wait for, and where it was (its stack).
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from dataclasses import dataclass
from typing import Any

from tfdist import files
from tfdist.launcher.records import read_records
from tfdist.worker.contract import AttemptFiles
from tfdist.worker.errors import library_dirs

#: The automatic bound: this many times the longest gap between two steps seen, within these limits.
AUTO_FACTOR = 20
AUTO_MIN_S = 300.0
AUTO_MAX_S = 600.0
#: How long the report waits for the workers' stacks (their threads answer within a second).
STACKS_WAIT_S = 3.0
#: Frames of the stuck worker's main thread shown in the report (the innermost ones).
SHOWN_FRAMES = 12


@dataclass(frozen=True)
class Steps:
    """One worker's progress record (``rank<R>.progress.json``)."""

    rank: str
    steps: int
    inside: bool  # inside a step now: computing, or waiting in a collective
    last: float  # wall clock of its last step's start or end
    longest: float  # the longest gap between two steps' starts, in seconds
    done: bool  # the process has exited
    resize: dict[str, Any] | None = None  # how its training can stop and resume (tfdist.resize.offer)


@dataclass(frozen=True)
class Hang:
    """A hung job: for how long nothing moved, and the worker the others wait for."""

    idle: float
    stuck: str  # a rank
    outside: bool  # the stuck rank is outside any step while others wait inside one


def read_steps(directory: str) -> dict[str, Steps]:
    """Every worker's progress record in an attempt directory, by rank."""
    found: dict[str, Steps] = {}
    for rank, r in read_records(directory, "progress").items():
        with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError):  # not ours
            found[rank] = Steps(rank, int(r["steps"]), bool(r["inside"]), float(r["last"]),
                                float(r["longest"]), bool(r["done"]), r.get("resize"))  # fmt: skip
    return found


def bound(limit: float | None, steps: dict[str, Steps]) -> float | None:
    """Seconds without a step that count as a hang (0: never); None before any worker's first step."""
    if limit is not None:
        return limit or None
    if not steps:
        return None
    longest = max(s.longest for s in steps.values())
    return min(AUTO_MAX_S, max(AUTO_MIN_S, AUTO_FACTOR * longest))


def verdict(steps: dict[str, Steps], now: float, limit: float) -> Hang | None:
    """A hang when no running worker started or ended a step for ``limit`` seconds (see above).

    Input/Output: rank 0 inside a step, rank 1 outside, both last moved 400 s ago, limit 300 ->
    ``Hang(idle=400, stuck="1", outside=True)``.
    """
    live = [s for s in steps.values() if not s.done]
    if not live or (len(live) == 1 and not live[0].inside):
        return None
    idle = now - max(s.last for s in live)
    if idle <= limit:
        return None
    rank, outside = stuck(steps)
    return Hang(idle, rank, outside)


def stuck(steps: dict[str, Steps]) -> tuple[str, bool]:
    """The rank the others wait for (one outside any step while others wait inside), and whether outside."""
    live = [s for s in steps.values() if not s.done] or list(steps.values())
    outside = [s for s in live if not s.inside]
    chosen = min(outside or live, key=lambda s: (s.steps, s.last))
    return chosen.rank, bool(outside) and len(outside) < len(live)


def collect_stacks(directory: str, ranks: list[str], wait_s: float = STACKS_WAIT_S) -> dict[str, str]:
    """Ask every worker of the attempt for its stacks and wait up to ``wait_s`` for ``ranks``' answers."""
    attempt = AttemptFiles(directory)
    try:
        files.write_text(attempt.stacks_request, "")
    except OSError:
        return {}
    answers: dict[str, str] = {}
    deadline = time.monotonic() + wait_s
    while True:
        for rank in ranks:
            if rank not in answers:
                with contextlib.suppress(OSError), open(attempt.stacks(rank), encoding="utf-8") as fh:
                    answers[rank] = fh.read()
        if len(answers) == len(ranks) or time.monotonic() > deadline:
            return answers
        time.sleep(0.1)


_FRAME = re.compile(r'^  File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>.+)$')


def main_thread_frames(stacks: str) -> list[str]:
    """The main thread's frames as one line each (``file:line in function: code``), innermost last; runs
    of library frames folded into one line, the last :data:`SHOWN_FRAMES` kept."""
    lines = stacks.split("\n")
    end = next((i for i, line in enumerate(lines[1:], 1) if line.startswith("Thread ")), len(lines))
    body = lines[1:end]
    frames = [
        (match, body[i + 1].strip() if i + 1 < len(body) and not _FRAME.match(body[i + 1]) else "")
        for i, line in enumerate(body)
        if (match := _FRAME.match(line)) is not None
    ]
    libraries = library_dirs()
    shown: list[str] = []
    folded = 0
    for i, (match, code) in enumerate(frames):
        path = match["file"]
        library = path.startswith("<") or os.path.abspath(path).startswith(libraries)
        if library and i < len(frames) - 1:  # the innermost frame stays: where it waits
            folded += 1
            continue
        if folded and shown:  # those before the script's own first frame (its start) say nothing
            shown.append(f"… {folded} frame(s) in libraries")
            folded = 0
        shown.append(f"{path}:{match['line']} in {match['func']}" + (f": {code}" if code else ""))
    return shown[-SHOWN_FRAMES:]
