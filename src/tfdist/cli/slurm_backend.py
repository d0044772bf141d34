"""The backend of a Slurm job, chosen at submission: what the nodes can run, said in one line.

The choice must be made before the job starts: MPI ranks need ``srun --mpi=...`` in the job script.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import replace

from tfdist import backends, variables
from tfdist.errors import ConfigError
from tfdist.launcher.preflight import horovod_installed
from tfdist.mpi.probe import srun_mpi_plugins
from tfdist.mpi.stack import SRUN_PLUGIN
from tfdist.slurm.script import MPI_BACKENDS, SbatchSpec, runs_tfdist_train


def _mpi4py_in(spec: SbatchSpec) -> bool | None:
    """Whether the job's Python has mpi4py (None when the job runs another Python, which cannot be asked)."""
    if spec.python != sys.executable:
        return None
    return importlib.util.find_spec("mpi4py") is not None


def resolve_backend(spec: SbatchSpec, requested: str) -> SbatchSpec:
    """``spec`` with its backend (:func:`tfdist.backends.choose`): the one asked for (flag, config file or
    TFDIST_BACKEND), checked against what the job can run, or for ``auto`` the fastest correct one (said on
    stderr for ``tfdist train``)."""
    plugin = spec.mpi or SRUN_PLUGIN
    choice = backends.choose(
        requested or str(variables.get("TFDIST_BACKEND")),
        source="--backend" if requested else "TFDIST_BACKEND",
        own_strategy=not runs_tfdist_train(spec.command),
        gpus=spec.gpus_per_node,
        mpi_ready=lambda: _mpi_ready(spec, plugin),
        mpi_launcher=f"srun --mpi={plugin}",
        horovod_installed=horovod_installed,
    )
    chosen = replace(spec, backend=choice.name, horovod_shim=choice.horovod_shim)
    if choice.reason:
        sys.stderr.write(f"tfdist slurm: backend {choice.name}: {choice.reason}.\n")
    elif choice.name in MPI_BACKENDS:  # named, not chosen after the probe: can the job start its ranks?
        _check_mpi_ready(chosen, choice.name, plugin, "--backend" if requested else "TFDIST_BACKEND")
    if choice.horovod_shim:
        sys.stderr.write(
            "tfdist slurm: Horovod is not installed here; in this job `import horovod` gives tfdist's "
            "implementation (tfdist.horovod, on the MPI backend).\n"
        )
    return chosen


def _mpi_ready(spec: SbatchSpec, plugin: str) -> bool:
    """The job's Python has mpi4py and this Slurm offers ``srun --mpi=plugin``."""
    plugins = srun_mpi_plugins()
    return bool(_mpi4py_in(spec)) and plugins is not None and plugin in plugins


def _check_mpi_ready(spec: SbatchSpec, name: str, plugin: str, source: str) -> None:
    if _mpi4py_in(spec) is False:
        raise ConfigError(
            f"{source}={name} needs mpi4py in the job's Python ({spec.python}), which lacks it. "
            f"{backends.MPI_INSTALL_HINT}"
        )
    plugins = srun_mpi_plugins()
    if plugins is not None and plugin not in plugins:
        raise ConfigError(
            f"{source}={name} starts ranks through srun --mpi={plugin}, but this Slurm offers "
            f"{', '.join(plugins) or 'no MPI plugin'} (srun --mpi=list). Hint: --mpi with one of those."
        )
