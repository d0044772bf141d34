"""Node utilities (tfdist.nodes): host lists (--hosts, --hostfile, -H) and their checks, the loopback rule,
free ports, the GPU count every command shares, name lookups with a timeout, peers that resolve to loopback.
Table cases and properties over generated names; the machine's parts with their outside calls replaced."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tfdist import nodes
from tfdist.errors import ConfigError
from tfdist.nodes import (
    HostSlots,
    check_hosts,
    is_address,
    is_loopback,
    loopback_among_remote,
    loopback_peers,
    machine,
    parse_host_slots,
    parse_hosts,
    read_hostfile,
)

LABEL = st.from_regex(r"\A[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?\Z")
HOST = st.lists(LABEL, min_size=1, max_size=3).map(".".join).filter(lambda h: not is_loopback(h))
IPV4 = (
    st.tuples(*[st.integers(1, 254)] * 4)
    .map(lambda t: ".".join(map(str, t)))
    .filter(lambda h: not is_loopback(h))
)


@pytest.mark.parametrize(
    ("host", "ok"),
    [
        ("node01", True),
        ("gpu-7.cluster.example.org", True),
        ("10.1.2.3", True),
        ("::1", True),
        ("[fe80::1]", True),
        ("n" * 63, True),
        ("n" * 64, False),
        ("-node", False),
        ("node-", False),
        ("node_1", False),
        ("a;b", False),
        ("$(id)", False),
        ("a b", False),
        ("", False),
        ("a..b", False),
    ],
)
def test_addresses(host: str, ok: bool) -> None:
    assert is_address(host) is ok


@given(st.lists(st.one_of(HOST, IPV4), min_size=1, max_size=8, unique_by=str.lower))
def test_distinct_valid_hosts_pass_unchanged(hosts: list[str]) -> None:
    assert check_hosts(tuple(hosts), "--hosts") == tuple(hosts)


@given(st.lists(HOST, min_size=1, max_size=6, unique_by=str.lower), st.data())
def test_a_repeated_host_is_refused_whatever_its_case(hosts: list[str], data: st.DataObject) -> None:
    repeated = data.draw(st.sampled_from(hosts))
    position = data.draw(st.integers(0, len(hosts)))
    listed = [*hosts[:position], repeated.upper(), *hosts[position:]]
    with pytest.raises(ConfigError, match="is listed twice"):
        check_hosts(tuple(listed), "--hosts")


@given(HOST, st.sampled_from(list(";|&$`'\" <>(){}*?!\\_,")))
def test_shell_and_invalid_characters_are_refused(host: str, bad: str) -> None:
    with pytest.raises(ConfigError, match="is not a host name or IP address"):
        check_hosts((host[:1] + bad + host[1:], "other"), "--hosts")


@given(
    st.lists(HOST, min_size=1, max_size=4, unique_by=str.lower), st.sampled_from(["localhost", "127.0.0.1"])
)
def test_loopback_cannot_be_mixed_with_remote_hosts(hosts: list[str], loopback: str) -> None:
    with pytest.raises(ConfigError, match="cannot be mixed with other hosts"):
        check_hosts((loopback, *hosts), "--hosts")
    assert check_hosts((loopback,), "--hosts") == (loopback,)


def test_host_slots_are_parsed_as_horovodrun_writes_them() -> None:
    assert parse_host_slots("n1:4,n2:4") == (HostSlots("n1", 4), HostSlots("n2", 4))
    assert parse_host_slots("a,b") == (HostSlots("a", 1), HostSlots("b", 1))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("n1:4,n2:2", "every host must run the same number of workers"),
        ("n1:x", "has slots 'x', not a number"),
        ("n1:0", "n1 has 0 slots"),
        ("n1:2,n1:2", "host n1 is listed twice"),
        ("n1:2,,n2:2", "an empty host name"),
    ],
)
def test_bad_host_slots(text: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        parse_host_slots(text)


@pytest.mark.parametrize(
    ("hosts", "named"),
    [
        (["localhost", "n2"], ["localhost"]),
        (["n1", "127.0.0.1", "[::1]", "n4"], ["127.0.0.1", "[::1]"]),
        (["127.0.0.1", "localhost", "::1"], []),  # all on this machine: a one-machine job
        (["n1", "10.0.0.2"], []),
        ([], []),
    ],
)
def test_loopback_among_remote_hosts(hosts: list[str], named: list[str]) -> None:
    assert loopback_among_remote(hosts) == named


@pytest.mark.parametrize(
    ("text", "hosts"),
    [("n1,n2", ("n1", "n2")), (" n1 , n2 ", ("n1", "n2")), ("n1", ("n1",)), ("n1,,n2", ("n1", "", "n2"))],
)
def test_host_lists(text: str, hosts: tuple[str, ...]) -> None:
    assert parse_hosts(text) == hosts


def test_hostfile(tmp_path: Path) -> None:
    (tmp_path / "hosts").write_text("n1 slots=4\n# spare node\n\n  n2  # the second\n")
    assert read_hostfile(str(tmp_path / "hosts")) == ("n1", "n2")
    (tmp_path / "empty").write_text("# nobody\n")
    with pytest.raises(ConfigError, match="lists no hosts"):
        read_hostfile(str(tmp_path / "empty"))
    with pytest.raises(ConfigError, match="cannot be read"):
        read_hostfile(str(tmp_path / "missing"))


def test_peers_that_resolve_to_loopback_here_are_named() -> None:
    table = {"node1": "127.0.1.1", "node2": "127.0.1.1", "node3": "10.0.0.3"}
    assert loopback_peers("node1", ["node1", "node2", "node3", "node2", "gone"], table.get) == [
        ("node2", "127.0.1.1")
    ]


def test_free_ports_are_distinct_and_bindable() -> None:
    ports = nodes.free_ports(3)
    assert len(set(ports)) == 3
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[0]))


def test_reverse_lookups_do_not_wait_for_a_slow_resolver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(machine.socket, "gethostbyaddr", lambda _ip: time.sleep(5) or ("late", [], []))
    started = time.monotonic()
    assert nodes.host_name("10.0.0.9", timeout=0.2) is None
    assert time.monotonic() - started < 2
    monkeypatch.setattr(machine.socket, "gethostbyaddr", lambda ip: (f"n{ip[-1]}.cluster", [], [ip]))
    assert nodes.host_name("10.0.0.9") == "n9.cluster"


def test_this_machine_by_name_and_by_loopback() -> None:
    assert nodes.is_this_machine("localhost") and nodes.is_this_machine(socket.gethostname())
    assert nodes.is_this_machine("127.0.0.1")
    assert not nodes.is_this_machine("no-such-host.invalid")


@pytest.mark.parametrize(
    ("nvml", "smi", "proc", "count"),
    [
        (4, "GPU 0: A\nGPU 1: A\n", ["0", "1", "2"], 4),  # NVML first, for every command
        (None, "GPU 0: A\n  MIG 1g.5gb Device 0\nGPU 1: A\n", ["0", "1", "2"], 2),  # then nvidia-smi -L
        (None, None, ["0000:3b:00.0", "0000:5e:00.0", "0000:86:00.0"], 3),  # then the driver's list
        (None, None, None, 0),  # no driver
    ],
)
def test_one_gpu_count_for_every_command(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    nvml: int | None,
    smi: str | None,
    proc: list[str] | None,
    count: int,
) -> None:
    import subprocess
    import sys
    import types

    if nvml is None:
        monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails: no library
    else:
        fake = types.SimpleNamespace(
            nvmlInit=lambda: None,
            nvmlShutdown=lambda: None,
            nvmlDeviceGetCount=lambda: nvml,
            nvmlDeviceGetHandleByIndex=lambda i: i,
            nvmlDeviceGetName=lambda handle: b"NVIDIA A100-SXM4-80GB",
        )
        monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(
        machine.shutil, "which", lambda name: "/usr/bin/nvidia-smi" if smi is not None else None
    )
    monkeypatch.setattr(
        machine.subprocess,
        "run",
        lambda argv, **kw: subprocess.CompletedProcess(argv, 0, stdout=smi or "", stderr=""),
    )
    gpus = tmp_path / "gpus"
    if proc is not None:
        for name in proc:
            (gpus / name).mkdir(parents=True)
    monkeypatch.setattr(machine, "NVIDIA_GPUS_DIR", str(gpus))
    assert nodes.gpu_count() == count
    assert len(nodes.gpu_names()) == count
    assert nodes.visible_gpus({}) == [str(i) for i in range(count)]
    assert nodes.visible_gpus({"CUDA_VISIBLE_DEVICES": "3,1"}) == ["3", "1"]


def test_gpu_names_come_from_nvidia_smi_listing() -> None:
    listing = (
        "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1a2b)\n"
        "  MIG 1g.10gb      Device  0: (UUID: MIG-3c4d)\n"
        "GPU 1: Tesla V100-SXM2-32GB (UUID: GPU-5e6f)\n"
        "GPU 2: (UUID: GPU-7a8b)\n"
    )
    assert machine.smi_names(listing) == ["NVIDIA H100 80GB HBM3", "Tesla V100-SXM2-32GB", "NVIDIA GPU"]
    assert machine.smi_names("") == []
