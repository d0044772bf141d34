"""``python -m tfdist.bench.pin INDEX COUNT -- CMD...``: CMD on COUNT cores of this host (``tfdist bench
--cpus-per-host``), as on a node whose cores all compute: whatever else the job runs there (launcher, MPI
proxy, side threads) takes time from the training, and the result says so instead of hiding it on idle
cores. Every process CMD starts inherits the set.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable

from tfdist.errors import ConfigError


def host_cpus(index: int, count: int, available: Iterable[int]) -> tuple[int, ...]:
    """The cores of node ``index``: its ``index``-th group of ``count`` among the ``available`` ones
    (wrapping), so that nodes emulated on one machine get cores of their own.

    Input/Output: ``(0, 1, [0, 1])`` -> ``(0,)``; ``(1, 1, [0, 1])`` -> ``(1,)``; ``(3, 2, [4, 5, 6, 7])``
    -> ``(6, 7)``; ``(1, 2, [0, 1, 2])`` -> ``(0, 2)``.
    """
    cpus = sorted(available)
    if not 1 <= count <= len(cpus):
        raise ConfigError(
            f"--cpus-per-host {count}: this host lets the benchmark use {len(cpus)} core(s) "
            f"({','.join(map(str, cpus))}). Hint: --cpus-per-host {len(cpus)} or fewer."
        )
    start = index * count
    return tuple(sorted(cpus[(start + i) % len(cpus)] for i in range(count)))


def main(argv: list[str]) -> int:
    """Bind this process to its node's cores, then become the command (exit 2 with one line when the
    host has too few cores)."""
    index, count, command = int(argv[0]), int(argv[1]), argv[argv.index("--") + 1 :]
    try:
        cpus = host_cpus(index, count, os.sched_getaffinity(0))
    except ConfigError as exc:
        print(f"tfdist bench: {exc}", file=sys.stderr)
        return 2
    os.sched_setaffinity(0, cpus)
    os.execvp(command[0], command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
