"""Shared fixtures: every test starts from an environment without cluster variables."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Generator, Iterator
from pathlib import Path

import pytest

CLUSTER_PREFIXES = (
    "TF_CONFIG",
    "SLURM_",
    "CUDA_VISIBLE_DEVICES",
    "TFDIST_",
    "TPU_",
    "COLAB_TPU_ADDR",
    "KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS",
    "OMPI_",
    "PMI_",
    "PMIX_",
)
TESTS = Path(__file__).parent
HELPERS = TESTS / "helpers"
#: The markers of every test in a folder of tests/ (pyproject.toml describes them). A test adds its own
#: (``slow``, or ``multiprocess`` for a tests/tf case that starts workers) with a decorator.
FOLDER_MARKERS: dict[str, tuple[str, ...]] = {
    "unit": (),
    "docs": (),
    "tf": ("tf",),
    "multiprocess": ("multiprocess",),
    "slurm": ("slurm",),
    "multihost": ("multihost",),
    "install": (),
}
#: pytest-timeout's limit for a folder whose tests take longer than the default (pyproject.toml: 300 s).
FOLDER_TIMEOUT_S = {"multihost": 900}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each test gets its folder's markers (and time limit): one place instead of a line in every file."""
    for item in items:
        try:
            folder = item.path.relative_to(TESTS).parts[0]
        except ValueError:
            continue
        if folder not in FOLDER_MARKERS:
            raise pytest.UsageError(f"tests/{folder}: a test folder without markers (FOLDER_MARKERS)")
        for name in FOLDER_MARKERS[folder]:
            item.add_marker(name)
        if folder in FOLDER_TIMEOUT_S:
            item.add_marker(pytest.mark.timeout(FOLDER_TIMEOUT_S[folder]))  # a test's own limit comes first


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Remove every variable that would make tfdist detect a cluster or pin devices."""
    for name in list(os.environ):
        if name.startswith(CLUSTER_PREFIXES):
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")


@pytest.fixture(autouse=True)
def forget_strategy() -> Iterator[None]:
    """tfdist fixes its per-process context when it builds a strategy: one per test."""
    from tfdist import context

    context._BUILT.clear()
    yield
    context._BUILT.clear()


@pytest.fixture(autouse=True)
def forget_global_seed() -> Iterator[None]:
    """A test that seeds TensorFlow globally (keras.utils.set_random_seed) must not seed the next one."""
    yield
    if "tensorflow" in sys.modules:
        sys.modules["tensorflow"].random.set_seed(None)


@pytest.fixture
def python() -> str:
    """The interpreter running the tests (the project's virtualenv)."""
    return sys.executable


@pytest.fixture(scope="session")
def one_process_reference(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """``one_process_reference(script, *args)``: the output directory of ``python SCRIPT OUT ARGS`` in one
    plain process (no cluster variables; TFDIST_RANK=0, by which the helpers name their outputs), run the
    first time a test of the run asks for that script and those arguments: the training that the same
    script on several workers, ranks or hosts must equal. Tests read it and write nothing there."""
    done: dict[tuple[str, ...], Path] = {}

    def run(script: str | Path, *args: str) -> Path:
        key = (str(script), *args)
        if key not in done:
            out = tmp_path_factory.mktemp(f"one-{Path(script).stem}")
            env = {k: v for k, v in os.environ.items() if not k.startswith(CLUSTER_PREFIXES)}
            env.update(TFDIST_RANK="0", TF_CPP_MIN_LOG_LEVEL="2")
            proc = subprocess.run(
                [sys.executable, str(script), str(out), *args],
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
            done[key] = out
        return done[key]

    return run


@pytest.fixture
def helpers() -> Path:
    """Directory of small worker scripts used by the multi-process tests."""
    return HELPERS


#: Wall time of each folder's tests (setup, call and teardown), so a regression in time is seen the day
#: it lands: ``./dev test`` prints them at its end.
FOLDER_TIME_S: dict[str, float] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, None, None]:
    started = time.monotonic()
    yield
    try:
        folder = item.path.relative_to(TESTS).parts[0]
    except ValueError:
        folder = "other"
    FOLDER_TIME_S[folder] = FOLDER_TIME_S.get(folder, 0.0) + time.monotonic() - started


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say how long each folder took, and how many tests ran on test hosts: they skip (with the reason)
    where namespaces cannot be made."""
    if FOLDER_TIME_S:
        times = sorted(FOLDER_TIME_S.items(), key=lambda kv: -kv[1])
        terminalreporter.write_line(
            f"time per folder ({sum(FOLDER_TIME_S.values()) / 60:.1f} min in all): "
            + ", ".join(f"{folder} {seconds:.0f} s" for folder, seconds in times)
        )
    counts: dict[str, int] = {}
    for outcome in ("passed", "failed", "skipped", "error"):
        for report in terminalreporter.stats.get(outcome, []):
            if "multihost" in getattr(report, "keywords", {}) and report.when in ("call", "setup"):
                if outcome == "passed" and report.when != "call":
                    continue
                counts[outcome] = counts.get(outcome, 0) + 1
    if counts:
        summary = ", ".join(f"{n} {outcome}" for outcome, n in counts.items())
        terminalreporter.write_line(f"multi-host tests (test hosts): {summary}")
