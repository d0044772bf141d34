"""argparse value types whose errors read as one line: ``'abc' is not an integer``.

Range checks are not done here: the Config dataclasses own them, so the CLI and the Python API agree.
"""

from __future__ import annotations

import argparse


def integer(text: str) -> int:
    """Parse an integer flag value."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def number(text: str) -> float:
    """Parse a number flag value."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def seconds(text: str) -> float:
    """Parse a duration in seconds."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
