"""What the benchmarks share: configurations measured in turns within one run (this machine's speed moves from
hour to hour, so every configuration meets the same drift), their medians and ratios, the JSON written; one
launched run read back as JSON; ``tfdist bench`` and the test hosts; a commit's tree to measure.

A benchmark imports it as ``from _common import ...`` after putting its own folder first on ``sys.path``.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from tfdist import files

ROOT = Path(__file__).resolve().parent.parent
TESTHOSTS = str(ROOT / "scripts" / "testhosts.sh")
T = TypeVar("T")


def alternate(
    names: Sequence[str],
    repeats: int,
    measure: Callable[[str, int], T],
    *,
    show: Callable[[int, str, T], str] | None = None,
) -> dict[str, list[T]]:
    """Every name measured once per repeat, ``measure(name, repeat)``, the order rotated left by one from
    repeat to repeat (each name runs first in turn); returns each name's samples in repeat order.
    ``show(repeat, name, sample)``, when given, is the progress line printed after each sample.

    Input: ``alternate(["a", "b"], 2, f)`` calls ``f("a", 0), f("b", 0), f("b", 1), f("a", 1)``
    Output: ``{"a": [f("a", 0), f("a", 1)], "b": [f("b", 0), f("b", 1)]}``
    """
    samples: dict[str, list[T]] = {name: [] for name in names}
    for repeat in range(repeats):
        shift = repeat % len(names)
        for name in [*names[shift:], *names[:shift]]:
            samples[name].append(measure(name, repeat))
            if show is not None:
                print(show(repeat, name, samples[name][-1]), flush=True)
    return samples


def medians(samples: Mapping[str, Iterable[float]]) -> dict[str, float]:
    """The median of each name's samples: ``{"a": [3.0, 1.0, 2.0]}`` -> ``{"a": 2.0}``."""
    return {name: statistics.median(values) for name, values in samples.items()}


def ratio_each(values: Sequence[float], reference: Sequence[float]) -> list[float]:
    """``values`` over ``reference`` repeat by repeat: steadier than the ratio of the medians when the
    machine's load moves between repeats (a repeat's runs are close in time, the repeats far apart)."""
    return [v / r for v, r in zip(values, reference, strict=True)]


def by_key(rows: Iterable[Mapping[str, float]]) -> dict[str, list[float]]:
    """Samples of several figures each as a list per figure: ``[{"x": 1}, {"x": 3}]`` -> ``{"x": [1, 3]}``."""
    figures: dict[str, list[float]] = {}
    for row in rows:
        for key, value in row.items():
            figures.setdefault(key, []).append(value)
    return figures


def stack() -> dict[str, Any]:
    """What a result ran on: TensorFlow's and Keras' versions and the CPU cores (imports TensorFlow)."""
    import keras
    import tensorflow as tf

    return {"tensorflow": tf.__version__, "keras": keras.__version__, "cpu_cores": os.cpu_count()}


def write_json(path: str | Path, report: Mapping[str, Any]) -> None:
    """``report`` as indented JSON at ``path`` (its folder made); written whole or not at all, so a run
    stopped while it writes leaves the previous result."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    files.write_text(path, json.dumps(report, indent=2) + "\n")  # tfdist's atomic write


def launched_run(
    worker: str, backend: str, workers: int, *args: str, env: Mapping[str, str] | None = None
) -> Any:
    """``tfdist launch -n WORKERS --cpu --backend BACKEND WORKER ARGS... OUT_JSON``: the JSON the worker wrote
    to ``OUT_JSON`` (its last argument), ``env`` added to the launch's environment; SystemExit with the
    launch's output when it failed."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        cmd = [sys.executable, "-m", "tfdist", "launch", "-n", str(workers), "--cpu", "--backend", backend]
        proc = subprocess.run(
            [*cmd, "--quiet-workers", "--run-dir", os.path.join(tmp, "logs"), worker, *args, out],
            capture_output=True,
            text=True,
            timeout=900,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})},
        )
        if proc.returncode != 0:
            raise SystemExit(f"{backend} {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
        return json.loads(Path(out).read_text())


def export(rev: str, into: Path) -> Path:
    """The tree of commit ``rev`` (``git archive``), unpacked under ``into``; returns its ``src`` directory:
    first on PYTHONPATH, it is the code measured, whatever is edited or committed during the run."""
    into.mkdir(parents=True, exist_ok=True)
    archive = into / "tree.tar"
    subprocess.run(["git", "archive", "-o", str(archive), rev], cwd=ROOT, check=True, timeout=120)
    with tarfile.open(archive) as tar:
        tar.extractall(into / "tree", filter="data")
    return into / "tree" / "src"


def tfdist_bench(out: Path, *args: str, env: Mapping[str, str], timeout: float = 7200) -> dict[str, Any]:
    """``python -m tfdist bench ARGS --out OUT`` from the repository root with ``env`` added: its
    results.json, the per-run folders removed (report and results kept); SystemExit with the bench's
    output when it failed."""
    cmd = [sys.executable, "-m", "tfdist", "bench", *args, "--out", str(out)]
    proc = subprocess.run(
        cmd, cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode != 0:
        raise SystemExit(f"tfdist bench failed ({out}):\n{(proc.stdout + proc.stderr)[-3000:]}")
    for folder in ("runs", "logs"):
        shutil.rmtree(out / folder, ignore_errors=True)
    return dict(json.loads((out / "results.json").read_text()))


def testhosts(env: Mapping[str, str], *args: str) -> None:
    """``scripts/testhosts.sh ARGS`` on the hosts ``env`` names (TFDIST_HOSTS_PREFIX / _SUBNET)."""
    subprocess.run(
        [TESTHOSTS, *args], env={**os.environ, **env}, check=True, capture_output=True, timeout=120
    )


def cap_links(env: Mapping[str, str], hosts: int, rate: str) -> None:
    """Every one of ``hosts`` test hosts' link capped at ``rate`` (``uncapped``: no cap)."""
    for i in range(1, hosts + 1):
        testhosts(env, "cap", f"node{i}", "off" if rate == "uncapped" else rate)
