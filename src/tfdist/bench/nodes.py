"""Which nodes ``tfdist bench`` runs across, and how it reaches them: ``--hosts``/``--on-host``, or the
Slurm allocation it runs in.

Input/Output: ``resolve_nodes("n1,n2", (), None, {})`` -> ``(("n1", "n2"), "")``; inside ``salloc -N 2``
(``SLURM_JOB_NODELIST=n[1-2]``) ``resolve_nodes(None, (1, 2), None, env)`` -> ``(("n1", "n2"),
"srun --nodes 1 --ntasks 1 --nodelist {host} --overlap --")``.
"""

from __future__ import annotations

from collections.abc import Mapping

from tfdist.nodes import expand_nodelist, parse_hosts

#: How a command reaches one node of a Slurm allocation: one task there, beside whatever already runs.
SRUN_ON_HOST = "srun --nodes 1 --ntasks 1 --nodelist {host} --overlap --"


def resolve_nodes(
    hosts: str | None, nodes: tuple[int, ...], on_host: str | None, environ: Mapping[str, str]
) -> tuple[tuple[str, ...], str]:
    """(hosts, on-host prefix): as given; else, with ``--nodes`` inside a Slurm allocation, its nodes
    reached through ``srun``; else none (one machine)."""
    if hosts is not None:
        return parse_hosts(hosts), on_host or ""
    nodelist = environ.get("SLURM_JOB_NODELIST")
    if nodes and nodelist:
        prefix = SRUN_ON_HOST if on_host is None else on_host
        return tuple(expand_nodelist(nodelist, "SLURM_JOB_NODELIST")), prefix
    return (), on_host or ""
