"""Host lists (--hosts / --hostfile): table cases and properties over generated names."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tfdist.errors import ConfigError
from tfdist.launch.hosts import check_hosts, is_address, is_loopback

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
