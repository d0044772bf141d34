"""A rank of an MPI job (mpirun / mpiexec, Open MPI, MPICH/Hydra, or PMIx under srun --mpi=pmix).

Detected from the process manager's variables only; MPI itself is initialised by the MPI backend.
"""

from __future__ import annotations

from collections.abc import Mapping

from tfdist.env.base import ClusterEnvironment
from tfdist.errors import ConfigError
from tfdist.mpi.stack import RANK_VARIABLES
from tfdist.nodes import cuda_visible_devices


def _number(environ: Mapping[str, str], name: str, default: int | None = None) -> int:
    raw = environ.get(name)
    if raw is None:
        if default is None:
            raise ConfigError(f"{name} is not set although other MPI variables are.")
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not an integer.") from None


class MPIEnvironment(ClusterEnvironment):
    """Rank and size from the MPI process manager; no TensorFlow cluster (the MPI backend syncs)."""

    kind = "mpi"

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> MPIEnvironment | None:
        """Detect the first MPI family whose rank variable is set."""
        for family, rank_var, size_var, local_var, local_size_var in RANK_VARIABLES:
            if rank_var not in environ:
                continue
            rank = _number(environ, rank_var)
            # PMIx under srun does not always export a size: Slurm's task count is the same number.
            size = _number(environ, size_var, _number(environ, "SLURM_NTASKS", 0) or None)
            if not 0 <= rank < size:
                raise ConfigError(
                    f"{rank_var}={rank} but {size_var}={size}; a rank must be below the job size."
                )
            local = _number(environ, local_var, 0)
            return cls(
                rank=rank,
                world_size=size,
                local_rank=local,
                local_world_size=max(_number(environ, local_size_var, 1), local + 1),
                task_index=rank,
                gpu_ids=cuda_visible_devices(environ),
                source=f"{family} ({rank_var})",
            )
        return None

    @property
    def is_distributed(self) -> bool:
        """Several MPI ranks take part even though there is no TensorFlow cluster spec."""
        return self.world_size > 1
