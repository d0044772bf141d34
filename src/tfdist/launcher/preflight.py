"""Checks of the surroundings before any process starts: one clear line instead of a broken job."""

from __future__ import annotations

import importlib.util
import os
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from tfdist import backends
from tfdist.errors import ConfigError
from tfdist.launcher.config import LaunchConfig
from tfdist.mpi.probe import MPIStack, require_stack

#: Extensions Python runs as scripts.
PYTHON_SUFFIXES = (".py", ".pyw", ".pyz")


def check_not_in_multi_task_step(environ: Mapping[str, str], nnodes: int = 1, met: bool = False) -> None:
    """``srun -n 4 tfdist launch -n 2 train.py`` would start 4 launchers of 2 workers each, none aware of
    the others: refuse with what to write instead. One task per node is a job of launchers only when the
    launch took the step's nodes (``nnodes`` > 1) or met at a rendezvous (``met``)."""
    tasks = environ.get("SLURM_STEP_NUM_TASKS", "")
    nodes = environ.get("SLURM_STEP_NUM_NODES", "1")
    if "SLURM_STEP_ID" not in environ or not tasks.isdigit() or not nodes.isdigit() or int(tasks) < 2:
        return
    if int(tasks) > int(nodes) or (nnodes == 1 and not met):
        raise ConfigError(
            f"tfdist launch is running in each of the {tasks} tasks of a Slurm step "
            f"(SLURM_STEP_NUM_TASKS={tasks} on {nodes} node(s)), "
            "so every task would start its own workers. Hint: let Slurm start the workers: "
            "srun tfdist run -- python train.py (or tfdist slurm submit -- python train.py), or start one "
            "launcher per node: srun --ntasks-per-node=1 tfdist launch -n K train.py."
        )


def check_python_script(path: str) -> None:
    """A script that is not Python (a shell script, a binary) fails in every worker: say so once."""
    if path.endswith(PYTHON_SUFFIXES):
        return
    try:
        with open(path, "rb") as fh:
            head = fh.read(1024)
    except OSError as exc:
        raise ConfigError(f"script {path!r} cannot be read: {exc.strerror}.") from None
    first = head.split(b"\n", 1)[0]
    binary = b"\0" in head
    other_interpreter = first.startswith(b"#!") and b"python" not in first
    if binary or other_interpreter:
        what = "a binary file" if binary else f"a script for {first[2:].decode(errors='replace').strip()}"
        raise ConfigError(
            f"script {path!r} is not Python ({what}). Hint: for another program use "
            f"tfdist launch --no-python -n N {path}."
        )


@dataclass(frozen=True)
class Machine:
    """What preflight found that the launch needs: the MPI launcher of the process-level backends."""

    mpiexec: str | None = None
    mpi_flavour: str = "unknown"  # hydra (MPICH) | openmpi | unknown: how to ask it for core binding
    #: --backend horovod without Horovod installed: scripts' `import horovod` gets tfdist.horovod.
    horovod_shim: bool = False
    #: The MPI library the workers' mpi4py loads and the launcher chosen for it (process-level backends).
    mpi: MPIStack | None = None


def preflight(config: LaunchConfig, environ: Mapping[str, str] = os.environ) -> Machine:
    """Every check that needs the machine, before anything is started or written."""
    check_not_in_multi_task_step(environ, config.nnodes, config.rendezvous)
    if config.run_dir and os.path.exists(config.run_dir) and not os.path.isdir(config.run_dir):
        raise ConfigError(f"--run-dir {config.run_dir!r} is a file. Hint: give a directory (new or a run's).")
    if config.command and not config.no_python:
        if config.command[0] == "-m":
            check_module(config.command[1])
        else:
            check_script(config.command[0])
            check_python_script(config.command[0])
    if config.nnodes > 1:
        check_hosts_resolve(config.hosts)
        if not config.node_ports:  # a rendezvous gives each node ports it found free itself
            check_ports_free(fixed_ports(config), config.base_port)
    choice = backends.choose(config.backend, horovod_installed=horovod_installed)
    if choice.name not in backends.PROCESS_BACKENDS:
        return Machine()
    stack = require_stack(config.python)
    flavour = stack.flavour if config.bind != "none" else "unknown"
    return Machine(stack.launcher, flavour, choice.horovod_shim, stack)


def horovod_installed() -> bool:
    """Whether Horovod itself is importable here (without importing it)."""
    return importlib.util.find_spec("horovod") is not None


def fixed_ports(config: LaunchConfig) -> tuple[int, ...]:
    """The ports this node's tasks listen on in a ``--hosts`` job (from ``--base-port``)."""
    from tfdist.launcher.plan import DEFAULT_BASE_PORT, mpi_control_port

    if config.backend != "tf":  # the MPI backends listen on node 0's control port only
        return (mpi_control_port(config),) if config.node_rank == 0 else ()
    base = config.base_port or DEFAULT_BASE_PORT
    return tuple(range(base, base + config.tasks_per_node))


def check_ports_free(ports: tuple[int, ...], base_port: int | None) -> None:
    """This node can listen on its fixed ports (named now, not as a worker's gRPC error later)."""
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            # As gRPC binds: a port left in TIME_WAIT is usable, one another program listens on is not.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("", port))
            except OSError:
                given = (
                    f"--base-port {base_port}" if base_port is not None else "the default --base-port 29400"
                )
                raise ConfigError(
                    f"port {port} is taken on {socket.gethostname()}: this node's workers listen on "
                    f"{given} and up. Hint: choose a --base-port that is free on every node (`ss -ltn` lists "
                    "what listens), or use --rdzv, where each node picks free ports itself."
                ) from None


def check_hosts_resolve(hosts: tuple[str, ...]) -> None:
    """Every node name resolves here (else the job would wait for a node nobody can reach)."""
    for host in hosts:
        try:
            socket.getaddrinfo(host, None)
        except (socket.gaierror, UnicodeError):
            raise ConfigError(
                f"--hosts: {host!r} does not resolve on {socket.gethostname()}. Hint: the nodes' names as "
                "this node resolves them (DNS or /etc/hosts), or their addresses."
            ) from None


def check_script(script: str) -> None:
    """The script exists and is a file."""
    if os.path.isdir(script):
        raise ConfigError(
            f"script {script!r} is a directory. Hint: give the Python file, e.g. "
            f"{os.path.join(script, 'train.py')}."
        )
    if not os.path.isfile(script):
        raise ConfigError(f"script {script!r} does not exist (looked in {os.getcwd()}).")


def check_module(name: str) -> None:
    # Workers run `python -m` from the current directory, which Python puts first on sys.path.
    sys.path.insert(0, os.getcwd())
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError) as exc:
        raise ConfigError(
            f"module {name!r} is not importable here: {exc}. Hint: check the name and PYTHONPATH."
        ) from None
    finally:
        sys.path.pop(0)
    if spec is None:
        raise ConfigError(
            f"module {name!r} is not importable from {os.getcwd()} or PYTHONPATH. Hint: check the name, or "
            "pass a script path."
        )
