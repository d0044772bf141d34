"""Which auto-shard policy a dataset needs. Pure."""

from __future__ import annotations


def shard_policy(num_files: int | None, num_workers: int) -> str:
    """``FILE`` when every worker can get its own files, else ``DATA`` (each worker keeps every Nth element).
    Input/Output: ``(None, 4)`` (in memory) -> "DATA"; ``(2, 4)`` -> "DATA"; ``(16, 4)`` -> "FILE"."""
    return "DATA" if num_files is None or num_files < num_workers else "FILE"
