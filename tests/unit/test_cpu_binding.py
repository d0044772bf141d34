"""Binding workers to cores is planned purely: which CPU set each worker (or MPI rank) gets."""

from __future__ import annotations

from pathlib import Path

import pytest

from tfdist.errors import ConfigError
from tfdist.launcher.config import LaunchConfig
from tfdist.launcher.plan import cpu_sets, plan_mpi, plan_workers
from tfdist.mpi.stack import bind_args


@pytest.mark.parametrize(
    ("bind", "workers", "cpus", "cpu_training", "expected"),
    [
        ("auto", 2, [0, 1], True, [(0,), (1,)]),
        ("auto", 2, [4, 5, 6, 7], True, [(4, 5), (6, 7)]),
        ("auto", 3, [0, 1, 2, 3], True, [(0,), (1,), (2,)]),  # the spare core stays unbound
        ("auto", 3, [0, 1], True, []),  # oversubscribed: let the kernel share the cores
        ("auto", 2, [0, 1], False, []),  # GPU workers keep every core for their host threads
        ("core", 2, [0, 1], False, [(0,), (1,)]),
        ("none", 2, [0, 1], True, []),
        ("auto", 1, [], True, []),
    ],
)
def test_cpu_sets(bind: str, workers: int, cpus: list[int], cpu_training: bool, expected: list) -> None:
    assert cpu_sets(bind, workers, cpus, cpu_training) == expected


def test_core_binding_refuses_more_workers_than_cores() -> None:
    with pytest.raises(ConfigError, match="3 workers on this node but only 2 CPU core"):
        cpu_sets("core", 3, [0, 1], True)


def test_bind_choices_are_checked() -> None:
    with pytest.raises(ConfigError, match="--bind-to='socket' is not one of auto, core, none"):
        LaunchConfig(bind="socket")
    with pytest.raises(ConfigError, match="--bind-to core binds all-reduce workers"):
        LaunchConfig(nproc_per_node=2, ps=1, bind="core")


def test_tf_workers_get_disjoint_cores_and_ps_jobs_none(tmp_path: Path) -> None:
    def plan(config: LaunchConfig) -> list:
        return plan_workers(
            config,
            local_ports=[4001, 4002, 4003, 4004],
            visible_gpus=[],
            cores=4,
            run_dir=str(tmp_path),
            attempt=0,
            base_env={},
            cpu_ids=[0, 1, 2, 3],
        )

    assert [s.cpus for s in plan(LaunchConfig(nproc_per_node=2, cpu=True))] == [(0, 1), (2, 3)]
    assert [s.cpus for s in plan(LaunchConfig(nproc_per_node=2, cpu=True, bind="none"))] == [(), ()]
    ps_job = plan(LaunchConfig(command=("x.py",), nproc_per_node=2, ps=1, no_python=True, cpu=True))
    assert all(s.cpus == () for s in ps_job)


@pytest.mark.parametrize(
    ("flavour", "args"),
    [
        ("hydra", ("-bind-to", "user:0,1")),
        ("openmpi", ("--map-by", "slot:PE=1", "--bind-to", "core")),
        ("unknown", ()),
    ],
)
def test_mpi_ranks_are_bound_by_the_mpi_launcher(flavour: str, args: tuple, tmp_path: Path) -> None:
    config = LaunchConfig(command=("train.py",), nproc_per_node=2, cpu=True, backend="mpi", no_python=True)
    (spec,) = plan_mpi(
        config,
        mpiexec="mpiexec",
        cores=2,
        run_dir=str(tmp_path),
        attempt=0,
        base_env={},
        flavour=flavour,
        cpu_ids=[0, 1],
    )
    tag = {"hydra": ("-prepend-rank",), "openmpi": ("--tag-output",)}.get(
        flavour, ()
    )  # lines name their rank
    assert spec.argv == ("mpiexec", *args, *tag, "-n", "2", "train.py")


@pytest.mark.parametrize(
    ("flavour", "sets", "nodes", "args"),
    [
        # Hydra's own core numbers would put a launcher kept to core 1 on core 0: the CPU numbers instead.
        ("hydra", [(1,)], 1, ("-bind-to", "user:1")),
        ("hydra", [(2, 3), (4, 5)], 1, ("-bind-to", "user:2+3,4+5")),
        # Across nodes node 0's numbers would bind every node: one rank keeps its node's set.
        ("hydra", [(1,)], 2, ()),
        ("hydra", [(0, 1), (2, 3)], 2, ("-bind-to", "core:2")),
        ("hydra", [], 1, ()),
        ("openmpi", [(0, 1, 2)], 1, ("--map-by", "slot:PE=3", "--bind-to", "core")),
        ("openmpi", [], 1, ()),
        ("unknown", [(0,)], 1, ()),
    ],
)
def test_mpi_bind_args(flavour: str, sets: list, nodes: int, args: tuple) -> None:
    assert bind_args(flavour, sets, nodes) == args
