"""The command line as the tests call it (imported by the tests; not a worker script).

``cli(capsys, ARGS)`` runs ``main(ARGS)`` in the test's own process: the form for a command that starts no
process of its own (bad input, a plan, a rendered script or manifest). ``tfdist(ARGS)`` runs
``python -m tfdist ARGS`` in a subprocess, its output captured and its time bounded: the form for a command
that starts workers, a job or a server, or that must see an environment or a fresh interpreter of its own.
``TFDIST`` is that subprocess's argv, for a test that starts it some other way (on a test host, in the
background).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

#: ``python -m tfdist`` with the interpreter running the tests (the project's virtualenv).
TFDIST = (sys.executable, "-m", "tfdist")


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``tfdist ARGS`` in this process: the exit code (argparse's own exit included), stdout and stderr."""
    from tfdist.cli import main

    try:
        code = main(list(args))
    except SystemExit as exc:  # argparse: usage errors and --help
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def tfdist(
    *args: str,
    env: Mapping[str, str] | None = None,
    base_env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """``python -m tfdist ARGS`` in a subprocess, killed after ``timeout`` seconds; its output as text.

    The environment is ``base_env`` (default: this process's) with ``env``'s variables set on top.
    """
    environ = {**(os.environ if base_env is None else base_env), **(env or {})}
    return subprocess.run(
        [*TFDIST, *args], env=environ, cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
