"""A worker whose rank 1 makes a user mistake tfdist reports as a ConfigError (no TensorFlow).

argv: OUT_DIR. Every rank records its attempt in OUT_DIR/attempt-<restart>-<rank>; rank 0 then waits (as a
peer blocked in a collective would) until the launcher ends it. Rank 1 first makes a scratch directory (as a
non-chief worker's private callback files) and names it in OUT_DIR/scratch-1: it must not outlive the error.
"""

import os
import sys
import time

from tfdist import files
from tfdist.errors import ConfigError

out = sys.argv[1]
rank, restart = os.environ["TFDIST_RANK"], os.environ["TFDIST_RESTART_COUNT"]
os.makedirs(out, exist_ok=True)
open(os.path.join(out, f"attempt-{restart}-{rank}"), "w").close()
if rank == "1":
    with open(os.path.join(out, "scratch-1"), "w") as f:
        f.write(files.scratch_dir("tfdist-worker1-"))
    time.sleep(0.3)
    raise ConfigError("global batch 9 is not divisible by the 2 replicas; use 8 or 10.")
time.sleep(60)
