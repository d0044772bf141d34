"""Every bash/python block of README.md and docs/ runs (or says why it cannot), and runs as shown."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from docblocks import ROOT, Block, all_blocks, example_files, problems

#: Seconds one example may take: a first-tier example starts at most one TensorFlow process or two.
FAST_TIMEOUT_S = 120
#: A second-tier example trains (a launch of 2 workers, an MPI job, a short benchmark grid).
SLOW_TIMEOUT_S = 540


def _param(block: Block) -> object:
    marks = [pytest.mark.slow, pytest.mark.timeout(SLOW_TIMEOUT_S + 30)] if block.kind == "slow" else []
    return pytest.param(block, id=block.where, marks=marks)


RUNNABLE = [_param(b) for b in all_blocks() if b.runs]


def test_every_block_runs_or_says_why() -> None:
    found = [problem for block in all_blocks() for problem in problems(block)]
    assert not found, "\n".join(found)
    assert len(RUNNABLE) >= 10  # the parser really found the examples


def test_example_files_have_distinct_names() -> None:
    names = [b.arg for b in all_blocks() if b.lang in ("bash", "python") and b.kind == "file"]
    assert len(names) == len(set(names)), names
    assert "train.py" in names


def _run(block: Block, cwd: Path) -> subprocess.CompletedProcess[str]:
    for name, text in example_files().items():
        (cwd / name).write_text(text)
    env = dict(os.environ)
    # The project's interpreter and its scripts (tfdist, mpiexec) come first, as in an activated venv.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    argv = (
        ["bash", "-e", "-o", "pipefail", "-c", block.text] if block.lang == "bash" else [sys.executable, "-"]
    )
    return subprocess.run(
        argv,
        input=block.text if block.lang == "python" else None,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=SLOW_TIMEOUT_S if block.kind == "slow" else FAST_TIMEOUT_S,
        check=False,
    )


@pytest.mark.parametrize("block", RUNNABLE)
def test_example_runs(block: Block, tmp_path: Path) -> None:
    result = _run(block, tmp_path)
    expected = int(block.arg) if block.kind == "exit" else 0
    output = (result.stdout + result.stderr)[-3000:]
    assert result.returncode == expected, f"{block.where} exited {result.returncode}:\n{output}"
    assert "warning" not in result.stderr.lower(), f"{block.where} warned:\n{output}"  # copied as is: clean
    if block.kind == "exit":
        # A user error is one line, without a traceback.
        assert "Traceback" not in result.stderr, output


def test_readme_links_point_at_files() -> None:
    readme = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(((?!https?:|#)[^)#]+)(?:#[^)]*)?\)", readme)
    assert targets, "README links into the docs"
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert not missing, f"README links to missing files: {missing}"


def test_readme_is_a_front_door() -> None:
    """A user reads how to install and run first, one example per place, then the contributors' two
    commands; CI runs the README's test command."""
    text = (ROOT / "README.md").read_text()
    lines = text.splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines; move details into docs/"
    first_block = next(i for i, line in enumerate(lines) if line.startswith("```bash"))
    assert lines[first_block + 1].startswith("pip install"), "the first command a reader meets installs"
    dev = next(i for i, line in enumerate(lines) if line.startswith("./dev demo"))
    assert lines[dev - 1] == "```bash" and lines[dev + 1].startswith("./dev test")
    for place in (
        "tfdist slurm submit",
        "--rdzv",
        "tfdist k8s manifest",
        "--ray-address",
        "--backend horovod",
    ):
        assert text.index(place) < lines_before(text, dev), place
    assert "exec ./dev test" in (ROOT / ".ci" / "run").read_text()


def lines_before(text: str, line: int) -> int:
    """The offset of the start of line ``line`` (0-based) in ``text``."""
    return sum(len(part) + 1 for part in text.splitlines()[:line])


def test_generated_blocks_are_fresh() -> None:
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    assert spec is not None and spec.loader is not None
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    names: list[str] = []
    for page in [*sorted((ROOT / "docs").rglob("*.md")), *hooks.OTHER_PAGES]:
        text = page.read_text()
        names += [name for name, _ in hooks.generated_blocks(text)]
        assert hooks.regenerate(text) == text, (
            f"{page.relative_to(ROOT)} is stale: python docs/hooks.py --write"
        )
    assert sorted(names) == sorted(hooks.GENERATORS), names
