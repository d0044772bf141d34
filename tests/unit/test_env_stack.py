"""``tfdist env``'s stack: which tfdist features work on a described stack, why not, and the fix (pure
planner, table-tested); and the facts as read from this virtualenv's package metadata (one real call)."""

from __future__ import annotations

from dataclasses import replace
from importlib import metadata

import pytest

from tfdist.cli.env import extras_line, read_stack, stack_rows
from tfdist.env.stack import (
    StackFacts,
    describe,
    keras_fix_line,
    missing_extras,
    plan_features,
    tf_keras_line,
)
from tfdist.keras import adapters

#: What ``pip install 'tfdist[cpu]'`` gives on Python 3.11 and later: no MPI, Ray, tfds, Kubernetes, Slurm.
CPU = StackFacts(
    tensorflow="2.21.0",
    tensorflow_dist="tensorflow-cpu",
    keras="3.15.1",
    keras_row=">=3.11,<3.16",
    keras_table=adapters.supported_spec(),
    keras_hint="pip install 'keras>=3.12,<3.17'",
    cuda_build=False,
)
MPI = replace(
    CPU, mpi4py="4.1.2", mpi_library="MPICH 4.3.0 (/v/lib/libmpi.so.12)", mpi_launcher="/v/bin/mpiexec"
)
FIT = "model.fit under MultiWorkerMirroredStrategy"


def feature(facts: StackFacts, prefix: str) -> tuple[bool, str, str, str]:
    (found,) = [f for f in plan_features(facts) if f.name.startswith(prefix)]
    return found.works, found.detail, found.fix, found.extra


@pytest.mark.parametrize(
    ("facts", "works", "detail", "fix"),
    [
        pytest.param(
            CPU, True, "tfdist's Keras fix, row >=3.11,<3.16 (Keras 3.15.1)", "", id="keras3-in-table"
        ),
        pytest.param(
            replace(
                CPU, tensorflow="2.17.1", keras="3.2.1", keras_row="", keras_hint="pip install 'keras>=3.3'"
            ),
            False,
            "Keras 3.2.1 is outside the fix's table (>=3.3,<3.17); Keras' own fails there",
            "pip install 'keras>=3.3', or train with tfdist.fit",
            id="keras-outside-table",
        ),
        pytest.param(
            replace(CPU, keras_patch=False),
            False,
            "TFDIST_KERAS_PATCH=0 turns the fix off, and Keras 3's own multi-worker fit fails",
            "unset TFDIST_KERAS_PATCH",
            id="fix-turned-off",
        ),
        pytest.param(
            replace(CPU, tf_keras="2.21.0", legacy_keras="1"),
            True,
            "Keras 2's own (Keras 2: tf-keras 2.21.0 (TF_USE_LEGACY_KERAS=1))",
            "",
            id="tf-keras",
        ),
        pytest.param(
            replace(CPU, legacy_keras="true"),
            False,
            "TF_USE_LEGACY_KERAS=true asks for tf-keras, which is not installed",
            "pip install --no-deps 'tf-keras==2.21.*' (its dependencies would replace tensorflow-cpu), or "
            "unset TF_USE_LEGACY_KERAS",
            id="legacy-without-tf-keras",
        ),
        pytest.param(
            replace(CPU, tensorflow="2.15.1", keras="2.15.0", keras_row=""),
            True,
            "Keras 2's own (Keras 2: keras 2.15.0 (TensorFlow 2.15.1's own))",
            "",
            id="tf215-keras2",
        ),
        pytest.param(
            StackFacts(),
            False,
            "TensorFlow is not installed",
            "pip install 'tfdist[cpu]' (or [gpu])",
            id="no-tf",
        ),
    ],
)
def test_model_fit_under_mwms_works_or_says_why_and_the_fix(
    facts: StackFacts, works: bool, detail: str, fix: str
) -> None:
    assert feature(facts, FIT)[:3] == (works, detail, fix)


def test_legacy_keras_values_other_than_tensorflows_own_leave_keras_3() -> None:
    """TensorFlow reads only true/True/1; TF_USE_LEGACY_KERAS=yes still gives Keras 3."""
    facts = replace(CPU, tf_keras="2.21.0", legacy_keras="yes")
    assert tf_keras_line(facts) == "Keras 3.15.1 (keras)"
    assert keras_fix_line(facts) == "covers Keras 3.15.1 (row >=3.11,<3.16)"


@pytest.mark.parametrize(
    ("facts", "works", "detail", "extra"),
    [
        pytest.param(CPU, False, "mpi4py is not installed", "mpi", id="no-mpi4py"),
        pytest.param(MPI, True, "(mpi4py 4.1.2 on MPICH 4.3.0)", "", id="mpich-wheel"),
        pytest.param(
            replace(MPI, mpi_launcher="", mpi_problem="mpi4py uses MPICH 4.3.0 and Hydra was not found"),
            False,
            "mpi4py uses MPICH 4.3.0 and Hydra was not found",
            "mpi",
            id="no-launcher",
        ),
        pytest.param(replace(MPI, tensorflow=None), False, "TensorFlow is not installed", "cpu", id="no-tf"),
    ],
)
def test_the_mpi_backend_and_horovod_api_need_mpi4py_and_its_launcher(
    facts: StackFacts, works: bool, detail: str, extra: str
) -> None:
    for name in ("MPI backend", "Horovod API"):
        got_works, got_detail, _, got_extra = feature(facts, name)
        assert (got_works, got_extra) == (works, extra), name
        assert detail in got_detail, (name, got_detail)


@pytest.mark.parametrize(
    ("facts", "works", "detail", "extra"),
    [
        (CPU, False, "tensorflow-cpu 2.21.0 is built without CUDA", ""),  # another venv, not an extra here
        (StackFacts(), False, "TensorFlow is not installed", ""),  # the extras line names cpu for it
        (replace(CPU, tensorflow_dist="tensorflow", cuda_build=True), False, "TensorFlow sees no GPU", ""),
        (replace(CPU, tensorflow_dist="tensorflow", cuda_build=True, gpus=4), True, "4 GPU(s)", ""),
        # The driver's GPUs beside what TensorFlow sees: the machine has GPUs this TensorFlow cannot use.
        (StackFacts(driver_gpus=1), False, "TensorFlow is not installed; the driver shows 1 GPU(s)", ""),
        (replace(CPU, driver_gpus=2), False, "built without CUDA; the driver shows 2 GPU(s)", ""),
        (
            replace(CPU, tensorflow_dist="tensorflow", cuda_build=True, driver_gpus=8),
            False,
            "TensorFlow sees no GPU; the driver shows 8 GPU(s)",
            "",
        ),
    ],
)
def test_gpu_says_whether_tensorflow_has_cuda_and_sees_gpus(
    facts: StackFacts, works: bool, detail: str, extra: str
) -> None:
    got_works, got_detail, _, got_extra = feature(facts, "GPU")
    assert (got_works, got_extra) == (works, extra)
    assert detail in got_detail


def test_the_missing_extras_name_the_features_they_add() -> None:
    missing = missing_extras(plan_features(CPU))
    assert missing == {
        "mpi": ["MPI backend (--backend mpi)", "Horovod API (tfdist.horovod, --backend horovod)"],
        "ray": ["Ray (tfdist launch --ray)"],
        "data": ["TensorFlow Datasets (--dataset tfds:NAME)"],
        "k8s": ["Kubernetes (tfdist k8s submit)"],
    }
    line = extras_line(missing)
    assert line is not None and line.startswith("pip install 'tfdist[mpi,ray,data,k8s]' adds: mpi for MPI")
    assert set(missing_extras(plan_features(StackFacts()))) == {"cpu", "ray", "data", "k8s"}
    full = replace(MPI, ray="2.60.0", tfds="4.9.10", kubernetes="37.0.2", sbatch="/usr/bin/sbatch", gpus=1)
    assert extras_line(missing_extras(plan_features(full))) is None
    assert all(f.works for f in plan_features(full))


def test_slurm_is_found_by_sbatch_and_its_fix_is_no_extra() -> None:
    works, detail, fix, extra = feature(CPU, "Slurm")
    assert (works, extra) == (False, "") and "no sbatch on PATH" in detail and "login node" in fix
    assert feature(replace(CPU, sbatch="/usr/bin/sbatch"), "Slurm")[:2] == (True, "sbatch at /usr/bin/sbatch")
    down = "the Slurm controller does not answer (scontrol ping: Slurmctld(primary) at c1 is DOWN)"
    assert feature(replace(CPU, sbatch="/usr/bin/sbatch", slurm_unreachable=down), "Slurm")[:2] == (
        False,
        down,
    )


def test_the_json_and_the_table_rows_hold_the_stack() -> None:
    stack = describe(replace(CPU, legacy_keras="0"))
    assert stack["found"]["tensorflow_dist"] == "tensorflow-cpu"
    assert stack["keras_fix"] == "covers Keras 3.15.1 (row >=3.11,<3.16)"
    assert stack["features"][0]["name"] == FIT
    rows = dict(stack_rows(stack))
    assert rows["TensorFlow"] == "2.21.0 (tensorflow-cpu)"
    assert rows["TF_USE_LEGACY_KERAS"] == "0"
    assert rows["MPI library (mpi4py)"] == "none: mpi4py is not installed"
    assert rows["MPI launcher"] == "none"
    rows = dict(stack_rows(describe(replace(MPI, mpi_launcher_version="Hydra 4.3.0"))))
    assert rows["MPI library (mpi4py)"] == "MPICH 4.3.0 (/v/lib/libmpi.so.12)"
    assert rows["MPI launcher"] == "/v/bin/mpiexec (Hydra 4.3.0)"


def test_the_facts_read_here_are_this_venvs_packages() -> None:
    """A real read of the project's virtualenv (package metadata only: no TensorFlow import)."""
    mpi = {"library": None, "launcher": None, "problem": "mpi4py is not installed"}
    facts = read_stack({"TF_USE_LEGACY_KERAS": "1", "PATH": "/nonexistent"}, 0, mpi)
    tf_dist = next(d for d in ("tensorflow-cpu", "tensorflow") if _has(d))
    assert (facts.tensorflow_dist, facts.tensorflow) == (tf_dist, metadata.version(tf_dist))
    assert facts.keras == metadata.version("keras")
    row = adapters.adapter_for(facts.keras)
    assert facts.keras_row == (row.name if row else "")
    assert facts.keras_table == adapters.supported_spec()
    assert (facts.legacy_keras, facts.sbatch, facts.mpi_problem) == ("1", "", "mpi4py is not installed")


def _has(distribution: str) -> bool:
    try:
        metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return False
    return True
