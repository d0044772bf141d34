"""Slurm's requeue, the one function the training loop and the lost-peer report call: a fake ``scontrol``
on PATH records what was asked; the log says what happened; nothing raises."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tfdist.slurm.commands import requeue_slurm_job


@pytest.fixture
def scontrol(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake scontrol that records its arguments and fails when FAKE_SCONTROL_FAILS is set."""
    calls = tmp_path / "calls"
    fake = tmp_path / "bin" / "scontrol"
    fake.parent.mkdir()
    fake.write_text(
        f'#!/bin/sh\necho "$@" >> {calls}\n'
        'if [ -n "$FAKE_SCONTROL_FAILS" ]; then echo "Requested operation is disabled" >&2; exit 1; fi\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    return calls


@pytest.fixture
def said(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("tfdist.slurm.commands")
    logger.addHandler(handler)
    yield lines
    logger.removeHandler(handler)


@pytest.mark.parametrize(
    ("environ", "asked", "expected"),
    [
        ({"SLURM_JOB_ID": "42"}, True, "asked Slurm to requeue job 42; it resumes"),
        (
            {"SLURM_JOB_ID": "42", "FAKE_SCONTROL_FAILS": "1"},
            True,
            "could not requeue job 42: scontrol requeue",
        ),
        ({"SLURM_JOB_ID": "42", "TFDIST_REQUEUE": "0"}, False, None),  # the user opted out
        ({}, False, None),  # not a Slurm job
        ({"SLURM_JOB_ID": "42; rm -rf /"}, False, "could not requeue job"),  # not a job id: never run
    ],
)
def test_requeue(
    scontrol: Path,
    said: list[str],
    monkeypatch: pytest.MonkeyPatch,
    environ: dict[str, str],
    asked: bool,
    expected: str | None,
) -> None:
    if "FAKE_SCONTROL_FAILS" in environ:
        monkeypatch.setenv("FAKE_SCONTROL_FAILS", "1")
    done = requeue_slurm_job("it resumes from step 8", environ)
    assert done is (asked and "FAKE_SCONTROL_FAILS" not in environ)
    assert (scontrol.read_text() if scontrol.exists() else "") == ("requeue 42\n" if asked else "")
    if expected is None:
        assert said == []
    else:
        assert len(said) == 1 and said[0].startswith(expected)
