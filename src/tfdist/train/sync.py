"""Gradient synchronisation across processes through MPI (mpi4py), Horovod's design without its build.

TensorFlow's collectives are the default path (the strategy all-reduces inside ``apply_gradients``);
this module is the other side of that seam: each process runs a one-device strategy, and one packed
buffer per step (every gradient plus the metric sums) is all-reduced by :mod:`tfdist.train.reduce`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from tfdist.errors import ConfigError, SetupError
from tfdist.train.reduce import NodeReducer, Waiter, layout
from tfdist.train.steps import global_sums, per_example_loss

INSTALL_HINT = (
    "Hint: pip install 'tfdist[mpi]' (mpi4py and the mpich wheel), or your system's MPI "
    "(apt-get install openmpi-bin libopenmpi-dev) plus pip install mpi4py."
)


def import_mpi() -> Any:
    """``mpi4py.MPI``, or a SetupError saying how to install it."""
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise SetupError(f"the MPI backend needs mpi4py and an MPI library ({exc}). {INSTALL_HINT}") from None
    return MPI


def pack_weights(weights: Sequence[np.ndarray]) -> np.ndarray:
    """All weights as one float64 vector (float64 holds every float32/float16 value exactly)."""
    return np.concatenate([w.ravel().astype(np.float64) for w in weights]) if weights else np.zeros(0)


def unpack_weights(flat: np.ndarray, like: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Inverse of :func:`pack_weights`, with the shapes and dtypes of ``like``."""
    out, offset = [], 0
    for w in like:
        out.append(flat[offset : offset + w.size].reshape(w.shape).astype(w.dtype))
        offset += w.size
    return out


def check_world(size: int) -> None:
    """ConfigError when the job's rank count differs from the count tfdist launched (``-n``)."""
    expected = os.environ.get("TFDIST_WORLD_SIZE")
    if expected and int(expected) != size:
        raise ConfigError(
            f"the MPI job has {size} rank(s) but tfdist expected {expected} (TFDIST_WORLD_SIZE / -n). Hint: start it with the same count, e.g. mpirun -np {expected}."
        )


class MPISync:
    """Sum-all-reduces float32 buffers over MPI_COMM_WORLD and broadcasts initial weights from rank 0."""

    name = "mpi"

    def __init__(self) -> None:
        mpi = import_mpi()
        self.mpi = mpi
        self.comm = mpi.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        check_world(self.size)
        # Override knobs for machines where spinning is cheaper (one rank per dedicated core).
        spin_s = float(os.environ.get("TFDIST_MPI_SPIN_US", "5000")) / 1e6
        poll_sleep_s = float(os.environ.get("TFDIST_MPI_POLL_SLEEP_US", "100")) / 1e6
        shared = os.environ.get("TFDIST_MPI_SHM", "1") != "0"
        self.reducer = NodeReducer(mpi, self.comm, Waiter(spin_s, poll_sleep_s), shared_memory=shared)

    def graph_allreduce(self, parts: list[Any], keep: int = 0) -> list[Any]:
        """:meth:`allreduce` as a step of the training graph: float32 tensors in, their sums out."""
        import tensorflow as tf

        parts = [tf.cast(p, tf.float32) for p in parts]
        outs = tf.numpy_function(
            lambda *arrays: self.allreduce(arrays, keep), parts, [tf.float32] * len(parts), stateful=True
        )
        return [tf.ensure_shape(o, p.shape) for o, p in zip(outs, parts, strict=True)]

    def allreduce(self, parts: Sequence[np.ndarray], keep: int = 0) -> list[np.ndarray]:
        """Element-wise sums over all ranks of every array in ``parts``, through ONE packed all-reduce.

        The first ``keep`` results are views of shared memory that the next call with the same layout
        overwrites (the training step consumes the gradients in ``apply_gradients`` before it returns);
        the others are fresh copies the caller may keep (the metric sums, accumulated across steps).
        """
        offsets, length = layout([p.size for p in parts])
        row = self.reducer.input_row(length)
        for part, start in zip(parts, offsets, strict=True):
            row[start : start + part.size] = part.ravel()
        result = self.reducer.allreduce(length)
        views = [
            result[start : start + p.size].reshape(p.shape) for p, start in zip(parts, offsets, strict=True)
        ]
        return views[:keep] + [v.copy() for v in views[keep:]]

    def allgather(self, array: np.ndarray) -> np.ndarray:
        """Every rank's array concatenated along the first axis, in rank order (uneven lengths allowed)."""
        return np.concatenate(self.comm.allgather(np.ascontiguousarray(array)), axis=0)

    def barrier(self) -> None:
        """Return once every rank got here (a one-float all-reduce, polled like the training ones)."""
        self.allreduce([np.zeros(1, np.float32)])

    def broadcast_weights(self, model: Any) -> None:
        """Give every rank rank 0's initial weights (one packed broadcast)."""
        weights = model.get_weights()
        flat = pack_weights(weights)
        self.comm.Bcast(flat, root=0)
        model.set_weights(unpack_weights(flat, weights))


def make_mpi_steps(
    strategy: Any,
    model: Any,
    loss_fn: Any,
    stats: Any,
    global_batch: int,
    step_var: Any,
    sync: Any,
    jit_compile: bool = False,
) -> tuple[Any, Any]:
    """(train_step, eval_step) for a process-level synchroniser (:class:`MPISync`, or
    :class:`tfdist.train.horovod.HorovodSync`): same contract as :func:`tfdist.train.steps.make_steps`.

    The synchroniser's ``graph_allreduce(parts, keep)`` sums a list of tensors over all processes.
    """
    import tensorflow as tf

    optimizer, world = model.optimizer, sync.size
    allreduce = sync.graph_allreduce

    def train_replica(x: Any, y: Any, w: Any, stop: Any) -> Any:
        variables = model.trainable_variables
        with tf.GradientTape() as tape:
            pred = model(x, training=True)
            per_example = per_example_loss(loss_fn, y, pred, w)
            loss = tf.reduce_sum(per_example * w) / global_batch
            if model.losses:
                loss += tf.add_n(model.losses) / world  # summed over ranks below: counted once
        grads = [tf.convert_to_tensor(g) for g in tape.gradient(loss, variables)]
        stat_values = global_sums(stats, y, pred, per_example, w, stop)
        # ONE all-reduce per step: every gradient and the metric sums, packed in numpy (not tf.concat,
        # whose fresh output buffer costs page faults every step).
        *reduced, stat_sums = allreduce([*grads, stat_values], keep=len(grads))
        summed = [tf.cast(r, v.dtype) for r, v in zip(reduced, variables, strict=True)]
        optimizer.apply_gradients(zip(summed, variables, strict=True))
        return stat_sums

    def eval_replica(x: Any, y: Any, w: Any) -> Any:
        pred = model(x, training=False)
        return allreduce([global_sums(stats, y, pred, per_example_loss(loss_fn, y, pred, w), w, 0.0)])[0]

    @tf.function(jit_compile=False)  # numpy_function and Horovod's ops cannot be compiled by XLA
    def train_step(batch: Any, stop: Any) -> Any:
        x, y, w = batch
        out = strategy.experimental_local_results(strategy.run(train_replica, args=(x, y, w, stop)))[0]
        step_var.assign_add(1)
        return out

    @tf.function
    def eval_step(batch: Any) -> Any:
        x, y, w = batch
        return strategy.experimental_local_results(strategy.run(eval_replica, args=(x, y, w)))[0]

    del jit_compile
    return train_step, eval_step
