"""What ``tfdist estimate`` reports: one replica's terms, their total, and the device they must fit. Pure."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

MIB = 2**20


@dataclass(frozen=True)
class Device:
    """The memory one replica is compared against: ``name`` says what it is (a GPU, host RAM, a flag)."""

    name: str
    bytes: int
    #: Replicas that share it: a GPU holds one, host RAM holds every replica of the machine.
    shared_by: int = 1


@dataclass(frozen=True)
class Term:
    """One line of the estimate: what, how many bytes, how it was worked out."""

    name: str
    bytes: int
    how: str
    kind: str = "model"  # model | workspace | baseline | margin


@dataclass(frozen=True)
class MemoryEstimate:
    """The estimate of one replica: its terms (the margin last), total, and the device compared."""

    model: str
    params: int
    optimizer: str
    slots: int
    precision: str
    batch_per_replica: int
    replicas: int
    terms: tuple[Term, ...]
    device: Device | None = None
    notes: tuple[str, ...] = field(default=())
    #: Whether ``terms`` are those of a sharded optimizer (slots / replicas).
    shard_optimizer: bool = False
    #: One replica's total in the other mode (sharded when these terms are not, and the reverse); None
    #: when sharding changes nothing (one replica, or an optimizer without slots).
    other_total: int | None = None

    @property
    def total(self) -> int:
        """Bytes of one replica, margin included."""
        return sum(t.bytes for t in self.terms)

    @property
    def needed(self) -> int:
        """Bytes the device must hold: one replica's total, times the replicas that share the device."""
        return self.total * (self.device.shared_by if self.device else 1)

    @property
    def fits(self) -> bool | None:
        """Whether the replicas that share the device fit in it; None without a device."""
        return None if self.device is None else self.needed <= self.device.bytes

    @property
    def sharded_total(self) -> int | None:
        """One replica's bytes with the optimizer sharded (None when that was not worked out)."""
        return self.total if self.shard_optimizer else self.other_total

    @property
    def unsharded_total(self) -> int:
        """One replica's bytes with every slot on every replica."""
        return self.other_total if self.shard_optimizer and self.other_total is not None else self.total

    @property
    def sharding_makes_it_fit(self) -> bool:
        """Whether the job fits the device sharded and does not unsharded."""
        if self.device is None or self.sharded_total is None:
            return False
        room = self.device.bytes // self.device.shared_by
        return self.sharded_total <= room < self.unsharded_total

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: every term in bytes and MiB, the total, the device and the verdict."""
        return {
            "model": self.model,
            "params": self.params,
            "optimizer": self.optimizer,
            "optimizer_slots": self.slots,
            "precision": self.precision,
            "batch_per_replica": self.batch_per_replica,
            "replicas": self.replicas,
            "terms": [{**asdict(t), "mib": round(t.bytes / MIB, 1)} for t in self.terms],
            "total_bytes": self.total,
            "total_mib": round(self.total / MIB, 1),
            "device": None if self.device is None else asdict(self.device),
            "needed_bytes": self.needed,
            "fits": self.fits,
            "shard_optimizer": self.shard_optimizer,
            "unsharded_total_bytes": self.unsharded_total,
            "sharded_total_bytes": self.sharded_total,
            "sharding_makes_it_fit": self.sharding_makes_it_fit,
            "notes": list(self.notes),
        }


def sharding_note(result: MemoryEstimate) -> str:
    """One line: each replica's memory sharded against unsharded, and whether sharding is what fits."""
    sharded, unsharded = result.sharded_total or 0, result.unsharded_total
    line = (
        f"optimizer slots sharded over {result.replicas} replicas (tfdist.fit(shard_optimizer=True), "
        f"--backend mpi): {sharded / MIB:,.0f} MiB per replica, unsharded {unsharded / MIB:,.0f} MiB"
    )
    if result.sharding_makes_it_fit:
        return line + "; sharding the optimizer is what makes this job fit."
    return line + "."
