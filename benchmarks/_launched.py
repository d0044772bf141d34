"""One launched run of a benchmark's worker script, read back as the JSON its chief wrote: what the
benchmarks that compare modes of ``tfdist.fit`` side by side share."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Any


def launched_run(worker: str, backend: str, workers: int, *args: str, timeout: float = 600) -> Any:
    """``tfdist launch -n WORKERS --cpu --backend BACKEND WORKER ARGS... OUT_JSON``: the JSON written to
    ``OUT_JSON`` (the worker's last argument); SystemExit with the launch's output when it failed."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        cmd = [sys.executable, "-m", "tfdist", "launch", "-n", str(workers), "--cpu", "--backend", backend]
        proc = subprocess.run(
            [*cmd, "--log-dir", os.path.join(tmp, "logs"), worker, *args, out],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if proc.returncode != 0:
            raise SystemExit(f"{backend} {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
        with open(out) as f:
            return json.load(f)
