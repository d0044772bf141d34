"""The registry of TFDIST_* variables is complete, the only reader, and what README documents."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tfdist import variables
from tfdist.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "tfdist"
#: Reads of a TFDIST_* variable that bypass the registry.
DIRECT_READ = re.compile(
    r"""(environ(\.get)?[\[(]\s*["']TFDIST_|["']TFDIST_\w+["']\s+(not\s+)?in\s+\w*environ)"""
)
#: The bootstrap runs before tfdist is importable (it decides whether to import it at all).
ALLOWED_DIRECT = {"variables.py", "sitecustomize.py"}


def _sources() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def test_every_variable_named_in_the_source_is_declared() -> None:
    named = {m for path in _sources() for m in re.findall(r"TFDIST_[A-Z][A-Z_]*[A-Z]", path.read_text())}
    undeclared = sorted(named - set(variables.VARIABLES))
    assert not undeclared, f"declare these in tfdist/variables.py: {undeclared}"
    assert len(named) >= 20  # the scan really found the variables


def test_no_code_reads_a_variable_around_the_registry() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in _sources()
        if path.name not in ALLOWED_DIRECT
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if DIRECT_READ.search(line)
    ]
    assert not offenders, "read TFDIST_* through tfdist.variables:\n" + "\n".join(offenders)


def test_the_direct_read_pattern_catches_what_it_should() -> None:
    for line in ('os.environ.get("TFDIST_X")', 'environ["TFDIST_X"]', '"TFDIST_X" in environ'):
        assert DIRECT_READ.search(line), line
    assert not DIRECT_READ.search('variables.get("TFDIST_X", environ)')


def test_the_docs_table_is_generated_from_the_registry() -> None:
    page = (ROOT / "docs" / "reference" / "environment.md").read_text()
    begin, end = "<!-- generated:variables:begin -->\n\n", "\n\n<!-- generated:variables:end -->"
    table = page.split(begin, 1)[1].split(end, 1)[0]
    assert table == variables.markdown_table()


@pytest.mark.parametrize(
    ("name", "environ", "expected"),
    [
        ("TFDIST_COLLECTIVE_TIMEOUT", {}, 300.0),
        ("TFDIST_COLLECTIVE_TIMEOUT", {"TFDIST_COLLECTIVE_TIMEOUT": " 20 "}, 20.0),
        ("TFDIST_CPU_REPLICAS", {}, None),
        ("TFDIST_CPU_REPLICAS", {"TFDIST_CPU_REPLICAS": ""}, None),
        ("TFDIST_CPU_REPLICAS", {"TFDIST_CPU_REPLICAS": "4"}, 4),
        ("TFDIST_KERAS_PATCH", {}, True),
        ("TFDIST_KERAS_PATCH", {"TFDIST_KERAS_PATCH": "off"}, False),
        ("TFDIST_KERAS_PATCH", {"TFDIST_KERAS_PATCH": "0"}, False),
        ("TFDIST_MPI_SHM", {"TFDIST_MPI_SHM": "1"}, True),
        ("TFDIST_BACKEND", {}, "auto"),
        ("TFDIST_BUCKET_AUTO_SHARE", {}, 0.2),
    ],
)
def test_values_are_parsed_with_their_defaults(name: str, environ: dict[str, str], expected: object) -> None:
    assert variables.get(name, environ) == expected


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("TFDIST_CPU_REPLICAS", "four", "TFDIST_CPU_REPLICAS='four' is not an integer"),
        ("TFDIST_COLLECTIVE_TIMEOUT", "soon", "TFDIST_COLLECTIVE_TIMEOUT='soon' is not a finite number"),
        ("TFDIST_COLLECTIVE_TIMEOUT", "nan", "TFDIST_COLLECTIVE_TIMEOUT='nan' is not a finite number"),
        ("TFDIST_BUCKET_AUTO_SHARE", "1e", "TFDIST_BUCKET_AUTO_SHARE='1e' is not a finite number"),
    ],
)
def test_a_bad_value_names_the_variable(name: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        variables.get(name, {name: value})
