"""The one backend decision (:func:`tfdist.backends.choose`) as every front end asks it: a process's context
and strategy plan, ``tfdist launch``'s preflight, ``tfdist train --workers N`` and ``tfdist slurm``."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from tfdist import backends
from tfdist.cli.train import _backend
from tfdist.errors import ConfigError

TRAIN = {"own_strategy": False, "workers": 2}  # tfdist train --workers 2 (any backend works)
SLURM = {**TRAIN, "mpi_launcher": "srun --mpi=pmi2"}  # tfdist slurm submit -- tfdist train
YES, NO = {"mpi_ready": lambda: True}, {"mpi_ready": lambda: False}
NO_HOROVOD = {"horovod_installed": lambda: False}


@pytest.mark.parametrize(
    ("requested", "given", "name", "reason", "shim"),
    [
        # Inside a process (context, strategy plan): auto is MPI under an MPI launcher, else tf.
        ("auto", {"under_mpi": True}, "mpi", "started by an MPI launcher", False),
        ("auto", {}, "tf", "", False),
        ("AUTO ", {}, "tf", "", False),  # as TFDIST_BACKEND may spell it
        ("horovod", {"under_mpi": False}, "horovod", "", False),
        ("tf", {"under_mpi": True}, "tf", "", False),  # a name always wins
        # A user's script builds its own strategy: tf, whatever the machine (tfdist slurm -- python x.py).
        ("auto", {"workers": 4, **YES}, "tf", "", False),
        # tfdist train --workers N / tfdist slurm -- tfdist train: the fastest this machine runs.
        (
            "auto",
            {**TRAIN, **YES},
            "mpi",
            "CPU only, mpi4py and an MPI launcher found: the MPI backend",
            False,
        ),
        ("auto", {**TRAIN, **NO}, "tf", "CPU only, mpi4py or an MPI launcher missing", False),
        ("auto", {**TRAIN, "gpus": 1, **YES}, "tf", "GPUs visible: TensorFlow's collectives (NCCL)", False),
        ("auto", {**TRAIN, "gpus": 8, **NO}, "tf", "GPUs visible", False),
        ("auto", {**TRAIN, "workers": 1, **YES}, "tf", "", False),  # one worker: nothing to synchronise
        ("mpi", {**TRAIN, "workers": 1, **NO}, "mpi", "", False),  # named: checked by the launch's preflight
        ("auto", {**SLURM, **YES}, "mpi", "CPU only, mpi4py and srun --mpi=pmi2 found", False),
        ("auto", {**SLURM, **NO}, "tf", "CPU only, mpi4py or srun --mpi=pmi2 missing", False),
        # --backend horovod: Horovod's own, or tfdist's Horovod API on the MPI backend when it is missing.
        ("horovod", {}, "horovod", "", False),
        ("horovod", NO_HOROVOD, "horovod", "", True),
        ("mpi", NO_HOROVOD, "mpi", "", False),
    ],
)
def test_the_backend_decision(
    requested: str, given: dict[str, Any], name: str, reason: str, shim: bool
) -> None:
    choice = backends.choose(requested, **given)
    assert (choice.name, choice.horovod_shim) == (name, shim)
    assert choice.reason.startswith(reason) and (choice.reason == "") == (reason == "")
    assert "\n" not in choice.reason  # said in one line


def test_without_mpi_the_reason_says_how_to_get_the_faster_backend() -> None:
    assert "tfdist[mpi]" in backends.choose("auto", **TRAIN, **NO).reason


@pytest.mark.parametrize(
    ("requested", "source", "expected"),
    [
        ("gloo", "--backend", "--backend='gloo' is not a backend; choose auto, tf, mpi, horovod."),
        (
            "NCL",
            "TFDIST_BACKEND",
            "TFDIST_BACKEND='ncl' is not a backend; choose auto, tf, mpi, horovod. Hint:",
        ),
        ("", "TFDIST_BACKEND", "TFDIST_BACKEND='' is not a backend"),
    ],
)
def test_unknown_names_say_where_they_came_from(requested: str, source: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        backends.choose(requested, source=source, **TRAIN, **YES)
    assert str(info.value).startswith(expected)


def test_the_probes_are_asked_only_when_they_decide() -> None:
    asked: list[str] = []

    def probe(what: str, answer: bool) -> Any:
        return lambda: asked.append(what) or answer

    backends.choose("auto", **TRAIN, gpus=2, mpi_ready=probe("mpi", True))  # GPUs: NCCL, MPI not asked
    backends.choose("auto", mpi_ready=probe("mpi", True))  # a script's own strategy
    backends.choose("mpi", horovod_installed=probe("horovod", True))
    assert asked == []
    backends.choose("horovod", horovod_installed=probe("horovod", True))
    assert asked == ["horovod"]


@pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None, reason="needs the MPI extra installed")
def test_train_picks_mpi_here_and_says_so(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TFDIST_BACKEND", raising=False)
    # This machine: no GPU, mpi4py and the mpich wheel's mpiexec in the environment (the dev extra).
    assert _backend(None, workers=2, gpus=0) == "mpi"
    err = capsys.readouterr().err
    assert err.startswith("tfdist train: backend mpi: CPU only") and err.count("\n") == 1
    assert _backend(None, workers=1, gpus=0) == "tf"  # one worker: nothing to synchronise
    assert _backend(None, workers=2, gpus=2) == "tf"


def test_train_takes_the_flag_then_the_backend_the_environment_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TFDIST_BACKEND", "tf")
    assert _backend(None, workers=2, gpus=0) == "tf"
    assert _backend("mpi", workers=2, gpus=0) == "mpi"

    monkeypatch.setenv("TFDIST_BACKEND", "gloo")
    with pytest.raises(ConfigError, match="TFDIST_BACKEND='gloo'"):
        _backend(None, workers=2, gpus=0)
    with pytest.raises(ConfigError, match="--backend='nccl'"):
        _backend("nccl", workers=2, gpus=0)
