"""The control plane against the job's size: everything a job of 8 ... 1,024 nodes computes before and
around its workers (the rendezvous has its own benchmark, rendezvous_scale.py), and the launcher with many
local workers.

    python benchmarks/control_plane_scale.py plan --repeats 5
    python benchmarks/control_plane_scale.py launcher --workers 8,32 --baseline REV

``plan`` times, for N nodes x 4 tasks each, one call of every pure step that grows with the job: a Slurm
node list expanded (several prefixes, several ranges) with its task counts; one srun task's environment
(the step's variables -> TF_CONFIG of 4N workers); the sbatch script; one node's launch plan (``--hosts``
of N nodes, 4 workers' TF_CONFIG); the MPI launcher's plan (Hydra's ``-hosts``) and the proxy command read
from a dry run of N lines, and MPICH's own dry run when ``mpiexec`` is installed; a host file and ``-H``;
the Kubernetes manifests (Job, JobSet, TFJob) and a pod's environment, one process and 4 per pod. Each
figure is the median of the repeats (taken in turns across sizes) in milliseconds of CPU time, and
``growth`` is the exponent between the two largest sizes (1: linear, 2: quadratic). Writes
benchmarks/results/control_plane_scale.json and .png.

``launcher`` runs ``tfdist launch -n W --cpu`` of a small script that prints lines (no TensorFlow) and
samples the launcher process with psutil while it runs: its threads, open files and resident memory at
their peak, and checks that every line reached the workers' logs and the console. ``--baseline REV`` also
measures commit REV's tree, in turns with this one. Writes
benchmarks/results/control_plane_scale_launcher.json and .png.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))  # the shared _common.py
from _common import ROOT, alternate, export, medians, write_json

from tfdist.env.kubernetes import KubernetesEnvironment
from tfdist.env.slurm import SlurmEnvironment
from tfdist.k8s import K8sJobSpec, render_yaml
from tfdist.launch.config import LaunchConfig
from tfdist.launch.membership import from_scheduler
from tfdist.launch.plan import plan_mpi, plan_workers
from tfdist.mpi import hydra
from tfdist.nodes import check_hosts, expand_nodelist, expand_tasks_per_node, parse_host_slots, read_hostfile
from tfdist.slurm.script import SbatchSpec, render_sbatch
from tfdist.worker.task import plan_task_env

SIZES = (8, 16, 32, 64, 128, 256, 512, 1024)
TASKS = 4
RESULTS = ROOT / "benchmarks" / "results"


def slurm_nodelist(nodes: int) -> str:
    """A compressed list of ``nodes`` hosts as Slurm writes one for a job spread over two partitions'
    names with holes: ``gpu[0001-0100,0102-0200],gpu-b[001-...],login7``.

    Input/Output: ``8`` -> ``"gpu[0001-0002,0004-0005],gpu-b[001-003],login7"``.
    """
    first = nodes // 2
    low = first // 2
    head = f"gpu[0001-{low:04d},{low + 2:04d}-{first + 1:04d}]"
    rest = nodes - first - 1
    return f"{head},gpu-b[001-{rest:03d}],login7" if rest else f"{head},login7"


def slurm_step(nodes: int) -> dict[str, str]:
    """The variables srun gives the last task of a step of ``nodes`` x :data:`TASKS` tasks."""
    return {
        "SLURM_JOB_ID": "48213",
        "SLURM_STEP_ID": "0",
        "SLURM_PROCID": str(nodes * TASKS - 1),
        "SLURM_LOCALID": str(TASKS - 1),
        "SLURM_STEP_NUM_TASKS": str(nodes * TASKS),
        "SLURM_STEP_NODELIST": slurm_nodelist(nodes),
        "SLURM_STEP_TASKS_PER_NODE": f"{TASKS}(x{nodes})",
    }


def addresses(nodes: int) -> tuple[str, ...]:
    """``nodes`` IPv4 addresses: what a rendezvous gives the MPI launcher (MPICH resolves names itself)."""
    return tuple(f"10.{8 + i // 65536}.{i // 256 % 256}.{i % 256}" for i in range(1, nodes + 1))


def steps(nodes: int, scratch: str) -> dict[str, Callable[[], object]]:
    """Every step measured at ``nodes`` nodes, by name (each a call to time)."""
    names = tuple(f"gpu{i:04d}" for i in range(1, nodes + 1))
    step = slurm_step(nodes)
    one_per_node = {**step, "SLURM_PROCID": str(nodes - 1), "SLURM_LOCALID": "0"}
    one_per_node |= {"SLURM_STEP_NUM_TASKS": str(nodes), "SLURM_STEP_TASKS_PER_NODE": f"1(x{nodes})"}
    hostfile = os.path.join(scratch, f"hosts-{nodes}")
    with open(hostfile, "w") as fh:
        fh.writelines(f"{name} slots={TASKS}\n" for name in names)
    launch = {"command": ("train.py",), "nnodes": nodes, "nproc_per_node": TASKS, "cpu": True}
    ips = addresses(nodes)
    dry_run = [f"HYDRA_LAUNCH: /bin/hydra_pmi_proxy --control-port h:1 --proxy-id {i}" for i in range(nodes)]
    dry_run.append("HYDRA_LAUNCH_END")

    def srun_task() -> object:
        env = SlurmEnvironment.detect(step)
        assert env is not None
        return plan_task_env(env, step)

    def launch_plan() -> object:
        config = LaunchConfig(**launch, hosts=names, node_rank=nodes - 1)  # type: ignore[arg-type]
        return plan_workers(
            config, local_ports=None, visible_gpus=(), cores=8, run_dir="/r", attempt=0, base_env={}
        )

    def mpi_plan() -> object:
        config = LaunchConfig(**launch, hosts=ips, backend="mpi")  # type: ignore[arg-type]
        return plan_mpi(
            config, mpiexec="mpiexec", cores=8, run_dir="/r", attempt=0, base_env={}, proxy=("p",)
        )

    def k8s(kind: str, per_pod: int = 1) -> Callable[[], object]:
        def render() -> object:
            spec = K8sJobSpec(
                ("python", "train.py"), "img:1", workers=nodes, kind=kind, nproc_per_pod=per_pod
            )
            return render_yaml(spec)

        return render

    pod = {
        "JOB_COMPLETION_INDEX": str(nodes - 1),
        "HOSTNAME": f"train-{nodes - 1}",
        "TFDIST_WORLD_SIZE": str(nodes),
        "TFDIST_K8S_SERVICE": "train",
        "TFDIST_PORT": "2222",
    }

    def pod_task() -> object:
        env = KubernetesEnvironment.detect(pod)
        assert env is not None
        return plan_task_env(env, pod)

    def pod_launcher() -> object:
        env = KubernetesEnvironment.detect(pod)
        assert env is not None
        return from_scheduler(env, pod, TASKS, TASKS).meet()

    def slurm_launcher() -> object:
        env = SlurmEnvironment.detect(one_per_node)
        assert env is not None
        return from_scheduler(env, one_per_node, TASKS, TASKS).meet()

    def sbatch() -> object:
        spec = SbatchSpec(("python", "train.py"), nodes=nodes, min_nodes=max(1, nodes // 2), gpus_per_node=4)
        return render_sbatch(spec)

    return {
        "slurm_nodelist": lambda: (
            expand_nodelist(step["SLURM_STEP_NODELIST"]),
            expand_tasks_per_node(f"4(x{nodes})"),
        ),
        "slurm_task_env": srun_task,
        "slurm_node_launcher": slurm_launcher,
        "sbatch_script": sbatch,
        "launch_plan_node": launch_plan,
        "hostfile": lambda: check_hosts(read_hostfile(hostfile), "--hostfile"),
        "host_slots": lambda: parse_host_slots(",".join(f"{n}:{TASKS}" for n in names)),
        "mpi_plan": mpi_plan,
        "mpi_proxy_line": lambda: hydra.proxy_line(dry_run, nodes - 1, "10.8.0.1:29400"),
        "k8s_job": k8s("job"),
        "k8s_jobset": k8s("jobset"),
        "k8s_tfjob": k8s("tfjob"),
        "k8s_pod_task_env": pod_task,
        "k8s_pod_launcher": pod_launcher,
    }


def timed(call: Callable[[], object], inner: int) -> float:
    """Milliseconds of this thread's CPU time per call, the best of ``inner`` calls after a collection (a
    collection landing in one call is the garbage of another). CPU time, not wall time: on a shared machine
    a call longer than the scheduler's time slice waits behind every other runnable process, which made
    wall times jump ten-fold between 512 and 1,024 nodes here while the CPU time doubled."""
    best = math.inf
    for _ in range(inner):
        gc.collect()
        start = time.thread_time()
        call()
        best = min(best, time.thread_time() - start)
    return best * 1000


def mpich_dry_run(nodes: int) -> float | None:
    """Milliseconds (wall: the work is in the child) of MPICH's own dry run for ``nodes`` hosts (what
    every node of a ``--backend mpi`` job runs to learn its proxy's command), or None without MPICH's
    ``mpiexec``."""
    mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")
    if mpiexec is None:
        return None
    start = time.perf_counter()
    hydra.proxy_argv(mpiexec, addresses(nodes), TASKS, nodes - 1, "10.8.0.1:29400")
    return (time.perf_counter() - start) * 1000


def growth(small: tuple[int, float], large: tuple[int, float]) -> float:
    """The exponent k of t ~ n^k between two sizes. Input/Output: ``((512, 1.0), (1024, 2.0))`` -> 1.0."""
    return math.log(large[1] / small[1]) / math.log(large[0] / small[0])


def run_plan(args: argparse.Namespace) -> None:
    sizes = [int(n) for n in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as scratch:

        def measure(name: str, _: int) -> dict[str, float]:
            figures = {step: timed(call, args.inner) for step, call in steps(int(name), scratch).items()}
            dry = mpich_dry_run(int(name)) if args.mpich else None
            return figures if dry is None else {**figures, "mpich_dry_run": dry}

        samples = alternate(
            [str(n) for n in sizes],
            args.repeats,
            measure,
            show=lambda repeat, name, sample: (
                f"repeat {repeat}: {name} nodes, {sum(sample.values()):.1f} ms in all"
            ),
        )
    names = list(samples[str(sizes[0])][0])
    rows = [
        {
            "nodes": n,
            **{
                k: round(v, 4)
                for k, v in medians({s: [r[s] for r in samples[str(n)]] for s in names}).items()
            },
        }
        for n in sizes
    ]
    small, large = rows[-2], rows[-1]
    growths = {s: round(growth((small["nodes"], small[s]), (large["nodes"], large[s])), 2) for s in names}
    report = {
        "benchmark": "control_plane_scale",
        "what": f"one call of each step for N nodes x {TASKS} tasks, milliseconds of the thread's CPU time "
        "(mpich_dry_run: wall time, its work is in mpiexec), median of the repeats "
        f"(each the best of {args.inner} calls); growth: the exponent between the two largest sizes (1 "
        "linear, 2 quadratic)",
        "machine": {"cpus": len(os.sched_getaffinity(0)), "python": platform.python_version()},
        "repeats": args.repeats,
        "tasks_per_node": TASKS,
        "rows": rows,
        "growth": growths,
    }
    out = Path(args.out or RESULTS / "control_plane_scale.json")
    write_json(out, report)
    print(f"growth {sizes[-2]} -> {sizes[-1]} nodes: {growths}")
    plot_plan(rows, names, out.with_suffix(".png"))


def plot_plan(rows: list[dict[str, Any]], names: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    nodes = [row["nodes"] for row in rows]
    fig, axis = plt.subplots(figsize=(9, 5.5))
    colours = plt.get_cmap("tab20").colors  # one colour per step: more steps than the default cycle has
    for i, name in enumerate(names):
        label = f"{name} (wall)" if name == "mpich_dry_run" else name
        style = "s--" if name.startswith(("k8s", "sbatch")) else "o-"
        axis.plot(nodes, [row[name] for row in rows], style, markersize=3, color=colours[i], label=label)
    linear = [rows[0]["launch_plan_node"] * n / nodes[0] for n in nodes]
    axis.plot(nodes, linear, "k:", label="linear (from launch_plan_node)")
    axis.set(
        xscale="log",
        yscale="log",
        xlabel=f"nodes ({TASKS} tasks each)",
        ylabel="milliseconds of CPU per call",
    )
    axis.set_title("control plane against the job's size")
    axis.set_xticks(nodes, [str(n) for n in nodes])
    axis.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


WORKER = """import os, sys, time
rank = os.environ["TFDIST_RANK"]
for i in range({lines}):
    print(f"rank {{rank}} line {{i}}", flush=True)
    time.sleep({pause})
"""


def launch_once(workers: int, src: str | None, lines: int, pause: float) -> dict[str, Any]:
    """One ``tfdist launch -n WORKERS --cpu`` of the printing script (``src``: the tfdist tree to run, None
    for this one), the launcher sampled every 20 ms; its peaks, and whether every line arrived."""
    import psutil

    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "worker.py")
        Path(script).write_text(WORKER.format(lines=lines, pause=pause))
        env = dict(os.environ, PYTHONPATH=src) if src else None
        logs = os.path.join(tmp, "logs")
        start = time.monotonic()
        cmd = [
            sys.executable,
            "-m",
            "tfdist",
            "launch",
            "-n",
            str(workers),
            "--cpu",
            "--run-dir",
            logs,
            script,
        ]
        with tempfile.TemporaryFile() as console:
            proc = subprocess.Popen(cmd, stdout=console, stderr=subprocess.STDOUT, env=env)
            launcher = psutil.Process(proc.pid)
            threads = files = rss = 0
            while proc.poll() is None:
                try:
                    with launcher.oneshot():
                        threads = max(threads, launcher.num_threads())
                        files = max(files, launcher.num_fds())
                        rss = max(rss, launcher.memory_info().rss)
                except psutil.Error:
                    break
                time.sleep(0.02)
            wall = time.monotonic() - start
            console.seek(0)
            shown = console.read().decode(errors="replace")
        logged = sum(p.read_text().count(" line ") for p in Path(logs).rglob("worker*.log"))
    if proc.returncode != 0:
        raise SystemExit(f"-n {workers} failed ({proc.returncode}):\n{shown[-2000:]}")
    return {
        "threads": threads,
        "open_files": files,
        "rss_mib": round(rss / 2**20, 1),
        "wall_s": round(wall, 2),
        "lines_expected": workers * lines,
        "lines_on_console": shown.count(" line "),
        "lines_in_logs": logged,
    }


def run_launcher(args: argparse.Namespace) -> None:
    counts = [int(n) for n in args.workers.split(",")]
    trees: dict[str, str | None] = {"this": None}
    with tempfile.TemporaryDirectory() as tmp:
        if args.baseline:
            trees[args.baseline] = str(export(args.baseline, Path(tmp)))
        names = [f"{tree}:{n}" for tree in trees for n in counts]
        samples = alternate(
            names,
            args.repeats,
            lambda name, _: launch_once(
                int(name.rpartition(":")[2]), trees[name.rpartition(":")[0]], args.lines, args.pause
            ),
            show=lambda repeat, name, s: (
                f"repeat {repeat}: {name} workers: {s['threads']} threads, {s['open_files']} files"
            ),
        )
    rows = []
    for name in names:
        runs = samples[name]
        tree, _, n = name.rpartition(":")
        rows.append(
            {
                "tree": tree,
                "workers": int(n),
                "threads": max(r["threads"] for r in runs),
                "open_files": max(r["open_files"] for r in runs),
                "rss_mib": max(r["rss_mib"] for r in runs),
                "wall_s": medians({"w": [r["wall_s"] for r in runs]})["w"],
                "lines_expected": runs[0]["lines_expected"],
                "lines_on_console": min(r["lines_on_console"] for r in runs),
                "lines_in_logs": min(r["lines_in_logs"] for r in runs),
            }
        )
    report = {
        "benchmark": "control_plane_scale_launcher",
        "what": f"tfdist launch -n W --cpu of a script printing {args.lines} lines {args.pause} s apart (no "
        "TensorFlow); the launcher process's peak threads, open files (fds) and RSS sampled every 20 ms with "
        "psutil (the largest over the repeats), wall time the median; tree: this working tree or the commit "
        "measured beside it",
        "machine": {"cpus": len(os.sched_getaffinity(0)), "python": platform.python_version()},
        "repeats": args.repeats,
        "baseline": args.baseline,
        "rows": rows,
    }
    out = Path(args.out or RESULTS / "control_plane_scale_launcher.json")
    write_json(out, report)
    for row in rows:
        print(row)
    plot_launcher(rows, out.with_suffix(".png"))


def plot_launcher(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    for tree in dict.fromkeys(row["tree"] for row in rows):
        mine = [row for row in rows if row["tree"] == tree]
        workers = [row["workers"] for row in mine]
        left.plot(workers, [row["threads"] for row in mine], "o-", label=tree)
        right.plot(workers, [row["open_files"] for row in mine], "o-", label=tree)
    left.set(xlabel="local workers (-n)", ylabel="threads (peak)", title="launcher threads")
    right.set(xlabel="local workers (-n)", ylabel="open files (peak)", title="launcher open files")
    for axis in (left, right):
        axis.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="part", required=True)
    plan = sub.add_parser("plan", help="the pure steps against the node count")
    plan.add_argument("--repeats", type=int, default=5)
    plan.add_argument("--inner", type=int, default=3, help="calls per sample, the best kept")
    plan.add_argument("--sizes", default=",".join(map(str, SIZES)))
    plan.add_argument("--no-mpich", dest="mpich", action="store_false", help="skip MPICH's own dry run")
    plan.add_argument("--out", default=None)
    launcher = sub.add_parser("launcher", help="tfdist launch -n W of a printing script")
    launcher.add_argument("--workers", default="8,32")
    launcher.add_argument("--repeats", type=int, default=3)
    launcher.add_argument("--lines", type=int, default=20)
    launcher.add_argument("--pause", type=float, default=0.1)
    launcher.add_argument("--baseline", default=None, help="also measure this commit's tree")
    launcher.add_argument("--out", default=None)
    args = parser.parse_args()
    run_plan(args) if args.part == "plan" else run_launcher(args)


if __name__ == "__main__":
    main()
