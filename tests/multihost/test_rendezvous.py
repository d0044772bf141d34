"""`tfdist launch --nnodes N --rdzv node1:PORT`: the same command on every test host forms one job.

Each host is a network namespace with its own address and name; scripts run as written (no tfdist import)
and their weights are compared with the same script in one process. The rendezvous also faces strangers:
garbage, a wrong token, a half-sent message held open and 200 idle connections, while a job forms.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import hostcluster
import numpy as np
import psutil
import pytest
from hostcluster import (
    HOSTS_SCRIPT,
    assert_ranks_equal_one_process,
    finish,
    made_hosts,
    one_process,
    received_bytes,
)

pytestmark = [pytest.mark.multihost, pytest.mark.timeout(600)]
HELPERS = Path(__file__).parent.parent / "helpers"
PY = sys.executable
ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith(("TF_CONFIG", "SLURM_", "TFDIST_"))},
    "TFDIST_HOSTS_PREFIX": "tfdr",
    "TFDIST_HOSTS_SUBNET": "10.82.0",
    "TFDIST_RDZV_TOKEN": "test-secret-0f3a",
}
_ports = itertools.count(29500)


@pytest.fixture(scope="module")
def hosts() -> Iterator[None]:
    yield from made_hosts(ENV, 3)


def launch_on(host: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """`tfdist launch ARGS` on a test host of this module (its own hosts and token)."""
    return hostcluster.launch_on(host, env or ENV, *args)


def on_every_host(
    nodes: int, tmp_path: Path, *launch_args: str, rdzv_timeout: str = "120"
) -> list[tuple[int, str]]:
    endpoint = f"node1:{next(_ports)}"
    procs = [
        launch_on(
            f"node{i}",
            "--nnodes",
            str(nodes),
            "--rdzv",
            endpoint,
            "--rdzv-timeout",
            rdzv_timeout,
            "--cpu",
            "--run-dir",
            str(tmp_path / f"run-node{i}"),
            *launch_args,
        )
        for i in range(nodes, 0, -1)  # the endpoint's node last: the others wait for it
    ]
    return finish(procs)[::-1]


# Three nodes: the second tier (test_model_fit_and_tfdist_fit_on_three_hosts forms three there too).
@pytest.mark.parametrize("nodes", [2, pytest.param(3, marks=pytest.mark.slow)])
def test_plain_mwms_script_forms_one_job_across_hosts(hosts: None, nodes: int, tmp_path: Path) -> None:
    script = str(HELPERS / "plain_mwms.py")
    single, out = tmp_path / "single", tmp_path / "out"
    single.mkdir()
    out.mkdir()
    one_process(script, str(single))
    results = on_every_host(nodes, tmp_path, "-n", "1", script, str(out))
    for code, output in results:
        assert code == 0, output[-3000:]
    summaries = {line for _, output in results for line in output.splitlines() if "formed at" in line}
    assert len(summaries) == 1  # every node printed the same job summary
    summary = summaries.pop()
    assert f"job of {nodes} node(s) x 1 worker(s)" in summary and "node 0 node1 (10.82.0.1)" in summary
    assert all(f"on {nodes} replicas" in output for _, output in results)
    assert_ranks_equal_one_process(single, out, nodes)


@pytest.mark.slow  # the first tier: model.fit on 2 x 2 workers across hosts in test_k8s_pods.py
def test_keras_model_fit_two_workers_on_each_of_two_hosts(hosts: None, tmp_path: Path) -> None:
    script = str(HELPERS / "keras_fit.py")
    single, out = tmp_path / "single", tmp_path / "out"
    single.mkdir()
    out.mkdir()
    one_process(script, str(single), "--plain", "--epochs", "2")
    results = on_every_host(2, tmp_path, "-n", "2", script, str(out), "--plain", "--epochs", "2")
    for code, output in results:
        assert code == 0, output[-3000:]
    ref = json.loads((single / "rank-0.json").read_text())
    for rank in range(4):
        weights = np.load(out / f"rank-{rank}.weights.npy")
        assert np.max(np.abs(weights - np.load(single / "rank-0.weights.npy"))) <= 1e-5
        history = json.loads((out / f"rank-{rank}.json").read_text())["history"]
        for key, values in ref["history"].items():
            assert np.allclose(history[key], values, atol=1e-5, rtol=0), key


@pytest.mark.slow  # the first tier: tfdist.fit across hosts on the MPI backend, below
def test_tfdist_fit_on_the_tf_backend_across_hosts(hosts: None, tmp_path: Path) -> None:
    probe = str(HELPERS / "fit_probe.py")
    single, out = tmp_path / "single", tmp_path / "out"
    single.mkdir()
    out.mkdir()
    one_process(probe, str(single))
    results = on_every_host(2, tmp_path, "-n", "2", probe, str(out))
    for code, output in results:
        assert code == 0, output[-3000:]
    assert_ranks_equal_one_process(single, out, 4)


def test_tfdist_fit_on_the_mpi_backend_two_ranks_on_each_of_two_hosts(hosts: None, tmp_path: Path) -> None:
    """No ssh, no scheduler: Hydra's proxies started by tfdist on every host; both reduce levels run."""
    probe = str(HELPERS / "fit_probe.py")
    single, out = tmp_path / "single", tmp_path / "out"
    single.mkdir()
    out.mkdir()
    one_process(probe, str(single))
    received = received_bytes("tfdr", "node2")
    results = on_every_host(2, tmp_path, "--backend", "mpi", "-n", "2", probe, str(out))
    for code, output in results:
        assert code == 0, output[-3000:]
    assert "local size 2, cross size 2): shared memory within a node, MPI across nodes" in results[0][1]
    assert received_bytes("tfdr", "node2") - received > 30_000  # the ranks of node2 talked over the switch
    assert_ranks_equal_one_process(single, out, 4)


def test_a_failing_worker_on_one_node_is_the_exit_code_on_every_node(hosts: None, tmp_path: Path) -> None:
    """Rank 1, node2's worker, exits 7 while rank 0 on node1 would run for two minutes: both launchers
    end at once with 7, the failure's code, not the stop's."""
    started = time.monotonic()
    worker = str(HELPERS / "worker.py")
    results = on_every_host(2, tmp_path, "--grace", "2", worker, "exit", str(tmp_path / "out"), "7")
    assert [code for code, _ in results] == [7, 7], results
    assert time.monotonic() - started < 60


def _bad(host: str, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    [(code, output)] = finish([launch_on(host, "--cpu", *args, env=env)], timeout=120)
    return code, output


def test_a_node_that_never_arrives_stops_the_others_with_one_line(hosts: None, tmp_path: Path) -> None:
    started = time.monotonic()
    code, output = _bad(
        "node1", "--nnodes", "3", "--rdzv", f"node1:{next(_ports)}", "--rdzv-timeout", "4", "-n", "1",
        str(HELPERS / "plain_mwms.py"), str(tmp_path),
    )  # fmt: skip
    assert code == 2 and output.count("\n") == 1, output
    assert "only 1 of 3 node(s) arrived at the rendezvous" in output and "(node1); 2 missing" in output
    assert time.monotonic() - started < 30 and not list(tmp_path.iterdir())


def test_a_mismatched_node_is_told_why(hosts: None, tmp_path: Path) -> None:
    script = str(HELPERS / "plain_mwms.py")
    endpoint = f"node1:{next(_ports)}"
    first = launch_on("node1", "--cpu", "--nnodes", "2", "--rdzv", endpoint, "--rdzv-timeout", "8", "-n", "1",
                      script, str(tmp_path))  # fmt: skip
    time.sleep(1.5)
    code, output = _bad("node2", "--nnodes", "2", "--rdzv", endpoint, "-n", "2", script, str(tmp_path))
    assert code == 2 and output.count("\n") == 1, output
    assert "node node2 was started with -n 2, but the job at this endpoint runs -n 1 (node node1)" in output
    other = str(HELPERS / "keras_fit.py")
    code, output = _bad("node3", "--nnodes", "2", "--rdzv", endpoint, "-n", "1", other, str(tmp_path))
    assert code == 2 and f"node node3 runs `{other} {tmp_path}`, but the job at this endpoint runs" in output
    assert finish([first])[0][0] == 2


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--nnodes", "2", "--rdzv", "node1:1", "--rdzv-timeout", "3"), "did not answer within 3 s"),
        (("--nnodes", "2", "--rdzv", "nodeX:29400"), "host 'nodeX' does not resolve on node2"),
        (("--nnodes", "0", "--rdzv", "node1:29400"), "--nnodes=0 must be at least 1"),
        (("--nnodes", "2", "--rdzv", "node1"), "--rdzv='node1' must be HOST:PORT"),
        (("--nnodes", "2", "--rdzv", "node1:29400", "--hosts", "node1,node2"), "--rdzv assigns node ranks"),
    ],
)
def test_bad_rendezvous_inputs_are_one_line(
    hosts: None, args: tuple[str, ...], expected: str, tmp_path: Path
) -> None:
    code, output = _bad("node2", *args, "-n", "1", str(HELPERS / "plain_mwms.py"), str(tmp_path))
    assert code == 2 and output.count("\n") == 1 and expected in output, output
    assert not list(tmp_path.iterdir())


def test_an_endpoint_name_that_resolves_to_loopback_on_its_own_node(hosts: None, tmp_path: Path) -> None:
    """Debian's "127.0.1.1 node1" on node1 only: node1 would advertise loopback to its peers."""
    subprocess.run([HOSTS_SCRIPT, "loopback-name", "node1", "self"], env=ENV, check=True, timeout=30)
    try:
        results = on_every_host(2, tmp_path, "-n", "1", str(HELPERS / "plain_mwms.py"), str(tmp_path / "o"))
    finally:
        subprocess.run([HOSTS_SCRIPT, "loopback-name", "node1", "off"], env=ENV, check=True, timeout=30)
    for code, output in results:
        assert code == 2 and output.count("\n") == 1, output
        assert re.search(r"node node1 reached the rendezvous through 127\.[\d.]+ \(loopback\)", output), (
            output
        )


def listening(pid: int, port: int) -> bool:
    """Whether a socket listens on ``port`` in the network namespace of process ``pid`` (psutil reads only
    the caller's namespace)."""
    with open(f"/proc/{pid}/net/tcp", encoding="ascii") as fh:
        rows = [line.split() for line in fh.readlines()[1:]]
    return any(int(row[1].split(":")[1], 16) == port and row[3] == "0A" for row in rows)


def _rogues(port: int) -> str:
    """From node3's namespace: 200 idle connections, garbage, a wrong token, half a join held open."""
    code = f"""
import hashlib, hmac, json, socket, sys, time
g = socket.create_connection(("node1", {port}), timeout=5); g.sendall(b"\\x00\\xff garbage\\n" * 10)
w = socket.create_connection(("node1", {port}), timeout=5)
nonce = json.loads(w.makefile().readline())["nonce"]
join = {{"name": "mallory", "nproc": 1, "command": "x", "digest": "0", "ports": [1], "pid": 1}}
mac = hmac.new(b"wrong", nonce.encode() + json.dumps(join, sort_keys=True, separators=(",", ":")).encode(),
               hashlib.sha256).hexdigest()
w.sendall(json.dumps({{"join": join, "mac": mac}}).encode() + b"\\n")
print("wrong token:", w.makefile().readline().strip(), flush=True)
h = socket.create_connection(("node1", {port}), timeout=5); h.sendall(b'{{"join": {{"name": "half')
held = []
for _ in range(200):
    try:
        held.append(socket.create_connection(("node1", {port}), timeout=2))
    except OSError:
        pass
print("rogues ready", len(held), flush=True)
time.sleep(40)
"""
    return code


@pytest.mark.slow  # the first tier: tests/unit/test_rendezvous_protocol.py's strangers and wrong tokens
def test_strangers_at_the_endpoint_do_not_disturb_the_job(hosts: None, tmp_path: Path) -> None:
    script = str(HELPERS / "plain_mwms.py")
    single, out = tmp_path / "single", tmp_path / "out"
    single.mkdir()
    out.mkdir()
    one_process(script, str(single))
    port = next(_ports)
    common = ("--nnodes", "2", "--rdzv", f"node1:{port}", "--rdzv-timeout", "120", "--cpu", "-n", "1")
    server = launch_on("node1", *common, "--run-dir", str(tmp_path / "r1"), script, str(out))
    launcher = psutil.Process(server.pid)  # testhosts.sh execs into the launcher: this is its process
    deadline = time.monotonic() + 60
    while not listening(server.pid, port):
        assert time.monotonic() < deadline and server.poll() is None
        time.sleep(0.2)
    threads, rss = launcher.num_threads(), launcher.memory_info().rss
    rogue = subprocess.Popen(
        [HOSTS_SCRIPT, "exec", "node3", "--", PY, "-c", _rogues(port)],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert rogue.stdout is not None
        said = [rogue.stdout.readline(), rogue.stdout.readline()]
        assert "refused this node: its token is not this job's" in said[0], said
        assert said[1].startswith("rogues ready 200"), said
        peak_threads, peak_rss = launcher.num_threads(), launcher.memory_info().rss
        second = launch_on("node2", *common, "--run-dir", str(tmp_path / "r2"), script, str(out))
        results = finish([server, second])
    finally:
        rogue.kill()
        rogue.wait(timeout=30)
    for code, output in results:
        assert code == 0, output[-3000:]
    assert_ranks_equal_one_process(single, out, 2)
    grew = (peak_rss - rss) / 2**20
    print(f"rendezvous process: {threads} -> {peak_threads} threads, RSS {rss / 2**20:.1f} MiB + {grew:.2f}")
    assert peak_threads == threads and peak_rss - rss < 16 * 2**20


@pytest.mark.slow
def test_a_horovod_keras_script_across_two_hosts_equals_one_process(hosts: None, tmp_path: Path) -> None:
    """horovodrun -np 2 -H node1:1,node2:1 train.py, as tfdist runs it: the same command on each host."""
    script = str(HELPERS / "hvd_keras.py")
    single, out = tmp_path / "single", tmp_path / "out"
    single.mkdir()
    out.mkdir()
    one_process(script, str(single), "--batch", "64", "--lr-ranks", "2")
    received = received_bytes("tfdr", "node2")
    results = on_every_host(2, tmp_path, "--backend", "horovod", "-n", "1", script, str(out))
    for code, output in results:
        assert code == 0, output[-3000:]
    assert "for this job `import horovod` gives tfdist's implementation" in results[1][1]
    assert received_bytes("tfdr", "node2") - received > 30_000  # rank 1 on node2 talked over the switch
    reference = np.load(single / "rank0.npz")
    for rank in range(2):
        weights = np.load(out / f"rank{rank}.npz")
        assert max(float(np.abs(weights[k] - reference[k]).max()) for k in reference.files) <= 1e-5


@pytest.mark.slow
def test_horovodrun_style_h_from_one_host_equals_one_process(hosts: None, tmp_path: Path) -> None:
    """`tfdist launch -H node1:1,node2:1` typed on node1 only: node2's part starts over ssh (an ssh server
    on each test host, as on a cluster without a scheduler), and the Horovod script ≡ one process; then
    `-H node1:2,node2:2` with `tfdist.fit` on the MPI backend (local size 2, cross size 2) ≡ one process."""
    served = subprocess.run(
        [HOSTS_SCRIPT, "sshd", "node1", "node2"], env=ENV, capture_output=True, text=True, timeout=600
    )
    assert served.returncode == 0, served.stderr
    ssh = subprocess.run(
        [HOSTS_SCRIPT, "ssh-command"], env=ENV, capture_output=True, text=True, timeout=30
    ).stdout.strip()
    script = str(HELPERS / "hvd_keras.py")
    single, out = tmp_path / "single", tmp_path / "out"
    single.mkdir()
    out.mkdir()
    one_process(script, str(single), "--batch", "64", "--lr-ranks", "2")
    received = received_bytes("tfdr", "node2")
    launcher = launch_on(
        "node1", "-H", "node1:1,node2:1", "--ssh", ssh, "--cpu", "--backend", "horovod",
        "--run-dir", str(tmp_path / "runs"), script, str(out),
    )  # fmt: skip
    [(code, output)] = finish([launcher])
    assert code == 0, output[-3000:]
    assert "[node2] tfdist launch: all workers finished" in output  # node2's launcher, relayed over ssh
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["node1", "node2"]
    assert received_bytes("tfdr", "node2") - received > 30_000
    reference = np.load(single / "rank0.npz")
    for rank in range(2):
        weights = np.load(out / f"rank{rank}.npz")
        assert max(float(np.abs(weights[k] - reference[k]).max()) for k in reference.files) <= 1e-5

    # mpirun -np 4 -H node1:2,node2:2 python train.py: tfdist.fit on the MPI backend, both reduce levels.
    probe = str(HELPERS / "fit_probe.py")
    single, out = tmp_path / "fit-single", tmp_path / "fit-out"
    single.mkdir()
    out.mkdir()
    one_process(probe, str(single))
    launcher = launch_on(
        "node1", "-H", "node1:2,node2:2", "--ssh", ssh, "--cpu", "--backend", "mpi",
        "--run-dir", str(tmp_path / "fit-runs"), probe, str(out),
    )  # fmt: skip
    [(code, output)] = finish([launcher])
    assert code == 0, output[-3000:]
    assert "local size 2, cross size 2): shared memory within a node, MPI across nodes" in output, output[
        -3000:
    ]
    assert_ranks_equal_one_process(single, out, 4)


@pytest.mark.slow
def test_model_fit_and_tfdist_fit_on_three_hosts(hosts: None, tmp_path: Path) -> None:
    """The same rendezvous command on 3 hosts, one worker each: a plain model.fit script, and tfdist.fit on
    the TF and MPI backends (global batch 12, 4 per replica), each ≡ one process."""
    keras_script, fit_script = str(HELPERS / "keras_fit.py"), str(HELPERS / "elastic_fit.py")
    runs = {
        "keras": (keras_script, ("--plain", "--epochs", "2"), ()),
        "fit-tf": (fit_script, ("--epochs", "2", "--steps", "4"), ()),
        "fit-mpi": (fit_script, ("--epochs", "2", "--steps", "4"), ("--backend", "mpi")),
    }
    for name, (script, args, launch_args) in runs.items():
        single, out, logs = tmp_path / name / "single", tmp_path / name / "out", tmp_path / name / "logs"
        for d in (single, out, logs):
            d.mkdir(parents=True)
        keras = script == keras_script  # keras_fit.py takes OUT; elastic_fit.py OUT CKPT
        one_process(script, *((str(single),) if keras else (str(single), str(single / "ckpt"))), *args)
        outputs = (str(out),) if keras else (str(out), str(out / "ckpt"))
        results = on_every_host(3, logs, *launch_args, "-n", "1", script, *outputs, *args)
        for code, output in results:
            assert code == 0, f"{name}: {output[-3000:]}"
        if keras:
            reference = np.load(single / "rank-0.weights.npy")
            ref = json.loads((single / "rank-0.json").read_text())["history"]
            for rank in range(3):
                assert np.max(np.abs(np.load(out / f"rank-{rank}.weights.npy") - reference)) <= 1e-5
                history = json.loads((out / f"rank-{rank}.json").read_text())["history"]
                for key, values in ref.items():
                    assert np.allclose(history[key], values, atol=1e-5, rtol=0), (name, key)
        else:
            assert_ranks_equal_one_process(single, out, 3)
