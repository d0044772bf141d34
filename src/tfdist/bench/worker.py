"""One measured process of ``tfdist bench``: ``python -m tfdist.bench.worker SPEC_JSON``.

Modes: ``train`` (``tfdist.fit`` on the workload's input pipeline), ``compute`` (the step on one in-memory
batch), ``input`` (the pipeline alone), ``independent`` (one of N unsynchronised one-worker copies started
at once, each writing ``bench-r<rank>.json``). The chief writes ``bench.json``.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tfdist import files, variables
from tfdist.worker.contract import RunFiles


def slowed(train_data: Any, per_replica: int, delay_s: float, seed: int) -> Any:
    """``train_data`` as a per-replica ``dataset_fn`` whose every batch takes at least ``delay_s`` to make:
    what an input-bound job looks like."""
    import numpy as np
    import tensorflow as tf

    def pause() -> np.float32:
        time.sleep(delay_s)
        return np.float32(0.0)

    def wait(x: Any, y: Any) -> tuple[Any, Any]:
        done = tf.numpy_function(pause, [], tf.float32, stateful=True)
        return x + tf.cast(done, x.dtype), y

    if callable(train_data):
        return lambda ctx: train_data(ctx).map(wait)
    x, y = train_data

    def dataset_fn(ctx: Any) -> Any:
        ds = tf.data.Dataset.from_tensor_slices((x, y)).shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        ds = ds.shuffle(4096, seed=seed).repeat().batch(per_replica, drop_remainder=True)
        return ds.map(wait).prefetch(tf.data.AUTOTUNE)

    return dataset_fn


def in_memory(prepared: Any) -> Any:
    """One global batch held in memory and repeated: the step without any input pipeline cost."""
    import numpy as np
    import tensorflow as tf

    data, global_batch = prepared.train_data, prepared.global_batch
    if callable(data):  # per-replica batches: repeat one until it fills the global batch
        x, y = (np.asarray(t) for t in next(iter(data(tf.distribute.InputContext())))[:2])
    else:
        x, y = data
    x, y = (np.resize(a, (global_batch, *a.shape[1:])) for a in (x, y))
    return tf.data.Dataset.from_tensors((tf.constant(x), tf.constant(y))).repeat()


def measure_input(prepared: Any, warmup: int, steps: int, seed: int) -> dict[str, Any]:
    """Examples per second of this worker's input pipeline alone (the same pipeline ``fit`` builds)."""
    from tfdist.train.data import DistributedData

    data = DistributedData(
        prepared.strategy,
        prepared.train_data,
        batch_size=prepared.global_batch,
        steps_per_epoch=warmup + steps,
        shuffle=True,
        seed=seed,
    )
    iterator = data.iterate(0, 1)
    for _ in range(warmup):
        next(iterator)
    started = time.perf_counter()
    for _ in range(steps):
        next(iterator)
    seconds = time.perf_counter() - started
    return {"examples_per_sec": steps * prepared.global_batch / seconds, "seconds": seconds}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m tfdist.bench.worker``."""
    from tfdist.bench.config import WorkerSpec

    given = list(sys.argv[1:] if argv is None else argv)
    if len(given) != 1:
        sys.stderr.write("usage: python -m tfdist.bench.worker SPEC_JSON (written by tfdist bench)\n")
        return 2
    args = WorkerSpec.from_json(given[0])
    copy = forget_cluster() if args.mode == "independent" else None

    import tfdist
    from tfdist.workloads.job import prepare

    prepared = prepare(args.train_config())
    if args.input_delay_ms > 0:
        prepared.train_data = slowed(
            prepared.train_data, args.batch_size_per_replica, args.input_delay_ms / 1000, args.seed
        )
    result: dict[str, Any] = {
        "mode": args.mode,
        "params": int(prepared.model.count_params()),
        "global_batch": prepared.global_batch,
        "pid": os.getpid(),
    }
    if args.mode == "input":
        result.update(measure_input(prepared, args.warmup, args.steps, args.seed))
    else:
        train_data = in_memory(prepared) if args.mode == "compute" else prepared.train_data
        history = tfdist.fit(
            prepared.model,
            train_data,
            batch_size=prepared.global_batch,
            epochs=1,
            steps_per_epoch=args.warmup + args.steps,
            verbose=0,
            log_every=args.log_every,
            seed=args.seed,
            timeline=args.timeline or None,
        )
        result.update(history.summary)
    out = Path(args.run_dir)
    if copy is not None:
        out.mkdir(parents=True, exist_ok=True)
        files.write_json(out / f"bench-r{copy}.json", result, default=float)
    elif tfdist.is_chief():
        out.mkdir(parents=True, exist_ok=True)
        files.write_json(RunFiles(str(out)).bench, result, default=float)
    return 0


def forget_cluster() -> int:
    """Make this launched worker a one-process job (before any strategy is built); return its rank."""
    rank = int(variables.get("TFDIST_RANK") or 0)
    os.environ.pop("TF_CONFIG", None)
    # One process: the launcher's check that the strategy spans the job does not apply to a copy.
    os.environ.update({"TFDIST_WORLD_SIZE": "1"})
    return rank


if __name__ == "__main__":
    sys.exit(main())
