"""``tfdist.fit(timeline=DIR)``: a Chrome trace per rank (``DIR/timeline-r<rank>.json``) of every step: host
spans around the loop's calls, and inside the step two graph stamps around ``Synchroniser.exchange``
(gradients ready, exchange done). Off, nothing is added to the graph.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfdist import files

_OFF = contextlib.nullcontext()


class NoTimeline:
    """The timeline when none was asked for: every span is one shared no-op context."""

    def span(self, name: str) -> contextlib.AbstractContextManager[Any]:
        """Nothing to record."""
        return _OFF

    def wrap(self, sync: Any, markers: bool = True) -> Any:
        """The synchroniser unchanged: no markers in the step."""
        return sync

    def write(self) -> None:
        """Nothing to write."""


class Timeline:
    """The spans of one rank's training, written as a Chrome trace by :meth:`write`."""

    def __init__(self, directory: str, rank: int, synchroniser: str = "") -> None:
        self.path = Path(directory) / f"timeline-r{rank}.json"
        self.rank, self.synchroniser = rank, synchroniser
        self.spans: list[tuple[str, float, float]] = []  # (name, start, end): wall seconds
        self.marks: list[tuple[str, float]] = []  # (name, wall seconds), stamped by the step's graph
        self._lock = threading.Lock()  # graph markers run on TensorFlow's threads
        #: Bytes each step summed across nodes (the MPI backend's reducer counts them), by step span index.
        self.crossed: dict[int, int] = {}
        self._reducer: Any = None
        self.nodes = 1  # the cross-node group's size (a sum moves 2 (nodes - 1) / nodes of its bytes)
        self.sharded = False  # the optimizer is sharded (tfdist.sync.shard): the trace names its parts

    @contextlib.contextmanager
    def span(self, name: str) -> Iterator[None]:
        """Record the wall time the block takes as one span named ``name``."""
        start = time.time()
        counted = self._reducer is not None and name == "step"
        before = self._reducer.crossed if counted else 0
        try:
            yield
        finally:
            if counted:  # on CPU the step has run when its call returns
                self.crossed[len(self.spans)] = self._reducer.crossed - before
            self.spans.append((name, start, time.time()))

    def mark(self, name: str) -> None:
        """A point in time (called from the step's graph)."""
        with self._lock:
            self.marks.append((name, time.time()))

    def wrap(self, sync: Any, markers: bool = True) -> Any:
        """``sync`` with markers around its gradient exchange (none under XLA: host spans only)."""
        self.synchroniser = str(getattr(sync, "name", type(sync).__name__))
        reducer = getattr(sync, "reducer", None)
        if reducer is not None and hasattr(reducer, "crossed"):
            self._reducer, self.nodes = reducer, int(reducer.cross.Get_size())
        return MarkedSync(sync, self) if markers else sync

    def events(self) -> list[dict[str, Any]]:
        """The Chrome trace events: every host span, and each step split at its graph markers."""
        out = [_event(name, start, end, self.rank) for name, start, end in self.spans]
        for index, crossed in self.crossed.items():
            out[index]["args"] = {"bytes across nodes": crossed}
        marks = sorted(self.marks, key=lambda m: m[1])
        for name, start, end in self.spans:
            if name == "step":
                out += self._inside_step(start, end, [m for m in marks if start <= m[1] <= end])
        meta = {"name": "process_name", "ph": "M", "pid": self.rank, "args": {"name": f"rank {self.rank}"}}
        return [meta, *out]

    def _inside_step(self, start: float, end: float, marks: list[tuple[str, float]]) -> list[dict[str, Any]]:
        ready = next((t for n, t in marks if n == READY), None)
        done = next((t for n, t in marks if n == EXCHANGED and ready is not None and t >= ready), None)
        if ready is None or done is None:
            return []
        inside = [_event("forward + backward", start, ready, self.rank, tid=1)]
        if self.synchroniser == "tf":  # the exchange returns at once; apply_gradients all-reduces
            return [*inside, _event("all-reduce + update", ready, end, self.rank, tid=1)]
        # Buckets summed during the backward pass (their own marks): instants on the step's row.
        buckets = [_instant(n, t, self.rank) for n, t in marks if n not in (READY, EXCHANGED)]
        exchange, update = SHARDED_SPANS if self.sharded else ("all-reduce", "update")
        return [
            *inside,
            _event(exchange, ready, done, self.rank, tid=1),
            _event(update, done, end, self.rank, tid=1),
            *buckets,
        ]

    def write(self) -> None:
        """Write this rank's trace (atomically)."""
        payload: dict[str, Any] = {"traceEvents": self.events(), "displayTimeUnit": "ms"}
        payload["otherData"] = {"rank": self.rank, "synchroniser": self.synchroniser, "nodes": self.nodes}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        files.write_text(self.path, json.dumps(payload))


READY, EXCHANGED = "gradients ready", "exchange done"
#: A sharded step's two parts after its backward pass.
SHARDED_SPANS = ("reduce-scatter", "update + all-gather")


@dataclass(frozen=True)
class ShardStamps:
    """A sharded step's stamps: ``before`` / ``after`` pass graph values on after a stamp that waits for
    them; with buckets, ``ready`` says the backward pass is over and ``mark`` names each bucket's sums."""

    before: Callable[[Sequence[Any]], list[Any]]
    after: Callable[[Sequence[Any]], list[Any]]
    ready: Callable[[], None]
    mark: Callable[[str], None]


class MarkedSync:
    """A synchroniser whose ``exchange`` is stamped in the step's graph before and after."""

    def __init__(self, sync: Any, timeline: Timeline) -> None:
        self._sync, self._timeline = sync, timeline

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sync, name)

    def exchange(self, grads: list[Any], sums: Any) -> tuple[list[Any], Any]:
        """The wrapped exchange, between two stamps that wait for its inputs and its outputs."""
        if getattr(self._sync, "overlaps", False):
            # Not a stamp here: TensorFlow runs a function's stateful ops in program order, so a stamp
            # made before the buckets' sends would hold them until the backward pass is over.
            self._sync.marker = self._timeline.mark
        else:
            *grads, sums = self._stamped(READY, [*grads, sums])
        reduced, summed = self._sync.exchange(grads, sums)
        *reduced, summed = self._stamped(EXCHANGED, [*reduced, summed])
        return list(reduced), summed

    def for_shard(self) -> ShardStamps:
        """What a sharded optimizer (tfdist.sync.shard) stamps its step with, in place of ``exchange``."""
        self._timeline.sharded = True
        mark = self._timeline.mark
        return ShardStamps(
            before=lambda values: self._stamped(READY, values),
            after=lambda values: self._stamped(EXCHANGED, values),
            ready=lambda: mark(READY),
            mark=mark,
        )

    def _stamped(self, name: str, values: Sequence[Any]) -> list[Any]:
        """``values`` passed on only after a stamp that itself runs only after all of them exist."""
        import numpy as np
        import tensorflow as tf

        def stamp() -> np.float32:
            self._timeline.mark(name)
            return np.float32(0.0)

        tensors = [v for v in values if isinstance(v, tf.Tensor)]
        with tf.control_dependencies(tensors):
            done = tf.numpy_function(stamp, [], tf.float32, stateful=True)
        with tf.control_dependencies([done]):
            return [tf.identity(v) if isinstance(v, tf.Tensor) else v for v in values]


def _event(name: str, start: float, end: float, rank: int, tid: int = 0) -> dict[str, Any]:
    return {
        "name": name,
        "ph": "X",
        "ts": start * 1e6,
        "dur": max(end - start, 0.0) * 1e6,
        "pid": rank,
        "tid": tid,
    }


def _instant(name: str, at: float, rank: int) -> dict[str, Any]:
    return {"name": name, "ph": "i", "s": "t", "ts": at * 1e6, "pid": rank, "tid": 1}


def open_timeline(directory: str | None, rank: int) -> Timeline | NoTimeline:
    """A timeline writing under ``directory``, or the no-op one when it is None."""
    return Timeline(directory, rank) if directory else NoTimeline()


def merge(paths: Sequence[str | Path]) -> dict[str, Any]:
    """Every rank's trace in one (one process row per rank)."""
    events = [event for path in paths for event in json.loads(Path(path).read_text())["traceEvents"]]
    return {"traceEvents": events, "displayTimeUnit": "ms"}
