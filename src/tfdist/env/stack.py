"""WHAT IS INSTALLED HERE, and which tfdist features work on it: ``tfdist env``'s stack and features.

Pure: :class:`StackFacts` is what ``tfdist env`` found (the Keras fix's table, a room above, comes in as
facts too); :func:`plan_features` says for each feature whether it works, why not, and the fix (usually
the extra of pyproject.toml that adds what is missing).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from tfdist.mpi.stack import GUIDE
from tfdist.variables import LEGACY_KERAS_ON


@dataclass(frozen=True)
class StackFacts:
    """One machine's stack as found (``None``: not installed). Versions are the modules' own."""

    tensorflow: str | None = None
    tensorflow_dist: str = ""  # the distribution that provides it: tensorflow-cpu, tensorflow, ...
    keras: str | None = None  # the ``keras`` module: Keras 3, or Keras 2 beside TensorFlow 2.15 and older
    keras_dist: str = "keras"  # what installed it: keras, keras-nightly, or a directory (a build of its own)
    keras_row: str = ""  # the adapter-table row that covers ``keras`` ("" outside the table)
    keras_table: str = ""  # the table's whole range: ">=3.3,<3.16"
    keras_hint: str = ""  # a Keras the table covers beside this TensorFlow: "pip install 'keras>=3.12,<3.16'"
    tf_keras: str | None = None  # the ``tf-keras`` package (Keras 2 for TensorFlow 2.16 and later)
    legacy_keras: str = ""  # TF_USE_LEGACY_KERAS as set ("" when unset)
    keras_patch: bool = True  # TFDIST_KERAS_PATCH
    mpi4py: str | None = None
    mpi_library: str = ""  # "MPICH 4.3.0 (/venv/lib/libmpi.so.12)"
    mpi_launcher: str = ""
    mpi_launcher_version: str = ""  # "Hydra 5.0.2", from the launcher's --version
    mpi_problem: str = ""  # why there is no library or launcher (tfdist.mpi.probe.find_stack)
    ray: str | None = None
    tfds: str | None = None  # tensorflow-datasets
    kubernetes: str | None = None
    sbatch: str = ""  # sbatch's path on PATH
    slurm_unreachable: str = ""  # why sbatch's cluster does not answer (tfdist.slurm.commands), "" if it does
    cuda_build: bool | None = None  # TensorFlow built with CUDA (None: unknown)
    gpus: int = 0  # GPUs TensorFlow sees
    driver_gpus: int = 0  # GPUs the NVIDIA driver shows this process (CUDA_VISIBLE_DEVICES applied)

    @property
    def builtin_keras2(self) -> bool:
        """The ``keras`` package is Keras 2: TensorFlow 2.15 and older, whose tf.keras it is."""
        return bool(self.keras) and str(self.keras).split(".")[0] == "2"

    @property
    def uses_legacy_keras(self) -> bool:
        """``tf.keras`` is Keras 2: TF_USE_LEGACY_KERAS on (tf-keras), or a TensorFlow before 2.16."""
        return self.tensorflow is not None and (self.legacy_keras in LEGACY_KERAS_ON or self.builtin_keras2)


@dataclass(frozen=True)
class Feature:
    """One tfdist feature on this stack: works or not, what it uses or why not, and the fix."""

    name: str
    works: bool
    detail: str  # works: what it runs on; else: why not
    fix: str = ""  # "" when it works
    extra: str = ""  # the extra that adds it to THIS venv ("" when none can, as a GPU TensorFlow build)


def tf_keras_line(facts: StackFacts) -> str:
    """Which Keras ``tf.keras`` is here, in one line.

    Input/Output: TF 2.21 + keras 3.15.1 -> ``"Keras 3.15.1 (keras)"``; TF 2.21, tf-keras 2.21.0,
    TF_USE_LEGACY_KERAS=1 -> ``"Keras 2: tf-keras 2.21.0 (TF_USE_LEGACY_KERAS=1)"``.
    """
    if facts.tensorflow is None:
        return f"Keras {facts.keras} ({facts.keras_dist}), without TensorFlow" if facts.keras else "none"
    if facts.builtin_keras2:
        return f"Keras 2: keras {facts.keras} (TensorFlow {facts.tensorflow}'s own)"
    if facts.legacy_keras in LEGACY_KERAS_ON:
        found = f"tf-keras {facts.tf_keras}" if facts.tf_keras else "tf-keras, which is NOT installed"
        return f"Keras 2: {found} (TF_USE_LEGACY_KERAS={facts.legacy_keras})"
    return f"Keras {facts.keras} ({facts.keras_dist})" if facts.keras else "none: keras is not installed"


def keras_fix_line(facts: StackFacts) -> str:
    """Whether tfdist's model.fit fix covers this Keras (the adapter table), in one line."""
    if facts.uses_legacy_keras:
        return "not needed: Keras 2's own multi-worker model.fit works"
    if facts.keras is None:
        return "no Keras installed"
    if not facts.keras_row:
        return f"does not cover Keras {facts.keras} (the table covers {facts.keras_table})"
    if not facts.keras_patch:
        return f"off (TFDIST_KERAS_PATCH=0); it covers Keras {facts.keras} (row {facts.keras_row})"
    return f"covers Keras {facts.keras} (row {facts.keras_row})"


def _no_tensorflow(name: str) -> Feature:
    return Feature(name, False, "TensorFlow is not installed", "pip install 'tfdist[cpu]' (or [gpu])", "cpu")


def _fit(facts: StackFacts) -> Feature:
    name = "model.fit under MultiWorkerMirroredStrategy"
    tf = facts.tensorflow
    if tf is None:
        return _no_tensorflow(name)
    if facts.uses_legacy_keras:
        if not facts.builtin_keras2 and facts.tf_keras is None:
            series = ".".join(tf.split(".")[:2])
            fix = (
                f"pip install --no-deps 'tf-keras=={series}.*' (its dependencies would replace "
                f"{facts.tensorflow_dist or 'TensorFlow'}), or unset TF_USE_LEGACY_KERAS"
            )
            why = f"TF_USE_LEGACY_KERAS={facts.legacy_keras} asks for tf-keras, which is not installed"
            return Feature(name, False, why, fix)
        return Feature(name, True, f"Keras 2's own ({tf_keras_line(facts)})")
    if facts.keras is None:
        return Feature(name, False, "keras is not installed", facts.keras_hint)
    if not facts.keras_row:
        why = f"Keras {facts.keras} is outside the fix's table ({facts.keras_table}); Keras' own fails there"
        return Feature(name, False, why, f"{facts.keras_hint}, or train with tfdist.fit")
    if not facts.keras_patch:
        why = "TFDIST_KERAS_PATCH=0 turns the fix off, and Keras 3's own multi-worker fit fails"
        return Feature(name, False, why, "unset TFDIST_KERAS_PATCH")
    return Feature(name, True, f"tfdist's Keras fix, row {facts.keras_row} (Keras {facts.keras})")


def _mpi(facts: StackFacts, name: str, uses: str) -> Feature:
    if facts.tensorflow is None:
        return _no_tensorflow(name)
    if facts.mpi4py is None:
        return Feature(name, False, "mpi4py is not installed", "pip install 'tfdist[mpi]'", "mpi")
    if facts.mpi_problem or not facts.mpi_launcher:
        why = facts.mpi_problem or "no MPI launcher was found"
        fix = f"pip install 'tfdist[mpi]' (MPICH and its mpiexec), or a site's MPI: {GUIDE}"
        return Feature(name, False, why, fix, "mpi")
    library = facts.mpi_library.split(" (")[0]  # its path and the launcher's are in the stack table
    return Feature(name, True, f"{uses} (mpi4py {facts.mpi4py} on {library})")


def _gpu(facts: StackFacts) -> Feature:
    name = "GPU"
    # What the driver shows, beside what TensorFlow sees: a GPU machine whose TensorFlow cannot use its
    # GPUs (no TensorFlow, a CPU-only wheel, missing CUDA libraries) is the case this line must name.
    driver = f"; the driver shows {facts.driver_gpus} GPU(s)" if facts.driver_gpus else ""
    if facts.tensorflow is None:
        # Not in the extras line: it already names cpu, and a venv holds one TensorFlow flavour.
        fix = "pip install 'tfdist[gpu]' instead of [cpu], on an NVIDIA GPU machine"
        return Feature(name, False, "TensorFlow is not installed" + driver, fix)
    if facts.gpus:
        return Feature(name, True, f"{facts.gpus} GPU(s) visible to TensorFlow")
    if facts.cuda_build is False or facts.tensorflow_dist == "tensorflow-cpu":
        why = f"{facts.tensorflow_dist or 'TensorFlow'} {facts.tensorflow} is built without CUDA" + driver
        # tensorflow-cpu and tensorflow share one package directory: no extra adds a GPU to this venv.
        return Feature(name, False, why, "pip install 'tfdist[gpu]' in a venv without tensorflow-cpu")
    fix = "pip install 'tfdist[gpu]' (TensorFlow's CUDA libraries), and check CUDA_VISIBLE_DEVICES"
    if not facts.driver_gpus:
        fix = "check nvidia-smi and CUDA_VISIBLE_DEVICES on a GPU node"
    return Feature(name, False, f"TensorFlow sees no GPU{driver}", fix)


def _package(name: str, version: str | None, package: str, extra: str) -> Feature:
    if version is None:
        return Feature(name, False, f"{package} is not installed", f"pip install 'tfdist[{extra}]'", extra)
    return Feature(name, True, f"{package} {version}")


def plan_features(facts: StackFacts) -> tuple[Feature, ...]:
    """Every tfdist feature that depends on the stack, in the order ``tfdist env`` shows them."""
    slurm = Feature("Slurm (tfdist slurm submit)", True, f"sbatch at {facts.sbatch}")
    if not facts.sbatch or facts.slurm_unreachable:
        why = facts.slurm_unreachable or "no sbatch on PATH: not a Slurm login node"
        fix = "run it on the cluster's login node (tfdist slurm script writes the job script anywhere)"
        slurm = Feature(slurm.name, False, why, fix)
    return (
        _fit(facts),
        _mpi(facts, "MPI backend (--backend mpi)", "tfdist's MPI all-reduce"),
        _mpi(facts, "Horovod API (tfdist.horovod, --backend horovod)", "tfdist's MPI backend"),
        _package("Ray (tfdist launch --ray)", facts.ray, "ray", "ray"),
        slurm,
        _gpu(facts),
        _package("TensorFlow Datasets (--dataset tfds:NAME)", facts.tfds, "tensorflow-datasets", "data"),
        _package("Kubernetes (tfdist k8s submit)", facts.kubernetes, "kubernetes", "k8s"),
    )


def missing_extras(features: tuple[Feature, ...]) -> dict[str, list[str]]:
    """The extras that would make features work in this venv, each with those features.

    Input/Output: MPI backend and Horovod API missing mpi4py -> ``{"mpi": ["MPI backend (--backend mpi)",
    "Horovod API (tfdist.horovod, --backend horovod)"]}``.
    """
    out: dict[str, list[str]] = {}
    for feature in features:
        if not feature.works and feature.extra:
            out.setdefault(feature.extra, []).append(feature.name)
    return out


def describe(facts: StackFacts) -> dict[str, Any]:
    """``tfdist env --json``'s ``stack``: the facts, which Keras serves tf.keras, whether the fix covers
    it, every feature, and the missing extras."""
    features = plan_features(facts)
    return {
        "found": asdict(facts),
        "tf_keras": tf_keras_line(facts),
        "keras_fix": keras_fix_line(facts),
        "features": [asdict(f) for f in features],
        "missing_extras": missing_extras(features),
    }
