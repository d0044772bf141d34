"""A missing optional package is one line naming the extra that installs it (exit code 2), before the
command starts anything."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from helpers.cli import cli
from tfdist.errors import SetupError, require


def test_the_hint_names_the_extra() -> None:
    with pytest.raises(SetupError) as caught:
        require("tfdist_no_such_module", "no-such-package", "plots", "a run directory's plots")
    assert str(caught.value) == (
        "a run directory's plots needs no-such-package. Hint: pip install 'tfdist[plots]'."
    )
    assert require("json", "json", "none", "nothing").dumps(1) == "1"


@pytest.mark.parametrize(
    ("module", "argv", "line"),
    [
        ("sklearn", ("train",), "the digits dataset needs scikit-learn. Hint: pip install 'tfdist[digits]'."),
        (
            "matplotlib",
            ("train", "--dataset", "synthetic"),
            "a run directory's plots needs matplotlib. Hint: pip install 'tfdist[plots]'.",
        ),
        (
            "yaml",
            ("k8s", "manifest", "--pods", "2", "--image", "img:1", "--", "python", "train.py"),
            "tfdist k8s manifest needs PyYAML. Hint: pip install 'tfdist[k8s]'.",
        ),
    ],
)
def test_a_command_without_its_extra_is_one_line_exit_2(
    module: str,
    argv: tuple[str, ...],
    line: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # what a venv without the package looks like to import
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(capsys, *argv)
    assert code == 2 and out == "", err
    assert err == f"tfdist {argv[0]}: error: {line}\n"
    assert not (tmp_path / "tfdist-runs").exists()
