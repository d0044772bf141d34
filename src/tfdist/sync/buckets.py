"""Gradient buckets on the MPI backend: each bucket handed to the coordinator as soon as the backward pass
produced it (its thread sums it meanwhile), and ``auto``'s decision, from the first steps, whether
buckets pay (:func:`tfdist.sync.wire.choose_buckets`)."""

from __future__ import annotations

import contextlib
import itertools
import os
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tfdist._log import get_logger
from tfdist.sync.request import SUM, Request
from tfdist.sync.wire import AUTO_STEPS, choose_buckets, plan_buckets

if TYPE_CHECKING:
    from tfdist.sync.mpi import MPISync

log = get_logger(__name__)

WIRE_TYPES = {"none": "float32", "fp16": "float16", "bf16": "bfloat16"}


class AutoBuckets:
    """``auto``: the gradient sums after the backward pass timed until :data:`AUTO_STEPS` are, then one
    decision, the same on every rank."""

    def __init__(self, share: float) -> None:
        self.share = share  # buckets when the sum takes at least this share of a step
        self.sums: list[tuple[float, float]] = []  # (start, seconds) of each timed sum

    @contextlib.contextmanager
    def timed(self, on: bool) -> Iterator[None]:
        """Time the block as one gradient sum when ``on``."""
        start = time.perf_counter()
        yield
        if on:
            self.note(start)

    def note(self, start: float) -> None:
        """One gradient sum from ``start`` to now."""
        self.sums.append((start, time.perf_counter() - start))

    def ready(self) -> bool:
        """Whether enough sums were timed (the first, which traced the step, is left out)."""
        return len(self.sums) > AUTO_STEPS

    def decide(self, table: Callable[[np.ndarray], np.ndarray], chief: bool) -> float:
        """The bucket size from now on (MB, 0: none): each rank's median sum and step period (between two
        sums' starts: everything a step takes) gathered by ``table`` (a collective)."""
        timed = self.sums[1:]
        starts = [start for start, _ in timed]
        mine = [
            statistics.median(seconds for _, seconds in timed),
            statistics.median(b - a for a, b in itertools.pairwise(starts)),
            len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1,
        ]
        rows = table(np.array(mine))
        cores = [int(c) for c in rows[:, 2]]
        size, share = choose_buckets(rows[:, 0].tolist(), rows[:, 1].tolist(), self.share, cores)
        self.sums = []
        if chief:
            alone = " (a rank has one core: buckets would take the backward pass's)" if min(cores) < 2 else ""
            log.info(
                "MPI backend: auto buckets: the gradient sum took %.0f %% of a step (%.1f of %.1f ms on the "
                "slowest rank), so %s",
                100 * share,
                1e3 * float(np.max(rows[:, 0])),
                1e3 * float(np.max(rows[:, 1])),
                f"{size:g} MB buckets from now on" if size else f"one sum after the backward pass{alone}",
            )
        return size


def submit_op(submit: Callable[..., np.int64], tensors: Sequence[Any]) -> Any:
    """A graph op handing ``tensors`` to ``submit`` (which returns a coordinator's ticket at once)."""
    import tensorflow as tf

    return tf.numpy_function(submit, list(tensors), tf.int64, stateful=True)


def ready_op(mark: Callable[[], Any], after: Sequence[Any]) -> Any:
    """The timeline's "gradients ready" stamp as an op (ticket -1) once every tensor of ``after`` exists;
    made after the buckets' sends: TensorFlow runs stateful ops in program order, and a stamp made before
    them would hold the sends until the backward pass is over."""
    import tensorflow as tf

    with tf.control_dependencies(list(after)):
        return tf.numpy_function(lambda: np.int64(mark() or -1), [], tf.int64, stateful=True)


def collect(sync: MPISync, tickets: Sequence[Any]) -> list[list[np.ndarray]]:
    """Each ticket's results, waited for in order (a negative ticket is a stamp, not a collective)."""
    results = []
    for ticket in tickets:
        if ticket < 0:
            continue
        done = sync.coordinator.wait(int(ticket))
        if done.error:
            raise RuntimeError(done.error)
        results.append(done.result)
    return results


def exchange(sync: MPISync, dense: list[Any], sums: Any) -> tuple[list[Any], Any]:
    """:meth:`MPISync.exchange` in buckets (or one bucket cast to 16 bits in the graph, for compression)."""
    import tensorflow as tf

    sizes = [4 * g.shape.num_elements() for g in dense]
    groups = plan_buckets(sizes, sync.options.bucket_size * 2**20)
    if sync.rank == 0:
        log.info("MPI backend: %d gradient(s) in %d bucket(s)", len(dense), len(groups))
    outs = _bucketed(sync, dense, sums, groups)
    by_index = dict(zip([i for group in groups for i in group], outs[:-1], strict=True))
    outs = [*(by_index[i] for i in range(len(dense))), outs[-1]]
    shaped = [tf.ensure_shape(o, p.shape) for o, p in zip(outs, [*dense, sums], strict=True)]
    return [tf.cast(r, g.dtype) for r, g in zip(shaped[:-1], dense, strict=True)], shaped[-1]


def _bucketed(sync: MPISync, dense: list[Any], sums: Any, groups: list[list[int]]) -> list[Any]:
    """Graph ops: each bucket but the last submitted as soon as its gradients exist; one last op submits
    the last bucket with the metric sums and waits for every bucket. Outputs in bucket order, then the
    sums."""
    import tensorflow as tf

    sync.exchanges += 1
    tag, compression = f"tfdist.grads{sync.exchanges}", sync.options.compression
    # 16-bit gradients are cast in the graph (TensorFlow's casts are several times faster than NumPy's
    # float16 conversion on the core the step computes on) and come back 16-bit.
    wire = getattr(tf, WIRE_TYPES[compression])
    tickets = [
        submit_op(
            lambda *arrays, name=f"{tag}/b{n}": _submit(sync, name, arrays, compression, 0),
            [tf.cast(dense[i], wire) for i in group],
        )
        for n, group in enumerate(groups[:-1])
    ]
    if sync.marker is not None:
        mark = sync.marker
        tickets.append(ready_op(lambda: mark("gradients ready"), [*dense, sums]))
    last = [tf.cast(dense[i], wire) for i in groups[-1]]
    total = sum(len(group) for group in groups)

    def finish(*given: Any) -> list[np.ndarray]:
        mine = _submit(sync, f"{tag}/b{len(groups) - 1}", given[len(tickets) :], compression, 1)
        return [array for result in collect(sync, [*given[: len(tickets)], mine]) for array in result]

    outs = tf.numpy_function(
        finish, [*tickets, *last, tf.cast(sums, tf.float32)], [wire] * total + [tf.float32], stateful=True
    )
    return [tf.cast(o, tf.float32) for o in outs[:-1]] + [outs[-1]]


def _submit(sync: MPISync, name: str, arrays: Sequence[np.ndarray], compression: str, exact: int) -> np.int64:
    """Hand one bucket to the coordinator (the last ``exact`` arrays are never compressed)."""
    if sync.marker is not None:
        sync.marker(f"sent {name.rsplit('/', 1)[-1]}")
    parts = [np.asarray(a) for a in arrays]
    return np.int64(sync.coordinator.submit(Request(name, SUM, parts, args=(compression, exact), local=0)))
