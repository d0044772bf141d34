"""The backend registry's rules: ``auto`` under MPI, and the fastest backend ``tfdist train`` picks."""

from __future__ import annotations

import importlib.util

import pytest

from tfdist import backends
from tfdist.cli.train import _default_backend
from tfdist.errors import ConfigError


@pytest.mark.parametrize(
    ("gpus", "mpi_ready", "expected"),
    [(0, True, "mpi"), (0, False, "tf"), (1, True, "tf"), (8, False, "tf")],
)
def test_fastest_backend_rule(gpus: int, mpi_ready: bool, expected: str) -> None:
    name, reason = backends.fastest(gpus, mpi_ready)
    assert name == expected and name in backends.NAMES
    assert "\n" not in reason and reason  # said in one line


def test_without_mpi_the_reason_says_how_to_get_the_faster_backend() -> None:
    assert "tfdist[mpi]" in backends.fastest(0, False)[1]


@pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None, reason="needs the MPI extra installed")
def test_train_picks_mpi_here_and_says_so(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TFDIST_BACKEND", raising=False)
    # This machine: no GPU, mpi4py and the mpich wheel's mpiexec in the environment (the dev extra).
    assert _default_backend(gpus=0, workers=2) == "mpi"
    err = capsys.readouterr().err
    assert err.startswith("tfdist train: backend mpi: CPU only") and err.count("\n") == 1
    assert _default_backend(gpus=0, workers=1) == "tf"  # one worker: nothing to synchronise
    assert _default_backend(gpus=2, workers=2) == "tf"


def test_train_takes_the_backend_the_environment_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TFDIST_BACKEND", "tf")
    assert _default_backend(gpus=0, workers=2) == "tf"

    monkeypatch.setenv("TFDIST_BACKEND", "gloo")
    with pytest.raises(ConfigError, match="TFDIST_BACKEND='gloo'"):
        _default_backend(gpus=0, workers=2)
