"""One rank of benchmarks/horovod_upstream.py: Horovod's test_tensorflow.py under pytest, JUnit XML out.

usage (through tfdist launch --backend horovod): horovod_upstream_worker.py TEST_FILE REPORT_DIR
TEST_TIMEOUT [SELECT]

The suite's helpers import a few Horovod-internal modules that are not Horovod's API:
``horovod.tensorflow.util._executing_eagerly`` (TensorFlow's ``executing_eagerly``),
``horovod.runner.util.threads.in_thread`` (start a daemon thread) and the ``mock`` package (the standard
library's ``unittest.mock``); stand-ins for exactly these are registered before the suite is imported.
"""

from __future__ import annotations

import sys
import threading
import types
import unittest.mock
from pathlib import Path
from typing import Any


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
    import horovod.tensorflow  # noqa: F401  (tfdist's, through the launcher's shim)
    import tensorflow as tf

    util = types.ModuleType("horovod.tensorflow.util")
    util._executing_eagerly = tf.executing_eagerly  # type: ignore[attr-defined]
    sys.modules["horovod.tensorflow.util"] = util
    for name in ("horovod.runner", "horovod.runner.util"):
        sys.modules[name] = types.ModuleType(name)
    threads = types.ModuleType("horovod.runner.util.threads")
    threads.in_thread = in_thread  # type: ignore[attr-defined]
    sys.modules["horovod.runner.util.threads"] = threads
    sys.modules.setdefault("mock", unittest.mock)


def main() -> int:
    import pytest

    test_file, reports, timeout = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    select = sys.argv[4] if len(sys.argv) > 4 else ""
    install_stand_ins()
    import horovod.tensorflow as hvd

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
        f"--timeout={timeout}",
        "--timeout-method=signal",
    ]
    if select:
        argv += ["-k", select]
    pytest.main(argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
