"""tfdist bench across nodes: options, the grid and each node's command, the link probe (real sockets on
loopback) and its reading, the runner stopping a job's other nodes, and the timeline's trace (pure parts)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.cli import cli
from tfdist.bench.config import BenchConfig
from tfdist.bench.nodes import SRUN_ON_HOST, resolve_nodes
from tfdist.bench.plan import Command, RunSpec, node_commands, on_node, plan_bench
from tfdist.bench.runner import RunFailed, run_all
from tfdist.bench.stats import Sample, summarize
from tfdist.diagnose.linkreport import describe, diagnosis, link_of, probe_pairs, slow_node
from tfdist.errors import ConfigError
from tfdist.train.options import FitOptions
from tfdist.train.timeline import NoTimeline, Timeline, merge, open_timeline

ON = "scripts/testhosts.sh exec {host} --"


def config(tmp_path: Path, **kw: object) -> BenchConfig:
    return BenchConfig(out=str(tmp_path / "out"), **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"nodes": (1, 2)}, "without --hosts"),
        ({"on_host": "ssh {host}"}, "--on-host 'ssh {host}' without --hosts"),
        ({"hosts": ("n1", "n2"), "nodes": (1, 3)}, "asks for 3 nodes but --hosts names 2"),
        ({"hosts": ("n1", "n1")}, "listed twice"),
        ({"hosts": ("n1", "bad host")}, "not a host name"),
        ({"hosts": ("n1", "n2"), "on_host": "ssh"}, "has no {host}"),
        ({"hosts": ("n1", "n2"), "base_port": 80}, "--base-port=80"),
    ],
)
def test_bad_node_options(tmp_path: Path, kw: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config(tmp_path, **kw)


def test_bad_node_options_from_the_cli_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, stderr = cli(capsys, "bench", "--hosts", "n1,n2", "--nodes", "1,4", "--out", str(tmp_path / "o"))
    err = stderr.strip().splitlines()
    assert code == 2 and len(err) == 1 and "asks for 4 nodes" in err[0]
    assert not (tmp_path / "o").exists()


def test_grid_across_nodes(tmp_path: Path) -> None:
    c = config(tmp_path, hosts=("n1", "n2", "n3"), workers=(1,), backends=("tf", "mpi"), compare=("raw-tf",))
    assert c.node_counts == (1, 3)  # one node and every host, by default
    names = [r.name for r in plan_bench(c, cores=2, gpus=0).runs]
    assert names == ["local-w1-r1", "tf-n3-w3-r1", "mpi-n3-w3-r1", "raw-tf-n3-w3-r1"]
    two_per_node = plan_bench(config(tmp_path, hosts=("n1", "n2"), nodes=(2,), workers=(2,)), cores=4, gpus=0)
    assert [r.name for r in two_per_node.runs] == ["tf-n2-w4-r1"]
    assert two_per_node.threads == 2  # a node's cores shared by its workers, not by the whole job's


@pytest.mark.parametrize(
    ("kw", "warmup"),
    [
        ({}, 10),  # one node: nothing decides during the run
        ({"nodes": (2,), "backends": ("mpi",)}, 20),  # auto buckets decide and trace again in the warm-up
        ({"nodes": (2,), "backends": ("mpi",), "bucket_mb": (0.0, "auto")}, 20),
        ({"nodes": (2,), "backends": ("mpi",), "bucket_mb": (0.0, 2.0)}, 10),  # sizes given: no decision
        ({"nodes": (2,), "backends": ("tf",)}, 10),
        ({"nodes": (2,), "backends": ("mpi",), "warmup": 5}, 5),  # given: kept
        ({"nodes": (), "backends": ("mpi",)}, 20),  # --hosts without --nodes: one node and every host
    ],
)
def test_the_warmup_covers_the_auto_buckets_decision_across_nodes(
    tmp_path: Path, kw: dict[str, object], warmup: int
) -> None:
    across = {"hosts": ("n1", "n2"), "on_host": ON} if "nodes" in kw else {}
    assert config(tmp_path, **across, **kw).warmup_steps == warmup


def test_each_node_starts_its_own_launch(tmp_path: Path) -> None:
    kw = {"python": "py", "threads": 1, "gpus": 0, "run_dir": "/r", "log_path": "/l/x.log", "timeout": 60.0}
    hosts = ("n1", "n2", "n3")
    spec = RunSpec(4, 1, "mpi", nodes=2)
    commands = node_commands(spec, ("-m", "prog"), hosts=hosts, on_host=ON, port=29610, **kw)  # type: ignore[arg-type]
    assert len(commands) == 2
    for rank, command in enumerate(commands):
        argv = list(command.argv)
        assert argv[:4] == ["scripts/testhosts.sh", "exec", f"n{rank + 1}", "--"]
        assert argv[argv.index("--hosts") + 1] == "n1,n2" and argv[argv.index("--node-rank") + 1] == str(rank)
        assert argv[argv.index("-n") + 1] == "2" and argv[argv.index("--base-port") + 1] == "29610"
        assert argv[argv.index("--backend") + 1] == "mpi" and argv[-2:] == ["-m", "prog"]
        assert command.log_path == f"/l/x-node{rank}.log" and command.env["TF_NUM_INTRAOP_THREADS"] == "1"
    (one,) = node_commands(RunSpec(1, 1, "local"), ("-m", "prog"), hosts=hosts, on_host="", port=1, **kw)  # type: ignore[arg-type]
    assert one.argv == ("py", "-u", "-m", "prog")


@pytest.mark.parametrize(
    ("template", "host", "argv"),
    [
        ("ssh {host}", "n2", ("ssh", "n2")),
        ("", "n2", ()),
        ("srun -w {host} --", "a-1", ("srun", "-w", "a-1", "--")),
    ],
)
def test_on_node(template: str, host: str, argv: tuple[str, ...]) -> None:
    assert on_node(template, host) == argv


def test_nodes_from_the_flags_or_a_slurm_allocation() -> None:
    assert resolve_nodes("n1, n2", (), None, {}) == (("n1", "n2"), "")
    assert resolve_nodes(None, (1, 2), None, {}) == ((), "")  # no allocation: BenchConfig refuses --nodes
    assert resolve_nodes(None, (), None, {"SLURM_JOB_NODELIST": "n[1-2]"}) == ((), "")  # --nodes opts in
    assert "{host}" in SRUN_ON_HOST


def test_nodes_of_a_slurm_allocation() -> None:
    # Expanded as every task expands its step's list (tfdist.nodes), without scontrol.
    env = {"SLURM_JOB_NODELIST": "n[1-3]"}
    assert resolve_nodes(None, (1, 2), None, env) == (("n1", "n2", "n3"), SRUN_ON_HOST)
    assert resolve_nodes(None, (1, 2), "ssh {host}", env) == (("n1", "n2", "n3"), "ssh {host}")


def probe(a: str, b: str, gbit: float, rtt: float = 0.05) -> dict[str, object]:
    return {"a": a, "b": b, "gbit_s": gbit, "rtt_ms": rtt, "interface_a": "eth0", "interface_b": "eth0"}


def test_the_slow_node_is_named_with_three_nodes() -> None:
    probes = [probe("n1", "n2", 8.0), probe("n1", "n3", 0.9), probe("n2", "n3", 0.92)]
    assert probe_pairs(("n1", "n2", "n3")) == [("n1", "n2"), ("n1", "n3"), ("n2", "n3")]
    assert slow_node(probes) == ("n3", 0.92, 8.0)
    lines = diagnosis(probes)
    assert any(line.startswith("slow node: n3") for line in lines)
    link = link_of(probes, ("n1", "n2"))
    assert link is not None and link["gbit_s"] == 8.0 and link["slowest_pair"] == ["n1", "n2"]
    assert link_of(probes, ("n1", "n2", "n3"))["slowest_pair"] == ["n1", "n3"]  # type: ignore[index]
    assert describe(link) == "eth0 8.00 Gbit/s, RTT 0.05 ms" and describe(None) == "-"


@pytest.mark.parametrize(
    "probes",
    [
        [probe("n1", "n2", 0.9)],  # two nodes: one pair cannot say which end is slow
        [probe("n1", "n2", 8.0), probe("n1", "n3", 7.0), probe("n2", "n3", 7.5)],  # none stands out
    ],
)
def test_no_slow_node(probes: list[dict[str, object]]) -> None:
    assert slow_node(probes) is None
    assert not any(line.startswith("slow node") for line in diagnosis(probes))


def test_link_probe_over_loopback(tmp_path: Path) -> None:
    """The real probe: one process serves, another measures, over a real TCP connection."""
    port = 29580
    rest = ("--pings", "20", "--out", str(tmp_path / "a.json"))
    link = [sys.executable, "-m", "tfdist.diagnose.link"]
    server = subprocess.Popen([*link, "serve", "--port", str(port), "--out", str(tmp_path / "b.json")])
    try:
        measured = subprocess.run(
            [*link, "measure", "--peer", "127.0.0.1", "--port", str(port), *("--seconds", "0.2"), *rest],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert measured.returncode == 0, measured.stderr
        assert server.wait(timeout=30) == 0
    finally:
        if server.poll() is None:
            server.kill()
    a, b = (json.loads((tmp_path / f"{x}.json").read_text()) for x in ("a", "b"))
    assert a["interface"] == b["interface"] == "lo" and a["address"] == "127.0.0.1"
    assert a["gbit_s"] > 0.01 and 0 < a["rtt_ms"] < 100 and a["bytes"] == b["received_bytes"]


def test_one_failing_node_stops_the_others(tmp_path: Path) -> None:
    sleeper = Command(
        (sys.executable, "-c", "import time; time.sleep(60)"), {}, str(tmp_path), str(tmp_path / "a.log")
    )
    failing = Command(
        (sys.executable, "-c", "print('node 2 gave up'); raise SystemExit(3)"),
        {},
        str(tmp_path),
        str(tmp_path / "b.log"),
    )
    started = time.monotonic()
    with pytest.raises(RunFailed, match=r"code 3; log: .*b\.log \(last line: node 2 gave up\)"):
        run_all((sleeper, failing), timeout=60)
    assert time.monotonic() - started < 20
    with pytest.raises(RunFailed, match="longer than 1 s"):
        run_all((sleeper,), timeout=1)


def test_rows_across_nodes_compare_with_their_own_size() -> None:
    def sample(eps: float) -> Sample:
        return Sample((0.1,), eps, 1.0, (0.0, 1.0), load_1min=2.5)

    rows = summarize(
        {
            RunSpec(1, 1, "local"): [sample(100)],
            RunSpec(2, 1, "tf", nodes=2): [sample(150)],
            RunSpec(2, 1, "independent", nodes=2): [sample(200)],
            RunSpec(2, 1, "independent"): [sample(190)],  # one node, 2 workers: not the 2-node limit
        }
    )
    tf = next(r for r in rows if r["name"] == "tf-n2-w2-r1")
    assert tf["nodes"] == 2 and tf["vs_independent"] == 0.75 and tf["load_1min"] == 2.5


def test_timeline_splits_each_step_at_its_markers(tmp_path: Path) -> None:
    for synchroniser, names in (
        ("tf", ["forward + backward", "all-reduce + update"]),
        ("mpi", ["forward + backward", "all-reduce", "update"]),
    ):
        timeline = Timeline(str(tmp_path / synchroniser), rank=1, synchroniser=synchroniser)
        timeline.spans = [("input", 9.0, 10.0), ("step", 10.0, 10.5), ("read results", 10.5, 10.6)]
        timeline.marks = [("gradients ready", 10.3), ("exchange done", 10.4)]
        timeline.write()
        events = json.loads((tmp_path / synchroniser / "timeline-r1.json").read_text())["traceEvents"]
        inside = [e for e in events if e.get("tid") == 1]
        assert [e["name"] for e in inside] == names and all(e["pid"] == 1 for e in events)
        assert inside[0]["ts"] == 10.0e6 and abs(inside[0]["dur"] - 0.3e6) < 1
    merged = merge([tmp_path / "tf" / "timeline-r1.json", tmp_path / "mpi" / "timeline-r1.json"])
    assert len(merged["traceEvents"]) == 2 * 4 + 2 + 3


def test_timeline_off_is_a_no_op(tmp_path: Path) -> None:
    off = open_timeline(None, 0)
    assert isinstance(off, NoTimeline) and off.wrap("sync") == "sync"
    with off.span("step"):
        pass
    off.write()
    assert isinstance(open_timeline(str(tmp_path), 3), Timeline)
    with pytest.raises(ConfigError, match="timeline=''"):
        FitOptions(epochs=1, timeline="")


@pytest.mark.parametrize(
    ("argv", "workers", "hosts"),
    [
        ([], (1, 2), ()),  # one machine: 1 and 2 workers
        (["--hosts", "n1,n2"], (1,), ("n1", "n2")),  # across nodes: one worker per node
        (["--hosts", "n1,n2", "--workers", "2"], (2,), ("n1", "n2")),
    ],
)
def test_workers_default_per_node_across_nodes(
    tmp_path: Path, argv: list[str], workers: tuple[int, ...], hosts: tuple[str, ...]
) -> None:
    import argparse

    from tfdist.cli import bench as cli_bench

    parser = argparse.ArgumentParser()
    cli_bench.register(parser.add_subparsers())
    args = parser.parse_args(["bench", "--out", str(tmp_path / "o"), *argv])
    made = cli_bench.config_from_args(args)
    assert made.workers == workers and made.hosts == hosts and made.timeline is False
