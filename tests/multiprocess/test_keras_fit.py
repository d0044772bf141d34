"""Keras scripts as written: model.fit / evaluate / predict under MultiWorkerMirroredStrategy, launched
unmodified (the script never imports tfdist), against the same script in one process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers.cli import tfdist

SCRIPT = str(Path(__file__).parent.parent / "helpers" / "keras_fit.py")
TOL = 1e-5


def run_single(out: Path, *args: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_CONFIG", "TFDIST_"))}
    proc = subprocess.run(
        [sys.executable, SCRIPT, str(out), *args], capture_output=True, text=True, timeout=180, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def run_launch(
    n: int,
    out: Path,
    *args: str,
    env: dict[str, str] | None = None,
    extra: tuple[str, ...] = (),
    script: str = SCRIPT,
):
    """`tfdist launch -n N --cpu [extra] SCRIPT [OUT ARGS...]` (OUT is left out for another script)."""
    out.mkdir(parents=True, exist_ok=True)
    argv = ["-n", str(n), "--cpu", *extra, "--run-dir", str(out / "logs"), script]
    argv += [*((str(out),) if script == SCRIPT else ()), *args]
    return tfdist("launch", *argv, base_env=env, timeout=300)


def results(out: Path, rank: int) -> tuple[np.ndarray, dict, np.ndarray]:
    weights = np.load(out / f"rank-{rank}.weights.npy")
    info = json.loads((out / f"rank-{rank}.json").read_text())
    return weights, info, np.load(out / f"rank-{rank}.predictions.npy")


def assert_same_run(reference: Path, out: Path, rank: int) -> None:
    w1, info1, p1 = results(reference, 0)
    w, info, p = results(out, rank)
    np.testing.assert_allclose(w, w1, atol=TOL, rtol=0)
    assert info["history"].keys() == info1["history"].keys()
    for key, values in info1["history"].items():
        assert len(info["history"][key]) == len(values), key  # same epochs: EarlyStopping agreed
        np.testing.assert_allclose(info["history"][key], values, atol=TOL, rtol=0, err_msg=key)
    for key, value in info1["evaluate"].items():
        assert abs(info["evaluate"][key] - value) <= TOL, key
    assert p.shape == p1.shape  # every example once, in order
    np.testing.assert_allclose(p, p1, atol=TOL, rtol=0)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("single")
    run_single(out)
    return out


@pytest.mark.parametrize("n", [2, pytest.param(3, marks=pytest.mark.slow)])  # 3: the same path, second tier
def test_model_fit_script_matches_one_process(n: int, reference: Path, tmp_path: Path) -> None:
    shared, private_tmp = tmp_path / "shared", tmp_path / "tmp"
    shared.mkdir()
    private_tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(private_tmp)}
    proc = run_launch(n, tmp_path / "out", "--shared", str(shared), env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for rank in range(n):
        assert_same_run(reference, tmp_path / "out", rank)
    # File-writing callbacks: the chief's files only, nothing racing, worker copies gone with the workers.
    epochs = len(results(reference, 0)[1]["history"]["loss"])
    assert sorted(p.name for p in shared.glob("ckpt-*.keras")) == [
        f"ckpt-{e:02d}.keras" for e in range(1, epochs + 1)
    ]
    assert len((shared / "log.csv").read_text().strip().splitlines()) == epochs + 1
    assert sorted(p.name for p in (shared / "backup").iterdir()) == [
        "latest.weights.h5",
        "training_metadata.json",
    ]
    assert len(list((shared / "tb" / "train").iterdir())) == 1
    assert not list(private_tmp.glob("tfdist-worker*")), "a worker left its private files behind"


def test_without_the_fix_keras_fails_as_upstream_does(tmp_path: Path) -> None:
    proc = run_launch(
        2, tmp_path / "out", "--plain", "--epochs", "1", env={**os.environ, "TFDIST_KERAS_PATCH": "0"}
    )
    assert proc.returncode != 0
    assert "unsupported type" in proc.stdout + proc.stderr


@pytest.mark.slow  # the CI tier keeps its time budget; ./dev test --all runs it
def test_backup_and_restore_resumes_every_worker_from_the_chiefs_backup(tmp_path: Path) -> None:
    """A worker killed at the start of epoch 3: the restarted job resumes from the chief's backup (Adam:
    its slots are in Keras' backup) and ends at the uninterrupted run's weights."""
    reference = tmp_path / "single"
    run_single(reference, "--plain", "--epochs", "3", "--adam")
    shared = tmp_path / "shared"
    shared.mkdir()
    proc = run_launch(
        2,
        tmp_path / "out",
        "--plain",
        "--epochs",
        "3",
        "--shared",
        str(shared),
        "--crash-at-epoch",
        "2",
        "--adam",
        "--read-rate",
        extra=("--max-restarts", "1"),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (tmp_path / "out" / "logs").glob("*/attempt-1")
    for rank in range(2):
        weights, info, _ = results(tmp_path / "out", rank)
        np.testing.assert_allclose(weights, results(reference, 0)[0], atol=TOL, rtol=0)
        assert len(info["history"]["loss"]) == 1  # the restarted fit ran only the epoch that was lost
        assert info["rates_read_in_callback"] == [pytest.approx(0.01)]  # float() of a mirrored variable


def test_steps_per_execution_is_refused_with_its_fix(tmp_path: Path) -> None:
    proc = run_launch(2, tmp_path / "out", "--plain", "--steps-per-execution", "4")
    assert proc.returncode != 0
    assert "steps_per_execution=4" in proc.stdout + proc.stderr
    assert "Hint: compile with steps_per_execution=1" in proc.stdout + proc.stderr


def test_a_users_own_sitecustomize_still_runs(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    marker = tmp_path / "marker"
    (mine / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'a').write('ran\\n')\n")
    script = tmp_path / "probe.py"
    script.write_text(
        "import keras\n"
        "from keras.src.backend.tensorflow import trainer\n"
        "print('patched' if hasattr(trainer.reduce_per_replica, '__wrapped__') else 'unpatched')\n"
    )
    proc = run_launch(2, tmp_path / "out", env={**os.environ, "PYTHONPATH": str(mine)}, script=str(script))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert marker.read_text() == "ran\n" * 3  # the launcher's own interpreter and both workers
    assert proc.stdout.count("patched") == 2 and "unpatched" not in proc.stdout


def test_an_unseeded_shuffle_is_named_with_its_fix(tmp_path: Path) -> None:
    proc = run_launch(2, tmp_path / "out", "--plain", "--epochs", "1", "--shuffle")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (proc.stdout + proc.stderr).count(
        "shuffled without a seed"
    ) == 1  # the job's line, not each worker's
    assert "keras.utils.set_random_seed(SEED)" in proc.stdout + proc.stderr


def test_model_fits_default_shuffle_shows_every_example_once_per_epoch(tmp_path: Path) -> None:
    """model.fit(x, y) shuffles by default, unseeded: the workers agree each epoch's order, so together they
    train on every example exactly once per epoch, in a new order each epoch, and nothing warns."""
    script = str(Path(SCRIPT).parent / "shuffle_fit.py")
    out = tmp_path / "out"
    quiet = {
        **os.environ,
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "TF_ENABLE_ONEDNN_OPTS": "0",
    }  # TensorFlow's own banners
    proc = run_launch(2, out, str(out), script=script, env=quiet)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "warning" not in (proc.stdout + proc.stderr).lower(), proc.stderr[-3000:]
    seen = [json.loads((out / f"seen-{rank}.json").read_text()) for rank in (0, 1)]
    epochs = [seen[0][epoch] + seen[1][epoch] for epoch in range(3)]
    for both in epochs:
        assert sorted(both) == list(range(64)), both
    orders = [tuple(seen[0][epoch]) for epoch in range(3)]
    assert len(set(orders)) == 3 and list(orders[0]) != sorted(orders[0])  # shuffled, anew each epoch
