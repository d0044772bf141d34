"""Where a run's CPU goes, thread by thread: each process of a node's tree named by its role (the
training rank, tfdist's launcher, MPI's launcher and proxy) and each of its threads by the name the
kernel shows (``/proc/PID/task/TID/comm``: TensorFlow's ``tf_Compute``, tfdist's ``tfdist-coordinator``,
a library's progress thread), summed as ``role/thread``. Per-thread CPU time does not depend on what
else the machine runs, so it shows a polling or spinning thread even on a noisy machine; beside it,
``role/thread waiting`` is the time the thread was ready to run but had no core (the kernel's
``schedstat``): what the other work on its cores took from it.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Mapping, Sequence

#: One snapshot: seconds of CPU so far per ``role/thread``.
Snapshot = dict[str, float]
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def role(argv: Sequence[str]) -> str:
    """What a process of a measured tree is, from its command line.

    Input/Output: ``["python", "-m", "tfdist", "launch", ...]`` -> ``"launcher"``;
    ``["/venv/bin/hydra_pmi_proxy", ...]`` -> ``"hydra_pmi_proxy"``; ``["python", "-u", "-m",
    "tfdist.worker.mpirun", "train.py"]`` -> ``"rank"``.
    """
    name = os.path.basename(argv[0]) if argv else ""
    if name.startswith(("mpiexec", "mpirun", "hydra_pmi_proxy", "srun", "ssh")):
        return name.split(".")[0]
    if not name.startswith("python"):
        return name or "other"
    if "tfdist.mpi.hydra" in argv:
        return "proxy-retry"
    if "tfdist" in argv and "launch" in argv:
        return "launcher"
    return "rank"


def cpu_seconds(stat: str) -> float:
    """User + system CPU seconds from a ``/proc/.../stat`` line (the fields after the command's name,
    which may hold spaces and parentheses)."""
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def read_threads(pids: Sequence[int]) -> dict[tuple[int, int], tuple[str, float, float]]:
    """Every thread of ``pids``: (pid, tid) -> (``role/thread``, CPU seconds, seconds waiting for a core);
    processes that ended are left out."""
    found: dict[tuple[int, int], tuple[str, float, float]] = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                kind = role([a.decode(errors="replace") for a in fh.read().split(b"\0") if a])
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/comm") as fh:
                    name = fh.read().strip()
                with open(f"/proc/{pid}/task/{tid}/stat") as fh:
                    cpu = cpu_seconds(fh.read())
                with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:  # on a core, waiting for one (ns)
                    waited = int(fh.read().split()[1]) / 1e9
                found[pid, int(tid)] = (f"{kind}/{name}", cpu, waited)
        except (OSError, ValueError, IndexError):  # gone meanwhile
            continue
    return found


def per_step_ms(
    snapshots: Sequence[tuple[float, Snapshot]], window: tuple[float, float], step_s: float
) -> dict[str, float]:
    """CPU ms per step of each ``role/thread`` between the first and the last snapshot inside
    ``window`` (wall times): its CPU rate there times ``step_s``; {} with fewer than two inside.

    Input/Output: snapshots ``[(0, {"rank/a": 1.0}), (10, {"rank/a": 6.0})]``, window (0, 10), step 0.1 s
    -> ``{"rank/a": 50.0}`` (half a core: 50 ms of each 100 ms step).
    """
    times = [t for t, _ in snapshots]
    first, last = bisect.bisect_left(times, window[0]), bisect.bisect_right(times, window[1]) - 1
    if last <= first:
        return {}
    (t0, a), (t1, b) = snapshots[first], snapshots[last]
    scale = step_s * 1e3 / (t1 - t0)
    spent = {key: (b[key] - a.get(key, 0.0)) * scale for key in b}
    return {key: round(ms, 2) for key, ms in sorted(spent.items(), key=lambda kv: -kv[1]) if ms > 0}


def totals(threads: Mapping[tuple[int, int], tuple[str, float, float]]) -> Snapshot:
    """The CPU seconds of every thread ever seen, summed per ``role/thread``, and its waits for a core
    per ``role/thread waiting``."""
    summed: Snapshot = {}
    for key, seconds, waited in threads.values():
        summed[key] = summed.get(key, 0.0) + seconds
        summed[f"{key} waiting"] = summed.get(f"{key} waiting", 0.0) + waited
    return summed
