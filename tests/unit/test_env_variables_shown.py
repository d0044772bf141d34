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


def test_a_ray_node_on_this_machine_is_reported_with_whether_it_answers(tmp_path) -> None:
    """As `ray start` leaves it: <temp>/ray/ray_current_cluster holds the GCS address; a real listening
    socket answers, a closed port does not; RAY_ADDRESS wins; no file and no variable: no cluster."""
    import socket

    from tfdist.launcher.ray.address import find_cluster as ray_cluster

    environ = {"RAY_TMPDIR": str(tmp_path)}
    assert ray_cluster(environ) is None
    (tmp_path / "ray").mkdir()
    with socket.socket() as gcs:
        gcs.bind(("127.0.0.1", 0))
        gcs.listen(1)
        address = f"127.0.0.1:{gcs.getsockname()[1]}"
        (tmp_path / "ray" / "ray_current_cluster").write_text(address + "\n")
        found = ray_cluster(environ)
        assert found == {
            "address": address,
            "from": str(tmp_path / "ray" / "ray_current_cluster"),
            "answers": True,
        }
    assert ray_cluster(environ)["answers"] is False  # the node stopped: its port is closed
    assert ray_cluster({**environ, "RAY_ADDRESS": "ray://127.0.0.1:1"})["from"] == "RAY_ADDRESS"
