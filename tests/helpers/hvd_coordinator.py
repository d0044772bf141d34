"""The coordinator under the MPI synchroniser's sums, checked on every rank (no TensorFlow).

Run on 2 ranks (tfdist launch --backend mpi -n 2 hvd_coordinator.py OUT). Writes OUT/coordinator-<rank>.json:
{check name: max abs error, or a message}.
"""

import json
import sys
import threading
import time
from pathlib import Path

import numpy as np

from tfdist.sync import process_sync

sync = process_sync("mpi")
rank, size = sync.rank, sync.size
results = {}


def x_of(r, n):
    return (np.arange(n, dtype=np.float32) + 1) * (r + 1)


def expected(n):
    return np.sum([x_of(r, n) for r in range(size)], axis=0)


def record(name, got, want):
    got = np.asarray(got)
    results[name] = float(np.max(np.abs(got - want))) if got.shape == want.shape else f"shape {got.shape}"


# Two sums issued from two threads in opposite orders on the ranks: paired by name, not by order.
got = {}


def call(name, n):
    got[name] = sync.allreduce([x_of(rank, n)], name=name)[0].copy()


first, second = (("a", 5), ("b", 9)) if rank % 2 == 0 else (("b", 9), ("a", 5))
threads = [threading.Thread(target=call, args=first)]
threads[0].start()
time.sleep(0.3)  # the first one is announced alone: the other rank announced the other name first
threads.append(threading.Thread(target=call, args=second))
threads[1].start()
for thread in threads:
    thread.join(30)
record("opposite orders: a", got.get("a"), expected(5))
record("opposite orders: b", got.get("b"), expected(9))

# The same name every step pairs step k with step k; `keep` views and fresh copies alike.
for step in range(3):
    view, copy = sync.allreduce([x_of(rank, 4) * step, x_of(rank, 3)], keep=1, name="step")
record("named step, kept view", view, expected(4) * 2)
record("named step, copy", copy, expected(3))

# One name, different shapes: RuntimeError naming both ranks' shapes, on every rank, promptly.
started = time.monotonic()
try:
    sync.allreduce([np.zeros(3 + rank, np.float32)], name="mismatch")
    results["mismatch"] = "no error"
except RuntimeError as exc:
    text = str(exc)
    ok = "tensor shapes" in text and "float32[3]" in text and "float32[4]" in text
    results["mismatch"] = 0.0 if ok else text
results["mismatch seconds"] = time.monotonic() - started

# A collective only rank 0 issues, then abandon() on every rank: it fails there, and the ranks go on.
coordinator = sync.coordinator
if rank == 0:
    from tfdist.sync.request import SUM, Request

    lonely = coordinator.submit(Request("lonely", SUM, [np.ones(2, np.float32)], local=0))
coordinator.abandon("after the lonely one", f"abandoned on rank {rank}")
if rank == 0:
    error = coordinator.wait(lonely).error
    results["abandoned"] = 0.0 if error == "abandoned on rank 0" else f"error {error!r}"
record("a sum after abandon()", sync.allreduce([x_of(rank, 6)], name="lonely")[0], expected(6))
sync.barrier()

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
(out / f"coordinator-{rank}.json").write_text(json.dumps(results))
