"""Where a launcher learns its peers: ``--hosts``, a Slurm step of one task per node, the pods of a tfdist
Kubernetes manifest -- each read into the same answer (an Assignment) the rendezvous gives."""

from __future__ import annotations

from pathlib import Path

import pytest

from tfdist.cli import main
from tfdist.errors import ConfigError
from tfdist.launcher import LaunchConfig
from tfdist.launcher.membership import (
    Fixed,
    Membership,
    from_hosts,
    from_scheduler,
    placed,
    scheduler_environment,
)
from tfdist.launcher.plan import DEFAULT_BASE_PORT
from tfdist.launcher.preflight import check_not_in_multi_task_step
from tfdist.launcher.rendezvous import Rendezvous, RendezvousSpec
from tfdist.launcher.rendezvous.protocol import Assignment

#: What srun sets in each task of ``srun --nodes 2 --ntasks-per-node 1`` (copied from a real step).
STEP = {
    "SLURM_JOB_ID": "90",
    "SLURM_STEP_ID": "0",
    "SLURM_PROCID": "1",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "1",
    "SLURM_STEP_NODELIST": "node[1-2]",
    "SLURM_STEP_NUM_NODES": "2",
    "SLURM_STEP_NUM_TASKS": "2",
    "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
}
#: What the batch script of the same job sees (no step variables).
BATCH = {
    "SLURM_JOB_ID": "90",
    "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "0",
    "SLURM_NTASKS": "2",
    "SLURM_JOB_NODELIST": "node[1-2]",
    "SLURM_TASKS_PER_NODE": "1(x2)",
}
POD = {
    "JOB_COMPLETION_INDEX": "2",
    "HOSTNAME": "train-2",
    "TFDIST_K8S_SERVICE": "train",
    "TFDIST_WORLD_SIZE": "3",
}


def test_a_slurm_step_of_one_task_per_node_is_the_job_of_its_nodes() -> None:
    env = scheduler_environment(STEP)
    assert env is not None and env.kind == "slurm"
    answer = from_scheduler(env, STEP, nproc=2, tasks=2).meet()
    # The port base Slurm jobs derive from the job id: 20000 + (90 mod 1000) * 40.
    assert answer == Assignment(
        node_rank=1,
        names=("node1", "node2"),
        addresses=("node1", "node2"),
        ports=((23600, 23601), (23600, 23601)),
        nproc=2,
        endpoint="the slurm job",
        order="in slurm's node order",
    )
    assert "node 1 node2 (node2) ports 23600,23601" in answer.summary()


def test_a_batch_script_or_one_task_is_not_a_job_of_launchers() -> None:
    assert scheduler_environment(BATCH) is None
    one = {**STEP, "SLURM_PROCID": "0", "SLURM_STEP_NODELIST": "node1", "SLURM_STEP_NUM_NODES": "1"}
    one.update(SLURM_STEP_NUM_TASKS="1", SLURM_STEP_TASKS_PER_NODE="1")
    assert scheduler_environment(one) is None
    assert scheduler_environment({}) is None


def test_the_pods_of_a_manifest_are_the_job_of_their_names() -> None:
    env = scheduler_environment(POD)
    assert env is not None and env.kind == "kubernetes"
    answer = from_scheduler(env, POD, nproc=3, tasks=3).meet()
    assert answer.node_rank == 2 and answer.names == ("train-0.train", "train-1.train", "train-2.train")
    assert answer.ports == ((2222, 2223, 2224),) * 3


def test_more_workers_than_a_slurm_jobs_port_slot_need_tfdist_port() -> None:
    env = scheduler_environment(STEP)
    assert env is not None
    with pytest.raises(ConfigError, match="41 tasks on one node exceed the 40 ports tfdist derives per job"):
        from_scheduler(env, STEP, nproc=41, tasks=41)
    given = {**STEP, "TFDIST_PORT": "30000"}
    answer = from_scheduler(scheduler_environment(given), given, nproc=41, tasks=41).meet()  # type: ignore[arg-type]
    assert answer.ports[0] == tuple(range(30000, 30041))


def test_two_tasks_on_a_node_are_refused_with_what_to_write() -> None:
    step = {**STEP, "SLURM_STEP_NUM_TASKS": "4", "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_PROCID": "3"}
    step["SLURM_LOCALID"] = "1"
    env = scheduler_environment(step)
    assert env is not None
    with pytest.raises(ConfigError, match="srun --ntasks-per-node=1 tfdist launch -n K"):
        from_scheduler(env, step, nproc=1, tasks=1)
    with pytest.raises(ConfigError, match="each of the 4 tasks of a Slurm step"):
        check_not_in_multi_task_step(step)
    check_not_in_multi_task_step(STEP, nnodes=2)  # one task per node that took the step's nodes
    check_not_in_multi_task_step(STEP, met=True)  # ... or met at a rendezvous
    with pytest.raises(ConfigError, match="each of the 2 tasks"):  # tfdist train --workers 2 in srun -N 2
        check_not_in_multi_task_step(STEP)


def test_hosts_are_the_same_answer_and_keep_the_default_port_unset() -> None:
    config = LaunchConfig(command=("t.py",), nproc_per_node=2, nnodes=2, node_rank=1, hosts=("a", "b"))
    member = from_hosts(config)
    answer = member.meet()
    assert answer.node_rank == 1 and answer.addresses == ("a", "b")
    assert answer.ports == ((DEFAULT_BASE_PORT, DEFAULT_BASE_PORT + 1),) * 2
    again = placed(config, member, answer)
    assert again == config  # nothing changes: the same job the flags described
    assert member.notice() is None and member.meet() == answer


def test_a_scheduler_answer_sets_the_nodes_and_the_port_base() -> None:
    config = LaunchConfig(command=("t.py",), nproc_per_node=2)
    member = from_scheduler(scheduler_environment(STEP), STEP, nproc=2, tasks=2)  # type: ignore[arg-type]
    job = placed(config, member, member.meet())
    assert (job.nnodes, job.node_rank, job.hosts, job.base_port) == (2, 1, ("node1", "node2"), 23600)
    assert job.node_ports == ()  # derived from the base: this node checks its own are free


def test_a_rendezvous_answer_carries_each_nodes_own_ports() -> None:
    config = LaunchConfig(command=("t.py",), nproc_per_node=1)
    answer = Assignment(1, ("a", "b"), ("10.0.0.1", "10.0.0.2"), ((4000,), (5000,)), 1, "a:29400")
    member = Rendezvous(RendezvousSpec("127.0.0.1:29400"), (2, 2), 1, 1, "t.py", "x")
    job = placed(config, member, answer)
    assert job.node_ports == ((4000,), (5000,)) and job.hosts == ("10.0.0.1", "10.0.0.2")


def test_every_source_is_a_membership() -> None:
    def use(member: Membership) -> bool:
        return member.ports_agreed

    assert use(Fixed(Assignment(0, ("a",), ("a",), ((1,),), 1, "x"))) is False
    assert use(Rendezvous(RendezvousSpec("127.0.0.1:29400"), (1, 1), 1, 1, "t.py", "x")) is True


@pytest.mark.parametrize(
    "args", [["--hosts", "a,b", "--nnodes", "2"], ["--nnodes", "2"], ["--node-rank", "1"]]
)
def test_flags_that_the_scheduler_already_answers_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    """(``--rdzv`` inside a step stays allowed: the nodes then meet at the endpoint, as torchrun's do.)"""
    expected = "which gives the nodes; drop --rdzv/--hosts"
    for key, value in STEP.items():
        monkeypatch.setenv(key, value)
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    code = main(["launch", "-n", "1", *args, "--run-dir", str(tmp_path / "run"), str(script)])
    err = capsys.readouterr().err
    assert code == 2 and expected in err and err.count("\n") == 1
    assert not (tmp_path / "run").exists()
