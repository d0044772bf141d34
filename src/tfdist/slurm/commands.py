"""Thin wrappers around Slurm's client commands (sbatch, scontrol, scancel), each with a timeout."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping

from tfdist import variables
from tfdist._log import get_logger
from tfdist.errors import ConfigError, SetupError, TfdistError

log = get_logger(__name__)

TIMEOUT_S = 30
_HINT = (
    "Hint: run on a login node of the cluster (or export SLURM_CONF=<its slurm.conf>), or start a local one "
    "with `scripts/slurm-local.sh start` and `export SLURM_CONF=/tmp/tfdist-slurm/slurm.conf`."
)
_JOB_ID = re.compile(r"^\d+(_\d+)?$")


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    if shutil.which(argv[0]) is None:
        raise SetupError(f"`{argv[0]}` is not on PATH, so tfdist cannot reach Slurm. {_HINT}")
    conf = os.environ.get("SLURM_CONF")
    if conf and not os.path.isfile(conf):  # Slurm's clients would retry reading it for a minute
        raise SetupError(f"SLURM_CONF={conf} is not a file. {_HINT}")
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise SetupError(
            f"`{' '.join(argv)}` did not answer within {TIMEOUT_S} s: is slurmctld running? {_HINT}"
        ) from None
    if proc.returncode != 0:
        unreachable = no_controller(argv[0], proc.stderr + proc.stdout)
        if unreachable:
            raise SetupError(f"{unreachable} {_HINT}")
    return proc


#: What Slurm's clients print without a configuration or an answering controller.
_NO_CONFIG = ("failed to fetch config", "Could not establish a configuration source")
_NO_ANSWER = ("Unable to contact slurm controller", "Unable to establish controller")


def no_controller(program: str, output: str) -> str | None:
    """One line naming why Slurm's client could not reach a controller, or None when it did."""
    if any(marker in output for marker in _NO_CONFIG):
        return (
            f"{program} found no Slurm configuration on this machine (no SLURM_CONF, no "
            "/etc/slurm/slurm.conf, no DNS SRV record): there is no cluster to reach from here."
        )
    if any(marker in output for marker in _NO_ANSWER):
        conf = os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf")
        return f"{program} cannot reach the Slurm controller named in {conf} (it does not answer)."
    return None


def check_job_id(job_id: str) -> str:
    """Job ids are numbers (``123`` or array tasks ``123_4``)."""
    if not _JOB_ID.match(job_id):
        raise ConfigError(f"job id {job_id!r} is not a Slurm job id (a number such as 4242).")
    return job_id


def _reason(text: str) -> str:
    """sbatch's reason on one line, without its ``sbatch: error:`` prefixes.
    Input/Output: ``"sbatch: error: Batch job submission failed: X"`` -> ``"Batch job submission failed: X"``.
    """
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    wanted = [line for line in lines if "error" in line or "failure" in line] or lines
    reason = wanted[-1] if wanted else "no reason given"
    for prefix in ("sbatch: error:", "sbatch:", "allocation failure:", "error:"):
        if reason.startswith(prefix):
            reason = reason[len(prefix) :].strip()
    return reason


def submit(script_path: str, cwd: str | None = None) -> str:
    """``sbatch --parsable SCRIPT`` and return the job id; ``sbatch --test-only`` first, since Slurm accepts,
    and leaves pending forever, a job its partition can never run (unless EnforcePartLimits is set)."""
    where = [] if cwd is None else [f"--chdir={cwd}"]
    for mode in ("--test-only", "--parsable"):
        proc = _run(["sbatch", mode, *where, script_path])
        if proc.returncode != 0:
            raise ConfigError(f"sbatch refused the job: {_reason(proc.stderr + proc.stdout)}")
    return proc.stdout.strip().split(";")[0]


def show_job(job_id: str) -> dict[str, str]:
    """``scontrol show job -o ID`` as a dict (JobState, ExitCode, StdOut, Restarts, …)."""
    proc = _run(["scontrol", "show", "job", "-o", check_job_id(job_id)])
    if proc.returncode != 0:
        raise ConfigError(
            f"job {job_id} is not known to Slurm ({proc.stderr.strip()}). Hint: finished jobs are "
            "forgotten after MinJobAge."
        )
    return dict(token.split("=", 1) for token in proc.stdout.split() if "=" in token)


def unreachable(environ: Mapping[str, str]) -> str:
    """Why this machine's Slurm controller does not answer ``scontrol ping``: "" when it does, or when
    Slurm's clients are not installed here."""
    if shutil.which("scontrol", path=environ.get("PATH")) is None:
        return ""
    try:
        proc = _run(["scontrol", "ping"])
    except TfdistError as exc:
        return str(exc).removesuffix(f" {_HINT}")
    down = [line.strip() for line in proc.stdout.splitlines() if line.strip().endswith("DOWN")]
    if down:  # "Slurmctld(primary) at HOST is DOWN"
        return f"the Slurm controller does not answer (scontrol ping: {down[0]})"
    if proc.returncode != 0:
        return f"scontrol ping: {_reason(proc.stdout + proc.stderr)}"
    return ""


def cancel(job_id: str) -> None:
    """``scancel ID``."""
    proc = _run(["scancel", check_job_id(job_id)])
    if proc.returncode != 0:
        raise ConfigError(f"scancel {job_id} failed: {proc.stderr.strip()}")


def requeue_slurm_job(why: str, environ: Mapping[str, str] | None = None) -> bool:
    """``scontrol requeue $SLURM_JOB_ID`` (TFDIST_REQUEUE=0 opts out), ``why`` logged; whether Slurm took
    it. Never raises: the job may not allow requeueing, another task may have asked first."""
    env = os.environ if environ is None else environ
    job_id = env.get("SLURM_JOB_ID")
    if not job_id or not variables.get("TFDIST_REQUEUE", env):
        return False
    try:
        proc = _run(["scontrol", "requeue", check_job_id(job_id)])
        if proc.returncode != 0:
            raise SetupError(f"scontrol requeue {job_id} failed: {proc.stderr.strip()}")
    except TfdistError as exc:
        log.warning("could not requeue job %s: %s", job_id, exc)
        return False
    log.warning("asked Slurm to requeue job %s; %s", job_id, why)
    return True


def read_log(job_id: str) -> str:
    """The job's output so far, from the standard-output file Slurm reports."""
    path = show_job(job_id).get("StdOut", "")
    if not path:
        raise ConfigError(f"Slurm reports no output file for job {job_id}.")
    if not os.path.exists(path):
        raise ConfigError(f"job {job_id} has not written {path} yet (still pending?).")
    with open(path, encoding="utf-8", errors="replace") as fh:
        return fh.read()
