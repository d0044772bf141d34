"""argparse value types whose errors read as one line (``'abc' is not an integer``; range checks are the
configs'), and ``--run-dir``, the one option several commands share."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any


def add_run_dir(parser: Any, dest: str, holds: str) -> None:
    """``--run-dir DIR`` (into ``dest``), the one name of every command's run directory, which ``holds``."""
    text = f"run directory: {holds} (default ./tfdist-runs/<run-id>)"
    parser.add_argument("--run-dir", dest=dest, metavar="DIR", help=text)


def integer(text: str) -> int:
    """Parse an integer flag value."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def _finite(what: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {what}") from None
        if not math.isfinite(value):  # no flag means nan or inf
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite {what}")
        return value

    return parse


#: Parse a finite number, or a finite duration in seconds.
number, seconds = _finite("number"), _finite("number of seconds")


def seconds_or_off(text: str) -> float:
    """Parse a duration in seconds, or ``off`` (0: the check it bounds is off)."""
    if text.strip().lower() == "off":
        return 0.0
    try:
        return seconds(text)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (or off)") from None


def command_words(remainder: list[str]) -> list[str]:
    """A ``-- COMMAND...`` remainder without its ``--``."""
    return remainder[1:] if remainder[:1] == ["--"] else list(remainder)
