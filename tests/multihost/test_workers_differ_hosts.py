"""Workers that differ, across two test hosts (one worker each, `tfdist launch --nnodes 2 --rdzv`): callbacks
on the chief only and each worker's own data of unequal length end as one process on this machine does."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hostcluster import Hosts, finish

HELPERS = Path(__file__).parent.parent / "helpers"
CALLBACKS = ("tensorboard_n", "early_stopping", "backup")
UNEVEN = ("arrays_one_batch_more", "dataset_unknown_length")
TOL = 1e-5
_ports = itertools.count(29740)


def on_both_hosts(hosts: Hosts, backend: str, tmp_path: Path, *script: str) -> None:
    """``script`` as one job of one worker on node1 and one on node2; both launchers must succeed."""
    env = {"TFDIST_RDZV_TOKEN": "differ-hosts-7c1e"}
    endpoint = f"node1:{next(_ports)}"
    procs = [
        hosts.launch_on(
            f"node{i}",
            "--nnodes",
            "2",
            "--rdzv",
            endpoint,
            "--rdzv-timeout",
            "120",
            "--cpu",
            "--backend",
            backend,
            "--run-dir",
            str(tmp_path / f"run-node{i}"),
            *script,
            env=env,
        )
        for i in (2, 1)  # the endpoint's node last: the other waits for it
    ]
    for code, output in finish(procs):
        assert code == 0, output[-3000:]


def load(out: Path, name: str, rank: int) -> tuple[np.ndarray, dict]:
    weights = np.load(out / f"{name}.rank-{rank}.weights.npy")
    return weights, json.loads((out / f"{name}.rank-{rank}.json").read_text())


@pytest.fixture(scope="module")
def references(one_process_reference: Callable[..., Path]) -> tuple[Path, Path]:
    """Both helpers in one plain process on this machine (every scenario: the same runs as
    tests/multiprocess/test_workers_differ.py's, made once per test run)."""
    differ = one_process_reference(HELPERS / "workers_differ.py")
    return differ, one_process_reference(HELPERS / "uneven_fit.py", "2", "--reference")


# The second tier: the first runs the same workers on one machine (tests/multiprocess/test_workers_differ.py).
@pytest.mark.parametrize(
    "backend", [pytest.param("tf", marks=pytest.mark.slow), pytest.param("mpi", marks=pytest.mark.slow)]
)
def test_workers_that_differ_across_hosts_equal_one_process(
    testhosts: Hosts, references: tuple[Path, Path], backend: str, tmp_path: Path
) -> None:
    differ, uneven = tmp_path / "differ", tmp_path / "uneven"
    uneven.mkdir()
    on_both_hosts(
        testhosts,
        backend,
        tmp_path,
        str(HELPERS / "workers_differ.py"),
        str(differ),
        "--only",
        ",".join(CALLBACKS),
    )
    on_both_hosts(
        testhosts,
        backend,
        tmp_path,
        str(HELPERS / "uneven_fit.py"),
        str(uneven),
        "2",
        "--only",
        ",".join(UNEVEN),
    )
    for out, reference, names in ((differ, references[0], CALLBACKS), (uneven, references[1], UNEVEN)):
        for name in names:
            w_ref, ref = load(reference, name, 0)
            for rank in (0, 1):
                w, got = load(out, name, rank)
                np.testing.assert_allclose(w, w_ref, atol=TOL, rtol=0, err_msg=f"{name} rank {rank}")
                assert got["iterations"] == ref["iterations"], name
                for key, values in ref["history"].items():
                    np.testing.assert_allclose(got["history"][key], values, atol=TOL, rtol=0, err_msg=name)
    assert load(differ, "early_stopping", 1)[1]["iterations"] == 12  # the chief's stop, on node2 too
