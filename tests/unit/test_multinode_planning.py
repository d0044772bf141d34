"""Pure parts of multi-node jobs: which backend a Slurm job gets, sbatch's reasons, lost-peer reports."""

from __future__ import annotations

import pytest

from tfdist.cli.slurm_backend import resolve_backend
from tfdist.diagnose.peers import is_peer_failure, lost_peers
from tfdist.errors import ConfigError
from tfdist.slurm import SbatchSpec
from tfdist.slurm.commands import _reason
from tfdist.slurm.script import runs_tfdist_train


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (("tfdist", "train", "--epochs", "1"), True),
        (("/venv/bin/tfdist", "train"), True),
        (("python3", "-m", "tfdist", "train"), True),
        (("/usr/bin/python3.11", "-m", "tfdist", "train", "--workers", "2"), True),
        (("tfdist", "launch", "train.py"), False),
        (("python", "train.py"), False),
        (("python", "-m", "tfdist"), False),
        (("python", "-m", "mymod", "train"), False),
    ],
)
def test_which_commands_are_tfdist_train(command: tuple[str, ...], expected: bool) -> None:
    assert runs_tfdist_train(command) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "sbatch: error: Batch job submission failed: Invalid node name specified\n",
            "Batch job submission failed: Invalid node name specified",
        ),
        (
            "allocation failure: Requested node configuration is not available\n",
            "Requested node configuration is not available",
        ),
        (
            "sbatch: warning: something\nsbatch: error: Invalid account or account/partition combination\n",
            "Invalid account or account/partition combination",
        ),
        ("", "no reason given"),
    ],
)
def test_sbatch_reasons_are_one_line(text: str, expected: str) -> None:
    assert _reason(text) == expected


def test_a_script_keeps_tensorflows_collectives_unless_asked() -> None:
    spec = SbatchSpec(command=("python", "train.py"), nodes=2)
    assert resolve_backend(spec, "").backend == "tf"
    assert resolve_backend(spec, "auto").backend == "tf"


def test_tfdist_train_on_gpu_nodes_keeps_nccl(capsys: pytest.CaptureFixture[str]) -> None:
    spec = SbatchSpec(command=("tfdist", "train"), nodes=2, gpus_per_node=4)
    assert resolve_backend(spec, "").backend == "tf"
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("tfdist slurm: backend tf: GPUs visible")


@pytest.mark.parametrize(
    ("requested", "environ", "expected"),
    [
        ("gloo", {}, "--backend='gloo' is not a backend"),
        ("", {"TFDIST_BACKEND": "ncl"}, "TFDIST_BACKEND='ncl' is not a backend"),
    ],
)
def test_unknown_backends_are_refused(
    requested: str, environ: dict[str, str], expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as info:
        resolve_backend(SbatchSpec(command=("python", "x.py")), requested)
    assert expected in str(info.value)


def test_mpi_backend_from_the_environment_gets_srun_mpi(monkeypatch: pytest.MonkeyPatch) -> None:
    """sbatch hands the submitting shell's variables to the job: TFDIST_BACKEND=mpi there needs srun --mpi."""
    monkeypatch.setenv("TFDIST_BACKEND", "mpi")
    spec = resolve_backend(SbatchSpec(command=("python", "x.py"), nodes=2), "")
    assert spec.backend == "mpi" and spec.mpi_plugin == "pmi2"


CLUSTER = {"worker": ["node1:20040", "node2:20041", "node3:20042"]}
ADDRESSES = {"node1": "10.0.0.1", "node2": "10.0.0.2", "node3": "10.0.0.3"}


def _resolve(name: str) -> str:
    if name not in ADDRESSES:
        raise OSError("unknown host")
    return ADDRESSES[name]


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (
            "failed to connect to all addresses; last error: UNKNOWN: ipv4:10.0.0.2:20041: Connection "
            "refused",
            ["worker 1 (node2:20041)"],
        ),
        ("Socket closed (peer node3:20042)", ["worker 2 (node3:20042)"]),
        (
            "The following tasks are unhealthy (stopped sending heartbeats):\n/job:worker/replica:0/task:2\n"
            "/job:worker/replica:0/task:1",
            ["worker 1 (node2:20041)", "worker 2 (node3:20042)"],
        ),
        ("ipv4:10.0.0.9:20041: Connection refused", []),  # not one of the job's addresses
        ("Collective ops is aborted by: a peer went away", []),
    ],
)
def test_lost_peers_are_named_by_worker_and_node(message: str, expected: list[str]) -> None:
    assert lost_peers(message, CLUSTER, _resolve) == expected


class UnavailableError(Exception):
    """Stands in for tf.errors.UnavailableError: the check goes by type name, not by import."""


class InvalidArgumentError(Exception):
    pass


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (UnavailableError("failed to connect to all addresses"), True),
        (UnavailableError("Collective has timed out"), True),
        (UnavailableError("Socket closed"), True),
        (InvalidArgumentError("Connection refused"), False),  # not a peer error type
        (UnavailableError("Out of range in the input pipeline"), False),
        (ValueError("connect"), False),
    ],
)
def test_what_counts_as_a_lost_peer(exc: Exception, expected: bool) -> None:
    assert is_peer_failure(exc) is expected
