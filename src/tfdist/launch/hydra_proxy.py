"""``python -m tfdist.launch.hydra_proxy SECONDS -- PROXY...``: start Hydra's proxy for this node, and start
it again while the first node's ``mpiexec`` is not listening yet.

Hydra's proxy gives up at once when its control port refuses the connection, and the nodes of a job
without a scheduler start in any order. Probing the port instead is not an option: ``mpiexec`` takes any
connection to it for a proxy. So the proxy is simply retried, for at most SECONDS, while that is its error.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from types import FrameType

#: What Hydra's proxy prints when the first node's mpiexec is not listening (yet).
NOT_LISTENING = "unable to connect to server"
RETRY_S = 0.5


def main(argv: list[str]) -> int:
    """Run the proxy until it connects (then until it ends); return its exit code."""
    seconds, command = float(argv[0]), argv[argv.index("--") + 1 :]
    deadline = time.monotonic() + seconds
    current: list[subprocess.Popen[str]] = []

    def stop(signum: int, frame: FrameType | None) -> None:
        for proc in current:
            proc.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop)
    while True:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        current[:] = [proc]
        output = proc.communicate()[0]
        if proc.returncode == 0 or NOT_LISTENING not in output or time.monotonic() > deadline:
            sys.stdout.write(output)
            return proc.returncode
        time.sleep(RETRY_S)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
