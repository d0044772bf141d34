"""LaunchConfig: what ``tfdist launch`` was asked to do, validated once."""

from __future__ import annotations

import math
import sys
from dataclasses import InitVar, dataclass, field

from tfdist import backends
from tfdist.errors import ConfigError
from tfdist.launcher.ray.address import check_address
from tfdist.launcher.rendezvous import RendezvousSpec
from tfdist.nodes import HostSlots, check_hosts, check_ports, parse_host_slots

BACKENDS = backends.NAMES


#: ``auto``: one core set per worker when CPU workers fit the cores; ``core``: always (error if they do
#: not fit); ``none``: let the kernel schedule.
BIND_CHOICES = ("auto", "core", "none")
#: ``--ray-strategy``: how Ray spreads the workers' bundles over its nodes (see tfdist.launcher.ray.plan).
RAY_STRATEGY_CHOICES = ("pack", "spread", "strict-spread")


@dataclass(frozen=True)
class LaunchConfig:
    """Options of one launch. ``command`` is what each worker runs after the Python interpreter:
    ``("train.py", "--epochs", "3")`` or ``("-m", "pkg.train", ...)``; with ``no_python`` it is run as is.
    """

    command: tuple[str, ...] = ()
    nproc_per_node: int = 1
    nnodes: int = 1
    node_rank: int = 0
    hosts: tuple[str, ...] = ()
    base_port: int | None = None
    #: Ports per node (in node order, one per task) agreed at a rendezvous; empty: derived from base_port.
    node_ports: tuple[tuple[int, ...], ...] = ()
    ps: int = 0
    chief: bool = False
    cpu: bool = False
    gpus_per_worker: str = "1"
    #: ``--run-dir``: logs and attempts (default ./tfdist-runs/<run-id>).
    run_dir: str | None = None
    prefix: bool = True
    quiet_workers: bool = False
    grace: float = 10.0
    max_restarts: int = 0
    watchdog_timeout: float | None = None  # None: derived from the steps; 0: no hang check
    timeout: float | None = None
    no_python: bool = False
    backend: str = "tf"
    bind: str = "auto"
    strict: bool = False  # a worker whose strategy does not span the job stops the job (else: a warning)
    extra_env: dict[str, str] = field(default_factory=dict)
    python: str = sys.executable
    #: Ray cluster address (``auto``, ``HOST:PORT``, ``ray://HOST:PORT``): the ``nproc_per_node`` workers are
    #: placed by Ray, one placement-group bundle of ``ray_cpus`` CPUs and ``ray_gpus`` GPUs each.
    ray: str | None = None
    ray_strategy: str = "spread"
    ray_cpus: float = 1.0
    ray_gpus: float = 0.0
    #: The nodes meet at a rendezvous (``--rdzv HOST:PORT``, or a RendezvousSpec), again after a failure;
    #: ``nnodes`` is then the fewest nodes of a round.
    rdzv: RendezvousSpec | str | None = None
    #: With ``rdzv``: the most nodes a round takes (``--nnodes MIN:MAX``); None: ``nnodes``.
    max_nnodes: int | None = None
    #: ``-H n1:4,n2:4`` (or HostSlots): this launch starts the job on every host (``ssh``).
    host_slots: tuple[HostSlots, ...] | str = ()
    ssh: str = "ssh"
    #: ``run_dir`` under the keyword the Python API first documented.
    log_dir: InitVar[str | None] = None

    def __post_init__(self, log_dir: str | None) -> None:
        if log_dir is not None:
            object.__setattr__(self, "run_dir", log_dir)
        # Frozen, yet given in the short forms users write: normalised once, here.
        if isinstance(self.rdzv, str):
            object.__setattr__(self, "rdzv", RendezvousSpec(self.rdzv))
        if isinstance(self.host_slots, str):
            object.__setattr__(self, "host_slots", parse_host_slots(self.host_slots))
        first = self.host_slots[0] if self.host_slots else None
        if isinstance(first, HostSlots) and self.nproc_per_node == 1:
            object.__setattr__(self, "nproc_per_node", first.slots)
        self._check_host_slots()
        self._check_counts()
        self._check_nodes()
        self._check_times()
        self._check_command()
        self._check_ray()

    def _check_counts(self) -> None:
        if self.nproc_per_node < 1:
            raise ConfigError(
                f"--nproc-per-node={self.nproc_per_node}: at least 1 worker per node is needed."
            )
        if self.ps < 0:
            raise ConfigError(f"--ps={self.ps} must be 0 or more parameter servers per node.")
        if self.bind not in BIND_CHOICES:
            raise ConfigError(f"--bind-to={self.bind!r} is not one of {', '.join(BIND_CHOICES)}.")
        if self.bind == "core" and self.ps:
            raise ConfigError(
                "--bind-to core binds all-reduce workers to cores; parameter-server jobs serve many "
                "workers from few tasks. Hint: use --bind-to none (or leave the default) with --ps."
            )
        if self.max_restarts < 0:
            raise ConfigError(f"--max-restarts={self.max_restarts} must be 0 or more.")
        if self.gpus_per_worker not in ("1", "all"):
            raise ConfigError(
                f"--gpus-per-worker={self.gpus_per_worker!r}: use 1 (one GPU per worker) or all."
            )
        if self.backend not in BACKENDS:
            raise ConfigError(f"--backend={self.backend!r}: available backends are {', '.join(BACKENDS)}.")
        if self.backend != "tf" and (self.ps or self.chief):
            raise ConfigError(
                f"--backend {self.backend} cannot run parameter servers or a chief: every MPI rank is a "
                "worker."
            )
        # One MPI job spans the nodes: it can only restart on every node at once, as the rendezvous does.
        if self.backend != "tf" and self.nnodes > 1 and self.max_restarts and not self.rendezvous:
            raise ConfigError(
                f"--max-restarts with --backend {self.backend} on several nodes needs --rdzv HOST:PORT: "
                "with --hosts every node's launcher would restart on its own. Hint: launch with --rdzv "
                "(the nodes meet again and restart together), or restart the command on every node "
                "(checkpoints resume)."
            )

    def _check_host_slots(self) -> None:
        if not self.host_slots:
            return
        if self.rdzv or self.hosts or self.node_rank or self.nnodes != 1 or self.max_nnodes:
            raise ConfigError(
                "-H names every host and its workers; drop --rdzv/--hosts/--hostfile/--node-rank/--nnodes."
            )
        if self.ray is not None:
            raise ConfigError("-H starts the workers over ssh, --ray through Ray: use one of them.")

    def _check_nodes(self) -> None:
        if self.nnodes < 1:
            raise ConfigError(f"--nnodes={self.nnodes} must be at least 1.")
        if self.max_nnodes is not None:
            if self.rdzv is None:
                raise ConfigError(
                    f"--nnodes={self.nnodes}:{self.max_nnodes}: a range of nodes needs --rdzv HOST:PORT (the "
                    "nodes still there meet again after a failure). Hint: add --rdzv, or give one number "
                    "with --hosts."
                )
            if self.max_nnodes < self.nnodes and not self.hosts:  # once met, nnodes is the round's count
                raise ConfigError(
                    f"--nnodes={self.nnodes}:{self.max_nnodes}: MIN={self.nnodes} is above MAX="
                    f"{self.max_nnodes}. Hint: --nnodes {self.max_nnodes}:{self.nnodes} (fewest:most)."
                )
        if self.rdzv is not None and not self.hosts:
            return  # the nodes, this one's rank and the ports are known once the nodes have met
        if not 0 <= self.node_rank < self.nnodes:
            raise ConfigError(
                f"--node-rank={self.node_rank} must be in 0..{self.nnodes - 1} for --nnodes={self.nnodes}."
            )
        if self.node_ports and len(self.node_ports) != self.nnodes:
            raise ConfigError(f"{len(self.node_ports)} port list(s) for --nnodes={self.nnodes}.")
        if self.nnodes > 1 and not self.hosts:
            raise ConfigError(
                f"--nnodes={self.nnodes} needs the node addresses. Hint: --hosts h1,h2,... or --hostfile "
                "FILE (one host per line)."
            )
        if self.hosts:
            check_hosts(self.hosts, "--hosts")
        if self.hosts and len(self.hosts) != self.nnodes:
            raise ConfigError(
                f"--hosts names {len(self.hosts)} host(s) ({','.join(self.hosts)}) but "
                f"--nnodes={self.nnodes}."
            )
        if self.base_port is not None:
            check_ports(self.base_port, self.tasks_per_node, f"--base-port={self.base_port}")

    def _check_times(self) -> None:
        times = (
            ("--grace", self.grace),
            ("--watchdog-timeout", self.watchdog_timeout),
            ("--timeout", self.timeout),
        )
        for flag, value in times:
            if value is not None and not math.isfinite(value):
                raise ConfigError(f"{flag}={value} is not a finite number of seconds.")
        if self.grace < 0:
            raise ConfigError(f"--grace={self.grace} must be 0 or more seconds.")
        if self.watchdog_timeout is not None and self.watchdog_timeout < 0:
            raise ConfigError(
                f"--watchdog-timeout={self.watchdog_timeout} must be positive seconds, or off (0) for no "
                "hang check."
            )
        if self.timeout is not None and self.timeout <= 0:
            raise ConfigError(
                f"--timeout={self.timeout} must be positive seconds (leave it out for no limit)."
            )

    def _check_command(self) -> None:
        if not self.command:
            return  # supplied later by launch(config, command)
        if not self.command[0]:
            raise ConfigError(
                "no script to run. Hint: tfdist launch -n 2 train.py [args...] or -m package.module."
            )
        if self.no_python:
            return
        if self.command[0] == "-m" and (len(self.command) < 2 or not self.command[1]):
            raise ConfigError("-m needs a module name. Hint: tfdist launch -n 2 -m package.module.")

    def _check_ray(self) -> None:
        if self.ray is None:
            return
        check_address(self.ray)
        if self.ray_strategy not in RAY_STRATEGY_CHOICES:
            raise ConfigError(
                f"--ray-strategy={self.ray_strategy!r} is not one of {', '.join(RAY_STRATEGY_CHOICES)}."
            )
        if not (math.isfinite(self.ray_gpus) and self.ray_gpus >= 0):
            raise ConfigError(f"--ray-gpus={self.ray_gpus:g}: give 0 or more GPUs per worker.")
        if not (math.isfinite(self.ray_cpus) and self.ray_cpus > 0):
            raise ConfigError(f"{self.ray_cpus:g} CPUs per Ray worker: it must be more than 0.")
        clashes = [
            flag
            for flag, used in (
                ("--nnodes", self.nnodes > 1),
                ("--hosts", bool(self.hosts)),
                ("--base-port", self.base_port is not None),
                ("--ps", self.ps > 0),
                ("--chief", self.chief),
                (f"--backend {self.backend}", self.backend != "tf"),
            )
            if used
        ]
        if clashes:
            raise ConfigError(
                f"--ray places -n workers on the Ray cluster's nodes itself; {', '.join(clashes)} cannot be "
                "combined with it (MPI backends and parameter servers on Ray are not supported). Hint: "
                "tfdist launch --ray ADDRESS -n N train.py."
            )

    @property
    def rendezvous(self) -> bool:
        """The nodes meet at a rendezvous (and meet again after a failure)."""
        return self.rdzv is not None

    @property
    def node_range(self) -> tuple[int, int]:
        """The fewest and the most nodes of a round of this job."""
        return self.nnodes, self.max_nnodes if self.max_nnodes is not None else self.nnodes

    @property
    def tasks_per_node(self) -> int:
        """Processes this launcher starts on every node (chief counted on node 0 only)."""
        return self.nproc_per_node + self.ps + (1 if self.chief or self.ps else 0)

    @property
    def uses_chief(self) -> bool:
        """A parameter-server job always has a chief (the coordinator)."""
        return self.chief or self.ps > 0
