"""WHO ARE MY PEERS, as the launcher asks it: one small interface, several sources of the same answer.

The launcher (:func:`tfdist.launch.launch` with ``rejoin`` and ``told``) asks a :class:`Membership` for the
job's nodes at the start and again before every restart (:meth:`~Membership.meet`), polls it while its
workers run (:meth:`~Membership.notice`: another node failed or left) and tells it how the job ended on
this node (:meth:`~Membership.close`) -- the roles of torch elastic's ``RendezvousHandler``
(``next_rendezvous``, ``shutdown``; ``notice`` stands for its agent's health checks of the other nodes).
The answer is an :class:`Assignment`: this node's rank and every node's name, address and ports, in rank
order.

Sources:

- :class:`tfdist.launch.rendezvous.Rendezvous` (``--rdzv HOST:PORT``): the nodes meet at an endpoint and
  each brings ports it found free; they meet again after every failure (elastic ``--nnodes MIN:MAX``).
- :class:`Fixed`, an answer known before the job starts that never changes: ``--hosts/--node-rank``
  (:func:`from_hosts`), or a scheduler that started one ``tfdist launch`` per node (:func:`from_scheduler`):
  a Slurm step with one task per node (``srun --ntasks-per-node=1 tfdist launch -n 4 train.py``) or the
  pods of a tfdist Kubernetes manifest. The scheduler's :class:`~tfdist.env.base.ClusterEnvironment`
  (the same one ``tfdist run`` turns into TF_CONFIG) is read as the nodes of the job.
- Ray: one launcher places every worker through a placement group (:mod:`tfdist.launch.ray_placement`);
  there is one launcher, not one per node, so nothing is met -- the placement is the answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Protocol

from tfdist.env.base import ClusterEnvironment
from tfdist.env.slurm import derive_base_port
from tfdist.errors import ConfigError
from tfdist.launch.config import LaunchConfig
from tfdist.launch.plan import DEFAULT_BASE_PORT
from tfdist.launch.rendezvous.protocol import Assignment, Notice


class Membership(Protocol):
    """This node's membership of a job, as the launcher uses it."""

    #: Each node found its own ports free (a rendezvous); otherwise they are derived from one base port
    #: and this node checks its own before starting (see tfdist.launch.preflight).
    ports_agreed: bool

    def meet(self) -> Assignment:
        """The job's nodes: at the start, and again before every restart."""
        ...

    def notice(self) -> Notice | None:
        """What another node said while this one's workers run (never blocks); ``None``: nothing yet."""
        ...

    def close(self, *, stop: bool = False, code: int = 0, why: str = "") -> None:
        """Leave the job: it ended well here, or (``stop``) for good with exit ``code`` and line ``why``."""
        ...


@dataclass(frozen=True)
class Fixed:
    """An answer that does not change while the job runs (a failed node is not replaced: the scheduler's
    own requeue or the user restarts the job)."""

    assignment: Assignment
    ports_agreed: bool = False

    def meet(self) -> Assignment:
        """The same nodes at the start and at every restart."""
        return self.assignment

    def notice(self) -> Notice | None:
        """Nobody to hear from: a node's failure reaches the others through their collectives."""
        return None

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
    """The nodes of a job whose scheduler started one ``tfdist launch`` per node: ``env`` is this
    launcher's task as the scheduler describes it from ``environ`` (one task per node), ``nproc`` the
    workers it starts and ``tasks`` the processes it runs (workers and any parameter servers).

    Input/Output: a Slurm step on n1,n2 with one task each, this one rank 1, base port 20400 ->
    ``Assignment(node_rank=1, names=("n1", "n2"), ports=((20400, 20401), (20400, 20401)), ...)`` for 2 tasks.
    """
    addresses = env.cluster_spec.get("worker", [])
    hosts = tuple(address.rpartition(":")[0] for address in addresses)
    if env.local_world_size != 1 or len(set(hosts)) != len(hosts):
        raise ConfigError(
            f"tfdist launch is running in each of the {env.world_size} tasks of a {env.kind} job "
            f"({env.source}) with {env.local_world_size} on this node, so every task would start its own "
            "workers. Hint: one tfdist launch per node (srun --ntasks-per-node=1 tfdist launch -n K "
            "train.py), or let the scheduler start the workers: srun tfdist run -- python train.py "
            "(or tfdist slurm submit -- python train.py)."
        )
    base = int(addresses[0].rpartition(":")[2])
    if env.kind == "slurm":
        # Slurm's own checks of a job's ports, now for `tasks` per node: the job's slot, TFDIST_PORT, 65535.
        derive_base_port(environ, tasks)
    ports = tuple(range(base, base + tasks))
    if ports[-1] > 65535:
        raise ConfigError(f"{env.source}: base port {base} with {tasks} tasks per node passes 65535.")
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
    """The scheduler's description of this process when it started a job of several tasks that
    ``tfdist launch`` should treat as one task per node (a Slurm step, a tfdist Kubernetes pod); else
    ``None`` (a plain machine, a batch script outside any step, a single task)."""
    from tfdist.env.kubernetes import KubernetesEnvironment
    from tfdist.env.slurm import SlurmEnvironment

    # A batch script is not a step of tasks: srun inside it is (SLURM_STEP_ID set).
    if "SLURM_STEP_ID" in environ:
        slurm = SlurmEnvironment.detect(environ)
        if slurm is not None and slurm.world_size > 1:
            return slurm
    pod = KubernetesEnvironment.detect(environ)
    if pod is not None and pod.world_size > 1:
        return pod
    return None


def placed(config: LaunchConfig, membership: Membership, assignment: Assignment) -> LaunchConfig:
    """``config`` with the nodes, this node's rank and its ports from ``assignment``."""
    if membership.ports_agreed:
        return replace(
            config,
            nnodes=assignment.nnodes,
            node_rank=assignment.node_rank,
            hosts=assignment.addresses,
            node_ports=assignment.ports,
        )
    base = assignment.ports[assignment.node_rank][0]
    return replace(
        config,
        nnodes=assignment.nnodes,
        node_rank=assignment.node_rank,
        hosts=assignment.addresses,
        # Left unset when it is the default anyway, so messages can say "the default --base-port".
        base_port=config.base_port if (config.base_port or DEFAULT_BASE_PORT) == base else base,
        node_ports=(),
    )


__all__ = ["Fixed", "Membership", "from_hosts", "from_scheduler", "placed", "scheduler_environment"]
