"""Modules found by what they are (tfdist.installed), not by a distribution's name: the Keras and
TensorFlow of this venv, and a build without package metadata that shadows them on the path."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tfdist.installed import find


def test_the_venvs_keras_and_tensorflow_with_their_distributions() -> None:
    import keras

    found = find("keras")
    assert (found.version, found.distribution) == (keras.__version__, "keras")
    assert found.path == str(Path(keras.__file__).parent)
    tensorflow = find("tensorflow")
    assert tensorflow.distribution in {"tensorflow", "tensorflow-cpu"} and tensorflow.version


def test_a_module_that_is_not_there() -> None:
    assert find("no_such_module_here").version is None


def test_a_build_without_metadata_is_read_from_its_own_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "keras" / "src").mkdir(parents=True)
    (tmp_path / "keras" / "__init__.py").write_text("")
    (tmp_path / "keras" / "src" / "version.py").write_text('__version__ = "3.16.1.site"\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "keras", raising=False)
    found = find("keras")
    assert (found.version, found.distribution, found.path) == ("3.16.1.site", "", str(tmp_path / "keras"))
