"""The backend of a Slurm job, chosen at submission: what the nodes can run, said in one line.

The choice must be made before the job starts: MPI ranks need ``srun --mpi=...`` in the job script.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from dataclasses import replace

from tfdist import backends, variables
from tfdist.errors import ConfigError
from tfdist.slurm.script import DEFAULT_MPI_PLUGIN, MPI_BACKENDS, SbatchSpec, runs_tfdist_train

#: Seconds `srun --mpi=list` may take (it only reads the plugin directory).
PLUGIN_LIST_TIMEOUT_S = 20


def srun_mpi_plugins() -> tuple[str, ...] | None:
    """The plugins ``srun --mpi=list`` names here (None when srun is missing or does not answer)."""
    if shutil.which("srun") is None:
        return None
    try:
        proc = subprocess.run(
            ["srun", "--mpi=list"], capture_output=True, text=True, timeout=PLUGIN_LIST_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        return None
    if proc.returncode != 0:  # no configuration here (not a Slurm login node): nothing can be said
        return None
    text = proc.stdout + proc.stderr
    names = [line.strip() for line in text.splitlines() if line.startswith(("\t", " ")) and line.strip()]
    return tuple(names)


def _mpi4py_in(spec: SbatchSpec) -> bool | None:
    """Whether the job's Python has mpi4py (None when the job runs another Python, which cannot be asked)."""
    if spec.python != sys.executable:
        return None
    return importlib.util.find_spec("mpi4py") is not None


def resolve_backend(spec: SbatchSpec, requested: str) -> SbatchSpec:
    """``spec`` with its backend: the one asked for (flag, config file or TFDIST_BACKEND), checked against
    what the job can run, or for ``auto`` the fastest correct one (said on stderr for ``tfdist train``).
    """
    name = (requested or str(variables.get("TFDIST_BACKEND"))).strip().lower()
    source = "--backend" if requested else "TFDIST_BACKEND"
    if name not in ("auto", *backends.NAMES):
        raise ConfigError(f"{source}={name!r} is not a backend; choose auto, {', '.join(backends.NAMES)}.")
    plugin = spec.mpi or DEFAULT_MPI_PLUGIN
    if name == "auto":
        # A script that builds MultiWorkerMirroredStrategy itself is one job only through TensorFlow's
        # collectives; `tfdist train` works on every backend, so it gets the fastest.
        if not runs_tfdist_train(spec.command):
            return spec
        plugins = srun_mpi_plugins()
        mpi_ready = bool(_mpi4py_in(spec)) and plugins is not None and plugin in plugins
        name, reason = backends.fastest(spec.gpus_per_node, mpi_ready)
        if name == "mpi":
            reason = (
                f"CPU nodes, mpi4py and srun --mpi={plugin} found: the MPI backend (--backend tf for "
                "TensorFlow's collectives)"
            )
        elif not spec.gpus_per_node:
            reason = (
                f"CPU nodes, but no mpi4py in the job's Python or no srun --mpi={plugin} plugin here: "
                "TensorFlow's collectives"
            )
        sys.stderr.write(f"tfdist slurm: backend {name}: {reason}.\n")
        return replace(spec, backend=name)
    shim = name == "horovod" and importlib.util.find_spec("horovod") is None
    chosen = replace(spec, backend=name, horovod_shim=shim)
    if name in MPI_BACKENDS:
        _check_mpi_ready(chosen, name, plugin, source)
    if shim:
        sys.stderr.write(
            "tfdist slurm: Horovod is not installed here; in this job `import horovod` gives tfdist's "
            "implementation (tfdist.horovod, on the MPI backend).\n"
        )
    return chosen


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
