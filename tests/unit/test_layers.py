"""The layer contract holds (import-linter, as in CI) and planners load without TensorFlow."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLANNERS = [
    "tfdist.env",
    "tfdist.strategies.plan",
    "tfdist.launcher.plan",
    "tfdist.launcher.policy",
    "tfdist.launcher.config",
    "tfdist.slurm.script",
    "tfdist.bench.plan",
    "tfdist.bench.config",
    "tfdist.backends",
    "tfdist.variables",
    "tfdist.context",
    "tfdist.nodes",
    "tfdist.diagnose.linkreport",
    "tfdist.worker.contract",
    "tfdist.cli",
]


def test_import_contracts_hold() -> None:
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint, "import-linter is a dev dependency: pip install -e '.[dev]'"
    proc = subprocess.run([lint], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "2 kept, 0 broken" in proc.stdout


@pytest.mark.parametrize("module", PLANNERS)
def test_planners_load_without_tensorflow(module: str) -> None:
    code = (
        f"import sys, {module}; heavy = [m for m in ('tensorflow', 'keras', 'mpi4py') if m in sys.modules]; "
        "print(','.join(heavy))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "", f"{module} loaded {proc.stdout.strip()}"


def test_no_module_import_cycles() -> None:
    """No two tfdist modules import each other, directly or through others (lazy imports included)."""
    import grimp

    graph = grimp.build_graph("tfdist", exclude_type_checking_imports=True)
    modules = sorted(m for m in graph.modules if m != "tfdist")
    cycles = []
    for module in modules:
        for imported in graph.find_modules_directly_imported_by(module):
            if imported == "tfdist" or imported.startswith(f"{module}."):
                continue  # the package namespace itself, and a package importing its own submodules
            back = graph.find_shortest_chain(importer=imported, imported=module)
            if back and not module.startswith(f"{imported}."):
                cycles.append(" -> ".join([module, *back]))
    assert not cycles, "import cycles:\n" + "\n".join(sorted(cycles))
