"""The user pages read as a manual, not a lab notebook: no dates, no "slow day" or "fast day", no commit
ids, no paths into the test suite, no "found and fixed" and no stories of emulated hosts, and no recipes
for test hosts (root-only network namespaces: docs/development.md has them). docs/performance.md (whose
measurements keep their day), docs/development.md and docs/architecture.md (for those who change tfdist)
are exempt. HTML comments (the example directives) are not shown, so they are not read.

Beyond the notebook: one install story (every ``pip install ".[…]"`` of the project is a line of the
install page), the Python versions as pyproject.toml's classifiers give them, and README and the index
saying near their top what has and has not run on GPUs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXEMPT = {"docs/performance.md", "docs/development.md", "docs/architecture.md"}
COMMENT = re.compile(r"<!--.*?-->", re.S)
#: 7 to 40 hexadecimal digits standing alone, with at least one digit and one letter.
COMMIT = re.compile(r"(?<![\w/.#@:-])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w-])", re.I)
NOTEBOOK = {
    "a date": re.compile(r"20\d\d-\d\d-\d\d"),
    "a day's mood": re.compile(r"\b(?:slow|fast) day", re.I),
    "a commit id": COMMIT,
    "a test path": re.compile(r"(?<![\w.-])tests/"),
    "development history": re.compile(
        r"found and fixed|\b(?:was|now) fixed\b|\bused to (?:fail|hang|crash)", re.I
    ),
    "an emulated-host story": re.compile(r"\bemulated\b", re.I),
    "a test-host recipe": re.compile(
        r"testhosts|slurm-local|network namespace|\bip netns\b|\btest hosts?\b", re.I
    ),
}
INSTALL_PAGE = ROOT / "docs" / "guides" / "install.md"
#: ``pip install ".[cpu]"``, ``pip install ".[gpu,mpi]"``: the project installed with extras from a clone.
PROJECT_INSTALL = re.compile(r"""pip install (?:-e )?["']\.\[[^\]]*\]["']""")
#: "Python 3.10 to 3.13": a statement of the supported versions.
PYTHON_RANGE = re.compile(r"Python (3\.\d+) to (3\.\d+)")


def user_pages() -> list[Path]:
    """README and the user's pages: index, getting started, guides, reference (the exempt pages left out)."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [p for p in pages if p.relative_to(ROOT).as_posix() not in EXEMPT]


def findings(text: str) -> list[str]:
    """``line: what 'text'`` for every piece of lab notebook in ``text`` (comments left out)."""
    shown = COMMENT.sub(lambda m: "\n" * m.group().count("\n"), text)
    return [
        f"{number}: {what} {m.group()!r}"
        for number, line in enumerate(shown.splitlines(), 1)
        for what, pattern in NOTEBOOK.items()
        for m in pattern.finditer(line)
    ]


@pytest.mark.parametrize("page", user_pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_user_pages_have_no_lab_notebook(page: Path) -> None:
    found = findings(page.read_text())
    assert not found, f"{page.relative_to(ROOT)}:\n" + "\n".join(found)


def shown(text: str) -> str:
    """``text`` without HTML comments (not shown on the built page)."""
    return COMMENT.sub("", text)


def test_every_project_install_is_a_line_of_the_install_page() -> None:
    """One install story: other pages repeat at most a line of it, and link to it for the rest."""
    home = set(PROJECT_INSTALL.findall(INSTALL_PAGE.read_text()))
    assert home, "the install page installs the project with its extras"
    for page in user_pages():
        strays = set(PROJECT_INSTALL.findall(shown(page.read_text()))) - home
        assert not strays, f"{page.relative_to(ROOT)}: {sorted(strays)} is not on {INSTALL_PAGE.name}"


def test_the_python_versions_are_the_classifiers() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()  # read as text: tomllib is not in Python 3.10
    versions = sorted(
        re.findall(r'"Programming Language :: Python :: (3\.\d+)"', pyproject), key=lambda v: int(v[2:])
    )
    assert f'requires-python = ">={versions[0]}"' in pyproject
    said = {
        page.relative_to(ROOT).as_posix(): PYTHON_RANGE.findall(shown(page.read_text()))
        for page in user_pages()
    }
    assert {page for page, ranges in said.items() if ranges} == {"README.md", "docs/guides/install.md"}
    for page, ranges in said.items():
        assert all(r == (versions[0], versions[-1]) for r in ranges), f"{page}: {ranges}, not {versions}"


@pytest.mark.parametrize("page", ["README.md", "docs/index.md"])
def test_the_front_pages_say_what_ran_on_gpus(page: str) -> None:
    top = " ".join(shown((ROOT / page).read_text()).split("\n## ")[0].split())
    assert "GPU" in top and "has not been run" in top, f"{page}: say near the top what ran on GPUs"


def test_the_exempt_pages_are_the_measurements_and_the_contributors() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in user_pages()}
    assert "README.md" in names and "docs/guides/troubleshooting.md" in names
    assert not names & EXEMPT


@pytest.mark.parametrize(
    ("text", "caught"),
    [
        ("measured 2026-11-26 on two hosts", True),
        ("on a slow day the ratio fell", True),
        ("A Fast day: one copy took 48 ms", True),
        ("at commit 2b64a33 the wire", True),
        ("see `tests/multihost/test_ray.py`", True),
        ("a hang we found and fixed", True),
        ("measured on 3 emulated hosts, node3 killed", True),
        ("Tested on 2 test hosts, each running an ssh server", True),
        ("scripts/testhosts.sh up 3", True),
        ("it used to hang after a restart", True),
        ("--namespace NS and a host list", False),
        ("the hosts of the test", False),
        ("(da3b21e, 5 repeats)", True),
        ("horovod_commit: 2626dc87a3a8eb8fb7d2216198ce45bce0f9e65a", True),
        ("(tests/unit)", True),
        ("keras-team/keras#20585 and ray#47464", False),
        ("image registry.example.com/ml/tfdist:2.21@sha256:abc", False),
        ("colour #3f51b5 and my-tests/ folder, unittests/", False),
        ("1234567 examples, 4,799,528 bytes, 1e-5", False),
        ("a facade, deadbeef, accede, decade", False),
        ("a slow link, a fast path, every day", False),
        ("<!-- example: skip needs a cluster (tests/multihost/test_ray.py starts one) -->", False),
        ("`--time 01:00:00`, version 2.21, port 29500", False),
    ],
)
def test_what_counts(text: str, caught: bool) -> None:
    assert bool(findings(text)) is caught, findings(text)
