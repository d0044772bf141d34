"""Keras and TensorFlow stacks users have, against tfdist's model.fit fix: one venv per cell, one JSON.

For every cell (a TensorFlow and a Keras release) a virtualenv is built once under ``$TFDIST_COMPAT_CACHE``
(default ``~/.cache/tfdist-compat/venvs/<cell>``) with ``tensorflow-cpu``, ``keras``, tfdist's runtime
dependencies and this tree (editable). The tutorial-style ``tests/helpers/keras_fit.py`` (no tfdist import)
runs in one process and on 2 workers (``tfdist launch -n 2 --cpu``); a cell passes when both workers' final
weights, history, ``evaluate()`` and ``predict()`` equal the one process's within 1e-5, or, for a Keras
outside the adapter table (:mod:`tfdist.keras.adapters`), when the launch ends with exit code 2 and
tfdist's one line.

    python devtools/compat.py [--cells tf2.17-keras3.5,...]   # ./dev compat: compat.json and the docs' table
    python devtools/compat.py --table | --write-docs           # print, or rewrite in docs/guides/keras-fit.md
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "compat.json"
DOC = ROOT / "docs" / "guides" / "keras-fit.md"
SCRIPT = ROOT / "tests" / "helpers" / "keras_fit.py"
TOL = 1e-5
#: tfdist's runtime dependencies (pyproject.toml's ``dependencies``), installed beside TF and Keras.
RUNTIME = ("numpy", "rich", "psutil", "scikit-learn", "matplotlib", "PyYAML")
ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "TF_ENABLE_ONEDNN_OPTS": "0", "PYTHONHASHSEED": "0"}


@dataclass(frozen=True)
class Cell:
    """One stack: ``tf_dist==tf`` and ``keras_dist==keras``; ``expect`` is "equal" or "refused"."""

    tf: str
    keras: str
    expect: str = "equal"
    tf_dist: str = "tensorflow-cpu"
    keras_dist: str = "keras"

    @property
    def name(self) -> str:
        return f"tf{'.'.join(self.tf.split('.')[:2])}-keras{'.'.join(self.keras.split('.')[:2])}"


#: The nightlies of the next release, as the registry has them (the date is in the version).
KERAS_NIGHTLY, TF_NIGHTLY = "3.16.0.dev2026102704", "2.22.0.dev20260905"

#: The oldest and newest Keras of each adapter row, each beside a TensorFlow that accepts it, the default
#: stack (TF 2.21 + Keras 3.15), the next release's nightlies, and one Keras outside the table (TF 2.17
#: accepts Keras 3.2).
CELLS: tuple[Cell, ...] = (
    Cell("2.16.2", "3.3.3"),
    Cell("2.16.2", "3.4.1"),
    Cell("2.17.1", "3.5.0"),
    Cell("2.17.1", "3.6.0"),
    Cell("2.18.1", "3.7.0"),
    Cell("2.19.1", "3.8.0"),
    Cell("2.19.1", "3.9.2"),
    Cell("2.20.0", "3.10.0"),
    Cell("2.20.0", "3.11.3"),
    Cell("2.21.0", "3.15.1"),
    Cell("2.21.0", KERAS_NIGHTLY, keras_dist="keras-nightly"),
    Cell(TF_NIGHTLY, KERAS_NIGHTLY, tf_dist="tf-nightly-cpu", keras_dist="keras-nightly"),
    Cell("2.17.1", "3.2.1", expect="refused"),
)


def venv_dir(cell: Cell) -> Path:
    """The cell's virtualenv, under ``$TFDIST_COMPAT_CACHE``."""
    cache = os.environ.get("TFDIST_COMPAT_CACHE", "~/.cache/tfdist-compat")
    return Path(cache).expanduser() / "venvs" / cell.name


def _stamp(cell: Cell) -> str:
    stack = {cell.tf_dist: cell.tf, cell.keras_dist: cell.keras, "runtime": RUNTIME}
    return json.dumps(stack, sort_keys=True)


def _pip(python: Path, *args: str, timeout: float) -> None:
    cmd = [str(python), "-m", "pip", "install", "--quiet", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {proc.returncode}): {' / '.join(tail)}")


def build(cell: Cell, timeout: float = 900) -> Path:
    """The cell's venv (built once; rebuilt when its stamp differs). Returns its python."""
    venv = venv_dir(cell)
    python = venv / "bin" / "python"
    stamp = venv / ".tfdist-compat"
    if python.exists() and stamp.exists() and stamp.read_text() == _stamp(cell):
        here = subprocess.run(
            [str(python), "-c", "import tfdist; print(tfdist.__file__)"], capture_output=True, text=True
        )
        if not here.stdout.startswith(str(ROOT / "src")):  # built from another tree: this one, editable
            _pip(python, "--no-deps", "-e", str(ROOT), timeout=300)
        return python
    shutil.rmtree(venv, ignore_errors=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    if cell.keras_dist == "keras":
        _pip(python, f"{cell.tf_dist}=={cell.tf}", f"keras=={cell.keras}", *RUNTIME, timeout=timeout)
    else:  # another distribution of the module keras: TensorFlow's own pick of keras makes room for it
        _pip(python, f"{cell.tf_dist}=={cell.tf}", *RUNTIME, timeout=timeout)
        subprocess.run([str(python), "-m", "pip", "uninstall", "-y", "-q", "keras"], timeout=120, check=False)
        _pip(python, f"{cell.keras_dist}=={cell.keras}", timeout=timeout)
    _pip(python, "--no-deps", "-e", str(ROOT), timeout=300)
    stamp.write_text(_stamp(cell))
    return python


def run_cell(cell: Cell, timeout: float = 400, build_timeout: float = 900) -> dict[str, Any]:
    """Build (if needed) and run one cell; its JSON record."""
    start = time.monotonic()
    record: dict[str, Any] = {"cell": cell.name, "tensorflow": cell.tf, "keras": cell.keras}
    record.update(tf_dist=cell.tf_dist, keras_dist=cell.keras_dist)
    record["expect"] = cell.expect
    try:
        python = build(cell, build_timeout)
    except (RuntimeError, subprocess.SubprocessError) as exc:
        return {**record, "passed": False, "error": f"venv build: {exc}", "seconds": _since(start)}
    built = time.monotonic()
    env = {**os.environ, **ENV}
    for var in ("TF_CONFIG", "PYTHONPATH", "VIRTUAL_ENV"):
        env.pop(var, None)
    with tempfile.TemporaryDirectory(prefix=f"tfdist-compat-{cell.name}-") as tmp:
        one, two = Path(tmp, "one"), Path(tmp, "two")
        one.mkdir()
        two.mkdir()
        launch = [str(python), "-m", "tfdist", "launch", "-n", "2", "--cpu"]
        launch += ["--run-dir", str(Path(tmp, "logs"))]
        argv = [*launch, str(SCRIPT), str(two)]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, cwd=tmp)
        output = proc.stdout + proc.stderr
        record["launch_exit_code"] = proc.returncode
        if cell.expect == "refused":
            lines = [line for line in output.splitlines() if "outside the releases tfdist" in line]
            record["message"] = lines[0] if lines else None
            traceback = "Traceback (most recent call last)" in output
            record["passed"] = proc.returncode == 2 and bool(lines) and not traceback
        elif proc.returncode != 0:
            record.update(passed=False, error=_tail(output))
        else:
            ref = subprocess.run(
                [str(python), str(SCRIPT), str(one)], capture_output=True, text=True, timeout=timeout, env=env
            )
            if ref.returncode != 0:
                record.update(passed=False, error="one process: " + _tail(ref.stdout + ref.stderr))
            else:
                record.update(differences(one, two))
                record["passed"] = record["max_diff"] <= TOL
                record["warnings"] = sorted(
                    {w for w in output.splitlines() if "tfdist:" in w and "Warn" in w}
                )
    record["seconds_build"] = round(built - start, 1)
    record["seconds"] = _since(built)
    return record


def differences(one: Path, two: Path) -> dict[str, float]:
    """The largest gap between the 2 workers' results and one process's: weights, history, ``evaluate()``
    and ``predict()``, each and all."""
    import numpy as np

    def gap(a: Any, b: Any) -> float:
        return float(np.abs(np.asarray(a) - np.asarray(b)).max())

    ref, worst = (
        json.loads((one / "rank-0.json").read_text()),
        dict.fromkeys(("weight", "history", "evaluate", "predict"), 0.0),
    )
    for rank in (0, 1):
        got = json.loads((two / f"rank-{rank}.json").read_text())
        for kind, name in (("weight", "weights"), ("predict", "predictions")):
            worst[kind] = max(
                worst[kind],
                gap(np.load(two / f"rank-{rank}.{name}.npy"), np.load(one / f"rank-0.{name}.npy")),
            )
        for kind in ("history", "evaluate"):
            worst[kind] = max([worst[kind], *(gap(got[kind][k], v) for k, v in ref[kind].items())])
    return {**{f"max_{k}_diff": v for k, v in worst.items()}, "max_diff": max(worst.values())}


def _since(start: float) -> float:
    return round(time.monotonic() - start, 1)


def _tail(text: str, lines: int = 6) -> str:
    return " / ".join(text.strip().splitlines()[-lines:])


def table(payload: dict[str, Any]) -> str:
    """The docs' supported-stacks table, one row per cell of a compat.json."""
    rows = [
        "| TensorFlow | Keras | 2 workers vs one process | max difference: weights / what it reports |",
        "|---|---|---|---|",
    ]
    for r in payload["cells"]:
        if r["expect"] == "refused":
            got = "refused with one line, exit code 2" if r["passed"] else "FAILED"
            diff = "-"
        else:
            got = "equal" if r["passed"] else "FAILED"
            diff = "-"
            if "max_diff" in r:
                reported = max(r["max_history_diff"], r["max_evaluate_diff"], r["max_predict_diff"])
                diff = f"{r['max_weight_diff']:.1e} / {reported:.1e}"
        keras = r["keras"] if r.get("keras_dist", "keras") == "keras" else f"{r['keras']} ({r['keras_dist']})"
        tf = (
            r["tensorflow"]
            if r.get("tf_dist", "tensorflow-cpu") == "tensorflow-cpu"
            else f"{r['tensorflow']} ({r['tf_dist']})"
        )
        rows.append(f"| {tf} | {keras} | {got} | {diff} |")
    return "\n".join(rows)


def results_table(path: Path = RESULTS) -> str:
    """:func:`table` of the committed results (the docs hook's generator of the supported-stacks block)."""
    return table(json.loads(path.read_text()))


BLOCK = re.compile(
    r"(<!-- generated:supported-stacks:begin -->\n\n)(.*?)(\n\n<!-- generated:supported-stacks:end -->)", re.S
)


def write_docs(payload: dict[str, Any], doc: Path = DOC) -> bool:
    """Rewrite the supported-stacks block of the Keras guide; True when it changed."""
    text = doc.read_text()
    new = BLOCK.sub(lambda m: m.group(1) + table(payload) + m.group(3), text)
    if new != text:
        doc.write_text(new)
    return new != text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", default="", help="comma-separated cell names (default: all)")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--table", action="store_true", help="print the docs table from --out and stop")
    parser.add_argument("--write-docs", action="store_true", help="rewrite the docs table from --out")
    parser.add_argument("--timeout", type=float, default=400, help="seconds per run")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if args.table or args.write_docs:
        payload = json.loads(out.read_text())
        changed = args.write_docs and write_docs(payload)
        print(table(payload) if not args.write_docs else "docs changed" if changed else "docs up to date")
        return 0
    wanted = [c for c in args.cells.split(",") if c]
    unknown = sorted(set(wanted) - {c.name for c in CELLS})
    if unknown:
        parser.error(f"unknown cells {unknown}; known: {[c.name for c in CELLS]}")
    cells = [c for c in CELLS if not wanted or c.name in wanted]
    start = time.monotonic()
    records = []
    for cell in cells:
        record = run_cell(cell, args.timeout)
        records.append(record)
        shown = {k: record.get(k) for k in ("passed", "max_diff", "seconds_build", "seconds", "error")}
        print(cell.name, json.dumps({k: v for k, v in shown.items() if v is not None}), flush=True)
    if wanted and out.exists():  # a subset updates its rows, the others stay
        old = {r["cell"]: r for r in json.loads(out.read_text())["cells"]}
        old.update({r["cell"]: r for r in records})
        records = [old[c.name] for c in CELLS if c.name in old]
    payload = {"python": sys.version.split()[0], "tolerance": TOL, "seconds": _since(start), "cells": records}
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=1) + "\n")
    os.replace(tmp, out)
    if out == RESULTS:  # the docs quote the committed results
        write_docs(payload)
    return 0 if all(r["passed"] for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
