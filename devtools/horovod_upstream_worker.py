"""One rank of devtools/horovod_upstream.py: Horovod's test_tensorflow.py under pytest, JUnit XML out.

usage (through tfdist launch --backend horovod): horovod_upstream_worker.py TEST_FILE REPORT_DIR
TEST_TIMEOUT [SELECT]

The suite's helpers import a few Horovod-internal modules that are not Horovod's API:
``horovod.tensorflow.util._executing_eagerly`` (TensorFlow's ``executing_eagerly``; Horovod's package
re-exports it as ``hvd._executing_eagerly``),
``horovod.runner.util.threads.in_thread`` (start a daemon thread), ``horovod.common.util.
is_version_greater_equal_than`` (the Keras suite's version check) and the ``mock`` package (the standard
library's ``unittest.mock``); stand-ins for exactly these are registered before the suite is imported.

Bounded, test by test (:class:`LockStep`): the ranks end every test together (a collective of the
coordinator that also drops whatever a test left unmatched, e.g. a collective only one rank issued),
and a test still running after TEST_TIMEOUT seconds on a rank has its stacks written to
REPORT_DIR/rank<r>.stuck.txt and its waiting collectives failed, so that test fails and the run goes on
(pytest-timeout cannot interrupt a rank blocked inside a TensorFlow op).
"""

from __future__ import annotations

import faulthandler
import sys
import threading
import time
import types
import unittest.mock
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


def in_thread(
    target: Any,
    args: tuple[Any, ...] = (),
    name: str | None = None,
    daemon: bool = True,
    silent: bool = False,
) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, name=name, daemon=daemon)
    thread.start()
    return thread


def install_stand_ins() -> None:
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
    """A pytest plugin: every test ends on every rank together; a stuck test fails after ``timeout`` s."""

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


def main() -> int:
    test_file, reports, timeout = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    select = sys.argv[4] if len(sys.argv) > 4 else ""
    install_stand_ins()
    import horovod.tensorflow as hvd

    from tfdist.horovod import runtime

    hvd.init()
    reports.mkdir(parents=True, exist_ok=True)
    argv = [
        str(test_file),
        "-q",
        "-p",
        "no:cacheprovider",
        "--rootdir",
        str(test_file.parent),
        "-c",
        "/dev/null",
    ]
    argv += [
        f"--junitxml={reports / f'rank{hvd.rank()}.xml'}",
        # A last resort for a rank looping in Python (the watchdog comes first).
        f"--timeout={2 * timeout}",
        "--timeout-method=signal",
    ]
    if select:
        argv += ["-k", select]
    plugin = LockStep(runtime.world().coordinator, timeout, reports / f"rank{hvd.rank()}.stuck.txt")
    pytest.main(argv, plugins=[plugin])
    return 0


if __name__ == "__main__":
    sys.exit(main())
