"""WHERE AN ATTEMPT'S PROCESSES RUN: one interface (:meth:`Placement.plan` the processes of an attempt,
:meth:`Placement.group` to run them), three implementations: :class:`LocalPlacement` (one process per task),
:class:`MPIPlacement` (one MPI launcher per node) and :class:`tfdist.launcher.ray.placement.RayPlacement`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tfdist.errors import ConfigError
from tfdist.launcher.config import LaunchConfig
from tfdist.launcher.plan import ProcessSpec, mpi_control_port, plan_mpi, plan_workers
from tfdist.launcher.preflight import Machine
from tfdist.launcher.workers import WorkerGroup
from tfdist.mpi import hydra
from tfdist.mpi.probe import launcher_flavour
from tfdist.nodes import free_ports


class Placement(Protocol):
    """Where the processes of a launch run, attempt after attempt."""

    def plan(
        self, config: LaunchConfig, *, run_dir: str, attempt: int, base_env: Mapping[str, str]
    ) -> list[ProcessSpec]:
        """The processes of one attempt (ports chosen now: a restart may find others free)."""
        ...

    def group(self, specs: list[ProcessSpec], config: LaunchConfig, console_names: set[str] | None) -> Any:
        """The group that starts, watches and stops ``specs`` (a :class:`WorkerGroup` or one like it)."""
        ...

    def close(self) -> None:
        """Give back what the placement holds (nothing, for processes of this node)."""
        ...


@dataclass(frozen=True)
class Devices:
    """This node's devices as the plans use them: visible GPUs, the CPU ids this process may use."""

    gpus: Sequence[str]
    cpu_ids: Sequence[int]

    @property
    def cores(self) -> int:
        """Cores to share among the workers (all of the machine's when the affinity is unknown)."""
        import os

        return len(self.cpu_ids) or os.cpu_count() or 1


class _HereGroup:
    """Processes of this node, in a :class:`WorkerGroup`; nothing to give back."""

    def group(self, specs: list[ProcessSpec], config: LaunchConfig, console_names: set[str] | None) -> Any:
        """A WorkerGroup of ``specs``, their output prefixed as the config asks."""
        return WorkerGroup(specs, prefix=config.prefix, console_names=console_names)

    def close(self) -> None:
        """Nothing is held between attempts."""


@dataclass(frozen=True)
class LocalPlacement(_HereGroup):
    """One process per task (workers, parameter servers, chief) on this node."""

    devices: Devices

    def plan(
        self, config: LaunchConfig, *, run_dir: str, attempt: int, base_env: Mapping[str, str]
    ) -> list[ProcessSpec]:
        """Every task of this node, with free local ports when the job is this node alone."""
        auto_ports = config.nnodes == 1 and config.base_port is None
        return plan_workers(
            config,
            local_ports=free_ports(config.tasks_per_node) if auto_ports else None,
            visible_gpus=self.devices.gpus,
            cores=self.devices.cores,
            run_dir=run_dir,
            attempt=attempt,
            base_env=base_env,
            cpu_ids=self.devices.cpu_ids,
        )


@dataclass(frozen=True)
class MPIPlacement(_HereGroup):
    """One MPI launcher starting every rank of this node (through Hydra's proxy across nodes)."""

    devices: Devices
    mpiexec: str
    flavour: str

    def plan(
        self, config: LaunchConfig, *, run_dir: str, attempt: int, base_env: Mapping[str, str]
    ) -> list[ProcessSpec]:
        """The MPI launcher of this node."""
        return plan_mpi(
            config,
            proxy=self._hydra_proxy(config),
            mpiexec=self.mpiexec,
            cores=self.devices.cores,
            run_dir=run_dir,
            attempt=attempt,
            base_env=base_env,
            flavour=self.flavour,
            cpu_ids=self.devices.cpu_ids,
            visible_gpus=self.devices.gpus,
        )

    def _hydra_proxy(self, config: LaunchConfig) -> tuple[str, ...]:
        """This node's Hydra proxy command when MPI ranks span several nodes (``()`` on one node)."""
        if config.nnodes == 1:
            return ()
        flavour = self.flavour if self.flavour != "unknown" else launcher_flavour(self.mpiexec)[0]
        if flavour != "hydra":
            raise ConfigError(
                f"--backend {config.backend} on several nodes starts ranks through MPICH's Hydra, but "
                f"{self.mpiexec} is not Hydra. Hint: pip install 'tfdist[mpi]' (the mpich wheel), or start "
                "the job with mpirun/srun yourself."
            )
        control = f"{config.hosts[0]}:{mpi_control_port(config)}"
        proxy = hydra.proxy_argv(self.mpiexec, config.hosts, config.nproc_per_node, config.node_rank, control)
        wait = str(config.timeout or hydra.CONNECT_TIMEOUT_S)
        return (config.python, "-m", "tfdist.mpi.hydra", wait, "--", *proxy)


def open_placement(config: LaunchConfig, machine: Machine, devices: Devices) -> Placement:
    """The placement the launch asks for (Ray's: before the signal handlers, which ``ray.init`` replaces)."""
    if config.ray is not None:
        from tfdist.launcher.ray.placement import RayPlacement

        ray: Placement = RayPlacement.open(config)
        return ray
    if machine.mpiexec:
        return MPIPlacement(devices, machine.mpiexec, machine.mpi_flavour)
    return LocalPlacement(devices)


__all__ = ["Devices", "LocalPlacement", "MPIPlacement", "Placement", "open_placement"]
