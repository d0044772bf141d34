"""Test hosts (network namespaces, scripts/testhosts.sh) and a 3-node Slurm on them, one per test run.

Every name, address and directory is the tests' own (prefix ``tfdt``, subnet 10.78.0.0/24), so hosts or a
cluster made by hand are never touched; whatever a crashed run left behind is removed when the next starts.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest
from hostcluster import CLUSTER_ENV, LEAKY, NODES, SLURM_SCRIPT, Cluster, unavailable_reason


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """A 3-node Slurm (slurmctld on node1, one slurmd per host) on 3 test hosts, for the whole run."""
    reason = unavailable_reason()
    if reason:
        pytest.skip(f"no test hosts: {reason}")
    env = {k: v for k, v in os.environ.items() if not k.startswith(LEAKY)}
    env.update(CLUSTER_ENV)
    env["SLURM_CONF"] = os.path.join(CLUSTER_ENV["TFDIST_SLURM_DIR"], "slurm.conf")
    started = subprocess.run(
        [SLURM_SCRIPT, "start", "--nodes", str(NODES)], env=env, capture_output=True, text=True, timeout=900
    )
    assert started.returncode == 0, started.stderr[-3000:]
    try:
        yield Cluster(env["SLURM_CONF"], env)
    finally:
        subprocess.run([SLURM_SCRIPT, "stop"], env=env, capture_output=True, timeout=120)
