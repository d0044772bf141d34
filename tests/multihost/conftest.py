"""The test hosts (network namespaces, scripts/testhosts.sh) and a 3-node Slurm on them, one of each per test
run: every test that needs hosts asks for ``testhosts`` (or ``cluster``, which runs on the same hosts).

Every name, address and directory is the tests' own (prefix ``tfdt``, subnet 10.78.0.0/24: hostcluster.py), so
hosts or a cluster made by hand or by a benchmark are never touched; whatever a crashed run left behind is
removed when the next starts. A test that changes a host (a cap, a cut, an alias, a name on loopback) puts it
back before it ends; one that kills a host's processes does it through ``testhosts.kill``.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest
from hostcluster import (
    CLUSTER_ENV,
    NODES,
    SLURM_SCRIPT,
    Cluster,
    Hosts,
    clean_env,
    kill_slurm,
    make_hosts,
    repair_killed,
)


@pytest.fixture(scope="session")
def testhosts() -> Iterator[Hosts]:
    """node1..node3 on one switch, for the whole run (skipped with the reason where they cannot be made)."""
    yield from make_hosts()


@pytest.fixture(scope="session")
def cluster(testhosts: Hosts) -> Iterator[Cluster]:
    """A 3-node Slurm (slurmctld on node1, one slurmd per host) on the test hosts, for the whole run."""
    env = {**clean_env(), **CLUSTER_ENV}
    env["SLURM_CONF"] = os.path.join(CLUSTER_ENV["TFDIST_SLURM_DIR"], "slurm.conf")
    started = subprocess.run(
        [SLURM_SCRIPT, "start", "--nodes", str(NODES)], env=env, capture_output=True, text=True, timeout=900
    )
    assert started.returncode == 0, started.stderr[-3000:]
    try:
        yield Cluster(env=env, conf=env["SLURM_CONF"])
    finally:
        kill_slurm(CLUSTER_ENV["TFDIST_SLURM_DIR"])
        subprocess.run([SLURM_SCRIPT, "stop"], env=env, capture_output=True, timeout=120)


@pytest.fixture(autouse=True)
def repair_killed_hosts() -> Iterator[None]:
    """A host a test killed (``testhosts.kill``) gets the Slurm cluster's daemon back after the test."""
    yield
    repair_killed()
