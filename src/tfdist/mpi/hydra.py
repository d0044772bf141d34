"""MPI ranks on several hosts without ssh or a scheduler: Hydra's ``manual`` launcher.

The first node runs ``mpiexec -launcher manual`` (MPICH's Hydra), which serves the job's PMI on an agreed
control port; every node starts its own ``hydra_pmi_proxy`` against that port, and Hydra does the rest as
under ssh (output, rank numbers, aborting every rank when one fails). The proxy's command line is Hydra's
own, printed by a dry run of the local ``mpiexec``: no flag is written here by hand.

``python -m tfdist.mpi.hydra SECONDS -- PROXY...`` runs a node's proxy, again while the first node's
mpiexec is not listening yet: the proxy gives up at once when its control port refuses, nodes start in any
order, and probing the port is no option (mpiexec takes any connection to it for a proxy).
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from types import FrameType

from tfdist.errors import ConfigError, SetupError

_LAUNCH = "HYDRA_LAUNCH: "
_END = "HYDRA_LAUNCH_END"
DRY_RUN_TIMEOUT_S = 20.0
#: The longest single argument Linux passes to a program (MAX_ARG_STRLEN: 32 pages, its NUL included).
MAX_ARG_BYTES = 32 * 4096 - 1
#: How long a node's proxy keeps trying to reach the first node's mpiexec (nodes start in any order).
CONNECT_TIMEOUT_S = 300.0
#: What Hydra's proxy prints when the first node's mpiexec is not listening (yet).
NOT_LISTENING = "unable to connect to server"
RETRY_S = 0.5


def manual_args(hosts: Sequence[str], ppn: int) -> tuple[str, ...]:
    """``mpiexec`` options for ``ppn`` ranks on each of ``hosts`` started by manual proxies.

    >>> manual_args(["10.0.0.1", "10.0.0.2"], 2)
    ('-launcher', 'manual', '-hosts', '10.0.0.1,10.0.0.2', '-ppn', '2')
    """
    listed = ",".join(hosts)
    size = len(listed.encode())
    if size > MAX_ARG_BYTES:
        # exec would fail with "Argument list too long", naming neither the list nor the fix.
        raise ConfigError(
            f"the MPI launcher's -hosts list of {len(hosts)} nodes is {size} bytes, over the {MAX_ARG_BYTES} "
            f"one argument of a program may hold (the longest name: {max(hosts, key=len)!r}). Hint: give the "
            "nodes by address (--hosts 10.0.0.1,...) or by shorter names."
        )
    return ("-launcher", "manual", "-hosts", listed, "-ppn", str(ppn))


def control_env(port: int) -> dict[str, str]:
    """Pins the first node's ``mpiexec`` to the agreed control port."""
    return {"MPIEXEC_PORT_RANGE": f"{port}:{port}"}


def proxy_line(lines: Sequence[str], proxy_id: int, control: str) -> tuple[str, ...]:
    """The proxy command for ``proxy_id`` from a dry run's output, pointed at ``control`` (HOST:PORT).

    Input/Output: ``["HYDRA_LAUNCH: /bin/hydra_pmi_proxy --control-port 10.0.0.9:1 --proxy-id 1"]``, 1,
    ``"10.0.0.1:29400"`` -> ``("/bin/hydra_pmi_proxy", "--control-port", "10.0.0.1:29400", "--proxy-id",
    "1")``.
    """
    for line in lines:
        if not line.startswith(_LAUNCH):
            continue
        argv = line[len(_LAUNCH) :].split()
        if "--proxy-id" in argv and argv[argv.index("--proxy-id") + 1] == str(proxy_id):
            if "--control-port" not in argv:
                break
            argv[argv.index("--control-port") + 1] = control
            return tuple(argv)
    raise SetupError(
        f"Hydra's mpiexec printed no launch line for proxy {proxy_id}: {' | '.join(lines)[:300]}"
    )


def proxy_argv(mpiexec: str, hosts: Sequence[str], ppn: int, proxy_id: int, control: str) -> tuple[str, ...]:
    """This node's ``hydra_pmi_proxy`` command (its local Hydra prints it; the dry run is then stopped)."""
    proc = subprocess.Popen(
        [mpiexec, *manual_args(hosts, ppn), "-n", str(ppn * len(hosts)), "true"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    output = bytearray()
    end = _END.encode()
    deadline = time.monotonic() + DRY_RUN_TIMEOUT_S
    try:
        assert proc.stdout is not None
        fd = proc.stdout.fileno()  # raw reads: a buffered reader would hide lines from select()
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            ended = False
            while not ended and time.monotonic() < deadline:
                if selector.select(timeout=max(0.0, deadline - time.monotonic())):
                    chunk = os.read(fd, 65536)
                    if not chunk:
                        break
                    # Only the new bytes (and the end marker's length before them) are searched: a search of
                    # everything read so far would grow with the square of the hosts (a line per proxy).
                    seen = max(0, len(output) - len(end) + 1)
                    output += chunk
                    ended = output.find(end, seen) >= 0
    finally:
        proc.kill()  # it waits for proxies that this dry run never starts
        proc.wait(timeout=10)
    lines = [line.strip() for line in output.decode(errors="replace").splitlines()]
    return proxy_line(lines, proxy_id, control)


def retry_proxy(argv: list[str]) -> int:
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
    sys.exit(retry_proxy(sys.argv[1:]))
