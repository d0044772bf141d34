"""WHERE AM I? One class per cluster kind, and the order in which they are tried, with its reasons:

TF_CONFIG (written on purpose, even inside a Slurm allocation) > Ray (``srun ray start`` leaves a Slurm
step's variables in every process Ray starts, where they no longer describe it) > Slurm (``srun
--mpi=pmix`` sets MPI's variables too, and Slurm knows the nodes) > Kubernetes (TFDIST_K8S_SERVICE, which
only tfdist's manifest sets) > MPI (a TPU variable can leak into a job, rank variables cannot) > TPU >
local (always detects).
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
    """The first of :data:`ENVIRONMENTS` that detects itself in ``environ`` (default ``os.environ``, only
    read); ConfigError when that kind's variables are inconsistent."""
    env = os.environ if environ is None else environ
    # LocalEnvironment always detects: next() finds one.
    return next(found for kind in ENVIRONMENTS if (found := kind.detect(env)) is not None)
