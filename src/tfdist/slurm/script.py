"""SbatchSpec and its rendering to an sbatch script. Pure: text in, text out, every value shell-quoted."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field

from tfdist.errors import ConfigError
from tfdist.mpi.stack import SRUN_PLUGIN

_TIME = re.compile(r"^(\d+|\d+:\d{2}|\d+:\d{2}:\d{2}|\d+-\d+|\d+-\d+:\d{2}|\d+-\d+:\d{2}:\d{2})$")
_MEM = re.compile(r"^\d+[KMGT]?$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SBATCH_VALUE = re.compile(r"^[^\s\"'\\]+$")
#: Backends whose ranks start through srun's MPI process-management interface.
MPI_BACKENDS = ("mpi", "horovod")
_PLUGIN = re.compile(r"^[a-z][a-z0-9_]*$")
#: Variables that must not route the workers' gRPC traffic through a proxy.
PROXY_VARIABLES = ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY")


@dataclass(frozen=True)
class SbatchSpec:
    """A job: resources (sbatch's own option names), environment set-up and the command each task runs."""

    command: tuple[str, ...]
    job_name: str = "tfdist"
    nodes: int = 1
    #: The fewest nodes the job may start with (``--nodes=MIN-MAX``; ``nodes`` is then the most): Slurm
    #: picks the count at each start, so a requeued job may start on fewer nodes after one was lost.
    min_nodes: int | None = None
    ntasks_per_node: int | None = None
    gpus_per_node: int = 0
    gpus_per_task: int | None = None
    gres: bool = True
    cpus_per_task: int | None = None
    mem: str | None = None
    time: str | None = None
    partition: str | None = None
    constraint: str | None = None
    account: str | None = None
    qos: str | None = None
    output: str = "tfdist-%j.out"
    error: str | None = None
    extra_sbatch: tuple[str, ...] = ()
    signal: str = "USR2@90"
    requeue: bool = True
    modules: tuple[str, ...] = ()
    venv: str | None = None
    container: str | None = None
    binds: tuple[str, ...] = ()
    exports: Mapping[str, str] = field(default_factory=dict)
    per_node: bool = False
    workdir: str | None = None
    nodelist: str | None = None
    #: How the tasks synchronise: tf (TensorFlow's collectives, through TF_CONFIG), mpi or horovod (ranks
    #: started through srun's MPI plugin, one packed all-reduce per step).
    backend: str = "tf"
    #: srun's ``--mpi`` plugin; None: :data:`SRUN_PLUGIN` for the MPI backends, Slurm's default else.
    mpi: str | None = None
    #: ``import horovod`` gives tfdist's Horovod API in the tasks (Horovod is not installed for the job).
    horovod_shim: bool = False
    #: Python that runs the task wrapper (``python -m tfdist run --``): inside a venv or a container,
    #: their ``python``; otherwise ``tfdist slurm`` passes its own interpreter, which has tfdist.
    python: str = "python"

    def __post_init__(self) -> None:
        self._check_text()
        self._check_resources()
        self._check_backend()
        self._check_train_batch()
        if not self.command:
            raise ConfigError("no command to run. Hint: tfdist slurm script [options] -- python train.py ...")

    def _check_text(self) -> None:
        values = [v for v in vars(self).values() if isinstance(v, str)]  # every text field, and the lists'
        values += [*self.command, *self.extra_sbatch, *self.modules, *self.binds]
        values += [*self.exports, *self.exports.values()]
        for value in values:
            if _CONTROL.search(value):
                raise ConfigError(
                    f"value {value!r} contains a newline or control character; job scripts cannot carry it "
                    "safely."
                )
        for name in ("job_name", "output", "error", "partition", "constraint", "account", "qos", "nodelist"):
            option = getattr(self, name)
            if option is not None and not _SBATCH_VALUE.match(option):
                flag = "--" + name.replace("_", "-")
                raise ConfigError(f"{flag}={option!r}: #SBATCH values cannot contain spaces or quotes.")
        for name in self.exports:
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
                raise ConfigError(f"--export {name!r} is not a valid variable name.")

    def _check_train_batch(self) -> None:
        """Refuse a ``tfdist train --global-batch-size G`` the replicas do not divide, before the queue."""
        batch = train_global_batch(self.command)
        if batch is None:
            return
        per_node = self.gpus_per_node if self.per_node else self.tasks_per_node
        for nodes in range(self.min_nodes or self.nodes, self.nodes + 1):  # any count Slurm may start
            replicas = nodes * per_node
            if batch % replicas:
                per = "--gpus-per-node" if self.per_node else "--ntasks-per-node"
                raise ConfigError(
                    f"--global-batch-size={batch} (in the job's command) is not divisible by the {replicas} "
                    f"replicas of {nodes} node(s) (--nodes={self.node_range}) x {per}={per_node}. Hint: a "
                    f"global batch that is a multiple of {replicas}, or another task count."
                )

    def _check_backend(self) -> None:
        if self.backend not in ("tf", *MPI_BACKENDS):
            raise ConfigError(f"--backend={self.backend!r} is not a backend; choose tf, mpi or horovod.")
        if self.mpi is not None and not _PLUGIN.match(self.mpi):
            raise ConfigError(
                f"--mpi={self.mpi!r} is not an MPI plugin name (srun --mpi=list shows them, e.g. pmi2)."
            )
        if self.mpi == "none" and self.backend in MPI_BACKENDS:
            raise ConfigError(
                f"--mpi=none cannot start the ranks of --backend {self.backend}: they need a process-"
                f"management interface. Hint: drop --mpi ({SRUN_PLUGIN} is the default)."
            )

    @property
    def mpi_plugin(self) -> str | None:
        """The ``srun --mpi`` value: the chosen plugin, the default one for MPI backends, else None."""
        if self.mpi is not None:
            return self.mpi
        return SRUN_PLUGIN if self.backend in MPI_BACKENDS else None

    def _check_resources(self) -> None:
        if self.nodes <= 0:
            raise ConfigError(f"--nodes={self.nodes} must be at least 1.")
        if self.min_nodes is not None and not 1 <= self.min_nodes <= self.nodes:
            raise ConfigError(
                f"--nodes={self.min_nodes}-{self.nodes}: MIN must be at least 1 and at most MAX. Hint: "
                f"--nodes {min(self.min_nodes, self.nodes)}-{max(self.min_nodes, self.nodes)} (fewest-most)."
            )
        if self.ntasks_per_node is not None and self.ntasks_per_node <= 0:
            raise ConfigError(f"--ntasks-per-node={self.ntasks_per_node} must be at least 1.")
        if self.gpus_per_node < 0 or (self.gpus_per_task is not None and self.gpus_per_task <= 0):
            raise ConfigError("GPU counts must be positive.")
        if self.gpus_per_task and not self.gpus_per_node:
            raise ConfigError(
                f"--gpus-per-task={self.gpus_per_task} on a CPU-only spec. Hint: add --gpus-per-node N."
            )
        if self.per_node and not self.gpus_per_node:
            raise ConfigError(
                "--per-node mirrored drives every GPU of a node, but the spec asks for no GPUs. Hint: add "
                "--gpus-per-node N."
            )
        if self.cpus_per_task is not None and self.cpus_per_task <= 0:
            raise ConfigError(f"--cpus-per-task={self.cpus_per_task} must be at least 1.")
        if self.time is not None and not _TIME.match(self.time):
            raise ConfigError(
                f"--time={self.time!r} is not a Slurm time: use MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or "
                "D-HH:MM:SS."
            )
        if self.mem is not None and not _MEM.match(self.mem):
            raise ConfigError(
                f"--mem={self.mem!r} is not a Slurm size: a number with an optional K, M, G or T suffix "
                "(e.g. 32G)."
            )

    @property
    def node_range(self) -> str:
        """``sbatch --nodes``: ``3``, or ``2-3`` when Slurm may start the job with fewer."""
        if self.min_nodes is not None and self.min_nodes < self.nodes:
            return f"{self.min_nodes}-{self.nodes}"
        return str(self.nodes)

    @property
    def tasks_per_node(self) -> int:
        """One task per GPU (multi-worker), one per node (per-node mirrored), or one on CPU nodes."""
        if self.ntasks_per_node is not None:
            return self.ntasks_per_node
        if self.per_node:
            return 1
        return self.gpus_per_node or 1


def runs_tfdist_train(command: tuple[str, ...]) -> bool:
    """Whether the job's command is ``tfdist train`` (directly or as ``python -m tfdist train``).

    >>> runs_tfdist_train(("tfdist", "train", "--epochs", "2")), runs_tfdist_train(("python", "t.py"))
    (True, False)
    """
    words = list(command)
    program = words[0].rsplit("/", 1)[-1] if words else ""
    if program == "tfdist":
        return words[1:2] == ["train"]
    return program.startswith("python") and words[1:4] == ["-m", "tfdist", "train"]


def train_global_batch(command: tuple[str, ...]) -> int | None:
    """The ``--global-batch-size`` of a ``tfdist train`` command (None: another command, or not given).

    >>> train_global_batch(("tfdist", "train", "--global-batch-size", "96")), train_global_batch(("x",))
    (96, None)
    """
    if not runs_tfdist_train(command):
        return None
    for i, word in enumerate(command):
        value = None
        if word == "--global-batch-size" and i + 1 < len(command):
            value = command[i + 1]
        elif word.startswith("--global-batch-size="):
            value = word.partition("=")[2]
        if value is not None:
            return int(value) if value.isdigit() and int(value) > 0 else None
    return None


def _sbatch_lines(spec: SbatchSpec) -> list[str]:
    gpus = (f"gpu:{spec.gpus_per_node}" if spec.gres else spec.gpus_per_node) if spec.gpus_per_node else None
    options: list[tuple[str, object]] = [
        ("job-name", spec.job_name),
        ("nodes", spec.node_range),
        ("ntasks-per-node", spec.tasks_per_node),
        ("gres" if spec.gres else "gpus-per-node", gpus),
        ("gpus-per-task", spec.gpus_per_task),
        ("cpus-per-task", spec.cpus_per_task),
        ("mem", spec.mem),
        ("time", spec.time),
        ("partition", spec.partition),
        ("constraint", spec.constraint),
        ("account", spec.account),
        ("qos", spec.qos),
        ("output", spec.output),
        ("error", spec.error),
        ("signal", spec.signal or None),
        ("chdir", spec.workdir),
        ("nodelist", spec.nodelist),
    ]
    if spec.node_range != str(spec.nodes):
        # With --ntasks-per-node, sbatch counts MIN x N tasks and Slurm then allocates only MIN nodes
        # (measured, Slurm 22.05); --mincpus reserves the CPUs of N tasks on every node it gives instead,
        # and the srun line below starts N tasks on each.
        per_task = spec.cpus_per_task or 1
        options = [
            ("mincpus", spec.tasks_per_node * per_task) if n == "ntasks-per-node" else (n, v)
            for n, v in options
        ]
    lines = [f"#SBATCH --{name}={value}" for name, value in options if value is not None]
    if spec.requeue:
        # A requeued job appends to its log instead of truncating the first run's output.
        lines += ["#SBATCH --requeue", "#SBATCH --open-mode=append"]
    lines += [f"#SBATCH {line}" for line in spec.extra_sbatch]
    return lines


def _environment_lines(spec: SbatchSpec) -> list[str]:
    lines: list[str] = []
    if spec.modules:
        lines += ["module purge", *(f"module load {shlex.quote(m)}" for m in spec.modules)]
    if spec.venv:
        lines.append(f"source {shlex.quote(spec.venv.rstrip('/') + '/bin/activate')}")
    if spec.container:
        lines.append(
            'export APPTAINER_CACHEDIR="${APPTAINER_CACHEDIR:-$HOME/.apptainer/cache}"'
            "  # keep image layers off $HOME quota if needed"
        )
    exports = {"TF_CPP_MIN_LOG_LEVEL": "2", **dict(spec.exports)}
    if spec.backend != "tf":
        exports["TFDIST_BACKEND"] = "mpi" if spec.horovod_shim else spec.backend
    if spec.horovod_shim:
        exports["TFDIST_HOROVOD_SHIM"] = "1"
    if spec.per_node:
        exports["TFDIST_GPUS_PER_WORKER"] = "all"
    lines += [f"export {name}={shlex.quote(value)}" for name, value in exports.items()]
    if spec.nodes * spec.tasks_per_node > 1:
        lines.append(
            f"unset {' '.join(PROXY_VARIABLES)}  # worker-to-worker gRPC must not go through a proxy"
        )
    return lines


def render_sbatch(spec: SbatchSpec) -> str:
    """The complete job script for ``spec`` (golden files: tests/golden/)."""
    launch = ["srun", f"--ntasks-per-node={spec.tasks_per_node}"]
    if spec.mpi_plugin:
        launch.append(f"--mpi={spec.mpi_plugin}")
    if spec.nodes * spec.tasks_per_node > 1:
        # One failed task ends the step: its peers would otherwise wait for it (an MPI rank in its
        # all-reduce, a TensorFlow worker for a peer that never joined) until a timeout, or forever.
        launch.append("--kill-on-bad-exit=1")
    if spec.container:
        launch += ["apptainer", "exec"]
        if spec.gpus_per_node:
            launch.append("--nv")
        for bind in spec.binds:
            launch += ["--bind", bind]
        launch.append(spec.container)
    body = [
        "#!/bin/bash",
        *_sbatch_lines(spec),
        "",
        "# Generated by tfdist slurm. Each task starts through `tfdist run`, which derives its rank, the "
        "cluster",
        "# (TF_CONFIG) and its GPU from Slurm's variables, so plain tf.distribute scripts become one job.",
        "set -eo pipefail  # no -u: virtualenv and module scripts read unset variables",
        *_environment_lines(spec),
        "",
        " ".join(
            shlex.quote(part) for part in [*launch, spec.python, "-m", "tfdist", "run", "--", *spec.command]
        ),
    ]
    return "\n".join(body) + "\n"
