"""A worker whose rank 1 makes a user mistake tfdist reports as a ConfigError (no TensorFlow), or raises
another exception (argv[2]: ``value`` a ValueError, a bug of the program; ``oserror`` an OSError, what a
restart may cure).

argv: OUT_DIR [KIND]. Every rank records its attempt in OUT_DIR/attempt-<restart>-<rank>; rank 0 then
waits (as a peer blocked in a collective would) until the launcher ends it. Rank 1 first makes a scratch
directory (as a non-chief worker's private callback files) and names it in OUT_DIR/scratch-1: it must not
outlive the error.
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
    kind = sys.argv[2] if len(sys.argv) > 2 else "config"
    if kind == "value":
        raise ValueError("a bad value in the program")
    if kind == "oserror":
        raise OSError("the data server went away")
    raise ConfigError("global batch 9 is not divisible by the 2 replicas; use 8 or 10.")
time.sleep(60)
