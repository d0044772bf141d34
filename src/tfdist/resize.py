"""A running job that grows: what a worker's training front end and its launcher say to each other.

When a node arrives while a job runs (``--nnodes MIN:MAX``), the launchers ask their workers to stop at a
step boundary; the job meets again with the new node and resumes from what the workers saved there. Only
a front end that can resume exactly offers that (``tfdist.fit`` with a checkpoint directory, ``model.fit``
with ``BackupAndRestore``, ``hvd.elastic.run``); it says so with :func:`offer`, the worker's progress
thread publishes the offer to the launcher and sets :func:`requested` when the launcher asks. Every
front end agrees on the stop across workers (a vote) before it saves and exits with :data:`EXIT_CODE`.
"""

from __future__ import annotations

from typing import Any

#: A worker's exit code after it saved at a step boundary because its launcher asked (sysexits'
#: EX_TEMPFAIL: try again); the launcher meets again without spending a restart.
EXIT_CODE = 75

_state: dict[str, Any] = {"offer": None, "requested": False}


def offer(by: str, global_batch: int | None = None, replicas_per_worker: int = 1) -> None:
    """The running front end can stop at a step boundary and resume: ``by`` names it for the launcher's
    lines; ``global_batch``: a batch every replica count must divide (``tfdist.fit``), or None."""
    _state["offer"] = {"by": by, "global_batch": global_batch, "replicas_per_worker": replicas_per_worker}


def withdraw() -> None:
    """The front end ended (a later one must offer again)."""
    _state["offer"] = None


def offered() -> dict[str, Any] | None:
    """What :func:`offer` said, for the worker's progress record; None when nothing can resize now."""
    current: dict[str, Any] | None = _state["offer"]
    return current


def ask() -> None:
    """The launcher asked this worker to stop at the next step boundary (set by the progress thread)."""
    _state["requested"] = True


def requested() -> bool:
    """Whether the launcher asked (cheap: read at every step's vote)."""
    return bool(_state["requested"])


def refusal(offers: list[dict[str, Any] | None], nodes: int, nproc: int) -> str | None:
    """Why a job of ``nodes`` nodes x ``nproc`` workers cannot be resumed from these workers' ``offers``
    (one line), or None when it can.

    Input/Output: ``([{"by": "tfdist.fit", "global_batch": 9, "replicas_per_worker": 1}], 2, 1)`` ->
    ``"global batch 9 is not divisible by 2 replicas"``.
    """
    if not offers or any(o is None for o in offers):
        return (
            "its workers cannot stop at a step boundary and resume (tfdist.fit with a checkpoint_dir, "
            "model.fit with keras.callbacks.BackupAndRestore and hvd.elastic.run can)"
        )
    for current in offers:
        assert current is not None
        batch = current.get("global_batch")
        replicas = nodes * nproc * int(current.get("replicas_per_worker") or 1)
        if batch and batch % replicas:
            return f"global batch {batch} is not divisible by {replicas} replicas"
    return None
