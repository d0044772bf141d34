"""Did the workers of a multi-worker launch build a strategy that spans the job? (see tfdist.worker.join)"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from tfdist.launcher.records import read_records

#: How long to wait for the other workers' records once one reported a strategy that does not span the job.
SETTLE_S = 3.0


def join_verdict(records: Mapping[int, Mapping[str, Any]], world: int, settled: bool) -> str | None:
    """The warning to print, or None. Pure.

    Input/Output: ``{0: {"class": "MirroredStrategy", "spans": False}, 1: {...same}}``, world 2 ->
    ``"every worker built MirroredStrategy: they train 2 separate models; …"``.
    """
    lonely = {rank: r for rank, r in records.items() if not r.get("spans")}
    if not lonely or (len(records) < world and not settled):
        return None
    advice = "use MultiWorkerMirroredStrategy or tfdist.strategy() so the workers train one model"
    classes = sorted({str(r.get("class")) for r in lonely.values()})
    if len(lonely) == world and len(classes) == 1:
        return f"every worker built {classes[0]}: they train {world} separate models; {advice}."
    ranks = ", ".join(f"w{rank}" for rank in sorted(lonely))
    return (
        f"worker(s) {ranks} built {' / '.join(classes)}, which does not span the job's {world} workers; "
        f"{advice}."
    )


class JoinCheck:
    """Reads the workers' strategy records from an attempt directory; yields the verdict once."""

    def __init__(self, attempt_dir: str, world: int) -> None:
        self.attempt_dir, self.world = attempt_dir, world
        self.first_seen: float | None = None
        self.done = world < 2

    def poll(self, now: float | None = None) -> str | None:
        """The warning, the first time it can be decided; None otherwise (and ever after)."""
        if self.done:
            return None
        records = self._records()
        if not records:
            return None
        now = time.monotonic() if now is None else now
        if self.first_seen is None:
            self.first_seen = now
        verdict = join_verdict(records, self.world, now - self.first_seen >= SETTLE_S)
        if verdict is not None or len(records) >= self.world:
            self.done = bool(verdict) or all(r.get("spans") for r in records.values())
        return verdict

    def final(self) -> str | None:
        """The verdict once every worker has ended (nothing more will be reported), unless already given."""
        if self.done:
            return None
        self.done = True
        records = self._records()
        return join_verdict(records, self.world, settled=True) if records else None

    def _records(self) -> dict[int, dict[str, Any]]:
        records = read_records(self.attempt_dir, "strategy")  # rank<R>.strategy.json (tfdist.worker.join)
        return {int(rank): record for rank, record in records.items() if rank.isdigit()}
