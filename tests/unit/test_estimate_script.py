"""``tfdist estimate SCRIPT.py:FUNCTION``: a name the script does not define is named with its closest
spellings before anything is imported (TensorFlow takes seconds to load)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tfdist.errors import ConfigError
from tfdist.estimate.read import check_script

SCRIPT = """
import keras
from models import make_resnet as resnet

WIDTH = 4


def build_model():
    return keras.Sequential([keras.Input((WIDTH,)), keras.layers.Dense(1)])


if __name__ == "__main__":
    def build_tiny():
        return build_model()
"""


@pytest.mark.parametrize("name", ["build_model", "resnet", "build_tiny", "WIDTH"])
def test_defined_names_pass(tmp_path: Path, name: str) -> None:
    path = tmp_path / "build.py"
    path.write_text(SCRIPT)
    assert check_script(f"{path}:{name}") == (str(path), name)


def test_a_typo_names_the_closest_function(tmp_path: Path) -> None:
    path = tmp_path / "build.py"
    path.write_text(SCRIPT)
    with pytest.raises(ConfigError, match=r"no function 'build_modle'\. Hint: did you mean build_model\?"):
        check_script(f"{path}:build_modle")


def test_a_name_made_in_a_loop_is_left_to_the_import(tmp_path: Path) -> None:
    path = tmp_path / "build.py"
    path.write_text("for n in ('a', 'b'):\n    globals()['build_' + n] = lambda: None\n")
    assert check_script(f"{path}:build_a")[1] == "build_a"


def test_the_typo_is_named_without_loading_tensorflow(tmp_path: Path) -> None:
    path = tmp_path / "build.py"
    path.write_text(SCRIPT)
    code = (
        "import sys\nfrom tfdist.cli import main\n"
        f"rc = main(['estimate', '{path}:build_modle'])\n"
        "print('tensorflow' in sys.modules, rc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["False", "2"], out.stderr
    assert "did you mean build_model?" in out.stderr
