"""Horovod's own TensorFlow test suites against tfdist's Horovod API: ``test/parallel/test_tensorflow.py``
(or, ``--suite tensorflow2_keras``, ``test_tensorflow2_keras.py``) of horovod/horovod, run with N ranks
through ``tfdist launch --backend horovod`` (Horovod not installed: tfdist answers ``import
horovod.tensorflow``), the outcome of every test counted and written as JSON.

    python devtools/horovod_upstream.py --horovod PATH --out benchmarks/results/horovod_upstream.json
    python devtools/horovod_upstream.py --horovod PATH --suite tensorflow2_keras --tf-keras \
        --out benchmarks/results/horovod_upstream_keras2.json

``--tf-keras``: under Keras 2 as users keep it on TensorFlow 2.16+ (the tf-keras package,
``TF_USE_LEGACY_KERAS=1``); tf-keras is installed without its dependencies (it pins the full
``tensorflow`` package) into a cache folder put on the ranks' PYTHONPATH, with the suite's own test
dependency (``parameterized``).

PATH is a Horovod checkout, or a bare git directory of one (its HEAD is read). A test counts as passed
when it passed on every rank, skipped when any rank skipped it, failed otherwise.

Each rank (``horovod_upstream.py rank TEST_FILE REPORT_DIR TEST_TIMEOUT [SELECT]``, started by the launcher)
runs the suite under pytest, JUnit XML out, with stand-ins for the few Horovod-internal modules the suite's
helpers import (:func:`install_stand_ins`). A run is bounded test by test (:class:`LockStep`); the JSON's
``stuck`` names the tests stopped after TEST_TIMEOUT seconds.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import types
import unittest.mock
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

SUITES = {
    "tensorflow": {
        "test/parallel/test_tensorflow.py": "parallel/test_tensorflow.py",
        "test/parallel/base_test_tensorflow.py": "parallel/base_test_tensorflow.py",
        "test/utils/common.py": "utils/common.py",
    },
    "tensorflow2_keras": {"test/parallel/test_tensorflow2_keras.py": "parallel/test_tensorflow2_keras.py"},
}
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tfdist-horovod-suite"
#: What --tf-keras installs (without dependencies) beside the ranks' own packages.
KERAS2 = ("tf-keras==2.21.0", "parameterized==0.9.0")


def keras2_path() -> str:
    """The folder holding tf-keras and the suite's test dependency (installed on first use)."""
    if not (CACHE / "tf_keras").is_dir() or not (CACHE / "parameterized").is_dir():
        pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(CACHE), *KERAS2]
        installed = subprocess.run(pip, capture_output=True, text=True, timeout=600)
        if installed.returncode != 0:
            raise SystemExit(f"could not install {', '.join(KERAS2)}: {installed.stderr[-2000:]}")
    return str(CACHE)


def copy_suite(source: Path, into: Path, suite: str) -> str:
    """The suite's files from a checkout or a git directory; returns the commit (or 'worktree')."""
    commit, git = "worktree", ["git", "--git-dir", str(source)]
    for name, target in SUITES[suite].items():
        (into / target).parent.mkdir(parents=True, exist_ok=True)
        if (source / name).is_file():
            shutil.copy(source / name, into / target)
            continue
        proc = subprocess.run([*git, "show", f"HEAD:{name}"], capture_output=True, timeout=60)
        if proc.returncode != 0:
            raise SystemExit(
                f"{name} is not in {source} (a Horovod checkout or git directory): {proc.stderr!r}"
            )
        (into / target).write_bytes(proc.stdout)
        commit = subprocess.run(
            [*git, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=60
        ).stdout
    return commit.strip()


def outcomes(report: Path) -> dict[str, tuple[str, str]]:
    """test name -> (passed | failed | skipped, first line of the reason) from one rank's JUnit XML."""
    found: dict[str, tuple[str, str]] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        status, reason = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                status, reason = "failed", (child.get("message") or child.text or "").strip()
            elif child.tag == "skipped":
                status, reason = "skipped", (child.get("message") or "").strip()
        found[case.get("name", "?")] = (status, reason.splitlines()[0][:300] if reason else "")
    return found


def combine(per_rank: list[dict[str, tuple[str, str]]]) -> dict[str, tuple[str, str]]:
    """Passed on every rank -> passed; skipped on any -> skipped; else failed (rank 0's reason first)."""
    combined: dict[str, tuple[str, str]] = {}
    for name in sorted(set().union(*per_rank)):
        results = [ranks.get(name, ("failed", "not run on this rank")) for ranks in per_rank]
        if all(status == "passed" for status, _ in results):
            combined[name] = ("passed", "")
        elif any(status == "skipped" for status, _ in results):
            combined[name] = next(r for r in results if r[0] == "skipped")
        else:
            combined[name] = next(r for r in results if r[0] == "failed")
    return combined


def stuck_tests(reports: Path) -> dict[str, list[int]]:
    """test id -> the ranks whose watchdog stopped it (``== <id>: ...`` lines of rank<r>.stuck.txt)."""
    stuck: dict[str, list[int]] = {}
    for path in sorted(reports.glob("rank*.stuck.txt")):
        rank = int(path.name[4:].split(".")[0])
        for line in path.read_text(errors="replace").splitlines():
            if line.startswith("== "):
                stuck.setdefault(line[3:].split(": still running")[0], []).append(rank)
    return stuck


def main() -> int:
    if sys.argv[1:2] == ["rank"]:
        return rank_main(sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--horovod", default=os.environ.get("HOROVOD_SRC", ""), help="checkout or git dir")
    parser.add_argument("--suite", choices=sorted(SUITES), default="tensorflow")
    parser.add_argument("--tf-keras", action="store_true", help="under tf-keras (TF_USE_LEGACY_KERAS=1)")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--select", default="", help="pytest -k expression (default: every test)")
    parser.add_argument("--test-timeout", type=int, default=120, help="seconds per test")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds for the whole run")
    parser.add_argument("--out", default="benchmarks/results/horovod_upstream.json")
    args = parser.parse_args()
    if not args.horovod:
        raise SystemExit("--horovod PATH (a horovod/horovod checkout or git directory) is required")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        commit = copy_suite(Path(args.horovod), tmp, args.suite)
        cmd = [sys.executable, "-m", "tfdist", "launch", "--backend", "horovod", "-n", str(args.ranks)]
        # The launcher ends its ranks itself at --timeout (a killed launcher would leave them).
        cmd += ["--cpu", "--timeout", str(args.timeout), "--run-dir", str(tmp / "logs"), __file__, "rank"]
        cmd += [str(tmp / "parallel" / f"test_{args.suite}.py"), str(tmp / "reports"), str(args.test_timeout)]
        cmd.append(args.select)
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "TF_ENABLE_ONEDNN_OPTS": "0"}
        if args.tf_keras:
            path = [keras2_path(), env.get("PYTHONPATH", "")]
            env.update(PYTHONPATH=os.pathsep.join(p for p in path if p), TF_USE_LEGACY_KERAS="1")
        started = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout + 120, env=env)
        elapsed = time.monotonic() - started
        reports = [tmp / "reports" / f"rank{r}.xml" for r in range(args.ranks)]
        if not all(r.is_file() for r in reports):
            output = proc.stdout[-3000:] + proc.stderr[-3000:]
            raise SystemExit(f"the suite did not finish (exit {proc.returncode}):\n{output}")
        combined = combine([outcomes(r) for r in reports])
        stuck = stuck_tests(tmp / "reports")
    counts = {s: sum(1 for v in combined.values() if v[0] == s) for s in ("passed", "failed", "skipped")}
    result = {
        "benchmark": "horovod_upstream",
        "suite": f"horovod/horovod test/parallel/test_{args.suite}.py",
        "keras": "tf-keras 2.21 (TF_USE_LEGACY_KERAS=1)" if args.tf_keras else "Keras 3",
        "horovod_commit": commit,
        "ranks": args.ranks,
        "launch_exit_code": proc.returncode,
        "seconds": round(elapsed, 1),
        "counts": counts,
        "stuck": stuck,
        "skipped": {k: v[1] for k, v in combined.items() if v[0] == "skipped"},
        "failed": {k: v[1] for k, v in combined.items() if v[0] == "failed"},
        "passed": sorted(k for k, v in combined.items() if v[0] == "passed"),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps({"counts": counts, "stuck": stuck, "failed": result["failed"]}, indent=2))
    return 0


def in_thread(
    target: Any,
    args: tuple[Any, ...] = (),
    name: str | None = None,
    daemon: bool = True,
    silent: bool = False,
) -> threading.Thread:
    """Horovod's ``in_thread``: ``target(*args)`` started in a thread."""
    thread = threading.Thread(target=target, args=args, name=name, daemon=daemon)
    thread.start()
    return thread


def install_stand_ins() -> None:
    """Stand-ins for what the suite's helpers import that is not Horovod's API:
    ``horovod.tensorflow.util._executing_eagerly`` (TensorFlow's ``executing_eagerly``, re-exported as
    ``hvd._executing_eagerly``), ``horovod.runner.util.threads.in_thread`` (a daemon thread),
    ``horovod.common.util.is_version_greater_equal_than`` (the Keras suite's version check) and the ``mock``
    package (the standard library's ``unittest.mock``)."""
    import horovod.tensorflow  # tfdist's, through the launcher's shim
    import tensorflow as tf

    util = types.ModuleType("horovod.tensorflow.util")
    util._executing_eagerly = tf.executing_eagerly  # type: ignore[attr-defined]
    sys.modules["horovod.tensorflow.util"] = util
    # An attribute of the package as well, as importing a real submodule makes it; Horovod's package also
    # re-exports the private helper itself (hvd._executing_eagerly).
    horovod.tensorflow.util = util
    horovod.tensorflow._executing_eagerly = tf.executing_eagerly
    for name in ("horovod.runner", "horovod.runner.util"):
        sys.modules[name] = types.ModuleType(name)
    threads = types.ModuleType("horovod.runner.util.threads")
    threads.in_thread = in_thread  # type: ignore[attr-defined]
    sys.modules["horovod.runner.util.threads"] = threads
    common = types.ModuleType("horovod.common.util")
    common.is_version_greater_equal_than = _version_at_least  # type: ignore[attr-defined]
    sys.modules["horovod.common"] = types.ModuleType("horovod.common")
    sys.modules["horovod.common.util"] = common
    if "mock" not in sys.modules:
        # The standard library's mock as the ``mock`` package (its backport, version 5, which other test
        # libraries, e.g. parameterized, look at).
        mock = types.ModuleType("mock")
        mock.__dict__.update({k: v for k, v in vars(unittest.mock).items() if not k.startswith("__")})
        mock.version_info = (5, 0, 0)  # type: ignore[attr-defined]
        sys.modules["mock"] = mock


def _version_at_least(ver: str, target: str) -> bool:
    """Horovod's ``is_version_greater_equal_than``: release parts compared as numbers."""
    from packaging import version

    return version.parse(ver.split("-")[0]) >= version.parse(target)


class Once:
    """``abandon(name)`` at most once per test on this rank, whoever asks first (watchdog or teardown)."""

    def __init__(self, coordinator: Any, name: str) -> None:
        self.coordinator, self.name = coordinator, name
        self.lock = threading.Lock()
        self.done = False

    def __call__(self, reason: str) -> None:
        with self.lock:
            if not self.done:
                self.coordinator.abandon(self.name, reason)
                self.done = True


class LockStep:
    """A pytest plugin: every test ends on every rank together (a collective of the coordinator that also
    drops whatever a test left unmatched, e.g. a collective only one rank issued); a test still running after
    ``timeout`` s has its stacks written to ``stuck_file`` and its waiting collectives failed, so it fails
    and the run goes on (pytest-timeout cannot interrupt a rank blocked inside a TensorFlow op)."""

    def __init__(self, coordinator: Any, timeout: float, stuck_file: Path) -> None:
        self.coordinator, self.timeout, self.stuck_file = coordinator, timeout, stuck_file

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: Any, nextitem: Any) -> Iterator[None]:
        once = Once(self.coordinator, item.nodeid)
        watchdog = threading.Timer(self.timeout, self._stuck, args=(item.nodeid, once))
        watchdog.daemon = True
        watchdog.start()
        yield
        watchdog.cancel()
        once(f"the test {item.nodeid} ended on another rank with this collective unmatched")

    def _stuck(self, nodeid: str, once: Once) -> None:
        with self.stuck_file.open("a") as out:
            out.write(f"== {nodeid}: still running after {self.timeout:.0f} s ({time.ctime()})\n")
            out.flush()
            faulthandler.dump_traceback(out, all_threads=True)
        once(f"the test {nodeid} was stopped after {self.timeout:.0f} s (see rank*.stuck.txt)")


def rank_main(argv: list[str]) -> int:
    """One rank: the suite under pytest, this rank's JUnit XML written into the report folder."""
    test_file, reports, timeout = Path(argv[0]), Path(argv[1]), int(argv[2])
    select = argv[3] if len(argv) > 3 else ""
    install_stand_ins()
    import horovod.tensorflow as hvd

    from tfdist.horovod import runtime

    hvd.init()
    reports.mkdir(parents=True, exist_ok=True)
    argv = [str(test_file), "-q", "-p", "no:cacheprovider", "-c", "/dev/null"]
    argv += ["--rootdir", str(test_file.parent)]
    argv.append(f"--junitxml={reports / f'rank{hvd.rank()}.xml'}")
    # A last resort for a rank looping in Python (the watchdog comes first).
    argv += [f"--timeout={2 * timeout}", "--timeout-method=signal", *(["-k", select] if select else [])]
    plugin = LockStep(runtime.world().coordinator, timeout, reports / f"rank{hvd.rank()}.stuck.txt")
    pytest.main(argv, plugins=[plugin])
    return 0


if __name__ == "__main__":
    sys.exit(main())
