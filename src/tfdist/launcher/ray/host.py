"""RUNS ON A RAY NODE, inside the actor that holds one worker's bundle: starts, signals and reads the worker's
process, and ships back its output, exit code, heartbeat age and records (the node's disk need not be the
launcher's). No Ray import: :mod:`tfdist.launcher.ray.placement` wraps it in ``ray.remote``.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any

from tfdist.launcher.workers import _child_setup
from tfdist.nodes import free_ports
from tfdist.worker import with_bootstrap
from tfdist.worker.contract import RECORD_KINDS, AttemptFiles

#: After the process exited, how long its output may take to end (a grandchild may hold the pipe open).
DRAIN_S = 2.0


def node_env(planned: Mapping[str, str], here: Mapping[str, str], launcher_boot: str) -> dict[str, str]:
    """The worker's environment on this node: its own variables, the planned ones on top, PYTHONPATH joined
    (this node's bootstrap first, the launcher's dropped). Pure.

    Input/Output: planned ``{"PYTHONPATH": "<launcher boot>", "TF_CONFIG": "..."}``, here
    ``{"PYTHONPATH": "/opt/lib", "PATH": "/usr/bin"}`` -> ``{"PATH": ..., "TF_CONFIG": ...,
    "PYTHONPATH": "<boot>:/opt/lib", ...}``.
    """
    env = {**here, **planned}
    parts: list[str] = []
    for source in (planned.get("PYTHONPATH", ""), here.get("PYTHONPATH", "")):
        for part in source.split(os.pathsep):
            if part and part != launcher_boot and part not in parts:
                parts.append(part)
    env["PYTHONPATH"] = os.pathsep.join(parts)
    return with_bootstrap(env)


class WorkerHost:
    """One worker's process on this node, started, signalled and read by the launcher."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._proc: subprocess.Popen[bytes] | None = None
        self._lines: list[str] = []
        self._eof = True
        self._exited_at: float | None = None
        self._attempt_dir = ""
        self._heartbeat = ""
        self._rank = ""
        self._sent: dict[str, str] = {}
        # PR_SET_PDEATHSIG fires when the *thread* that forked the child ends: fork from one that lives as
        # long as this actor.
        self._requests: queue.Queue[tuple[dict[str, Any], Future[int]]] = queue.Queue()
        threading.Thread(target=self._spawner, name="tfdist-spawner", daemon=True).start()

    def where(self) -> tuple[str, str]:
        """(node id, node address) of the node Ray placed this actor on, as Ray knows them."""
        import ray  # only ever called inside a Ray actor

        return ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address()

    def free_port(self) -> int:
        """A port free on every interface of this node now."""
        return free_ports(1, "")[0]

    def start(
        self, argv: list[str], planned: dict[str, str], cwd: str, launcher_python: str, launcher_boot: str
    ) -> int:
        """Start the worker (the previous one ended) in ``cwd`` under this node's interpreter; its pid."""
        env = node_env(planned, os.environ, launcher_boot)
        if argv and argv[0] == launcher_python:
            argv = [sys.executable, *argv[1:]]
        self._attempt_dir = env.get("TFDIST_ATTEMPT_DIR", "")
        self._heartbeat = env.get("TFDIST_HEARTBEAT_FILE", "")
        self._rank = env.get("TFDIST_RANK", "")
        self._sent = {}
        if self._attempt_dir:
            os.makedirs(self._attempt_dir, exist_ok=True)
        done: Future[int] = Future()
        self._requests.put(({"argv": argv, "env": env, "cwd": cwd if os.path.isdir(cwd) else None}, done))
        return done.result(timeout=60)

    def _spawner(self) -> None:
        while True:
            request, done = self._requests.get()
            try:
                proc = subprocess.Popen(
                    request["argv"],
                    env=request["env"],
                    cwd=request["cwd"],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    preexec_fn=lambda: _child_setup(()),
                )
            except OSError as exc:
                done.set_exception(exc)
                continue
            with self._lock:
                self._proc, self._lines, self._eof, self._exited_at = proc, [], False, None
            threading.Thread(target=self._pump, args=(proc,), daemon=True).start()
            done.set_result(proc.pid)

    def _pump(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for raw in iter(proc.stdout.readline, b""):
            with self._lock:
                self._lines.append(raw.decode("utf-8", errors="replace").rstrip("\n"))
                self._lock.notify_all()
        proc.stdout.close()
        with self._lock:
            self._eof = True
            self._lock.notify_all()

    def read(self, wait_s: float) -> dict[str, Any]:
        """New output lines (waiting up to ``wait_s`` for some), and the process's state."""
        deadline = time.monotonic() + wait_s
        with self._lock:
            while not self._lines and not self._finished() and time.monotonic() < deadline:
                self._lock.wait(timeout=min(0.2, max(0.0, deadline - time.monotonic())))
            lines, self._lines = self._lines, []
            finished = self._finished()
            proc = self._proc
        code = proc.returncode if finished and proc is not None else None
        return {
            "lines": lines,
            "code": code,
            "eof": finished and self._eof,
            "heartbeat_age": self._heartbeat_age(),
            "records": self._records(),
        }

    def _finished(self) -> bool:
        proc = self._proc
        if proc is None or proc.poll() is None:
            return False
        if self._exited_at is None:
            self._exited_at = time.monotonic()
        return self._eof or time.monotonic() - self._exited_at > DRAIN_S

    def _heartbeat_age(self) -> float | None:
        if not self._heartbeat:
            return None
        try:
            return max(0.0, time.time() - os.stat(self._heartbeat).st_mtime)
        except OSError:
            return None

    def _records(self) -> dict[str, str]:
        """Records not yet shipped or changed since, each only when complete (valid JSON)."""
        import json

        out: dict[str, str] = {}
        if not self._attempt_dir:
            return out
        for name in (AttemptFiles.record_name(kind, self._rank) for kind in RECORD_KINDS):
            try:
                with open(os.path.join(self._attempt_dir, name), encoding="utf-8") as fh:
                    text = fh.read()
                json.loads(text)
            except (OSError, ValueError):
                continue
            if self._sent.get(name) != text:
                out[name] = self._sent[name] = text
        return out

    def signal(self, signum: int) -> None:
        """Deliver ``signum`` to the worker's process group (if it still runs)."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signum)

    def kill(self) -> int | None:
        """SIGKILL the worker's process group and reap it; its exit code."""
        proc = self._proc
        if proc is None:
            return None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):  # the kernel reaps SIGKILLed processes
            return proc.wait(timeout=10)
        return None
