"""Elastic node counts: ``--nnodes MIN:MAX``, parsed and checked (pure).

A job launched with ``--nnodes MIN:MAX --rdzv HOST:PORT`` forms with up to MAX nodes; after a failure the
nodes still there meet again and the job restarts on them (at least MIN) from its last checkpoint. The
script keeps its global batch: each replica takes a larger share, so the math does not change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tfdist.errors import ConfigError

_RANGE = re.compile(r"^\s*(\d+)\s*(?::\s*(\d+)\s*)?$")


@dataclass(frozen=True)
class NodeRange:
    """The fewest and the most nodes a round of the job takes (equal: a fixed job)."""

    low: int
    high: int

    @property
    def elastic(self) -> bool:
        """Whether the job may go on with fewer nodes than it started with."""
        return self.low < self.high

    def __str__(self) -> str:
        return f"{self.low}:{self.high}" if self.elastic else str(self.low)


def parse_nnodes(text: str) -> NodeRange:
    """``--nnodes N`` or ``--nnodes MIN:MAX`` -> NodeRange; ConfigError with one line otherwise.

    >>> parse_nnodes("2:4"), parse_nnodes("3")
    (NodeRange(low=2, high=4), NodeRange(low=3, high=3))
    """
    match = _RANGE.match(text)
    if not match:
        raise ConfigError(f"--nnodes={text!r} must be a number of nodes N or a range MIN:MAX, e.g. 2:4.")
    low = int(match.group(1))
    high = int(match.group(2)) if match.group(2) is not None else low
    if match.group(2) is None and low < 1:
        raise ConfigError(f"--nnodes={low} must be at least 1.")
    if low < 1:
        raise ConfigError(f"--nnodes={text}: MIN={low} must be at least 1 node.")
    if low > high:
        raise ConfigError(
            f"--nnodes={text}: MIN={low} is above MAX={high}. Hint: --nnodes {high}:{low} (fewest:most)."
        )
    return NodeRange(low, high)
