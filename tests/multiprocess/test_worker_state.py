"""Which state agrees across the workers of a ``model.fit`` under MultiWorkerMirroredStrategy: the trainable
weights and the optimizer's variables always; batch normalization's moving statistics only with
``BatchNormalization(synchronized=True)`` — without it each worker keeps the statistics of its own shard,
as under Keras' MirroredStrategy, and the chief's are the ones a save writes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from helpers.cli import tfdist

SCRIPT = str(Path(__file__).parent.parent / "helpers" / "bn_fit.py")


@pytest.mark.slow  # the first tier: test_keras_fit's weights equal one process's
@pytest.mark.parametrize("synchronized", [False, True])
def test_weights_and_optimizer_agree_and_moving_statistics_only_when_synchronized(
    tmp_path: Path, synchronized: bool
) -> None:
    flags = ["--synchronized"] if synchronized else []
    proc = tfdist(
        "launch", "-n", "2", "--cpu", "--run-dir", str(tmp_path / "run"), SCRIPT, str(tmp_path), *flags,
        timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    w0, w1 = (np.load(tmp_path / f"state-{rank}.npz") for rank in (0, 1))
    assert np.abs(w0["trainable"] - w1["trainable"]).max() < 1e-6
    assert np.abs(w0["optimizer"] - w1["optimizer"]).max() < 1e-6
    gap = np.abs(w0["statistics"] - w1["statistics"]).max()
    assert gap < 1e-6 if synchronized else gap > 1e-3, gap


def test_a_worker_reads_back_the_checkpoints_it_wrote(tmp_path: Path) -> None:
    """Each worker checkpoints to a directory of its own: the non-chief's write goes to tfdist's private
    directory, and its ``load_weights`` / ``load_model`` of the path it named find that copy."""
    script = str(Path(__file__).parent.parent / "helpers" / "checkpoint_readback.py")
    proc = tfdist("launch", "-n", "2", "--cpu", "--run-dir", str(tmp_path / "run"), script, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    assert "rank 0 read back its checkpoints: True" in out and "rank 1 read back its checkpoints: True" in out
