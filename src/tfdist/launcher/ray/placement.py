"""Ray as the placement of ``tfdist launch --ray``: reserve one bundle per worker for the whole launch, hold
an actor on each, and hand the supervisor a WorkerGroup whose processes run on the bundles' nodes."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from typing import Any

from tfdist.errors import ConfigError
from tfdist.launcher.config import LaunchConfig
from tfdist.launcher.console import console_print
from tfdist.launcher.plan import ProcessSpec
from tfdist.launcher.ray.address import check_reachable
from tfdist.launcher.ray.group import RayWorkerGroup
from tfdist.launcher.ray.plan import (
    RAY_INSTALL_HINT,
    RAY_STRATEGIES,
    NodeResources,
    Placement,
    bundle,
    plan_ray_workers,
    shortfall,
)
from tfdist.worker.contract import forwarded_env

#: How long the bundles may wait for resources that exist but other jobs hold, before the launch gives up.
PLACEMENT_WAIT_S = 60.0


def import_ray() -> Any:
    """The ``ray`` module, or one line with the install hint."""
    try:
        import ray
    except ImportError:
        raise ConfigError(f"--ray needs Ray, which is not installed here. {RAY_INSTALL_HINT}") from None
    return ray


class RayPlacement:
    """One bundle and one actor per worker on a Ray cluster, for the life of a launch."""

    def __init__(self, ray: Any, address: str, group: Any, actors: list[Any], where: list[tuple[str, str]]):
        self.ray, self.address, self.placement_group = ray, address, group
        self.actors, self.where = actors, where

    @classmethod
    def open(cls, config: LaunchConfig) -> RayPlacement:
        """Connect to ``config.ray`` and reserve the workers' bundles, or say in one line why not."""
        assert config.ray is not None
        ray = import_ray()
        check_reachable(config.ray)
        try:
            ray.init(address=config.ray, logging_level=logging.ERROR, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ConfigError(
                f"--ray-address {config.ray}: cannot join a Ray cluster there: {first} Hint: start one with "
                "ray start --head, or give its address (HOST:PORT)."
            ) from None
        try:
            return cls._reserve(ray, config)
        except BaseException:
            ray.shutdown()
            raise

    @classmethod
    def _reserve(cls, ray: Any, config: LaunchConfig) -> RayPlacement:
        from ray.util.placement_group import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from tfdist.launcher.ray.host import WorkerHost

        address = config.ray or "auto"
        nodes = [
            NodeResources(
                n["NodeManagerAddress"], n["Resources"].get("CPU", 0.0), n["Resources"].get("GPU", 0.0)
            )
            for n in ray.nodes()
            if n.get("Alive")
        ]
        why = shortfall(config, nodes, address)
        if why:
            raise ConfigError(why)
        need = bundle(config)
        group = placement_group([need] * config.nproc_per_node, strategy=RAY_STRATEGIES[config.ray_strategy])
        if not group.wait(timeout_seconds=PLACEMENT_WAIT_S):
            remove_placement_group(group)  # nothing of the job stays pending on the cluster
            free = ray.available_resources()
            raise ConfigError(
                f"the Ray cluster at {address} could not place -n {config.nproc_per_node} bundles of "
                f"{need} ({config.ray_strategy}) within {PLACEMENT_WAIT_S:g} s: free now "
                f"{free.get('CPU', 0):g} CPU, {free.get('GPU', 0):g} GPU (other jobs hold the rest). "
                "Hint: ray status shows who holds them; retry later or use fewer workers."
            )
        remote = ray.remote(WorkerHost)
        actors = [
            remote.options(
                num_cpus=need["CPU"],
                num_gpus=need.get("GPU", 0),
                max_concurrency=4,  # a long read never delays a signal or a kill
                scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=i),
            ).remote()
            for i in range(config.nproc_per_node)
        ]
        try:
            where = [tuple(w) for w in ray.get([a.where.remote() for a in actors], timeout=120)]
        except BaseException:
            for actor in actors:
                ray.kill(actor)
            remove_placement_group(group)
            raise
        placed = ", ".join(f"w{i} on {addr}" for i, (_, addr) in enumerate(where))
        console_print(f"tfdist launch: Ray at {address} placed {len(actors)} worker(s): {placed}")
        return cls(ray, address, group, actors, where)

    def plan(
        self, config: LaunchConfig, *, run_dir: str, attempt: int, base_env: Mapping[str, str]
    ) -> list[ProcessSpec]:
        """Every worker of one attempt, with ports free on its node now."""
        ports = self.ray.get([actor.free_port.remote() for actor in self.actors], timeout=60)
        placements = [
            Placement(address, int(port), node)
            for (node, address), port in zip(self.where, ports, strict=True)
        ]
        return plan_ray_workers(
            config, placements, run_dir=run_dir, attempt=attempt, base_env=forwarded_env(base_env)
        )

    def group(
        self, specs: list[ProcessSpec], config: LaunchConfig, console_names: set[str] | None
    ) -> RayWorkerGroup:
        """The attempt's WorkerGroup on the actors."""
        return RayWorkerGroup(
            specs,
            self.actors,
            prefix=config.prefix,
            console_names=console_names,
            launcher_python=config.python,
        )

    def close(self) -> None:
        """Stop the actors (and any worker still running), free the bundles, disconnect."""
        from ray.util.placement_group import remove_placement_group

        for actor in self.actors:
            with contextlib.suppress(Exception):  # a lost node: Ray ends what ran there
                self.ray.get(actor.kill.remote(), timeout=15)
            self.ray.kill(actor)
        try:
            remove_placement_group(self.placement_group)
        finally:
            self.ray.shutdown()
