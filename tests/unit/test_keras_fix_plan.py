"""The Keras fix's pure parts and the worker bootstrap, without TensorFlow."""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

import pytest

from tfdist.keras import callbacks, fix
from tfdist.worker import BOOT_MARK, boot_dir, with_bootstrap
from tfdist.worker.imports import after_import


@pytest.mark.parametrize(
    ("version", "tested"),
    [
        ("3.15.0", True),
        ("3.15.1", True),
        ("3.15.2rc1", True),
        ("3.14.9", True),
        ("3.3.3", True),
        ("3.2.1", False),
        ("3.16.0", True),
        ("3.17.0", False),
        ("3.16.0.dev2026", True),
        ("2.15.0", False),
        ("0", False),
    ],
)
def test_tested_keras_range(version: str, tested: bool) -> None:
    assert fix.keras_in_tested_range(version) is tested


@pytest.mark.parametrize(
    ("value", "on"), [("1", True), ("", True), ("0", False), ("false", False), ("OFF", False)]
)
def test_tfdist_keras_patch_switch(value: str, on: bool) -> None:
    assert fix.enabled_by_env({"TFDIST_KERAS_PATCH": value}) is on


def test_out_of_range_keras_is_left_alone_without_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fix, "keras_version", lambda: "3.99.0")
    monkeypatch.setattr(fix, "_STATE", {})
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert fix.gate() is False
    assert seen == []  # refused only where it matters: a multi-worker fit (tests/unit/test_keras_adapters.py)


@pytest.mark.parametrize(
    ("path", "moved"),
    [
        ("out/ckpt-{epoch:02d}.keras", "/t/ckpt-{epoch:02d}.keras"),
        ("/abs/log.csv", "/t/log.csv"),
        ("out/{epoch}/model.keras", "/t/out/{epoch}/model.keras"),
        ("model.weights.h5", "/t/model.weights.h5"),
    ],
)
def test_worker_files_move_under_the_private_dir(path: str, moved: str) -> None:
    assert callbacks.moved_path(path, "/t") == moved


def test_bootstrap_goes_first_on_pythonpath_once() -> None:
    env = with_bootstrap({"PYTHONPATH": os.pathsep.join(["/a", boot_dir(), "/b"]), "X": "1"})
    assert env["PYTHONPATH"].split(os.pathsep) == [boot_dir(), "/a", "/b"]
    assert env[BOOT_MARK] == "1" and env["X"] == "1"
    assert with_bootstrap({})["PYTHONPATH"] == boot_dir()
    assert (Path(boot_dir()) / "sitecustomize.py").is_file()


def test_workers_reconnect_to_tensorflow_peers_quickly_unless_the_user_chose() -> None:
    options = with_bootstrap({})["TF_GRPC_DEFAULT_OPTIONS"]
    assert "grpc.initial_reconnect_backoff_ms=50" in options and " " not in options
    # TensorFlow splits on "," then "=": every option must be one name=integer pair.
    assert all(len(o.split("=")) == 2 and o.split("=")[1].isdigit() for o in options.split(","))
    mine = "grpc.keepalive_time_ms=30000"
    assert with_bootstrap({"TF_GRPC_DEFAULT_OPTIONS": mine})["TF_GRPC_DEFAULT_OPTIONS"] == mine


def test_after_import_runs_once_when_the_module_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "tfdist_probe_mod.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: list[int] = []
    after_import("tfdist_probe_mod", lambda m: seen.append(m.VALUE))
    assert seen == []  # nothing imported eagerly
    import tfdist_probe_mod  # type: ignore[import-not-found]

    assert seen == [1] and tfdist_probe_mod.VALUE == 1
    after_import("tfdist_probe_mod", lambda m: seen.append(2))  # already imported: at once
    assert seen == [1, 2]
    sys.modules.pop("tfdist_probe_mod", None)


@pytest.mark.parametrize(
    ("version", "environ", "expected"),
    [
        ("3.15.1", {}, "on for Keras 3.15.1 (tested range >=3.3,<3.17)"),
        ("3.15.1", {"TFDIST_KERAS_PATCH": "0"}, "off (TFDIST_KERAS_PATCH=0)"),
        ("3.17.0", {}, "off: Keras 3.17.0 is outside the tested range >=3.3,<3.17"),
    ],
)
def test_tfdist_env_says_whether_the_fix_applies(
    version: str, environ: dict, expected: str, monkeypatch
) -> None:
    from tfdist.cli.env import keras_fix_status

    monkeypatch.setattr(fix, "keras_version", lambda: version)
    assert keras_fix_status(environ) == expected
