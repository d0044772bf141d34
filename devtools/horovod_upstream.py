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

PATH is a Horovod checkout, or a bare git directory of one (its HEAD is read). The suite's helper
modules come with it (``base_test_tensorflow.py``, ``test/utils/common.py``); the few Horovod-internal
modules they import are answered by small stand-ins (see ``horovod_upstream_worker.py``). A test counts as
passed when it passed on every rank, skipped when any rank skipped it, failed otherwise. The ranks end
every test together, and a test still running after ``--test-timeout`` seconds is stopped (its
collectives fail, its stacks are kept): the JSON's ``stuck`` names those.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

SUITES = {
    "tensorflow": {
        "test/parallel/test_tensorflow.py": "parallel/test_tensorflow.py",
        "test/parallel/base_test_tensorflow.py": "parallel/base_test_tensorflow.py",
        "test/utils/common.py": "utils/common.py",
    },
    "tensorflow2_keras": {"test/parallel/test_tensorflow2_keras.py": "parallel/test_tensorflow2_keras.py"},
}
WORKER = Path(__file__).with_name("horovod_upstream_worker.py")
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tfdist-horovod-suite"
#: What --tf-keras installs (without dependencies) beside the ranks' own packages.
KERAS2 = ("tf-keras==2.21.0", "parameterized==0.9.0")


def keras2_path() -> str:
    """The folder holding tf-keras and the suite's test dependency (installed on first use)."""
    if not (CACHE / "tf_keras").is_dir() or not (CACHE / "parameterized").is_dir():
        installed = subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(CACHE), *KERAS2],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if installed.returncode != 0:
            raise SystemExit(f"could not install {', '.join(KERAS2)}: {installed.stderr[-2000:]}")
    return str(CACHE)


def copy_suite(source: Path, into: Path, suite: str) -> str:
    """The suite's files from a checkout or a git directory; returns the commit (or 'worktree')."""
    commit = "worktree"
    for name, target in SUITES[suite].items():
        (into / target).parent.mkdir(parents=True, exist_ok=True)
        if (source / name).is_file():
            shutil.copy(source / name, into / target)
            continue
        proc = subprocess.run(
            ["git", "--git-dir", str(source), "show", f"HEAD:{name}"], capture_output=True, timeout=60
        )
        if proc.returncode != 0:
            raise SystemExit(
                f"{name} is not in {source} (a Horovod checkout or git directory): {proc.stderr!r}"
            )
        (into / target).write_bytes(proc.stdout)
        commit = subprocess.run(
            ["git", "--git-dir", str(source), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=60
        ).stdout.strip()
    return commit


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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--horovod", default=os.environ.get("HOROVOD_SRC", ""), help="checkout or git dir")
    parser.add_argument("--suite", choices=sorted(SUITES), default="tensorflow")
    parser.add_argument("--tf-keras", action="store_true", help="under tf-keras (TF_USE_LEGACY_KERAS=1)")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--select", default="", help="pytest -k expression (default: every test)")
    parser.add_argument("--test-timeout", type=int, default=120, help="seconds per test")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds for the whole run")
    parser.add_argument("--out", default="benchmarks/results/horovod_upstream.json")
    parser.add_argument("--keep", default="", help="copy the ranks' JUnit XML and stuck stacks here")
    args = parser.parse_args()
    if not args.horovod:
        raise SystemExit("--horovod PATH (a horovod/horovod checkout or git directory) is required")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        commit = copy_suite(Path(args.horovod), tmp, args.suite)
        cmd = [sys.executable, "-m", "tfdist", "launch", "--backend", "horovod", "-n", str(args.ranks)]
        cmd += [
            "--cpu",
            "--timeout",  # the launcher ends its ranks itself (a killed launcher would leave them)
            str(args.timeout),
            "--run-dir",
            str(tmp / "logs"),
            str(WORKER),
            str(tmp / "parallel" / f"test_{args.suite}.py"),
        ]
        cmd += [str(tmp / "reports"), str(args.test_timeout), args.select]
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "TF_ENABLE_ONEDNN_OPTS": "0"}
        if args.tf_keras:
            path = [keras2_path(), env.get("PYTHONPATH", "")]
            env.update(PYTHONPATH=os.pathsep.join(p for p in path if p), TF_USE_LEGACY_KERAS="1")
        started = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout + 120, env=env)
        elapsed = time.monotonic() - started
        if args.keep:
            shutil.copytree(tmp / "reports", args.keep, dirs_exist_ok=True)
        reports = [tmp / "reports" / f"rank{r}.xml" for r in range(args.ranks)]
        if not all(r.is_file() for r in reports):
            raise SystemExit(
                f"the suite did not finish (exit {proc.returncode}):\n"
                f"{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
            )
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


if __name__ == "__main__":
    sys.exit(main())
