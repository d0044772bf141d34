"""Chief-aware, step-exact checkpoints. Every worker takes part in a save (TensorFlow may run collectives
while saving distributed variables); only the chief writes the shared directory, the others a private one
deleted at once."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import Any

from tfdist import files
from tfdist.errors import ConfigError

#: The run's per-epoch logs, next to the checkpoints.
HISTORY = "history.json"


class Checkpointer:
    """Saves and restores model, optimizer, global step and epoch; keeps the last ``keep`` checkpoints."""

    def __init__(
        self,
        directory: str,
        *,
        model: Any,
        optimizer: Any,
        step: Any,
        epoch: Any,
        is_chief: bool,
        keep: int = 3,
        extra: dict[str, Any] | None = None,
        shard: Any = None,
    ) -> None:
        """``extra``: more state that decides the next step (the epoch's partial sums; the Keras seed
        generators' states are added here); ``shard``: a :class:`tfdist.sync.shard.ShardedOptimizer`, whose
        slots are saved whole and restored as this rank's slice."""
        import tensorflow as tf

        self.directory = os.path.abspath(directory)
        self.is_chief = is_chief
        self.keep = keep
        _check_writable(self.directory)
        # Keyed by position, not by name: Keras numbers seed generators per process (seed_generator_4).
        seeds = [v for v in model.variables if "seed_generator" in v.path]
        rng = {f"seed_generator_{i}": v.value for i, v in enumerate(seeds)}
        self.shard = shard
        self.parts = {"model": model, "step": step, "epoch": epoch, "rng": rng, **(extra or {})}
        self.checkpoint = tf.train.Checkpoint(optimizer=optimizer, **self.parts)
        self.manager = tf.train.CheckpointManager(self.checkpoint, self.directory, max_to_keep=keep)

    def restore_latest(self) -> str | None:
        """Restore the newest checkpoint in the directory, if any; a mismatched one is a ConfigError."""
        import tensorflow as tf

        latest = self.manager.latest_checkpoint
        if latest is None:
            return None
        if self.shard is not None:  # the whole optimizer, of which this rank keeps its slice
            with self.shard.whole(gather=False) as optimizer:
                self._restore(tf.train.Checkpoint(optimizer=optimizer, **self.parts), latest)
                self.shard.keep_slice(optimizer)
        else:
            self._restore(self.checkpoint, latest)
        return str(latest)

    def _restore(self, checkpoint: Any, latest: str) -> None:
        import tensorflow as tf

        try:
            checkpoint.restore(latest).assert_existing_objects_matched()
        except (AssertionError, ValueError, tf.errors.NotFoundError, tf.errors.InvalidArgumentError) as exc:
            first = str(exc).strip().splitlines()[0][:200]
            raise ConfigError(
                f"checkpoint {latest} does not match this model/optimizer ({first}). Hint: use a new "
                "checkpoint_dir or the model that wrote it."
            ) from None

    def save(self, step: int, history: dict[str, list[float]] | None = None) -> str:
        """Save on every worker (only the chief's copy kept), with ``history`` first at an epoch's end."""
        if self.shard is not None:
            return self._save_whole(step, history)
        if self.is_chief:
            if history is not None:
                files.write_json(os.path.join(self.directory, HISTORY), history)
            return str(self.manager.save(checkpoint_number=step))
        scratch = tempfile.mkdtemp(prefix="tfdist-ckpt-")
        try:
            self.checkpoint.write(os.path.join(scratch, "ckpt"))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return self.directory

    def _save_whole(self, step: int, history: dict[str, list[float]] | None) -> str:
        """A sharded optimizer's checkpoint, unsharded: every rank's slots gathered to the chief."""
        import tensorflow as tf

        assert self.shard is not None
        with self.shard.whole(gather=True) as optimizer:
            if optimizer is None:
                return self.directory
            if history is not None:
                files.write_json(os.path.join(self.directory, HISTORY), history)
            # A manager over this checkpoint reads the directory's index, so the oldest ones still go.
            checkpoint = tf.train.Checkpoint(optimizer=optimizer, **self.parts)
            manager = tf.train.CheckpointManager(checkpoint, self.directory, max_to_keep=self.keep)
            return str(manager.save(checkpoint_number=step))

    def latest(self) -> tuple[str | None, int | None]:
        """The newest checkpoint on disk and its step (``ckpt-12`` -> 12), or ``(None, None)``."""
        import tensorflow as tf

        path = tf.train.latest_checkpoint(self.directory)
        if path is None:
            return None, None
        number = path.rsplit("-", 1)[-1]
        return path, int(number) if number.isdigit() else None

    def history(self, epochs: int) -> dict[str, list[float]]:
        """The first ``epochs`` epochs of the run's history, as saved with the checkpoints ({} if none)."""
        path = os.path.join(self.directory, HISTORY)
        try:
            with open(path, encoding="utf-8") as fh:
                saved = json.load(fh)
        except (OSError, ValueError):
            return {}
        return {k: list(v)[:epochs] for k, v in saved.items()} if isinstance(saved, dict) else {}


def _check_writable(directory: str) -> None:
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"checkpoint_dir {directory!r} cannot be created: {exc.strerror}. Hint: choose a writable "
            "directory."
        ) from None
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ConfigError(f"checkpoint_dir {directory!r} is not writable. Hint: choose a directory you own.")
