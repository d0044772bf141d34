"""The docs build with ``mkdocs build --strict``: a broken link or anchor, a missing page or a docstring
that does not render fails the tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT_S = 180


def _build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(config),
            "--site-dir",
            str(site),
        ],
        cwd=config.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        check=False,
    )


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path_factory.mktemp("site")
    return _build(ROOT / "mkdocs.yml", out), out


@pytest.fixture(scope="module")
def site(build: tuple[subprocess.CompletedProcess[str], Path]) -> Path:
    result, out = build
    if result.returncode != 0:
        pytest.fail("the docs do not build: see test_mkdocs_build_strict_passes", pytrace=False)
    return out


def test_mkdocs_build_strict_passes(build: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    result, _ = build
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}{result.stderr}"


def test_every_page_of_the_nav_is_built(site: Path) -> None:
    pages = {p.relative_to(site).parent.as_posix() for p in site.rglob("index.html")}
    for page in (
        "reference/cli",
        "reference/python-api",
        "reference/environment",
        "guides/slurm",
        "architecture",
    ):
        assert page in pages, sorted(pages)


def test_the_command_reference_is_generated_from_the_parsers(site: Path) -> None:
    from tfdist.cli import build_parser

    html = (site / "reference" / "cli" / "index.html").read_text()
    assert "tfdist:cli" not in html
    for command in ("tfdist env", "tfdist launch", "tfdist train", "tfdist slurm submit", "tfdist bench"):
        assert command in html, command
    # Every flag of every sub-command is on the page, e.g. launch's --watchdog-timeout.
    for flag in ("--nproc-per-node", "--watchdog-timeout", "--nodelist", "--mpi", "--diagnose", "--rdzv"):
        assert f"<code>{flag}</code>" in html, flag
    assert build_parser().prog == "tfdist"


def test_the_python_api_is_rendered_from_the_docstrings(site: Path) -> None:
    html = (site / "reference" / "python-api" / "index.html").read_text()
    for name in ("tfdist.api.strategy", "tfdist.train.entry.fit", "tfdist.launcher.config.LaunchConfig"):
        assert f'id="{name}"' in html, name


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    (tmp_path / "src").symlink_to(ROOT / "src")
    index = tmp_path / "docs" / "index.md"
    index.write_text(index.read_text() + "\nSee [the missing page](guides/no-such-page.md).\n")
    result = _build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert result.returncode != 0
    assert "no-such-page.md" in result.stdout + result.stderr
