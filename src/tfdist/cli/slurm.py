"""``tfdist slurm script|submit|status|cancel|logs``: job scripts with sbatch's own option names."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from typing import Any

from tfdist import files
from tfdist.cli.argtypes import add_run_dir, command_words, integer
from tfdist.cli.guards import with_command_guard
from tfdist.errors import ConfigError, SetupError

#: Flags that map to SbatchSpec fields (dest name = field name), shared by `script` and `submit`:
#: (flag, type, metavar, help).
_SPEC_FLAGS: tuple[tuple[str, Any, str | None, str], ...] = (
    ("--nodes", None, "N|MIN-MAX", "nodes; MIN-MAX (or MIN:MAX): Slurm may start (or restart) with fewer"),
    ("--ntasks-per-node", integer, "N", "tasks (workers) per node (default: one per GPU, else 1)"),
    ("--gpus-per-node", integer, "G", "GPUs of each node the job asks for"),
    ("--gpus-per-task", integer, "G", "GPUs of each task (sbatch's)"),
    ("--cpus-per-task", integer, "N", "CPUs of each task (sbatch's)"),
    ("--mem", None, "SIZE", "memory per node, as sbatch reads it: 64G, 500M (a bare number is MB)"),
    ("--time", None, "MINUTES|HH:MM:SS", "time limit, as sbatch reads it: a bare number is minutes"),
    ("--partition", None, "NAME", "sbatch's, as is"),
    ("--constraint", None, "FEATURES", "sbatch's, as is"),
    ("--account", None, "NAME", "sbatch's, as is"),
    ("--qos", None, "NAME", "sbatch's, as is"),
    ("--job-name", None, "NAME", "sbatch's, as is"),
    ("--output", None, "PATTERN", "the job's output file, sbatch's pattern (%%j: the job id)"),
    ("--error", None, "PATTERN", "the job's error file (default: with the output)"),
    ("--signal", None, None, "preemption signal (default USR2@90: NCCL may trap USR1)"),
    ("--container", None, None, "Apptainer image (.sif); tasks run under `apptainer exec`"),
    ("--venv", None, None, "virtualenv to activate in the job"),
    ("--nodelist", None, None, "run on these nodes (Slurm node list, e.g. node[1-2])"),
    ("--mpi", None, None, "srun's MPI plugin for --backend mpi|horovod (default pmi2)"),
)
#: Repeatable flags: (flag, dest, metavar, help).
_LIST_FLAGS = (
    ("--module", "modules", "NAME", "`module load NAME` before the tasks start (repeatable)"),
    ("--bind", "binds", "SRC[:DST]", "with --container: a path bound into the container (repeatable)"),
    ("--sbatch", "extra_sbatch", "OPTION", "an extra #SBATCH line, e.g. --sbatch=--exclusive (repeatable)"),
)

#: The examples at the end of ``script --help`` and ``submit --help``.
_EXAMPLES = {
    "script": (
        "tfdist slurm script --nodes 2 --gpus-per-node 4 -- python train.py   # print the job script",
    ),
    "submit": (
        "tfdist slurm submit --nodes 2 --gpus-per-node 4 --time 60 -- python train.py",
        "tfdist slurm submit --nodes 2 -- tfdist train --epochs 10   # on the fastest backend the nodes run",
    ),
}


def register(sub: Any) -> None:
    """Add ``slurm`` and its sub-commands."""
    from tfdist.cli import Parser, examples

    p = sub.add_parser("slurm", help="write, submit and watch Slurm jobs")
    actions = p.add_subparsers(dest="action", metavar="ACTION", parser_class=Parser)
    actions.required = True
    for name, helptext in (
        ("script", "print the job script"),
        ("submit", "write the job script into a run directory and sbatch it"),
    ):
        a = actions.add_parser(name, help=helptext, **examples(*_EXAMPLES[name]))
        for flag, kind, metavar, text in _SPEC_FLAGS:
            a.add_argument(flag, type=kind, metavar=metavar, help=text)
        for flag, dest, metavar, helptext in _LIST_FLAGS:
            a.add_argument(flag, dest=dest, action="append", metavar=metavar, help=helptext)
        a.add_argument("--export", action="append", metavar="NAME=VALUE", help="variable exported in the job")
        a.add_argument(
            "--backend",
            help="auto (default) | tf | mpi | horovod: auto is tf for a script, and for `tfdist train` the "
            "fastest backend the nodes can run",
        )
        a.add_argument("--per-node", choices=("mirrored",), help="one task per node driving all its GPUs")
        a.add_argument(
            "--no-requeue", action="store_true", help="do not ask Slurm to requeue the job on preemption"
        )
        a.add_argument("--config", help="TOML file with the same options; flags win")
        if name == "submit":
            add_run_dir(a, "run_dir", "the sbatch script and the job's logs")
        a.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND... run by every task")
        a.set_defaults(run=run_script if name == "script" else run_submit)
        with_command_guard(a, f"tfdist slurm {name} --nodes 2 -- python train.py")
    for name, helptext in (
        ("status", "show a job's state"),
        ("cancel", "cancel a job"),
        ("logs", "print a job's output"),
    ):
        a = actions.add_parser(name, help=helptext)
        a.add_argument("job_id", metavar="JOBID")
        a.set_defaults(run={"status": run_status, "cancel": run_cancel, "logs": run_logs}[name])


def _load_toml(path: str) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # the same parser, as a package before Python 3.11 (a dependency there)
        import tomli as tomllib

    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"--config {path!r} cannot be read: {exc.strerror}.") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"--config {path!r} is not valid TOML: {exc}.") from None
    values = {key.replace("-", "_"): value for key, value in data.items()}
    for key, value in values.items():
        _check_toml_type(path, key, value)
    return values


#: The TOML type of each key that is not a plain string.
_TOML_TYPES = {
    **{k: "an integer" for k in ("ntasks_per_node", "gpus_per_node", "gpus_per_task", "cpus_per_task")},
    "nodes": 'an integer or a "MIN-MAX" string',
    **{k: "a boolean" for k in ("gres", "requeue")},
    **{k: "a list of strings" for k in ("modules", "binds", "extra_sbatch")},
    "exports": "a table of strings",
    "per_node": 'a boolean or "mirrored"',
}
_TOML_NAMES = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list"}


def _check_toml_type(path: str, key: str, value: Any) -> None:
    """ConfigError naming the key when its value has the wrong TOML type (e.g. nodes = "two")."""
    want = _TOML_TYPES.get(key, "a string")
    ok = {
        "an integer": isinstance(value, int) and not isinstance(value, bool),
        "a boolean": isinstance(value, bool),
        "a list of strings": isinstance(value, list) and all(isinstance(v, str) for v in value),
        "a table of strings": isinstance(value, dict) and all(isinstance(v, str) for v in value.values()),
        'a boolean or "mirrored"': isinstance(value, bool) or value == "mirrored",
        'an integer or a "MIN-MAX" string': (isinstance(value, int) and not isinstance(value, bool))
        or isinstance(value, str),  # the string's form is checked with the flag's (parse_node_range)
        "a string": isinstance(value, str),
    }[want]
    if not ok:
        got = _TOML_NAMES.get(type(value), "a table" if isinstance(value, dict) else type(value).__name__)
        raise ConfigError(f"--config {path!r}: key {key!r} must be {want}, got {value!r} ({got}).")


def spec_from_args(args: argparse.Namespace) -> Any:
    """Merge the TOML file (if any) with flags (flags win) into a validated SbatchSpec."""
    from tfdist.slurm import SbatchSpec

    values: dict[str, Any] = _load_toml(args.config) if args.config else {}
    fields = {f[2:].replace("-", "_") for f, *_ in _SPEC_FLAGS} | {d for _, d, _, _ in _LIST_FLAGS}
    fields |= {"exports", "per_node", "requeue", "gres", "extra_sbatch", "workdir", "backend"}
    unknown = sorted(set(values) - fields)
    if unknown:
        raise ConfigError(
            f"--config {args.config!r} has unknown key(s) {', '.join(unknown)}; keys are the sbatch flag "
            "names."
        )
    for flag, *_ in _SPEC_FLAGS:
        dest = flag[2:].replace("-", "_")
        if getattr(args, dest) is not None:
            values[dest] = getattr(args, dest)
    for _, dest, _, _ in _LIST_FLAGS:
        if getattr(args, dest):
            values[dest] = getattr(args, dest)
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
    if isinstance(values.get("nodes"), str):  # from the flag or the file: N or MIN-MAX
        from tfdist.nodes import parse_node_range

        source = "--nodes" if args.nodes is not None else f"--config {args.config!r}: nodes"
        nodes = parse_node_range(values["nodes"], source, "-")
        values["min_nodes"], values["nodes"] = (nodes.low if nodes.elastic else None), nodes.high
    if args.export:
        values["exports"] = dict(_parse_export(item) for item in args.export)
    if args.per_node or values.get("per_node") in (True, "mirrored"):
        values["per_node"] = True
    if args.no_requeue:
        values["requeue"] = False
    if not values.get("venv") and not values.get("container"):
        values.setdefault("python", sys.executable)  # the interpreter running this has tfdist installed
    if args.backend is not None:
        values["backend"] = args.backend
    try:
        spec = SbatchSpec(command=tuple(command_words(args.command)), **{**values, "backend": "tf"})
    except TypeError as exc:
        raise ConfigError(f"bad job option: {exc}") from None
    from tfdist.cli.slurm_backend import resolve_backend

    return resolve_backend(spec, str(values.get("backend") or ""))


def _parse_export(item: str) -> tuple[str, str]:
    name, sep, value = item.partition("=")
    if not sep:
        raise ConfigError(f"--export {item!r} must be NAME=VALUE.")
    return name, value


def run_script(args: argparse.Namespace) -> int:
    """Print the job script."""
    from tfdist.slurm import render_sbatch

    sys.stdout.write(render_sbatch(spec_from_args(args)))
    return 0


def run_submit(args: argparse.Namespace) -> int:
    """Write the script atomically into the run directory, submit it, print the job id."""
    from dataclasses import replace

    from tfdist.launcher.outcome import new_run_id
    from tfdist.slurm import commands, render_sbatch
    from tfdist.worker.contract import RunFiles

    spec = spec_from_args(args)
    run_dir = os.path.abspath(args.run_dir or os.path.join("tfdist-runs", new_run_id()))
    if spec.output == "tfdist-%j.out":
        spec = replace(spec, output=RunFiles(run_dir).slurm_output)
    # The tasks record the step's first failure there, so the job ends with that task's exit code.
    spec = replace(spec, exports={**spec.exports, "TFDIST_RUN_DIR": run_dir})
    made = not os.path.exists(run_dir)
    os.makedirs(run_dir, exist_ok=True)
    path = RunFiles(run_dir).sbatch
    files.write_text(path, render_sbatch(spec))
    try:
        job_id = commands.submit(path, cwd=os.getcwd())
    except (ConfigError, SetupError):
        # Nothing was submitted: leave nothing behind either.
        if made:
            shutil.rmtree(run_dir, ignore_errors=True)
        else:
            os.unlink(path)
        raise
    print(f"submitted job {job_id}; script {path}; output {spec.output.replace('%j', job_id)}")
    return 0


def run_status(args: argparse.Namespace) -> int:
    """Print state, exit code, restarts and output path; exit 0 (the state is data, not an error)."""
    from tfdist.slurm import commands

    job = commands.show_job(args.job_id)
    print(
        f"job {args.job_id}: {job.get('JobState', '?')} (exit code {job.get('ExitCode', '?')}, "
        f"restarts {job.get('Restarts', '0')}, reason {job.get('Reason', 'None')}); output "
        f"{job.get('StdOut', '?')}"
    )
    return 0


def run_cancel(args: argparse.Namespace) -> int:
    """Cancel the job."""
    from tfdist.slurm import commands

    commands.show_job(args.job_id)  # unknown ids get the clear error before scancel's terse one
    commands.cancel(args.job_id)
    print(f"cancelled job {args.job_id}")
    return 0


def run_logs(args: argparse.Namespace) -> int:
    """Print the job's output so far."""
    from tfdist.slurm import commands

    sys.stdout.write(commands.read_log(args.job_id))
    return 0
