"""``tfdist launch -H n1:4,n2:4 ...``: one command starts the job on every host, as ``horovodrun -H`` does.

It starts ``tfdist launch --nnodes N --rdzv FIRST:PORT -n SLOTS ...`` on every host (over ssh); a remote
launcher stops when its ssh connection ends, so ending this command ends the job everywhere.
"""

from __future__ import annotations

import os
import secrets
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import replace

from tfdist.errors import WorkerFailedError
from tfdist.launcher.attempt import exit_code_of
from tfdist.launcher.config import LaunchConfig
from tfdist.launcher.outcome import RunResult, new_run_id
from tfdist.launcher.plan import ProcessSpec, TaskSlot
from tfdist.launcher.workers import WorkerGroup
from tfdist.nodes import HostSlots, free_ports, is_this_machine
from tfdist.worker.contract import RunFiles, forwarded_env

#: Port of the rendezvous when the first host is another machine (no way to ask it for a free one).
DEFAULT_RDZV_PORT = 29400


def launch_argv(config: LaunchConfig, endpoint: str) -> list[str]:
    """The ``tfdist launch`` arguments every host runs for a ``-H`` launch: ``--nnodes``, ``--rdzv``, ``-n``,
    every option of ``config`` that is not its default (the CLI parser's inverse), the script and its args."""
    defaults = LaunchConfig()
    args = ["--nnodes", str(len(config.host_slots)), "--rdzv", endpoint, "-n", str(config.nproc_per_node)]
    flags: list[tuple[str, object, object]] = [
        ("--ps", config.ps, defaults.ps),
        ("--gpus-per-worker", config.gpus_per_worker, defaults.gpus_per_worker),
        ("--run-dir", config.run_dir, defaults.run_dir),
        ("--grace", config.grace, defaults.grace),
        ("--max-restarts", config.max_restarts, defaults.max_restarts),
        ("--watchdog-timeout", config.watchdog_timeout, defaults.watchdog_timeout),
        ("--timeout", config.timeout, defaults.timeout),
        ("--backend", config.backend, defaults.backend),
        ("--bind-to", config.bind, defaults.bind),
    ]
    for flag, value, default in flags:
        if value != default:
            args += [flag, str(value)]
    switches = [
        ("--chief", config.chief),
        ("--cpu", config.cpu),
        ("--no-prefix", not config.prefix),
        ("--quiet-workers", config.quiet_workers),
        ("--strict", config.strict),
        ("--no-python", config.no_python),
    ]
    args += [flag for flag, on in switches if on]
    return [*args, *config.command]  # ("-m", "pkg", ...) is the CLI's own -m form


def remote_shell(python: str, cwd: str, env: dict[str, str], args: Sequence[str]) -> str:
    """The shell command run on a remote host: the token from stdin, the launcher, SIGTERM when stdin ends."""
    exports = "".join(f"export {k}={shlex.quote(v)}; " for k, v in sorted(env.items()))
    launch = " ".join(shlex.quote(a) for a in [python, "-m", "tfdist", "launch", *args])
    return (
        f"read -r TFDIST_RDZV_TOKEN && export TFDIST_RDZV_TOKEN && {exports}cd {shlex.quote(cwd)} && "
        # A background job's input is /dev/null: the watcher reads the connection through fd 3.
        f"exec 3<&0; {{ {launch} & pid=$!; (cat <&3 >/dev/null; kill -TERM $pid 2>/dev/null) & wait $pid; }}"
    )


def commands(config: LaunchConfig, endpoint: str, cwd: str) -> list[tuple[str, list[str]]]:
    """(host, argv) of what starts each host's launcher, its run directory under the job's."""
    assert config.run_dir, "the job's run directory is decided before the hosts start"
    env = {**forwarded_env(os.environ), **config.extra_env}
    out = []
    for host in config.host_slots:
        assert isinstance(host, HostSlots)
        own = launch_argv(replace(config, run_dir=os.path.join(config.run_dir, host.name)), endpoint)
        shell = remote_shell(config.python, cwd, env, own)
        if is_this_machine(host.name):
            out.append((host.name, ["/bin/sh", "-c", shell]))
        else:
            out.append((host.name, [*shlex.split(config.ssh), host.name, shell]))
    return out


def launch_on_hosts(config: LaunchConfig, *, check: bool = False) -> RunResult:
    """``-H``: the same launch on every host; ``check``: a failure raises WorkerFailedError."""
    from tfdist.launcher.preflight import check_hosts_resolve, preflight

    hosts = tuple(h for h in config.host_slots if isinstance(h, HostSlots))
    check_hosts_resolve(tuple(h.name for h in hosts))
    preflight(replace(config, host_slots=()))  # the script and options, before any host starts
    run_dir = os.path.abspath(config.run_dir or os.path.join("tfdist-runs", new_run_id()))
    started = time.monotonic()
    job = replace(config, run_dir=run_dir)
    code, host = run(commands(job, rendezvous_endpoint(hosts), os.getcwd()), run_dir, config.grace)
    if check and code != 0:
        log = RunFiles(run_dir).launcher_log(host)
        raise WorkerFailedError(f"{host}'s launcher", code, log, f"exited with code {code}")
    return RunResult(code, 1, run_dir, time.monotonic() - started)


def rendezvous_endpoint(hosts: Sequence[HostSlots]) -> str:
    """The first host serves the rendezvous: a free port when it is this machine, else the default."""
    first = hosts[0].name
    if is_this_machine(first):
        return f"{first}:{free_ports(1, '')[0]}"
    return f"{first}:{DEFAULT_RDZV_PORT}"


#: Seconds a host's launcher gets to stop its workers after its input closed, beyond their own --grace.
STOP_MARGIN_S = 20.0


def run(started: Sequence[tuple[str, list[str]]], run_dir: str, grace: float = 10.0) -> tuple[int, str]:
    """Start every host's launcher, relay its output; the job's exit code and the host that failed first."""
    token = secrets.token_hex(16).encode() + b"\n"
    specs = [
        ProcessSpec(
            TaskSlot("host", i, i, 0),
            tuple(argv),
            dict(os.environ),
            RunFiles(run_dir).launcher_log(host),
            label=host,
            stdin=token,  # the token travels on standard input, never in a command line
            console_prefix="" if i == 0 else f"[{host}] ",
        )
        for i, (host, argv) in enumerate(started)
    ]
    group = WorkerGroup(specs, prefix=True, console_names=None)
    code, host = 0, ""
    try:
        group.start()
        failed = group.wait(None)
        if failed is not None:
            host, code = failed[0].name, exit_code_of(failed[1] or 1)
            sys.stderr.write(
                f"tfdist launch: {host}'s launcher exited with code {code}; stopping the job on every host.\n"
            )
    except KeyboardInterrupt:
        code = 130
    finally:
        # Closing a launcher's input stops it (the remote shell's watcher); SIGTERM reaches the local one.
        group.close(grace + STOP_MARGIN_S)
    return code, host
