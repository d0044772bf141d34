"""hvd.allreduce with Compression.fp16 and without, on N ranks; records what the MPI backend sent.

Run with TFDIST_MPI_SHM=0 (each rank its own node, so every sum crosses MPI). Writes
OUT/wire-<rank>.json: for each case, the wire's dtype and bytes of this rank's last sum across nodes, and
the result's largest error against the exact sum of every rank's float16 inputs.
"""

import json
import sys
from pathlib import Path

import numpy as np
import tensorflow as tf

import tfdist.horovod.tensorflow as hvd
from tfdist.horovod import runtime

hvd.init()
rank, size = hvd.rank(), hvd.size()
N = 100_000
values = [np.linspace(-1, 1, N, dtype=np.float32) * (r + 1) for r in range(size)]
exact = np.sum([v.astype(np.float16).astype(np.float64) for v in values], axis=0)
reducer = runtime.world().float_sync().reducer  # the MPI backend's: it records its last wire
out = {}
for name, compression in (("none", hvd.Compression.none), ("fp16", hvd.Compression.fp16)):
    got = hvd.allreduce(tf.constant(values[rank]), op=hvd.Sum, compression=compression, name=name).numpy()
    dtype, nbytes = reducer.wire
    out[name] = {
        "dtype": str(np.dtype(dtype)),
        "bytes": int(nbytes),
        "result_dtype": str(got.dtype),
        "max_rel_error": float(np.max(np.abs(got - exact) / np.maximum(np.abs(exact), 1e-3))),
    }
Path(sys.argv[1], f"wire-{rank}.json").write_text(json.dumps(out))
