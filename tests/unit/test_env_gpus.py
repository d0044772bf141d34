"""`tfdist env` on a GPU machine: the driver's GPUs are listed whether or not TensorFlow can use them.

The driver is reached the way the launcher reaches it (NVML, else ``nvidia-smi -L``); this machine has no
NVIDIA driver, so an executable ``nvidia-smi`` on PATH prints what the real one prints on an H100 node.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tfdist.cli import env as env_cli

LISTING = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-4bd3e0c6-5f0f-1b3c-a0f4-1f1d2e3c4b5a)\n"


@pytest.fixture
def h100_driver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One H100 on the driver, no NVML library: ``nvidia-smi -L`` answers."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\nprintf '{LISTING}'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{__import__('os').environ['PATH']}")
    monkeypatch.setitem(sys.modules, "pynvml", None)


@pytest.fixture
def no_tensorflow(monkeypatch: pytest.MonkeyPatch) -> None:
    """``import tensorflow`` fails, as in a driver image without it."""
    import importlib

    strategy = importlib.import_module("tfdist.strategies")

    def missing() -> None:
        raise ImportError("No module named 'tensorflow'")

    monkeypatch.setattr(strategy, "discover_devices", missing)


@pytest.mark.usefixtures("h100_driver", "no_tensorflow")
def test_without_tensorflow_the_drivers_gpu_is_listed_and_planned() -> None:
    info = env_cli.collect({})
    assert info["devices"]["gpus"] == []  # TensorFlow sees nothing: it is not there
    assert info["devices"]["driver_gpus"] == ["0: NVIDIA H100 80GB HBM3"]
    # The plan is what tfdist.strategy() builds once TensorFlow is installed: this GPU, not "no GPU".
    assert info["strategy"]["gpu_indices"] == [0]
    assert "no GPU" not in info["strategy"]["reason"]
    assert any("TensorFlow is not installed" in w and "tfdist[gpu]" in w for w in info["warnings"])
    gpu = next(f for f in info["stack"]["features"] if f["name"] == "GPU")
    assert not gpu["works"] and "the driver shows 1 GPU(s)" in gpu["detail"]


@pytest.mark.usefixtures("h100_driver", "no_tensorflow")
def test_cuda_visible_devices_applies_to_the_drivers_list() -> None:
    assert env_cli.collect({"CUDA_VISIBLE_DEVICES": ""})["devices"]["driver_gpus"] == []
    assert env_cli.driver_gpus({"CUDA_VISIBLE_DEVICES": "0"}) == ["0: NVIDIA H100 80GB HBM3"]
    assert env_cli.driver_gpus({"CUDA_VISIBLE_DEVICES": "GPU-4bd3e0c6"}) == ["GPU-4bd3e0c6"]
    assert env_cli.driver_gpus({"CUDA_VISIBLE_DEVICES": "3"}) == []  # no such GPU on this node


@pytest.mark.usefixtures("h100_driver")
def test_the_tables_and_the_bug_report_name_both_lists(capsys: pytest.CaptureFixture[str]) -> None:
    """With this machine's TensorFlow (CPU-only): the table shows the driver's GPU beside TensorFlow's
    none, and the bug-report block counts both."""
    from tfdist.cli import main

    assert main(["env"]) == 0
    out = capsys.readouterr().out
    assert "GPUs (driver)" in out and "0: NVIDIA H100 80GB HBM3" in out
    assert "- GPUs: 0 seen by TensorFlow, 1 on the driver" in out


def test_without_keras_the_fix_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Python whose path has no Keras (this venv's site-packages left out, as a bare interpreter's)."""
    monkeypatch.setattr(sys, "path", [p for p in sys.path if "site-packages" not in p])
    monkeypatch.delitem(sys.modules, "keras", raising=False)
    assert env_cli.keras_fix_status({}) == "off: Keras is not installed"
