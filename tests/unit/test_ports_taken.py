"""A `--hosts` job's fixed port taken by another program on this node: one line naming the node, before any
worker starts (with --rdzv each node picks its own free ports)."""

from __future__ import annotations

import socket

import pytest

from tfdist.errors import ConfigError
from tfdist.launcher.config import LaunchConfig
from tfdist.launcher.preflight import check_ports_free, fixed_ports


def config(**kwargs) -> LaunchConfig:
    base = {"command": ("t.py",), "nproc_per_node": 2, "nnodes": 2, "hosts": ("n1", "n2"), "base_port": 40100}
    return LaunchConfig(**{**base, **kwargs})


def test_the_ports_this_node_listens_on() -> None:
    assert fixed_ports(config()) == (40100, 40101)
    assert fixed_ports(config(backend="mpi")) == (40100,)  # node 0 serves MPI's control port
    assert fixed_ports(config(backend="mpi", node_rank=1)) == ()


def test_a_port_another_program_listens_on_is_named_with_this_node() -> None:
    with socket.socket() as holder:
        holder.bind(("", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(ConfigError) as info:
            check_ports_free((port,), port)
    message = str(info.value)
    assert f"port {port} is taken on {socket.gethostname()}" in message and f"--base-port {port}" in message
    check_ports_free((port,), port)  # released: free again
