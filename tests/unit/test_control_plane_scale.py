"""Everything a job of 1,024 nodes computes besides its rendezvous, checked for the right answer at that
size: Slurm's node lists and task counts, a task's TF_CONFIG among 4,096 workers, the sbatch script, one
node's launch plan, the MPI launcher's host list (and MPICH's own reading of it), host files and ``-H``,
the Kubernetes manifests against their schemas and what a pod derives from them. How long each takes is
measured by benchmarks/control_plane_scale.py, not here."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from test_k8s_manifest import K8S_VERSION, crd_validator

from tfdist.env import KubernetesEnvironment, SlurmEnvironment
from tfdist.errors import ConfigError
from tfdist.k8s import K8sJobSpec, render_yaml
from tfdist.launcher.config import LaunchConfig
from tfdist.launcher.logs import RankFiles
from tfdist.launcher.membership import from_scheduler
from tfdist.launcher.plan import (
    DEFAULT_BASE_PORT,
    ProcessSpec,
    cluster_spec,
    plan_mpi,
    plan_slots,
    plan_workers,
)
from tfdist.mpi import hydra
from tfdist.mpi.probe import launcher_flavour
from tfdist.nodes import (
    MAX_HOSTS,
    check_hosts,
    expand_nodelist,
    expand_tasks_per_node,
    parse_host_slots,
    read_hostfile,
)
from tfdist.slurm.script import SbatchSpec, render_sbatch
from tfdist.worker.task import plan_task_env

NODES = 1024
TASKS = 4
HOSTS = tuple(f"gpu{i:04d}" for i in range(1, NODES + 1))
#: A job over two name prefixes with a hole (gpu0257 is down) and a lone node.
SPREAD = "gpu[0001-0256,0258-0513],gpu-b[001-510],login[7,9]"


def slurm_step(
    rank: int, tasks_per_node: str = f"{TASKS}(x{NODES})", nodelist: str = SPREAD
) -> dict[str, str]:
    """What srun gives task ``rank`` (no SLURM_LOCALID: derived from the counts)."""
    counts = expand_tasks_per_node(tasks_per_node)
    return {
        "SLURM_JOB_ID": "48213",
        "SLURM_STEP_ID": "0",
        "SLURM_PROCID": str(rank),
        "SLURM_STEP_NUM_TASKS": str(sum(counts)),
        "SLURM_STEP_NODELIST": nodelist,
        "SLURM_STEP_TASKS_PER_NODE": tasks_per_node,
    }


# --- Slurm ---------------------------------------------------------------------------------------------


def test_a_thousand_nodes_expand_in_order_with_their_padding() -> None:
    hosts = expand_nodelist(f"gpu[0001-{NODES:04d}]")
    assert len(hosts) == NODES == len(set(hosts))
    assert (hosts[0], hosts[999], hosts[-1]) == ("gpu0001", "gpu1000", "gpu1024")


def test_several_prefixes_and_ranges_keep_slurms_order() -> None:
    hosts = expand_nodelist(SPREAD)
    assert len(hosts) == NODES == len(set(hosts))
    assert hosts[255:257] == ["gpu0256", "gpu0258"]  # the hole is skipped, not filled
    assert hosts[511:513] == ["gpu0513", "gpu-b001"]
    assert hosts[999] == "gpu-b488" and hosts[-2:] == ["login7", "login9"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"4(x{NODES})", [4] * NODES),
        ("8(x1000),4(x24)", [8] * 1000 + [4] * 24),
        ("2,4(x1022),1", [2, *[4] * 1022, 1]),
    ],
)
def test_task_counts_of_a_thousand_nodes(text: str, expected: list[int]) -> None:
    assert expand_tasks_per_node(text) == expected


@pytest.mark.parametrize(
    "text",
    ["a[1-99999]b[1-99999]", ",".join(f"p{i}[1-50000]" for i in range(3)), "n[00001-99999],m[1-2]"],
)
def test_lists_past_the_bound_are_refused_before_they_are_built(text: str) -> None:
    with pytest.raises(ConfigError, match=f"more than {MAX_HOSTS}"):
        expand_nodelist(text)


@pytest.mark.parametrize("rank", [0, 3, 4, 2047, 3999, NODES * TASKS - 1])
def test_every_task_of_4096_finds_itself_and_its_peers(rank: int) -> None:
    environ = slurm_step(rank)
    env = SlurmEnvironment.detect(environ)
    assert env is not None
    hosts = expand_nodelist(SPREAD)
    workers = env.cluster_spec["worker"]
    assert len(workers) == NODES * TASKS == len(set(workers))
    node, position = divmod(rank, TASKS)
    assert (env.rank, env.world_size, env.local_rank, env.local_world_size) == (rank, 4096, position, TASKS)
    host, _, port = workers[rank].rpartition(":")
    assert host == hosts[node]
    assert [w.rpartition(":")[2] for w in workers[node * TASKS : (node + 1) * TASKS]] == [
        str(int(port) - position + j) for j in range(TASKS)
    ]
    tf_config = json.loads(plan_task_env(env, environ)["TF_CONFIG"])
    assert tf_config["task"] == {"type": "worker", "index": rank}
    assert tf_config["cluster"] == {"worker": workers}


@pytest.mark.parametrize(("rank", "node", "local"), [(7999, 999, 7), (8000, 1000, 0), (8095, 1023, 3)])
def test_uneven_nodes_place_each_rank(rank: int, node: int, local: int) -> None:
    environ = slurm_step(rank, "8(x1000),4(x24)", f"gpu[0001-{NODES:04d}]")
    env = SlurmEnvironment.detect(environ)
    assert env is not None
    assert (env.world_size, env.local_rank) == (8096, local)
    assert env.cluster_spec["worker"][rank].startswith(f"gpu{node + 1:04d}:")


def test_one_launcher_per_node_of_a_thousand_reads_the_same_nodes() -> None:
    environ = slurm_step(999, f"1(x{NODES})")
    env = SlurmEnvironment.detect(environ)
    assert env is not None
    answer = from_scheduler(env, environ, TASKS, TASKS).meet()
    assert answer.node_rank == 999 and answer.names == tuple(expand_nodelist(SPREAD))
    assert len(set(answer.ports)) == 1 and len(answer.ports[0]) == TASKS


def test_the_sbatch_script_of_a_thousand_nodes() -> None:
    spec = SbatchSpec(("python", "train.py"), nodes=NODES, min_nodes=900, gpus_per_node=TASKS)
    script = render_sbatch(spec)
    assert "#SBATCH --nodes=900-1024\n" in script
    assert f"#SBATCH --mincpus={TASKS}\n" in script and "--kill-on-bad-exit=1" in script
    assert script.rstrip().endswith("python -m tfdist run -- python train.py")


def test_a_global_batch_that_no_node_count_divides_is_refused_at_a_thousand_nodes() -> None:
    command = ("tfdist", "train", "--global-batch-size", "4096")
    SbatchSpec(command, nodes=NODES, gpus_per_node=TASKS)
    with pytest.raises(ConfigError, match="1023 node"):
        SbatchSpec(command, nodes=NODES, min_nodes=1023, gpus_per_node=TASKS)


# --- tfdist launch --hosts on 1,024 nodes --------------------------------------------------------------


def launch_config(node: int, **extra: object) -> LaunchConfig:
    return LaunchConfig(
        command=("train.py",), nnodes=NODES, nproc_per_node=TASKS, hosts=HOSTS, node_rank=node, cpu=True,
        **extra,  # type: ignore[arg-type]
    )  # fmt: skip


def test_ranks_of_a_thousand_nodes_are_unique_and_contiguous() -> None:
    config = launch_config(0)
    slots = plan_slots(config)
    assert [s.index for s in slots] == list(range(NODES * TASKS))
    assert [s.node for s in slots] == [i // TASKS for i in range(NODES * TASKS)]
    spec = cluster_spec(config, slots, None)
    assert list(spec) == ["worker"] and len(set(spec["worker"])) == NODES * TASKS
    assert spec["worker"][3999] == f"gpu1000:{DEFAULT_BASE_PORT + 3}"


@pytest.mark.parametrize("node", [0, 999, NODES - 1])
def test_one_nodes_workers_see_all_4096(node: int) -> None:
    processes = plan_workers(
        launch_config(node), local_ports=None, visible_gpus=(), cores=8, run_dir="/r", attempt=0, base_env={}
    )
    assert len(processes) == TASKS
    ranks = [int(p.env["TFDIST_RANK"]) for p in processes]
    assert ranks == list(range(node * TASKS, (node + 1) * TASKS))
    assert [p.env["TFDIST_LOCAL_RANK"] for p in processes] == ["0", "1", "2", "3"]
    for process, rank in zip(processes, ranks, strict=True):
        tf_config = json.loads(process.env["TF_CONFIG"])
        assert tf_config["task"] == {"type": "worker", "index": rank}
        workers = tf_config["cluster"]["worker"]
        assert (
            len(workers) == NODES * TASKS
            and workers[rank] == f"{HOSTS[node]}:{DEFAULT_BASE_PORT + rank % TASKS}"
        )
        assert process.log_path == f"/r/attempt-0/worker{rank}.log"


def test_a_hostfile_and_host_slots_of_a_thousand_hosts(tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    path.write_text("# the job's nodes\n" + "".join(f"{h} slots={TASKS}\n" for h in HOSTS))
    assert check_hosts(read_hostfile(str(path)), "--hostfile") == HOSTS
    slots = parse_host_slots(",".join(f"{h}:{TASKS}" for h in HOSTS))
    assert [s.name for s in slots] == list(HOSTS) and {s.slots for s in slots} == {TASKS}
    with pytest.raises(ConfigError, match="gpu0999 is listed twice"):
        parse_host_slots(",".join(f"{h}:{TASKS}" for h in (*HOSTS, "gpu0999")))
    with pytest.raises(ConfigError, match=r"'GPU1000' is listed twice \(entries 1000 and 1025\)"):
        check_hosts((*HOSTS, "GPU1000"), "--hosts")


# --- the MPI backend on 1,024 nodes ------------------------------------------------------------------------

ADDRESSES = tuple(f"10.8.{i // 256}.{i % 256}" for i in range(1, NODES + 1))


def mpi_plan(node: int) -> list[ProcessSpec]:
    config = LaunchConfig(
        command=("train.py",), nnodes=NODES, nproc_per_node=TASKS, hosts=ADDRESSES, node_rank=node, cpu=True,
        backend="mpi",
    )  # fmt: skip
    processes = plan_mpi(
        config, mpiexec="mpiexec", cores=8, run_dir="/r", attempt=0, base_env={}, proxy=("proxy",)
    )
    return processes


def test_the_mpi_launcher_lists_every_host_once_in_order() -> None:
    processes = mpi_plan(0)
    assert [p.slot.role for p in processes] == ["mpi", "proxy"]
    argv = list(processes[0].argv)
    assert argv[argv.index("-hosts") + 1].split(",") == list(ADDRESSES)
    assert argv[argv.index("-ppn") + 1] == str(TASKS) and argv[argv.index("-n") + 1] == str(NODES * TASKS)
    # One argument, within the kernel's limit for a single one (MAX_ARG_STRLEN, 128 KiB).
    assert len(argv[argv.index("-hosts") + 1]) < 128 * 1024
    assert [p.slot.role for p in mpi_plan(999)] == ["proxy"]  # only the first node runs the launcher


def test_a_host_list_longer_than_one_argument_may_be_is_refused_by_name() -> None:
    """Linux refuses to start a program with an argument over 128 KiB: the list at exactly the limit
    starts one, a byte more is refused before anything starts, naming the list."""
    names = [f"node{i:04d}.rack{i // 32:02d}.cluster.example.org" for i in range(NODES)]
    names[-1] += "x" * (hydra.MAX_ARG_BYTES - len(",".join(names)))
    argv = hydra.manual_args(names, TASKS)
    assert len(argv[3]) == hydra.MAX_ARG_BYTES
    assert subprocess.run(["true", *argv], timeout=30).returncode == 0
    names[-1] += "x"
    with pytest.raises(ConfigError, match=f"-hosts list of {NODES} nodes is {hydra.MAX_ARG_BYTES + 1} bytes"):
        hydra.manual_args(names, TASKS)


def test_the_proxy_line_of_node_1000_is_found_among_1024() -> None:
    lines = [
        f"HYDRA_LAUNCH: /bin/hydra_pmi_proxy --control-port h:1 --proxy-id {i} --x" for i in range(NODES)
    ]
    argv = hydra.proxy_line(["noise", *lines, "HYDRA_LAUNCH_END"], 999, "10.8.0.1:29400")
    assert argv == ("/bin/hydra_pmi_proxy", "--control-port", "10.8.0.1:29400", "--proxy-id", "999", "--x")


MPIEXEC = shutil.which("mpiexec", path=str(Path(sys.executable).parent))


@pytest.mark.skipif(MPIEXEC is None or launcher_flavour(MPIEXEC)[0] != "hydra", reason="no MPICH mpiexec")
def test_mpich_reads_a_thousand_hosts_and_gives_the_last_proxy_its_command() -> None:
    assert MPIEXEC is not None
    argv = hydra.proxy_argv(MPIEXEC, ADDRESSES, TASKS, NODES - 1, "10.8.0.1:29400")
    assert argv[argv.index("--proxy-id") + 1] == str(NODES - 1)
    assert argv[argv.index("--control-port") + 1] == "10.8.0.1:29400"


def test_the_rank_files_of_a_thousand_ranks_hold_a_bounded_number_open(tmp_path: Path) -> None:
    files = RankFiles(str(tmp_path), max_open=16)
    for rank in range(NODES):
        files.write(f"[{rank}] step 0")
        assert len(files.files) <= 16
    files.write("[999] step 1")  # closed long ago: opened again to append, not truncated
    files.close()
    assert len(list(tmp_path.glob("rank*.log"))) == NODES
    assert (tmp_path / "rank999.log").read_text() == "step 0\nstep 1\n"


# --- Kubernetes at 1,024 pods ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["job", "jobset", "tfjob"])
def test_manifests_of_1024_pods_pass_their_schemas(kind: str) -> None:
    spec = K8sJobSpec(("python", "train.py"), "registry.example.com/tf:2.21", workers=NODES, kind=kind)
    docs = list(yaml.safe_load_all(render_yaml(spec)))
    for doc in docs:
        if doc["kind"] in ("Job", "Service"):
            assert kubernetes_validate.validate(doc, K8S_VERSION, strict=True) == K8S_VERSION
        else:
            errors = [e.message for e in crd_validator(doc["kind"]).iter_errors(doc)]
            assert not errors, errors
    workload = docs[-1]["spec"]
    counts = {
        "job": lambda: (workload["completions"], workload["parallelism"]),
        "jobset": lambda: tuple(
            workload["replicatedJobs"][0]["template"]["spec"][k] for k in ("completions", "parallelism")
        ),
        "tfjob": lambda: (workload["tfReplicaSpecs"]["Worker"]["replicas"],) * 2,
    }[kind]()
    assert counts == (NODES, NODES)
    assert len(spec.pod_hostname(NODES - 1)) <= 63


@pytest.mark.parametrize("index", [0, 999, NODES - 1])
def test_pod_1000_of_1024_finds_itself_and_its_peers(index: int) -> None:
    spec = K8sJobSpec(("python", "train.py"), "img:1", workers=NODES)
    pod = {
        "JOB_COMPLETION_INDEX": str(index),
        "HOSTNAME": spec.pod_hostname(index),
        "TFDIST_WORLD_SIZE": str(NODES),
        "TFDIST_K8S_SERVICE": spec.service,
        "TFDIST_PORT": str(spec.port),
    }
    env = KubernetesEnvironment.detect(pod)
    assert env is not None and (env.rank, env.world_size) == (index, NODES)
    tf_config = json.loads(plan_task_env(env, pod)["TF_CONFIG"])
    workers = tf_config["cluster"]["worker"]
    assert tf_config["task"]["index"] == index and len(set(workers)) == NODES
    assert workers[index] == f"train-{index}.train:2222"
    four = from_scheduler(env, pod, TASKS, TASKS).meet()  # --nproc-per-pod 4: each pod's launcher
    assert four.node_rank == index and four.names[999] == "train-999.train"
