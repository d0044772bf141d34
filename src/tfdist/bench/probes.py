"""``python -m tfdist.bench.probes allreduce --backend tf|mpi --floats N[,N2,...] --iters K --out FILE``: the
time of one float32 sum-all-reduce across the launch's workers, through TensorFlow's collectives or MPI.
The chief writes the median, p90 and samples as JSON (the first size at the top level, all under ``sizes``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from tfdist import variables


def timed(call: Callable[[], object], iters: int, warmup: int) -> list[float]:
    """Wall-clock seconds of ``call`` per iteration, after ``warmup`` untimed calls."""
    for _ in range(warmup):
        call()
    samples = []
    for _ in range(iters):
        started = time.perf_counter()
        call()
        samples.append(time.perf_counter() - started)
    return samples


def memcopy_samples(floats: int, iters: int) -> list[float]:
    """One in-memory copy of ``floats`` float32: the lower bound of any all-reduce of that size."""
    src, dst = np.ones(floats, np.float32), np.empty(floats, np.float32)
    return timed(lambda: np.copyto(dst, src), iters, warmup=3)


def _mpi_allreduce(floats: int, iters: int, warmup: int) -> tuple[list[float], bool]:
    from tfdist.sync.mpi import MPISync

    sync = MPISync()
    buffer = np.ones(floats, np.float32)
    wire = sync.options.compression  # TFDIST_COMPRESSION: the gradients' wire, as a training step sends them
    samples = timed(lambda: sync.packed_sum([buffer], keep=1, compressed=1, compression=wire), iters, warmup)
    check = sync.allreduce([np.ones(4, np.float32)])[0]
    return samples, bool(np.all(check == sync.size)) and sync.rank == 0


def _tf_allreduce(floats: int, iters: int, warmup: int) -> tuple[list[float], bool]:
    import tensorflow as tf

    from tfdist import api

    strategy = api.strategy()
    buffer = tf.ones([floats], tf.float32)

    @tf.function
    def reduce(x: tf.Tensor) -> tf.Tensor:
        def replica(v: tf.Tensor) -> tf.Tensor:
            # A value computed in the replica (not the captured input): what a gradient is.
            return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, v * 1.0)

        return strategy.experimental_local_results(strategy.run(replica, args=(x,)))[0]

    # .numpy() per call: the time includes waiting for the peers, as a training step does.
    samples = timed(lambda: reduce(buffer).numpy(), iters, warmup)
    total = float(reduce(tf.ones([4], tf.float32)).numpy()[0])
    return samples, total == strategy.num_replicas_in_sync and api.is_chief()


def allreduce_main(args: argparse.Namespace) -> int:
    """Measure each size, and let the chief (rank 0) write the JSON result."""
    run = _mpi_allreduce if args.backend == "mpi" else _tf_allreduce
    sizes, writer = [], False
    for floats in (int(x) for x in str(args.floats).split(",")):
        samples, writer = run(floats, args.iters, args.warmup)
        sizes.append(
            {
                "floats": floats,
                "bytes": floats * 4,
                "median_s": statistics.median(samples),
                "p90_s": float(np.percentile(samples, 90)),
                "samples_s": samples,
            }
        )
    if writer:
        result = {
            "backend": args.backend,
            "workers": int(variables.get("TFDIST_WORLD_SIZE")),
            **sizes[0],
            "sizes": sizes,
        }
        Path(args.out).write_text(json.dumps(result, indent=2))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m tfdist.bench.probes``."""
    parser = argparse.ArgumentParser(prog="python -m tfdist.bench.probes")
    sub = parser.add_subparsers(dest="probe", required=True)
    ar = sub.add_parser("allreduce")
    ar.add_argument("--backend", choices=("tf", "mpi"), required=True)
    ar.add_argument("--floats", required=True, help="float32 count, or a comma-separated list of counts")
    ar.add_argument("--iters", type=int, default=30)
    ar.add_argument("--warmup", type=int, default=5)
    ar.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    return allreduce_main(args)


if __name__ == "__main__":
    sys.exit(main())
