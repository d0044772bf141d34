"""``python -m tfdist.launcher.ps_server``: a TensorFlow server for a parameter-server job's ps/worker task.

It reads TF_CONFIG (written by ``tfdist launch``), serves until the launcher stops it, and exits 0 on
SIGTERM so that an orderly end of the job is not reported as a failure.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from types import FrameType


def _stop(signum: int, frame: FrameType | None) -> None:
    os._exit(0)  # the gRPC server thread cannot be joined cleanly; nothing is left to flush


def main() -> int:
    """Start the server named by TF_CONFIG's task and block."""
    signal.signal(signal.SIGTERM, _stop)
    config = json.loads(os.environ["TF_CONFIG"])
    import tensorflow as tf

    task, cluster = config["task"], tf.train.ClusterSpec(config["cluster"])
    server = tf.distribute.Server(cluster, job_name=task["type"], task_index=task["index"], protocol="grpc")
    print(f"serving {task['type']}:{task['index']} at {server.target}", flush=True)
    server.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
