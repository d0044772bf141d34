"""A Horovod collective as two ops: *submit* (hands the arrays to the coordinator) and *wait* (blocks until
every rank submitted the same name). Two, because a blocking Python op holds an executor thread: ranks
running ``a, b`` and ``b, a`` would each block in their first. Earlier waits are ordered after later
submits (when no cycle follows), so a step's collectives are all submitted before any blocks.

A disagreeing collective raises ``FailedPreconditionError`` (Horovod's type); in a graph through a read of
``/dev/null/<message>``, since a Python op can only raise UnknownError.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from tfdist.horovod import runtime
from tfdist.sync.request import Request

MAX_PENDING_WAITS = 64  # per graph: older waits are left where TensorFlow puts them
MAX_DESCENDANTS = 4000  # ops visited per pending wait when adding an edge (trace time only)
_PENDING: weakref.WeakKeyDictionary[Any, list[Any]] = weakref.WeakKeyDictionary()
_LAST_SUBMIT: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def normalize(name: str) -> str:
    """Horovod's ``_normalize_name``: a tensor name as an op-name fragment."""
    return re.sub("[^a-zA-Z0-9_]", "_", name)


def default_name(prefix: str, tensor: Any) -> str | None:
    """Horovod's name in a graph (``HorovodAllreduce_<tensor>``); None eagerly (named by kind)."""
    import tensorflow as tf

    if tf.executing_eagerly():
        return None
    return f"{prefix}_{normalize(tensor.name)}"


def failed_precondition(message: str) -> Exception:
    """The exception a disagreeing collective raises (Horovod's type)."""
    import tensorflow as tf

    return tf.errors.FailedPreconditionError(None, None, message)


def run_eager(request: Request) -> list[np.ndarray]:
    """Submit, wait, raise Horovod's error on a mismatch."""
    coordinator = runtime.world().coordinator
    done = coordinator.wait(coordinator.submit(request))
    if done.error:
        raise failed_precondition(done.error)
    return done.result


def run(
    kind: str,
    tensors: Sequence[Any],
    dtypes: Sequence[Any],
    shapes: Sequence[Any],
    *,
    name: str | None,
    args: Any = None,
    local: Any = None,
    free_first_dim: bool = False,
    check: Any = None,
) -> list[Any]:
    """The collective ``kind`` of ``tensors`` (results of ``dtypes``/``shapes``), eager or in a graph.
    ``local``: values that may differ across ranks (alltoall's splits); ``check(arrays, local)`` validates
    this rank's inputs (ValueError -> InvalidArgumentError) and may return ``local`` normalised."""
    import tensorflow as tf

    n = len(tensors)

    def make(arrays: Sequence[np.ndarray], local_value: Any, label: str) -> Request:
        arrays = [np.asarray(a) for a in arrays]
        if check is not None:
            local_value = check(arrays, local_value)
        return Request(label, kind, arrays, args, local_value, free_first_dim)

    if tf.executing_eagerly():
        local_value = None if local is None else np.asarray(local)
        try:
            request = make([np.asarray(t) for t in tensors], local_value, name or kind.lower())
        except ValueError as exc:
            raise tf.errors.InvalidArgumentError(None, None, str(exc)) from None
        return [tf.convert_to_tensor(a) for a in run_eager(request)]

    holder = {"name": ""}  # not annotated: AutoGraph cannot convert a function with an annotated closure name
    inputs = list(tensors) + ([tf.convert_to_tensor(local)] if local is not None else [])

    def submit(*arrays: np.ndarray) -> np.int64:
        request = make(arrays[:n], arrays[n] if local is not None else None, holder["name"])
        return np.int64(runtime.world().coordinator.submit(request))

    with tf.control_dependencies(_previous_submit()):
        ticket = tf.numpy_function(submit, inputs, tf.int64, stateful=True, name=name or kind.capitalize())
    _LAST_SUBMIT[ticket.graph] = ticket.op
    holder["name"] = ticket.op.name  # unique in the graph, the same on every rank tracing this program
    out_dtypes = [tf.as_dtype(d) for d in dtypes]
    # What a failed wait returns beside its error: empty arrays (unknown dimensions 0).
    blanks = [
        np.zeros([n or 0 for n in s.as_list()] if s.rank is not None else [0], d.as_numpy_dtype)
        for s, d in zip(map(tf.TensorShape, shapes), out_dtypes, strict=True)
    ]

    def wait(ticket_value: np.int64) -> list[Any]:
        done = runtime.world().coordinator.wait(int(ticket_value))
        if done.error:
            return [*blanks, np.bytes_(done.error.encode())]
        return [
            *[np.asarray(r, d.as_numpy_dtype) for r, d in zip(done.result, out_dtypes, strict=True)],
            np.bytes_(b""),
        ]

    outs = tf.numpy_function(wait, [ticket], [*out_dtypes, tf.string], stateful=False)
    _order_after_later_submits(outs[0].op, ticket.op)
    results = _raise_on_error(list(outs[:-1]), outs[-1])
    for out, shape in zip(results, shapes, strict=True):
        out.set_shape(shape)
    return results


def _previous_submit() -> list[Any]:
    """The graph's last submit, which the next must follow: a TensorFlow 1 graph has no program order, so
    a wait could hold the only inter-op thread before an earlier submit of the run was made."""
    import tensorflow as tf

    last = _LAST_SUBMIT.get(tf.compat.v1.get_default_graph())
    return [] if last is None else [last]


def _raise_on_error(outs: list[Any], error: Any) -> list[Any]:
    import tensorflow as tf

    def fail() -> list[Any]:
        # ENOTDIR: TensorFlow reports it as FailedPreconditionError, with the path (our message) in it. The
        # outputs use what was read (a control edge alone may be optimised away: the read is stateless).
        content = tf.raw_ops.ReadFile(filename=tf.strings.join(["/dev/null/", error]))
        read = tf.strings.length(content) >= 0
        return [tf.where(read, o, o) for o in outs]

    return list(tf.cond(tf.equal(error, ""), lambda: [tf.identity(o) for o in outs], fail))


def _order_after_later_submits(wait_op: Any, submit_op: Any) -> None:
    """Make the graph's earlier waits start after ``submit_op`` when no cycle can follow, then remember
    ``wait_op`` for the submits to come."""
    graph = submit_op.graph
    pending = _PENDING.setdefault(graph, [])
    inputs = {t.op for t in submit_op.inputs} | set(submit_op.control_inputs)
    kept = []
    for earlier in pending:
        below = _descendants(earlier)
        # A stateful op after the wait will be ordered before later submits by tf.function (program
        # order): an edge would close a cycle, now or later. Retire the wait.
        if below is None or any(op._is_stateful and op is not earlier for op in below):
            continue
        if not inputs & below:
            earlier._add_control_input(submit_op)
        kept.append(earlier)
    kept.append(wait_op)
    _PENDING[graph] = kept[-MAX_PENDING_WAITS:]


def _descendants(op: Any) -> set[Any] | None:
    seen, stack = {op}, [op]
    while stack:
        current = stack.pop()
        for nxt in [c for t in current.outputs for c in t.consumers()] + list(current._control_outputs):
            if nxt not in seen:
                seen.add(nxt)
                if len(seen) > MAX_DESCENDANTS:
                    return None
                stack.append(nxt)
    return seen
