"""TF_CONFIG: the explicit cluster description TensorFlow itself reads."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tfdist import variables
from tfdist.env.base import KNOWN_ROLES, ClusterEnvironment, ClusterSpecDict
from tfdist.errors import ConfigError
from tfdist.nodes import cuda_visible_devices, loopback_among_remote, parse_address, split_address

_HINT = (
    'Hint: TF_CONFIG looks like {"cluster": {"worker": ["host:port", ...]}, '
    '"task": {"type": "worker", "index": 0}}.'
)


def parse_cluster(cluster: object) -> ClusterSpecDict:
    """Validate a cluster spec mapping roles to address lists; reject unknown roles and duplicates."""
    if not isinstance(cluster, dict) or not cluster:
        raise ConfigError(
            f'TF_CONFIG: "cluster" must be a non-empty object of role -> address list, got {cluster!r}. '
            f"{_HINT}"
        )
    spec: ClusterSpecDict = {}
    seen: dict[str, str] = {}
    for role, addresses in cluster.items():
        if role not in KNOWN_ROLES:
            raise ConfigError(
                f"TF_CONFIG: unknown role {role!r} in cluster; roles are {', '.join(KNOWN_ROLES)}."
            )
        if not isinstance(addresses, list) or not addresses:
            raise ConfigError(
                f"TF_CONFIG: cluster[{role!r}] must be a non-empty list of host:port, got {addresses!r}."
            )
        if role == "chief" and len(addresses) != 1:
            raise ConfigError(
                f"TF_CONFIG: cluster has {len(addresses)} chiefs; a cluster has at most one chief."
            )
        for i, address in enumerate(addresses):
            parse_address(address, f"TF_CONFIG cluster[{role!r}][{i}]", 'write e.g. "node1:2222"')
            if address in seen:
                raise ConfigError(
                    f"TF_CONFIG: address {address} appears twice ({seen[address]} and {role}[{i}]). Hint: "
                    "give every task its own port."
                )
            seen[address] = f"{role}[{i}]"
        spec[role] = list(addresses)
    if not any(role in spec for role in ("chief", "worker")):
        raise ConfigError(f"TF_CONFIG: cluster has no chief or worker task; nothing would train. {_HINT}")
    return spec


def loopback_warning(spec: ClusterSpecDict) -> str | None:
    """Warn when loopback addresses are mixed with other hosts: remote tasks could never reach them."""
    hosts = {split_address(addr)[0] for addrs in spec.values() for addr in addrs}
    loop = set(loopback_among_remote(hosts))
    if loop:
        return (
            f"TF_CONFIG mixes loopback hosts ({', '.join(sorted(loop))}) with other hosts "
            f"({', '.join(sorted(hosts - loop))}); tasks on other machines cannot reach a loopback address."
        )
    return None


class TFConfigEnvironment(ClusterEnvironment):
    """A cluster described by the ``TF_CONFIG`` JSON variable."""

    kind = "tf_config"

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> TFConfigEnvironment | None:
        """Parse and validate ``TF_CONFIG``; ``None`` when the variable is unset or blank."""
        raw = environ.get("TF_CONFIG")
        if raw is None or not raw.strip():
            return None
        config = _load_json(raw)
        spec = parse_cluster(config.get("cluster"))
        role, index = _parse_task(config.get("task"), spec)
        warning = loopback_warning(spec)
        # Training ranks: the chief first, then the workers in order; -1 for ps and evaluator tasks.
        rank = index + ("chief" in spec and role == "worker") if role in ("chief", "worker") else -1
        return cls(
            rank=rank,
            world_size=len(spec.get("chief", [])) + len(spec.get("worker", [])),
            local_rank=int(variables.get("TFDIST_LOCAL_RANK", environ)),
            local_world_size=int(variables.get("TFDIST_LOCAL_WORLD_SIZE", environ)),
            role=role,
            task_index=index,
            cluster_spec={k: v for k, v in spec.items() if k != "evaluator"},
            gpu_ids=cuda_visible_devices(environ),
            # The launcher pins one GPU per worker through CUDA_VISIBLE_DEVICES before the process starts.
            gpus_bound_by_scheduler=variables.raw("TFDIST_RANK", environ) is not None,
            source="TF_CONFIG",
            warnings=(warning,) if warning else (),
        )


def _load_json(raw: str) -> dict[str, Any]:
    try:
        config = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"TF_CONFIG is not valid JSON ({exc.msg} at character {exc.pos}): {raw[:80]!r}. {_HINT}"
        ) from None
    if not isinstance(config, dict):
        raise ConfigError(
            f"TF_CONFIG must be a JSON object, got {type(config).__name__}: {raw[:80]!r}. {_HINT}"
        )
    for key in ("cluster", "task"):
        if key not in config:
            raise ConfigError(f"TF_CONFIG has no {key!r} key (keys: {sorted(config)}). {_HINT}")
    return config


def _parse_task(task: object, spec: ClusterSpecDict) -> tuple[str, int]:
    if not isinstance(task, dict):
        raise ConfigError(f'TF_CONFIG: "task" must be an object with type and index, got {task!r}. {_HINT}')
    role = task.get("type")
    if role not in KNOWN_ROLES:
        raise ConfigError(f"TF_CONFIG: task type {role!r} is not a role; roles are {', '.join(KNOWN_ROLES)}.")
    if role not in spec:
        raise ConfigError(
            f"TF_CONFIG: task type {role!r} is not in the cluster (roles there: {', '.join(spec)})."
        )
    index = task.get("index", 0)
    if isinstance(index, bool) or not isinstance(index, int):
        raise ConfigError(f"TF_CONFIG: task index {index!r} is not an integer.")
    if not 0 <= index < len(spec[role]):
        raise ConfigError(
            f"TF_CONFIG: task index {index} is out of range for {role!r}, which has {len(spec[role])} "
            f"task(s) (valid: 0-{len(spec[role]) - 1})."
        )
    return role, index
