"""The memory one replica must fit in: a size given with ``--device-memory``, this node's GPU (NVML), or
without a GPU the host's RAM, which every replica of the node shares."""

from __future__ import annotations

import os

from tfdist.estimate.plan import parse_size
from tfdist.estimate.result import Device
from tfdist.nodes import gpu_memory


def find_device(flag: str | None, replicas: int) -> Device:
    """``--device-memory`` if given, else GPU 0's total memory from NVML, else this host's RAM."""
    if flag is not None:
        return Device(f"--device-memory {flag}", parse_size(flag))
    gpu = gpu_memory()
    if gpu is not None:
        return Device(f"GPU 0: {gpu[0]}", gpu[1])
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return Device("host RAM (no GPU found)", ram, shared_by=replicas)
