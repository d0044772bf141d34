"""The nodes of a job, one home for each node utility (used by env/, launch/, worker/, bench/, diagnose/):
:mod:`~tfdist.nodes.lists` (pure: node and host lists, addresses, ports, node ranges) and
:mod:`~tfdist.nodes.machine` (this machine: free ports, its GPUs, name lookups with a timeout).
"""

# ruff: noqa: F401  (this module re-exports its submodules' names)
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
