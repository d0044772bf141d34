"""The nodes of a job, one home for each node utility (used by env/, launch/, worker/, bench/, diagnose/).

- :mod:`tfdist.nodes.lists` (pure): Slurm's compressed node lists and task counts, ``--hosts``,
  ``--hostfile`` and ``-H HOST:SLOTS`` lists, their checks, and the rule that a loopback address cannot
  stand beside remote hosts.
- :mod:`tfdist.nodes.machine` (this machine): free ports, the GPUs it has (one count for every command),
  name lookups with a timeout, whether a name is this machine, peers that resolve to loopback here.
"""

from __future__ import annotations

from tfdist.nodes.lists import (
    MAX_HOSTS,
    MAX_PORT,
    HostSlots,
    NodeRange,
    check_hosts,
    check_ports,
    expand_nodelist,
    expand_tasks_per_node,
    is_address,
    is_loopback,
    loopback_among_remote,
    parse_address,
    parse_host_slots,
    parse_hosts,
    parse_node_range,
    read_hostfile,
    split_address,
)
from tfdist.nodes.machine import (
    NVIDIA_GPUS_DIR,
    address_of,
    cuda_visible_devices,
    free_ports,
    gpu_count,
    gpu_memory,
    gpu_names,
    host_name,
    is_this_machine,
    loopback_peers,
    parse_gpu_list,
    visible_gpus,
)

__all__ = [
    "MAX_HOSTS",
    "MAX_PORT",
    "NVIDIA_GPUS_DIR",
    "HostSlots",
    "NodeRange",
    "address_of",
    "check_hosts",
    "check_ports",
    "cuda_visible_devices",
    "expand_nodelist",
    "expand_tasks_per_node",
    "free_ports",
    "gpu_count",
    "gpu_memory",
    "gpu_names",
    "host_name",
    "is_address",
    "is_loopback",
    "is_this_machine",
    "loopback_among_remote",
    "loopback_peers",
    "parse_address",
    "parse_gpu_list",
    "parse_host_slots",
    "parse_hosts",
    "parse_node_range",
    "read_hostfile",
    "split_address",
    "visible_gpus",
]
