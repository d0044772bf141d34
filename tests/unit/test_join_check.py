"""The launcher's verdict on workers whose strategy does not span the job (pure), and its record reader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tfdist.launcher.join import SETTLE_S, JoinCheck, join_verdict
from tfdist.worker.errors import first_line, record_name

MIRRORED = {"class": "MirroredStrategy", "spans": False}
MWMS = {"class": "MultiWorkerMirroredStrategy", "spans": True}


@pytest.mark.parametrize(
    ("records", "settled", "expected"),
    [
        (
            {0: MIRRORED, 1: MIRRORED},
            False,
            "every worker built MirroredStrategy: they train 2 separate models",
        ),
        ({0: MWMS, 1: MWMS}, True, None),
        ({0: MIRRORED}, False, None),  # the other worker may still be building its strategy
        ({0: MIRRORED}, True, "worker(s) w0 built MirroredStrategy, which does not span the job's 2 workers"),
        (
            {0: MWMS, 1: {"class": "OneDeviceStrategy", "spans": False}},
            False,
            "worker(s) w1 built OneDeviceStrategy",
        ),
    ],
)
def test_verdict(records: dict, settled: bool, expected: str | None) -> None:
    verdict = join_verdict(records, 2, settled)
    if expected is None:
        assert verdict is None
    else:
        assert verdict is not None and verdict.startswith(expected)
        assert "use MultiWorkerMirroredStrategy or tfdist.strategy()" in verdict


def test_check_speaks_once(tmp_path: Path) -> None:
    (tmp_path / "rank0.strategy.json").write_text(json.dumps(MIRRORED))
    check = JoinCheck(str(tmp_path), 2)
    assert check.poll(0.0) is None
    verdict = check.poll(SETTLE_S + 0.1)
    assert verdict is not None and "w0" in verdict
    (tmp_path / "rank1.strategy.json").write_text(json.dumps(MIRRORED))
    assert check.poll(SETTLE_S + 1) is None  # said once
    assert check.final() is None


def test_a_job_that_ends_before_the_verdict_still_gets_it(tmp_path: Path) -> None:
    (tmp_path / "rank0.strategy.json").write_text(json.dumps(MIRRORED))
    check = JoinCheck(str(tmp_path), 2)
    verdict = check.final()  # every worker exited between two polls
    assert verdict is not None and "w0 built MirroredStrategy" in verdict
    assert check.final() is None


@pytest.mark.parametrize(
    ("message", "line"),
    [
        ("\n\nbad shape\n[[1, 2]]", "bad shape"),
        ("x" * 1000, "x" * 400 + " …"),
        ("", ""),
    ],
)
def test_first_line_of_an_exception_message(message: str, line: str) -> None:
    assert first_line(message) == line


@pytest.mark.parametrize(
    ("environ", "name"),
    [
        ({"TFDIST_RANK": "3"}, "rank3.error.json"),
        ({"PMI_RANK": "1"}, "rank1.error.json"),
        ({"OMPI_COMM_WORLD_RANK": "2"}, "rank2.error.json"),
    ],
)
def test_error_record_is_named_by_rank(environ: dict[str, str], name: str) -> None:
    assert record_name(environ) == name


def test_a_missing_horovod_gets_a_pointer_to_tfdists_horovod_api() -> None:
    from tfdist.launcher.records import error_lines

    record = {"type": "ModuleNotFoundError", "message": "No module named 'horovod'", "where": None}
    lines = error_lines(record, "exited with code 1")
    assert lines[0] == "  ModuleNotFoundError: No module named 'horovod'"
    assert "tfdist launch --backend horovod" in lines[-1] and "tfdist.horovod.tensorflow" in lines[-1]
    other = error_lines({"type": "ModuleNotFoundError", "message": "No module named 'pandas'"}, "")
    assert len(other) == 1


def test_mpi_output_is_split_into_per_rank_files(tmp_path: Path) -> None:
    from tfdist.launcher.logs import RankFiles

    files = RankFiles(str(tmp_path))
    for line in [
        "[0] epoch 1",
        "[1] epoch 1",
        "launcher says hi",
        "[1,0]<stdout>: open mpi line",
        "[1] done",
    ]:
        files.write(line)
    files.close()
    assert (tmp_path / "rank0.log").read_text() == "epoch 1\nopen mpi line\n"
    assert (tmp_path / "rank1.log").read_text() == "epoch 1\ndone\n"


@pytest.mark.parametrize(
    ("code", "message"),
    [(5, "exited with code 5"), ("bad input file", "bad input file"), (0, None), (None, None)],
)
def test_an_mpi_rank_s_non_zero_exit_is_recorded_with_its_rank(
    tmp_path: Path, code: object, message: str | None
) -> None:
    from tfdist.launcher.records import error_lines, read_error_record
    from tfdist.worker.errors import record_exit

    env = {"TFDIST_ATTEMPT_DIR": str(tmp_path), "PMI_RANK": "1"}
    try:
        raise SystemExit(code)
    except SystemExit as exc:
        record_exit(exc, env)
    record = read_error_record({"TFDIST_ATTEMPT_DIR": str(tmp_path)})  # the MPI launcher: no rank
    if message is None:
        assert record is None and not list(tmp_path.iterdir())
    else:
        assert record is not None
        assert error_lines(record, "exited")[0] == f"  [r1] SystemExit: {message}"
        assert record["where"]["file"] == __file__
