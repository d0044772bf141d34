"""``tfdist launch -H n1:4,n2:4 ...``: one command on one node starts the job on every host, as
``horovodrun -H`` does.

It starts the same ``tfdist launch --nnodes N --rdzv FIRST:PORT -n SLOTS ...`` on every host — here for
this machine, over ssh for the others — so the hosts meet at a rendezvous exactly as when a user types the
command on each. Why ssh: it is what a cluster without a scheduler has (horovodrun and MPI's own launchers
use it); the hosts need the same Python environment and working directory (a shared filesystem), as for
horovodrun. The rendezvous token is made here and sent on ssh's standard input, never in a command line;
a remote launcher stops when its ssh connection ends (the remote shell waits on that input), so ending
this command ends the job everywhere.
"""

from __future__ import annotations

import os
import secrets
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

from tfdist.nodes import HostSlots, free_ports, is_this_machine
from tfdist.worker.contract import forwarded_env

#: Port of the rendezvous when the first host is another machine (no way to ask it for a free one).
DEFAULT_RDZV_PORT = 29400


def launch_args(argv: Sequence[str], script: str, hosts: Sequence[HostSlots], endpoint: str) -> list[str]:
    """The ``tfdist launch`` arguments every host runs: the user's, without ``-H``/``--ssh``/``-n``, with
    the job's ``--nnodes``, ``--rdzv`` and ``-n`` (options after the script belong to the script).
    A ``--log-dir`` stays: :func:`commands` gives each host its own directory under it."""
    cut = list(argv).index(script) if script in argv else len(argv)
    head, tail = list(argv[:cut]), list(argv[cut:])
    kept: list[str] = []
    skip = False
    for arg in head:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in ("-H", "--host-slots", "--ssh", "-n", "--nproc-per-node", "--rdzv", "--nnodes"):
            skip = "=" not in arg
            continue
        kept.append(arg)
    return ["--nnodes", str(len(hosts)), "--rdzv", endpoint, "-n", str(hosts[0].slots), *kept, *tail]


def remote_shell(python: str, cwd: str, env: dict[str, str], args: Sequence[str]) -> str:
    """The shell command run on a remote host: read the token from standard input, start the launcher, and
    stop it (SIGTERM) when standard input ends, i.e. when this side's ssh connection goes away."""
    exports = "".join(f"export {k}={shlex.quote(v)}; " for k, v in sorted(env.items()))
    launch = " ".join(shlex.quote(a) for a in [python, "-m", "tfdist", "launch", *args])
    return (
        f"read -r TFDIST_RDZV_TOKEN && export TFDIST_RDZV_TOKEN && {exports}cd {shlex.quote(cwd)} && "
        # A background job's input is /dev/null: the watcher reads the connection through fd 3.
        f"exec 3<&0; {{ {launch} & pid=$!; (cat <&3 >/dev/null; kill -TERM $pid 2>/dev/null) & wait $pid; }}"
    )


def commands(
    hosts: Sequence[HostSlots], args: Sequence[str], ssh: str, python: str, cwd: str
) -> list[tuple[str, list[str]]]:
    """(host, argv) of the process that starts each host's launcher; ssh starts remote commands with a
    bare environment, so each gets what travels to another host (:func:`forwarded_env`)."""
    env = forwarded_env(os.environ)
    out = []
    for host in hosts:
        own = per_host_log_dir(args, host.name)
        if is_this_machine(host.name):
            out.append((host.name, ["/bin/sh", "-c", remote_shell(python, cwd, env, own)]))
        else:
            out.append((host.name, [*shlex.split(ssh), host.name, remote_shell(python, cwd, env, own)]))
    return out


def per_host_log_dir(args: Sequence[str], host: str) -> list[str]:
    """``args`` with ``--log-dir DIR`` made ``DIR/HOST``: hosts on one shared filesystem keep apart.

    Input/Output: ``(["--log-dir", "runs", "t.py"], "n2")`` -> ``["--log-dir", "runs/n2", "t.py"]``.
    """
    out = list(args)
    for i, arg in enumerate(out):
        if arg == "--log-dir" and i + 1 < len(out):
            out[i + 1] = os.path.join(out[i + 1], host)
            break
        if arg.startswith("--log-dir="):
            out[i] = "--log-dir=" + os.path.join(arg.split("=", 1)[1], host)
            break
    return out


def rendezvous_endpoint(hosts: Sequence[HostSlots]) -> str:
    """The first host serves the rendezvous: a free port when it is this machine, else the default."""
    first = hosts[0].name
    if is_this_machine(first):
        return f"{first}:{free_ports(1, '')[0]}"
    return f"{first}:{DEFAULT_RDZV_PORT}"


def run(started: Sequence[tuple[str, list[str]]], timeout: float | None = None) -> int:
    """Start every host's launcher, relay its output (the remote ones prefixed with ``[HOST]``), and return
    the job's exit code: the first non-zero one ends the others."""
    token = secrets.token_hex(16)
    procs: list[tuple[str, subprocess.Popen[bytes]]] = []
    relays = []
    for i, (host, argv) in enumerate(started):
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert proc.stdin is not None
        proc.stdin.write(token.encode() + b"\n")
        proc.stdin.flush()  # the pipe stays open: closing it stops that host's launcher
        relay = threading.Thread(target=_relay, args=(proc, "" if i == 0 else f"[{host}] "), daemon=True)
        relay.start()
        procs.append((host, proc))
        relays.append(relay)
    deadline = None if timeout is None else time.monotonic() + timeout
    code = 0
    try:
        while any(p.poll() is None for _, p in procs):
            failed = [(h, p.returncode) for h, p in procs if p.returncode not in (None, 0)]
            if failed or (deadline is not None and time.monotonic() > deadline):
                host, code = failed[0] if failed else ("", 124)
                why = f"{host}'s launcher exited with code {code}" if failed else "the --timeout passed"
                sys.stderr.write(f"tfdist launch: {why}; stopping the job on every host.\n")
                break
            time.sleep(0.2)
    except KeyboardInterrupt:
        code = 130
    finally:
        _stop(procs)
        for relay in relays:
            relay.join(timeout=5)
    return code or next((p.returncode for _, p in procs if p.returncode), 0)


def _relay(proc: subprocess.Popen[bytes], prefix: str) -> None:
    assert proc.stdout is not None
    for line in iter(proc.stdout.readline, b""):
        sys.stdout.write(prefix + line.decode(errors="replace"))
        sys.stdout.flush()


def _stop(procs: Sequence[tuple[str, subprocess.Popen[bytes]]]) -> None:
    """Close every launcher's input (the remote shell then stops its launcher), then wait; SIGTERM and
    SIGKILL the connections that are still there after a grace period."""
    for _, proc in procs:
        if proc.stdin and not proc.stdin.closed:
            try:
                proc.stdin.close()
            except OSError:
                pass
    for sig, grace in ((None, 30.0), (signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        alive = [p for _, p in procs if p.poll() is None]
        if not alive:
            return
        for proc in alive:
            if sig is not None:
                proc.send_signal(sig)
        end = time.monotonic() + grace
        while time.monotonic() < end and any(p.poll() is None for p in alive):
            time.sleep(0.1)
