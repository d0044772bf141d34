"""WHO ARE MY PEERS, as the launcher asks it: one small interface (the roles of torch elastic's
``RendezvousHandler``), several sources of the same answer: the rendezvous (``--rdzv``) and :class:`Fixed`
answers (``--hosts``, a scheduler's one launcher per node). :func:`open_membership` is the one factory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Protocol

from tfdist.env.base import ClusterEnvironment
from tfdist.env.slurm import derive_base_port
from tfdist.errors import ConfigError
from tfdist.launcher.assignment import Assignment, Notice
from tfdist.launcher.config import LaunchConfig
from tfdist.launcher.plan import DEFAULT_BASE_PORT
from tfdist.launcher.rendezvous.server import LAST_CALL_S
from tfdist.nodes import check_ports, split_address


class Membership(Protocol):
    """This node's membership of a job, as the launcher uses it."""

    @property
    def ports_agreed(self) -> bool:
        """Each node found its own ports free (a rendezvous); else they come from one base port."""
        ...

    def meet(self) -> Assignment:
        """The job's nodes: at the start, and again before every restart."""
        ...

    def notice(self) -> Notice | None:
        """What another node said while this one's workers run (never blocks); ``None``: nothing yet."""
        ...

    def decline(self, why: str) -> None:
        """Nodes wait to join, but this node's workers cannot stop and resume now (``why``, one line)."""
        ...

    def close(self, *, stop: bool = False, code: int = 0, why: str = "") -> None:
        """Leave the job: it ended well here, or (``stop``) for good with exit ``code`` and line ``why``."""
        ...


@dataclass(frozen=True)
class Fixed:
    """An answer that does not change while the job runs (a failed node is not replaced)."""

    assignment: Assignment
    ports_agreed: bool = False

    def meet(self) -> Assignment:
        """The same nodes at the start and at every restart."""
        return self.assignment

    def notice(self) -> Notice | None:
        """Nobody to hear from: a node's failure reaches the others through their collectives."""
        return None

    def decline(self, why: str) -> None:
        """Nobody waits to join a fixed job."""

    def close(self, *, stop: bool = False, code: int = 0, why: str = "") -> None:
        """Nothing to leave."""


def from_hosts(config: LaunchConfig, source: str = "--hosts") -> Fixed:
    """``--hosts h1,h2 --node-rank R``: every node wrote the same list; ports from ``--base-port``."""
    base = config.base_port or DEFAULT_BASE_PORT
    ports = tuple(range(base, base + config.tasks_per_node))
    return Fixed(
        Assignment(
            node_rank=config.node_rank,
            names=config.hosts,
            addresses=config.hosts,
            ports=(ports,) * config.nnodes,
            nproc=config.nproc_per_node,
            endpoint=source,
            order="as --hosts lists them",
        )
    )


def from_scheduler(env: ClusterEnvironment, environ: Mapping[str, str], nproc: int, tasks: int) -> Fixed:
    """The nodes of a job whose scheduler started one ``tfdist launch`` per node (``env``: this launcher's
    task); ``nproc`` workers and ``tasks`` processes (with parameter servers) per node.

    Input/Output: a Slurm step on n1,n2 with one task each, this one rank 1, base port 20400 ->
    ``Assignment(node_rank=1, names=("n1", "n2"), ports=((20400, 20401), (20400, 20401)), ...)`` for 2 tasks.
    """
    addresses = env.cluster_spec.get("worker", [])
    hosts = tuple(split_address(address)[0] for address in addresses)
    if env.local_world_size != 1 or len(set(hosts)) != len(hosts):
        raise ConfigError(
            f"tfdist launch is running in each of the {env.world_size} tasks of a {env.kind} job "
            f"({env.source}) with {env.local_world_size} on this node, so every task would start its own "
            "workers. Hint: one tfdist launch per node (srun --ntasks-per-node=1 tfdist launch -n K "
            "train.py), or let the scheduler start the workers: srun tfdist run -- python train.py "
            "(or tfdist slurm submit -- python train.py)."
        )
    base = int(split_address(addresses[0])[1])
    if env.kind == "slurm":
        # Slurm's own checks of a job's ports, now for `tasks` per node: the job's slot, TFDIST_PORT.
        derive_base_port(environ, tasks)
    ports = tuple(range(check_ports(base, tasks, f"{env.source}: base port {base}"), base + tasks))
    return Fixed(
        Assignment(
            node_rank=env.rank,
            names=hosts,
            addresses=hosts,
            ports=(ports,) * len(hosts),
            nproc=nproc,
            endpoint=f"the {env.kind} job",  # the same words on every node (env.source names this task)
            order=f"in {env.kind}'s node order",
        )
    )


def scheduler_environment(environ: Mapping[str, str]) -> ClusterEnvironment | None:
    """The scheduler's job when it started several tasks that ``tfdist launch`` treats as nodes, else None."""
    from tfdist.env.kubernetes import KubernetesEnvironment
    from tfdist.env.slurm import SlurmEnvironment

    # A batch script is not a step of tasks: srun inside it is (SLURM_STEP_ID set).
    if "SLURM_STEP_ID" in environ:
        slurm = SlurmEnvironment.detect(environ)
        if slurm is not None and slurm.world_size > 1:
            return slurm
    pod = KubernetesEnvironment.detect(environ)
    return pod if pod is not None and pod.world_size > 1 else None


def open_membership(config: LaunchConfig, environ: Mapping[str, str]) -> Membership | None:
    """Where this node learns its peers (None: this machine alone, or Ray); clashing flags refused here."""
    if config.rdzv is not None:
        if config.hosts or config.node_rank or config.base_port is not None:
            raise ConfigError(
                "--rdzv assigns node ranks, hosts and ports itself; drop --hosts/--hostfile/--node-rank/"
                "--base-port (or drop --rdzv)."
            )
        return _rendezvous(config)
    scheduler = scheduler_nodes(
        environ, config.ray is not None, config.hosts, config.node_rank, config.nnodes
    )
    if scheduler is not None:
        return from_scheduler(scheduler, environ, config.nproc_per_node, config.tasks_per_node)
    return from_hosts(config) if config.nnodes > 1 else None


def scheduler_nodes(
    environ: Mapping[str, str], ray: bool, hosts: object, node_rank: int, nnodes: int
) -> ClusterEnvironment | None:
    """The scheduler's job when it started one launcher per node, or ``None`` (none, or Ray)."""
    scheduler = scheduler_environment(environ) if not ray else None
    if scheduler is not None and (hosts or node_rank or nnodes != 1):
        raise ConfigError(
            f"tfdist launch runs in one task per node of a {scheduler.kind} job ({scheduler.source}), "
            "which gives the nodes; drop --rdzv/--hosts/--hostfile/--node-rank/--nnodes."
        )
    return scheduler


def one_node(config: LaunchConfig) -> LaunchConfig:
    """``config`` as this node alone sees it before the nodes have met (its checks: script, log dir)."""
    return replace(config, nnodes=1, max_nnodes=None, node_rank=0)


def _rendezvous(config: LaunchConfig) -> Membership:
    """The ``--rdzv`` membership of this node (met at the start and again after each failure)."""
    from tfdist.launcher.preflight import preflight
    from tfdist.launcher.rendezvous import Rendezvous, RendezvousSpec, job_digest

    assert isinstance(config.rdzv, RendezvousSpec)
    preflight(one_node(config))  # a missing script fails here, not after every node waited for this one
    low, high = config.node_range
    shared = {  # what every node of one job must have been given alike
        "command": list(config.command),
        "nproc": config.nproc_per_node,
        "backend": config.backend,
        "ps": config.ps,
        "chief": config.chief,
        "nnodes": f"{low}:{high}" if high > low else str(low),
        "max_restarts": config.max_restarts,
        "grow_every": config.rdzv.grow_every,
    }
    return Rendezvous(
        config.rdzv,
        (low, high),
        config.nproc_per_node,
        config.tasks_per_node,
        " ".join(config.command),
        job_digest(shared),
        restarts=config.max_restarts,
        last_call=LAST_CALL_S if config.rdzv.last_call is None else config.rdzv.last_call,
    )


def placed(config: LaunchConfig, membership: Membership, assignment: Assignment) -> LaunchConfig:
    """``config`` with the nodes, this node's rank and its ports from ``assignment``."""
    agreed, base = membership.ports_agreed, assignment.ports[assignment.node_rank][0]
    return replace(
        config,
        nnodes=assignment.nnodes,
        node_rank=assignment.node_rank,
        hosts=assignment.addresses,
        # Left unset when it is the default anyway, so messages can say "the default --base-port".
        base_port=config.base_port if agreed or (config.base_port or DEFAULT_BASE_PORT) == base else base,
        node_ports=assignment.ports if agreed else (),
    )


__all__ = [
    "Fixed",
    "Membership",
    "from_hosts",
    "from_scheduler",
    "one_node",
    "open_membership",
    "placed",
    "scheduler_environment",
    "scheduler_nodes",
]
