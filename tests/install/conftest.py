"""The wheel of this tree, built once per test run for the install tests (:mod:`install.userstack`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from install.userstack import build_wheel


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This tree's wheel, built once per test run."""
    return build_wheel(tmp_path_factory.mktemp("wheel"))
