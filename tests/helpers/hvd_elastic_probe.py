"""What the tests of Horovod's elastic examples read, added to those scripts in two lines.

``HVD_ELASTIC_OUT=DIR``: each rank appends to ``DIR/rank<R>.jsonl`` a line after every commit and every
sync of the state (the attempt, the state's objects, digests of its model and optimizer variables: all of
them, and the trainable ones with the optimizer's: a rank's batch-norm statistics are its own) and writes
``DIR/rank<R>.npz`` (the model's final trainable weights). ``HVD_ELASTIC_CRASH_AFTER=N``: on the first attempt
(``TFDIST_RESTART_COUNT=0``) rank 1 exits at once with code 3 right after its N-th commit, as a lost
process does. ``HVD_ELASTIC_PACE=S``: every rank sleeps S seconds after each commit, and rank 0 writes
``DIR/commits`` (its commits so far, every attempt together), so a test has a mid-run to act in.
"""

import hashlib
import json
import os
import time
from pathlib import Path

import numpy as np

OUT = os.environ.get("HVD_ELASTIC_OUT")
ATTEMPT = int(os.environ.get("TFDIST_RESTART_COUNT", "0"))


def digest(state, trainable):
    """sha256 of the model's (trainable) and the optimizer's variables, in order."""
    found = state.optimizer.variables
    model = state.model.trainable_variables if trainable else state.model.variables
    h = hashlib.sha256()
    for v in [*model, *(found() if callable(found) else found)]:
        h.update(np.asarray(v.numpy()).tobytes())
    return h.hexdigest()


def watch(state, rank):
    """Record ``state``'s commits and syncs on ``rank``; crash after the N-th commit when asked."""
    crash_after = int(os.environ.get("HVD_ELASTIC_CRASH_AFTER", "0"))
    pace = float(os.environ.get("HVD_ELASTIC_PACE", "0"))
    commit, sync, commits = state.commit, state.sync, []

    def record(event):
        if OUT:
            objects = {k: getattr(state, k) for k in state._saved_state}
            line = {"event": event, "attempt": ATTEMPT, "objects": objects}
            line.update(digest=digest(state, False), trainable=digest(state, True))
            with open(os.path.join(OUT, f"rank{rank}.jsonl"), "a") as fh:
                fh.write(json.dumps(line, default=float) + "\n")

    def committed():
        commit()
        commits.append(1)
        record("commit")
        if rank == 1 and ATTEMPT == 0 and len(commits) == crash_after:
            os._exit(3)
        if pace and OUT:
            if rank == 0:
                path = os.path.join(OUT, "commits")
                done = int(Path(path).read_text()) if os.path.exists(path) else 0
                with open(path + ".tmp", "w") as fh:
                    fh.write(str(done + 1))
                os.replace(path + ".tmp", path)
            time.sleep(pace)

    def synced():
        sync()
        record("sync")

    state.commit, state.sync = committed, synced


def save_weights(model, rank):
    """``DIR/rank<R>.npz``: the model's trainable weights at the end."""
    if OUT:
        np.savez(os.path.join(OUT, f"rank{rank}.npz"), *[v.numpy() for v in model.trainable_variables])
