"""Which nodes ``tfdist bench`` runs across, and how it reaches them: ``--hosts``/``--on-host``, or the
Slurm allocation it runs in.

Input/Output: ``resolve_nodes("n1,n2", (), None, {})`` -> ``(("n1", "n2"), "")``; inside ``salloc -N 2``
(``SLURM_JOB_NODELIST=n[1-2]``) ``resolve_nodes(None, (1, 2), None, env)`` -> ``(("n1", "n2"),
"srun --nodes 1 --ntasks 1 --nodelist {host} --overlap --")``.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping

from tfdist.errors import ConfigError

#: How a command reaches one node of a Slurm allocation: one task there, beside whatever already runs.
SRUN_ON_HOST = "srun --nodes 1 --ntasks 1 --nodelist {host} --overlap --"


def slurm_nodes(nodelist: str) -> tuple[str, ...]:
    """The host names of a Slurm node list (``n[1-3]`` -> n1, n2, n3), expanded by ``scontrol``."""
    try:
        proc = subprocess.run(
            ["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(
            f"SLURM_JOB_NODELIST={nodelist!r}: scontrol could not expand it ({exc}). Hint: pass --hosts."
        ) from None
    if proc.returncode != 0:
        raise ConfigError(
            f"SLURM_JOB_NODELIST={nodelist!r}: scontrol show hostnames failed ({proc.stderr.strip()}). "
            "Hint: pass --hosts."
        )
    return tuple(proc.stdout.split())


def resolve_nodes(
    hosts: str | None, nodes: tuple[int, ...], on_host: str | None, environ: Mapping[str, str]
) -> tuple[tuple[str, ...], str]:
    """(hosts, on-host prefix): as given; else, with ``--nodes`` inside a Slurm allocation, its nodes
    reached through ``srun``; else none (one machine)."""
    if hosts is not None:
        return tuple(h.strip() for h in hosts.split(",")), on_host or ""
    nodelist = environ.get("SLURM_JOB_NODELIST")
    if nodes and nodelist:
        return slurm_nodes(nodelist), SRUN_ON_HOST if on_host is None else on_host
    return (), on_host or ""
