"""What Keras cannot do multi-worker, said before the first step instead of failing or training wrong."""

from __future__ import annotations

import warnings
from typing import Any

from tfdist.errors import ConfigError

_WARNED: set[str] = set()


def warn_once(message: str) -> None:
    """A RuntimeWarning shown once per process (fit and evaluate both pass here)."""
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=4)


def check_fit_inputs(model: Any, iterator: Any, strategy: Any) -> None:
    """Refuse ``steps_per_execution > 1``; warn about unseeded shuffles and uneven last batches."""
    steps = int(getattr(model, "steps_per_execution", 1) or 1)
    if steps > 1:
        raise ConfigError(
            f"model.compile(steps_per_execution={steps}) under MultiWorkerMirroredStrategy: Keras runs "
            "several steps in one call with per-step end-of-data checks that are not safe across workers. "
            "Hint: compile with steps_per_execution=1 (the default)."
        )
    adapter = getattr(iterator, "data_adapter", None)
    if adapter is None:
        return
    chief, _ = worker_identity(strategy)
    if chief and unseeded_shuffle(adapter):  # the chief's line is the job's
        warn_once(
            "tfdist: the training data is shuffled without a seed; every worker shuffles differently, and "
            "with DATA auto-sharding workers then skip and repeat examples. Hint: call "
            "keras.utils.set_random_seed(SEED) (or tf.random.set_seed) before building the data, or pass "
            "shuffle(..., seed=SEED)."
        )
    partial = getattr(adapter, "partial_batch_size", None)
    replicas = int(strategy.num_replicas_in_sync)
    if chief and partial and int(partial) % replicas:
        warn_once(
            f"tfdist: the last batch holds {int(partial)} examples for {replicas} replicas, so replicas get "
            "unequal (possibly empty) shares and that step's gradient is not the one-process gradient "
            "(an empty share crashes convolutions under oneDNN). Hint: use a dataset size divisible by the "
            "global batch, or drop the remainder."
        )


def unseeded_shuffle(adapter: Any) -> bool:
    """True when the user's own dataset shuffles with no seed."""
    import tensorflow as tf

    dataset = getattr(adapter, "_dataset", None)
    if not isinstance(dataset, tf.data.Dataset):
        return False
    return any(_is_unseeded(node) for node in _pipeline(dataset))


def _pipeline(dataset: Any, limit: int = 200) -> list[Any]:
    seen: list[Any] = []
    todo = [dataset]
    while todo and len(seen) < limit:
        node = todo.pop()
        seen.append(node)
        try:
            todo.extend(node._inputs())
        except Exception:  # a dataset kind without inputs (sources, or private wrappers)
            continue
    return seen


def _is_unseeded(node: Any) -> bool:
    # tf.data stores an unseeded shuffle's seeds as (0, 0): "draw fresh randomness in every process".
    if type(node).__name__ != "_ShuffleDataset":
        return False
    seeds = (getattr(node, "_seed", None), getattr(node, "_seed2", None))
    return all(seed is None or int(seed) == 0 for seed in seeds)


def worker_identity(strategy: Any) -> tuple[bool, int]:
    """(is_chief, task index) of this process in a multi-worker strategy."""
    chief = bool(getattr(strategy.extended, "should_checkpoint", True))
    resolver = getattr(strategy, "cluster_resolver", None)
    task_id = getattr(resolver, "task_id", 0) if resolver is not None else 0
    return chief, int(task_id or 0)


def is_multi_worker(strategy: Any) -> bool:
    """True for a MultiWorkerMirroredStrategy that really spans several workers."""
    import tensorflow as tf

    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return False
    in_mode = getattr(strategy.extended, "_in_multi_worker_mode", None)
    return bool(in_mode()) if callable(in_mode) else False
