"""A sharded optimizer's checkpoints, in the unsharded format: at a save the slots are gathered to the
chief into a full-size copy of the optimizer; a restore reads that format and keeps each rank's slice, so a
checkpoint moves between rank counts and between sharded and unsharded runs."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from tfdist.errors import ConfigError
from tfdist.sync.shard_layout import ShardLayout

#: The flat variable the optimizer is built over; its slots are named ``<optimizer>/tfdist_shard_<slot>``.
SHARD_NAME = "tfdist_shard"
HINT = "Hint: leave shard_optimizer out (or TFDIST_SHARD_OPTIMIZER=0)"


class WholeCheckpoint:
    """The checkpoint half of :class:`tfdist.sync.shard.ShardedOptimizer`."""

    model: Any
    optimizer: Any
    strategy: Any
    sync: Any
    comm: Any
    targets: list[Any]
    layout: ShardLayout

    def _slots(self) -> dict[str, Any]:
        """This rank's slot variables by slot name (``momentum``, ``velocity`` …)."""
        marker = f"{SHARD_NAME}_"
        return {
            v.path.rsplit("/", 1)[-1][len(marker) :]: v
            for v in self.optimizer.variables
            if v.path.rsplit("/", 1)[-1].startswith(marker)
        }

    def _full_slots(self, full: Any, names: Sequence[str]) -> dict[str, list[Any]]:
        """The full-size optimizer's slot of each model variable, by slot name, in the variables' order."""
        by_path = {v.path.split("/", 1)[-1]: v for v in full.variables}
        out: dict[str, list[Any]] = {}
        for name in names:
            wanted_paths = [f"{t.path.replace('/', '_')}_{name}" for t in self.targets]
            missing = [p for p in wanted_paths if p not in by_path]
            if missing:
                raise ConfigError(
                    f"shard_optimizer: the optimizer's slot {missing[0]} was not found. {HINT}."
                )
            out[name] = [by_path[p] for p in wanted_paths]
        return out

    @contextlib.contextmanager
    def whole(self, gather: bool) -> Iterator[Any]:
        """A full-size copy of the optimizer that the model points to while the block runs, for a
        checkpoint in the unsharded format.

        ``gather=True`` (a save): every rank sends its slots to the chief, which gets the copy filled;
        the other ranks get None. ``gather=False`` (a restore): every rank gets an empty copy to restore
        into, then :meth:`keep_slice` keeps its slice.
        """
        is_chief = self.sync.rank == 0
        if gather and not is_chief:
            for variable in self._slots().values():
                self._gather(variable.numpy())
            yield None
            return
        full = self._full_copy()
        slots = self._slots()
        full_slots = self._full_slots(full, list(slots))
        if gather:
            for name, variable in slots.items():
                rows = self._gather(variable.numpy())
                assert rows is not None
                flats = self.layout.unshard(rows)
                for target, slot, flat in zip(self.targets, full_slots[name], flats, strict=True):
                    slot.assign(flat.reshape(target.shape))
            self._copy_scalars(self.optimizer, full, _ids(slots, full_slots))
        previous = self.model.optimizer
        self.model.optimizer = full  # the model's checkpoint names its optimizer: the whole one, once
        try:
            yield full
        finally:
            self.model.optimizer = previous

    def keep_slice(self, full: Any) -> None:
        """After a restore into :meth:`whole`'s copy: this rank's slice of each slot, and the scalars."""
        slots = self._slots()
        full_slots = self._full_slots(full, list(slots))
        for name, variable in slots.items():
            flats = [slot.numpy().reshape(-1) for slot in full_slots[name]]
            variable.assign(self.layout.own(flats))
        self._copy_scalars(full, self.optimizer, _ids(slots, full_slots))

    @staticmethod
    def _copy_scalars(source: Any, target: Any, skip: set[int]) -> None:
        """The optimizer's variables that are not slots (iterations, learning rate …), in their order."""
        src = [v for v in source.variables if id(v) not in skip]
        dst = [v for v in target.variables if id(v) not in skip]
        if len(src) != len(dst):
            raise ConfigError(f"shard_optimizer: the optimizer's variables do not pair up. {HINT}.")
        for s, d in zip(src, dst, strict=True):
            d.assign(s.value)

    def _full_copy(self) -> Any:
        """A new optimizer of the same kind and settings, built over the model's own variables."""
        optimizer = self.optimizer
        try:
            with self.strategy.scope():
                full = type(optimizer).from_config(optimizer.get_config())
                full.build(self.targets)
        except (TypeError, ValueError) as exc:
            raise ConfigError(
                f"shard_optimizer: the optimizer cannot be copied for a checkpoint ({exc})."
            ) from None
        return full

    def _gather(self, mine: np.ndarray) -> np.ndarray | None:
        """Every rank's shard as the rows of an N x shard array on the chief (None elsewhere)."""
        sync = self.sync
        mine = np.ascontiguousarray(mine, np.float32)
        if sync.size == 1:
            return mine.reshape(1, -1)
        rows = np.empty((sync.size, self.layout.shard), np.float32) if sync.rank == 0 else None
        sync.watch.begin("the sharded optimizer's gather of its slots for a checkpoint")
        sync.reducer.waiter.wait(self.comm.Igather(mine, rows, root=0))
        return rows


def _ids(slots: dict[str, Any], full_slots: dict[str, list[Any]]) -> set[int]:
    """The ids of every slot variable, sharded and whole: what is not a scalar of the optimizer."""
    return {id(v) for v in slots.values()} | {id(v) for vs in full_slots.values() for v in vs}
