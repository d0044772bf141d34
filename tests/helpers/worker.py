"""A worker for launcher tests (no TensorFlow): behaviour chosen by argv[1], files written to argv[2].

Modes: ranks (write rank file, exit 0) · sleep (write pid files, wait) · stubborn (like sleep, ignores
SIGTERM) · fail-once (rank 1 exits 3 on the first attempt) · silent (one line, then no output) ·
exit (rank 1 exits with argv[3] after a short delay).
"""

import json
import os
import signal
import subprocess
import sys
import time

mode, out = sys.argv[1], sys.argv[2]
rank = int(os.environ["TFDIST_RANK"])
os.makedirs(out, exist_ok=True)


def record(name: str, data: object) -> None:
    tmp = os.path.join(out, f".{name}.tmp")
    with open(tmp, "w") as fh:
        json.dump(data, fh)
    os.replace(tmp, os.path.join(out, name))


print(f"hello from rank {rank}", flush=True)
print(f"to stderr from rank {rank}", file=sys.stderr, flush=True)
if mode == "ranks":
    keys = (
        "TFDIST_RANK",
        "TFDIST_LOCAL_RANK",
        "TFDIST_WORLD_SIZE",
        "TFDIST_RUN_DIR",
        "TFDIST_RESTART_COUNT",
        "TF_CONFIG",
    )
    record(f"rank-{rank}.json", {k: os.environ.get(k) for k in keys})
elif mode in ("sleep", "stubborn"):
    if mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    record(f"pids-{rank}.json", [os.getpid(), child.pid])
    time.sleep(120)
elif mode == "fail-once":
    if rank == 1 and os.environ["TFDIST_RESTART_COUNT"] == "0":
        time.sleep(0.5)
        sys.exit(3)
    record(f"done-{rank}-attempt{os.environ['TFDIST_RESTART_COUNT']}.json", rank)
elif mode == "silent":
    time.sleep(120)
elif mode == "stubborn":  # hung, and deaf to SIGTERM (as a process stuck in a collective can be)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(120)
elif mode == "exit":
    if rank == 1:
        time.sleep(0.5)
        print("rank 1 is about to fail", flush=True)
        sys.exit(int(sys.argv[3]))
    time.sleep(120)
