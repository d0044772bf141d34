"""Run under the MPI backend: checks MPISync.allreduce's sums and buffer contract, writes ok-<rank>.json."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from tfdist.sync.mpi import MPISync


def main() -> None:
    out = Path(sys.argv[1])
    sync = MPISync()
    rank, size = sync.rank, sync.size
    want = sum(range(1, size + 1))
    checked = 0
    # Lengths below, at and above the chunk and alignment sizes; several layouts alternating across calls.
    layouts = [[(1,)], [(5,), (3, 4)], [(17,), (2,)], [(1000,), (7, 7, 3), (3,)], [(100_003,), (4,)]]
    for repeat in range(3):
        for shapes in layouts:
            parts = [np.full(s, rank + 1 + repeat, np.float32) for s in shapes]
            sums = sync.allreduce(parts, keep=len(parts) - 1)
            for got, shape in zip(sums, shapes, strict=True):
                assert got.shape == shape, (got.shape, shape)
                assert np.all(got == want + size * repeat), (shape, got.ravel()[:5])
                checked += got.size
            kept = sums[-1]
            sync.allreduce([np.zeros(s, np.float32) for s in shapes])  # the same layout again
            # The last part was copied out: a later call must not change it.
            assert np.all(kept == want + size * repeat)
    (out / f"ok-{rank}.json").write_text(
        json.dumps(
            {
                "rank": rank,
                "size": size,
                "checked": checked,
                "local_size": sync.reducer.local_size,
                "cross_size": sync.reducer.cross.Get_size(),
            }
        )
    )


if __name__ == "__main__":
    main()
