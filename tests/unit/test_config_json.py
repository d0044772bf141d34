"""Configs cross process boundaries as JSON: the same value comes out, and bad JSON is one clear error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tfdist.bench.config import BenchConfig, WorkerSpec
from tfdist.errors import ConfigError
from tfdist.workloads.config import TrainConfig


def test_train_config_round_trips() -> None:
    config = TrainConfig(workload="regression", epochs=3, lr=0.2, steps_per_epoch=7, mixed_precision="bf16")
    assert TrainConfig.from_json(config.to_json()) == config


def test_worker_spec_round_trips(tmp_path: Path) -> None:
    spec = WorkerSpec.of(BenchConfig(out=str(tmp_path), input_delay_ms=2.5), str(tmp_path / "r"), "compute")
    assert WorkerSpec.from_json(spec.to_json()) == spec


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "train config: not valid JSON"),
        ("[1, 2]", "expected a JSON object, got list"),
        ('{"epochs": 2, "colour": "red"}', "unknown key(s) colour for TrainConfig"),
        ('{"epochs": 0}', "--epochs=0 must be at least 1"),  # the value checks run again on the other side
    ],
)
def test_bad_train_config_json(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        TrainConfig.from_json(text)
    assert message in str(info.value)


def test_the_job_entry_point_refuses_a_bad_file_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "train.json"
    path.write_text(json.dumps({"workload": "nope"}))
    proc = subprocess.run(
        [sys.executable, "-m", "tfdist.workloads.job", str(path)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "--workload 'nope' is unknown" in proc.stderr
