"""argparse value types whose errors read as one line: ``'abc' is not an integer``.

Range checks are not done here: the Config dataclasses own them, so the CLI and the Python API agree.
Also the one option several commands share by name: ``--run-dir`` (:func:`add_run_dir`).
"""

from __future__ import annotations

import argparse
import math
from typing import Any


def add_run_dir(parser: Any, dest: str, holds: str) -> None:
    """``--run-dir DIR`` on ``parser`` (a parser or an argument group), stored in ``dest``: every command
    that writes a run names its directory so; ``holds`` says what the command puts there."""
    parser.add_argument(
        "--run-dir",
        dest=dest,
        default=None,
        metavar="DIR",
        help=f"run directory: {holds} (default ./tfdist-runs/<run-id>)",
    )


def integer(text: str) -> int:
    """Parse an integer flag value."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def number(text: str) -> float:
    """Parse a finite number flag value (``nan`` and ``inf`` are refused: no flag means them)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def seconds(text: str) -> float:
    """Parse a finite duration in seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number of seconds")
    return value
