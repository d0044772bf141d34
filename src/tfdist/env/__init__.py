"""WHERE AM I? One class per cluster kind, and the order in which they are tried.

Priority, stated once: an explicit ``TF_CONFIG`` beats Slurm (a user or the tfdist launcher wrote it on
purpose, possibly inside a Slurm allocation), Slurm beats MPI (``srun --mpi=pmix`` sets both, and Slurm
also knows the nodes), MPI beats TPU (a TPU variable can leak into a job's environment, a process manager's
rank variables cannot), and Local always detects, so it is last. Kubernetes (a pod of a tfdist manifest)
comes after Slurm and before MPI: its marker, TFDIST_K8S_SERVICE, is written by tfdist into the pod only.
Ray (a process Ray started: RAY_RAYLET_PID) comes after TF_CONFIG and before Slurm: a Ray node started by
``srun ray start`` passes that step's Slurm variables to every process Ray starts there, where they no
longer describe the process.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from tfdist.env.base import ClusterEnvironment
from tfdist.env.kubernetes import KubernetesEnvironment
from tfdist.env.local import LocalEnvironment
from tfdist.env.mpi import MPIEnvironment
from tfdist.env.ray import RayEnvironment
from tfdist.env.slurm import SlurmEnvironment
from tfdist.env.tf_config import TFConfigEnvironment
from tfdist.env.tpu import TPUEnvironment

ENVIRONMENTS: tuple[type[ClusterEnvironment], ...] = (
    TFConfigEnvironment,
    RayEnvironment,
    SlurmEnvironment,
    KubernetesEnvironment,
    MPIEnvironment,
    TPUEnvironment,
    LocalEnvironment,
)


def detect_environment(environ: Mapping[str, str] | None = None) -> ClusterEnvironment:
    """Return the first environment in :data:`ENVIRONMENTS` that detects itself.

    Reads ``os.environ`` when ``environ`` is not given; never writes it. Raises ConfigError when the
    variables of the detected kind are inconsistent.
    """
    env = os.environ if environ is None else environ
    for kind in ENVIRONMENTS:
        found = kind.detect(env)
        if found is not None:
            return found
    raise AssertionError("LocalEnvironment always detects")  # pragma: no cover


__all__ = [
    "ENVIRONMENTS",
    "ClusterEnvironment",
    "KubernetesEnvironment",
    "LocalEnvironment",
    "MPIEnvironment",
    "RayEnvironment",
    "SlurmEnvironment",
    "TFConfigEnvironment",
    "TPUEnvironment",
    "detect_environment",
]
