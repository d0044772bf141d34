"""`tfdist env`'s variables table: what a bug report about a distributed job needs, secrets hidden."""

from __future__ import annotations

from tfdist.cli.env import relevant_variables


def test_the_variables_of_every_cluster_kind_are_shown_and_others_are_not() -> None:
    environ = {
        "TF_CONFIG": "{}",
        "SLURM_JOB_ID": "7",
        "RAY_ADDRESS": "10.0.0.1:6379",
        "RAY_RAYLET_PID": "42",
        "JOB_COMPLETION_INDEX": "1",
        "PMI_RANK": "0",
        "MPIR_CVAR_CH4_NETMOD": "ofi",
        "UCX_NET_DEVICES": "eth0",
        "HOME": "/root",
        "PATH": "/usr/bin",
    }
    shown = relevant_variables(environ)
    assert set(shown) == set(environ) - {"HOME", "PATH"}


def test_secret_looking_values_are_redacted() -> None:
    shown = relevant_variables({"RAY_REDIS_PASSWORD": "pw", "TFDIST_RDZV_SECRET": "s", "SLURM_JOB_ID": "3"})
    assert shown == {
        "RAY_REDIS_PASSWORD": "<redacted>",
        "TFDIST_RDZV_SECRET": "<redacted>",
        "SLURM_JOB_ID": "3",
    }
