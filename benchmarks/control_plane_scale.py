"""The control plane against the job's size (the rendezvous: rendezvous_scale.py).

    python benchmarks/control_plane_scale.py plan --repeats 5
    python benchmarks/control_plane_scale.py launcher --workers 8,32,64 --repeats 3

``plan``: for N = 8 ... 1,024 nodes x 4 tasks, the CPU time of one call of every pure step that grows with
the job (a Slurm node list and its task counts expanded, an srun task's TF_CONFIG of 4N workers, the sbatch
script, one node's ``--hosts`` launch plan, the MPI launcher's host list, a host file, the Kubernetes JobSet
manifest and a pod's environment) and the wall time of MPICH's own dry run when ``mpiexec`` is installed;
medians of the repeats (taken in turns across sizes); ``growth``: the exponent between the two largest
sizes (1: linear). ``launcher``: ``tfdist launch -n W --cpu`` of a script printing lines (no TensorFlow),
the launcher's peak threads, open files and memory (psutil), and whether every line reached the workers'
logs and the console.
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
from _common import ROOT, alternate, medians, write_json

from tfdist.env.kubernetes import KubernetesEnvironment
from tfdist.env.slurm import SlurmEnvironment
from tfdist.k8s import K8sJobSpec, render_yaml
from tfdist.launcher.config import LaunchConfig
from tfdist.launcher.plan import plan_mpi, plan_workers
from tfdist.mpi import hydra
from tfdist.nodes import check_hosts, expand_nodelist, expand_tasks_per_node, read_hostfile
from tfdist.slurm.script import SbatchSpec, render_sbatch
from tfdist.worker.task import plan_task_env

SIZES = (8, 16, 32, 64, 128, 256, 512, 1024)
TASKS = 4
RESULTS = ROOT / "benchmarks" / "results"


def slurm_nodelist(nodes: int) -> str:
    """A compressed list of ``nodes`` hosts as Slurm writes one for a job spread over two partitions'
    names with holes.

    Input/Output: ``8`` -> ``"gpu[0001-0002,0004-0005],gpu-b[001-003],login7"``.
    """
    first = nodes // 2
    low = first // 2
    head = f"gpu[0001-{low:04d},{low + 2:04d}-{first + 1:04d}]"
    rest = nodes - first - 1
    return f"{head},gpu-b[001-{rest:03d}],login7" if rest else f"{head},login7"


def addresses(nodes: int) -> tuple[str, ...]:
    """``nodes`` IPv4 addresses: what a rendezvous gives the MPI launcher (MPICH resolves names itself)."""
    return tuple(f"10.{8 + i // 65536}.{i // 256 % 256}.{i % 256}" for i in range(1, nodes + 1))


def steps(nodes: int, scratch: str) -> dict[str, Callable[[], object]]:
    """Every step measured at ``nodes`` nodes, by name (each a call to time)."""
    names = tuple(f"gpu{i:04d}" for i in range(1, nodes + 1))
    step = {  # what srun gives the last task of a step of nodes x TASKS tasks
        "SLURM_JOB_ID": "48213",
        "SLURM_STEP_ID": "0",
        "SLURM_PROCID": str(nodes * TASKS - 1),
        "SLURM_LOCALID": str(TASKS - 1),
        "SLURM_STEP_NUM_TASKS": str(nodes * TASKS),
        "SLURM_STEP_NODELIST": slurm_nodelist(nodes),
        "SLURM_STEP_TASKS_PER_NODE": f"{TASKS}(x{nodes})",
    }
    pod = {
        "JOB_COMPLETION_INDEX": str(nodes - 1),
        "HOSTNAME": f"train-{nodes - 1}",
        "TFDIST_WORLD_SIZE": str(nodes),
        "TFDIST_K8S_SERVICE": "train",
        "TFDIST_PORT": "2222",
    }
    hostfile = os.path.join(scratch, f"hosts-{nodes}")
    Path(hostfile).write_text("".join(f"{name} slots={TASKS}\n" for name in names))
    launch = {"command": ("train.py",), "nnodes": nodes, "nproc_per_node": TASKS, "cpu": True}
    node = LaunchConfig(**launch, hosts=names, node_rank=nodes - 1)
    mpi = LaunchConfig(**launch, hosts=addresses(nodes), backend="mpi")
    where = {"cores": 8, "run_dir": "/r", "attempt": 0, "base_env": {}}
    return {
        "slurm_nodelist": lambda: (
            expand_nodelist(step["SLURM_STEP_NODELIST"]),
            expand_tasks_per_node(f"4(x{nodes})"),
        ),
        "slurm_task_env": lambda: plan_task_env(SlurmEnvironment.detect(step), step),
        "sbatch_script": lambda: render_sbatch(
            SbatchSpec(("python", "train.py"), nodes=nodes, min_nodes=max(1, nodes // 2), gpus_per_node=4)
        ),
        "launch_plan_node": lambda: plan_workers(node, local_ports=None, visible_gpus=(), **where),
        "hostfile": lambda: check_hosts(read_hostfile(hostfile), "--hostfile"),
        "mpi_plan": lambda: plan_mpi(mpi, mpiexec="mpiexec", proxy=("p",), **where),
        "k8s_jobset": lambda: render_yaml(
            K8sJobSpec(("python", "train.py"), "img:1", workers=nodes, kind="jobset")
        ),
        "k8s_pod_task_env": lambda: plan_task_env(KubernetesEnvironment.detect(pod), pod),
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


def run_plan(args: argparse.Namespace) -> dict[str, Any]:
    sizes = [int(n) for n in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as scratch:

        def measure(name: str, _: int) -> dict[str, float]:
            figures = {step: timed(call, args.inner) for step, call in steps(int(name), scratch).items()}
            dry = mpich_dry_run(int(name)) if args.mpich else None
            return figures if dry is None else {**figures, "mpich_dry_run": dry}

        samples = alternate([str(n) for n in sizes], args.repeats, measure)
    names = list(samples[str(sizes[0])][0])
    rows = []
    for n in sizes:
        median = medians({s: [r[s] for r in samples[str(n)]] for s in names})
        rows.append({"nodes": n, **{k: round(v, 4) for k, v in median.items()}})
    small, large = rows[-2], rows[-1]
    return {
        "benchmark": "control_plane_scale",
        "what": f"one call of each step for N nodes x {TASKS} tasks, milliseconds of the thread's CPU time "
        "(mpich_dry_run: wall time, its work is in mpiexec), median of the repeats "
        f"(each the best of {args.inner} calls); growth: the exponent between the two largest sizes (1 "
        "linear, 2 quadratic)",
        "repeats": args.repeats,
        "tasks_per_node": TASKS,
        "rows": rows,
        "growth": {
            s: round(growth((small["nodes"], small[s]), (large["nodes"], large[s])), 2) for s in names
        },
    }


WORKER = """import os, sys, time
rank = os.environ["TFDIST_RANK"]
for i in range({lines}):
    print(f"rank {{rank}} line {{i}}", flush=True)
    time.sleep({pause})
"""


def launch_once(workers: int, lines: int, pause: float) -> dict[str, Any]:
    """One ``tfdist launch -n WORKERS --cpu`` of the printing script, the launcher sampled every 20 ms; its
    peaks, and whether every line arrived."""
    import psutil

    with tempfile.TemporaryDirectory() as tmp:
        script, logs = os.path.join(tmp, "worker.py"), os.path.join(tmp, "logs")
        Path(script).write_text(WORKER.format(lines=lines, pause=pause))
        cmd = [sys.executable, *f"-m tfdist launch -n {workers} --cpu --run-dir".split(), logs, script]
        start = time.monotonic()
        with tempfile.TemporaryFile() as console:
            proc = subprocess.Popen(cmd, stdout=console, stderr=subprocess.STDOUT)
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


def run_launcher(args: argparse.Namespace) -> dict[str, Any]:
    counts = [str(n) for n in args.workers.split(",")]
    samples = alternate(counts, args.repeats, lambda n, _: launch_once(int(n), args.lines, args.pause))
    rows = []
    for n, runs in samples.items():
        rows.append(
            {
                "workers": int(n),
                **{k: max(r[k] for r in runs) for k in ("threads", "open_files", "rss_mib")},
                "wall_s": medians({"w": [r["wall_s"] for r in runs]})["w"],
                "lines_expected": runs[0]["lines_expected"],
                **{k: min(r[k] for r in runs) for k in ("lines_on_console", "lines_in_logs")},
            }
        )
    return {
        "benchmark": "control_plane_scale_launcher",
        "what": f"tfdist launch -n W --cpu of a script printing {args.lines} lines {args.pause} s apart (no "
        "TensorFlow); the launcher process's peak threads, open files (fds) and RSS sampled every 20 ms with "
        "psutil (the largest over the repeats), wall time the median",
        "repeats": args.repeats,
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="part", required=True)
    plan = sub.add_parser("plan", help="the pure steps against the node count")
    plan.add_argument("--repeats", type=int, default=5)
    plan.add_argument("--inner", type=int, default=3, help="calls per sample, the best kept")
    plan.add_argument("--sizes", default=",".join(map(str, SIZES)))
    plan.add_argument("--no-mpich", dest="mpich", action="store_false", help="skip MPICH's own dry run")
    plan.add_argument("--out", default=str(RESULTS / "control_plane_scale.json"))
    launcher = sub.add_parser("launcher", help="tfdist launch -n W of a printing script")
    launcher.add_argument("--workers", default="8,32")
    launcher.add_argument("--repeats", type=int, default=3)
    launcher.add_argument("--lines", type=int, default=20)
    launcher.add_argument("--pause", type=float, default=0.1)
    launcher.add_argument("--out", default=str(RESULTS / "control_plane_scale_launcher.json"))
    args = parser.parse_args()
    report = run_plan(args) if args.part == "plan" else run_launcher(args)
    report["machine"] = {"cpus": len(os.sched_getaffinity(0)), "python": platform.python_version()}
    write_json(args.out, report)
    for row in report["rows"]:
        print(row)


if __name__ == "__main__":
    main()
