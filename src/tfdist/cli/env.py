"""``tfdist env``: what tfdist sees here, and what it would build."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from tfdist import variables
from tfdist.cli import examples
from tfdist.env.stack import StackFacts, describe
from tfdist.launcher.ray.address import find_cluster

#: Variable names (or prefixes) that matter to distributed training, shown by ``tfdist env``.
RELEVANT_PREFIXES = (
    *("TF_CONFIG", "TFDIST_", "TF_NUM_", "TF_CPP_MIN_LOG_LEVEL", "TF_ENABLE_ONEDNN_OPTS", "XLA_FLAGS"),
    *("SLURM_", "RAY_", "JOB_COMPLETION_INDEX", "OMPI_COMM_WORLD_", "PMI_", "PMIX_", "MPIR_CVAR_", "UCX_"),
    *("CUDA_VISIBLE_DEVICES", "NCCL_", "TPU_", "COLAB_TPU_ADDR", "FI_PROVIDER", "OMP_NUM_THREADS"),
    "TF_USE_LEGACY_KERAS",
)
SECRET_MARKERS = ("TOKEN", "KEY", "SECRET", "PASSWORD")


def register(sub: Any) -> None:
    """Add the ``env`` sub-parser."""
    p = sub.add_parser(
        "env",
        help="show the detected environment, devices and the strategy tfdist would build",
        **examples(
            "tfdist env          # where this process runs, its devices, the strategy tfdist would build",
            "tfdist env --json   # the same as one JSON object",
        ),
    )
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    p.set_defaults(run=run)


def relevant_variables(environ: Mapping[str, str]) -> dict[str, str]:
    """Variables that matter to tfdist, with secret-looking ones redacted.

    Input/Output: ``{"SLURM_JOB_ID": "7", "TFDIST_API_TOKEN": "x", "HOME": "/r"}`` ->
    ``{"SLURM_JOB_ID": "7", "TFDIST_API_TOKEN": "<redacted>"}``.
    """
    return {
        name: "<redacted>" if any(marker in name.upper() for marker in SECRET_MARKERS) else environ[name]
        for name in sorted(environ)
        if name.startswith(RELEVANT_PREFIXES)
    }


def _versions() -> dict[str, str | None]:
    from tfdist import __version__

    versions: dict[str, str | None] = {
        "tfdist": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    for module in ("tensorflow", "keras", "numpy"):
        try:
            versions[module] = __import__(module).__version__
        except Exception:  # not installed or broken install: report, do not crash the diagnostic
            versions[module] = None
    return versions


def collect(environ: Mapping[str, str]) -> dict[str, Any]:
    """Everything ``tfdist env`` reports, as a JSON-ready dictionary."""
    from tfdist.env import detect_environment
    from tfdist.strategies import LocalDevices, discover_devices, options_from_environ, plan_strategy

    env = detect_environment(environ)
    driver = driver_gpus(environ)
    try:
        devices = discover_devices()
        tensorflow = True
    except ImportError:  # tfdist without TensorFlow: say what is missing rather than fail here
        tensorflow = False
        devices = LocalDevices(gpus=(), cpu_cores=os.cpu_count() or 1)
    # Without TensorFlow the plan counts the driver's GPUs: what tfdist.strategy() builds once it is there.
    planned = devices if tensorflow else LocalDevices(gpus=tuple(driver), cpu_cores=devices.cpu_cores)
    plan = plan_strategy(env, planned, options_from_environ(environ))
    info = env.describe()
    if not tensorflow:
        info["warnings"] = [
            *env.warnings,
            "TensorFlow is not installed: nothing can train here; the strategy above counts the driver's "
            "GPUs. Hint: pip install 'tfdist[gpu]' (or 'tfdist[cpu]' without a GPU).",
        ]
    mpi = mpi_status(environ)
    return {
        **info,
        "devices": {"gpus": list(devices.gpus), "driver_gpus": driver, "cpu_cores": devices.cpu_cores},
        "strategy": plan.describe(),
        "versions": _versions(),
        "variables": relevant_variables(environ),
        "keras_fix": keras_fix_status(environ),
        "inside_slurm_allocation": "SLURM_JOB_ID" in environ and env.kind != "slurm",
        "ray_cluster": find_cluster(environ),
        "mpi": mpi,
        "stack": describe(read_stack(environ, len(devices.gpus), mpi, len(driver))),
    }


def driver_gpus(environ: Mapping[str, str]) -> list[str]:
    """The NVIDIA driver's GPUs this process may use (CUDA_VISIBLE_DEVICES applied), as ``"1: NVIDIA A100"``
    (a UUID as it is)."""
    from tfdist.nodes import gpu_names, visible_gpus

    names = gpu_names()
    gpus = visible_gpus(environ, len(names))  # below: an index the node does not have is no GPU
    return [
        f"{g}: {names[int(g)]}" if g.isdigit() else g for g in gpus if not g.isdigit() or int(g) < len(names)
    ]


def read_stack(
    environ: Mapping[str, str], gpus: int, mpi: Mapping[str, Any], driver_gpus: int = 0
) -> StackFacts:
    """This machine's stack for :func:`tfdist.env.stack.plan_features` (the modules' own versions,
    :mod:`tfdist.installed`)."""
    import shutil

    from tfdist.installed import find
    from tfdist.keras import adapters
    from tfdist.slurm.commands import unreachable

    tensorflow, found_keras = find("tensorflow"), find("keras")
    tf_version, keras = tensorflow.version, found_keras.version
    row = adapters.adapter_for(keras) if keras else None
    tf = sys.modules.get("tensorflow")  # loaded by the device listing: ask it whether it has CUDA
    cuda = bool(tf.test.is_built_with_cuda()) if tf is not None and hasattr(tf, "test") else None
    library = mpi.get("library") or {}
    return StackFacts(
        tensorflow=tf_version,
        tensorflow_dist=tensorflow.distribution,
        keras=keras,
        keras_dist=found_keras.distribution or found_keras.path,
        keras_row=row.name if row else "",
        keras_table=adapters.supported_spec(),
        keras_hint=adapters.install_hint(tf_version),
        tf_keras=find("tf_keras").version,
        legacy_keras=environ.get("TF_USE_LEGACY_KERAS", ""),
        keras_patch=bool(variables.get("TFDIST_KERAS_PATCH", environ)),
        mpi4py=find("mpi4py").version,
        mpi_library=f"{library['name']} ({library['path']})" if library else "",
        mpi_launcher=mpi.get("launcher") or "",
        mpi_launcher_version=mpi.get("launcher_version") or mpi.get("flavour") or "",
        mpi_problem=mpi.get("problem") or "",
        ray=find("ray").version,
        tfds=find("tensorflow_datasets").version,
        kubernetes=find("kubernetes").version,
        sbatch=shutil.which("sbatch", path=environ.get("PATH")) or "",
        slurm_unreachable=unreachable(environ),
        cuda_build=cuda,
        gpus=gpus,
        driver_gpus=driver_gpus,
    )


def mpi_status(environ: Mapping[str, str]) -> dict[str, Any]:
    """The MPI library mpi4py loads here, the launcher ``tfdist launch --backend mpi`` would use, which
    launcher started this process, and the line for a pair that cannot work (:mod:`tfdist.mpi`)."""
    import importlib.util

    from tfdist.mpi.probe import find_stack
    from tfdist.mpi.stack import mismatch, started_by

    if importlib.util.find_spec("mpi4py") is None:
        return {"library": None, "launcher": None, "problem": "mpi4py is not installed", "started_by": None}
    stack = find_stack()
    by = started_by(environ)
    line = mismatch(stack.library, by, stack.launcher)
    return {**stack.to_dict(), "started_by": by.name if by else None, "mismatch": line}


def keras_fix_status(environ: Mapping[str, str]) -> str:
    """Whether model.fit under MultiWorkerMirroredStrategy gets tfdist's Keras fix here, and why not."""
    from tfdist.keras import fix

    version = fix.keras_version()
    low, high = fix.TESTED_KERAS
    tested = f"tested range >={low[0]}.{low[1]},<{high[0]}.{high[1]}"
    if version == "0":
        return "off: Keras is not installed"
    if not fix.enabled_by_env(dict(environ)):
        return f"off (TFDIST_KERAS_PATCH={variables.raw('TFDIST_KERAS_PATCH', environ)})"
    if not fix.keras_in_tested_range(version):
        return f"off: Keras {version} is outside the {tested}"
    return f"on for Keras {version} ({tested})"


def _table(console: Any, title: str, rows: Iterable[tuple[Any, Any]]) -> None:
    from rich.table import Table

    table = Table(title=title, show_header=False)
    for row in rows:
        table.add_row(*row)
    console.print(table)


def _print_tables(info: dict[str, Any]) -> None:
    from rich.console import Console

    console = Console()
    devices, mpi = info["devices"], info["mpi"]
    where = ("kind", "source", "role", "task_index", "rank", "world_size", "local_rank", "local_world_size")
    rows = [(key, str(info[key])) for key in (*where, "is_chief")]
    rows += [(f"cluster[{role}]", ", ".join(addrs)) for role, addrs in info["cluster_spec"].items()]
    rows += [("GPUs (TensorFlow)", ", ".join(devices["gpus"]) or "none")]
    rows += [("GPUs (driver)", ", ".join(devices["driver_gpus"]) or "none")]
    _table(console, "tfdist environment", [*rows, ("CPU cores", str(devices["cpu_cores"]))])
    strategy = info["strategy"]
    _table(console, "strategy tfdist.strategy() would build", [(k, str(v)) for k, v in strategy.items()])
    _print_stack(console, info["stack"])
    _table(console, "relevant variables", info["variables"].items() or [("(none set)", "")])
    ray = info["ray_cluster"]
    if ray is not None:
        state = "answers" if ray["answers"] else "does not answer: a stopped or crashed cluster?"
        console.print(
            f"Ray cluster: {ray['address']} (from {ray['from']}; {state}); tfdist launch --ray uses it"
        )
    if mpi.get("started_by"):
        console.print(f"MPI: this process was started by {mpi['started_by']}", markup=False)
    if mpi.get("mismatch"):
        console.print(f"[yellow]warning:[/] {mpi['mismatch']}", highlight=False)
    if info["inside_slurm_allocation"]:
        console.print(
            "[yellow]Inside a Slurm allocation but not an srun step: run under srun for multi-worker.[/]"
        )
    for warning in info["warnings"]:
        console.print(f"[yellow]warning:[/] {warning}")
    console.print("\nCopy this into a bug report:\n")
    lib = mpi.get("library")
    lines = [f"- {k}: {v}" for k, v in info["versions"].items()]
    lines += [
        f"- environment: {info['kind']} (rank {info['rank']} of {info['world_size']})",
        f"- strategy: {strategy['kind']} ({strategy['num_replicas']} replicas)",
        f"- GPUs: {len(devices['gpus'])} seen by TensorFlow, {len(devices['driver_gpus'])} on the driver, "
        f"CPU cores: {devices['cpu_cores']}",
        f"- tf.keras: {info['stack']['tf_keras']}",
        f"- Keras fix: {info['keras_fix']}",
        f"- MPI library (mpi4py): {lib['name']} ({lib['path']})" if lib else "- MPI library: none",
    ]
    if mpi.get("launcher"):
        lines.append(f"- MPI launcher: {mpi['launcher']} ({mpi['launcher_version'] or mpi['flavour']})")
    if mpi.get("problem"):
        lines.append(f"- MPI: {mpi['problem']}")
    if mpi.get("started_by"):
        lines.append(f"- started by: {mpi['started_by']}")
    # print(), not console.print: the block must stay plain text, free of rich markup and wrapping.
    print("\n".join(lines))


def stack_rows(stack: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The stack table's rows: what is installed, which Keras serves tf.keras, whether the fix covers it."""
    found = stack["found"]
    launcher, version = found["mpi_launcher"], found["mpi_launcher_version"]
    tf = f"{found['tensorflow']} ({found['tensorflow_dist']})" if found["tensorflow"] else "not installed"
    library = found["mpi_library"] or (f"none: {found['mpi_problem']}" if found["mpi_problem"] else "none")
    return [
        ("TensorFlow", tf),
        ("tf.keras", stack["tf_keras"]),
        ("TF_USE_LEGACY_KERAS", found["legacy_keras"] or "(unset)"),
        ("Keras model.fit fix", stack["keras_fix"]),
        ("MPI library (mpi4py)", library if found["mpi4py"] else "none: mpi4py is not installed"),
        ("MPI launcher", f"{launcher} ({version})" if launcher and version else launcher or "none"),
    ]


def extras_line(missing: Mapping[str, list[str]]) -> str | None:
    """One line naming the extras that would add the missing features (None when nothing is missing).

    Input/Output: ``{"mpi": ["MPI backend"], "ray": ["Ray"]}`` -> ``"pip install 'tfdist[mpi,ray]' adds:
    mpi for MPI backend; ray for Ray"``.
    """
    if not missing:
        return None
    what = "; ".join(f"{extra} for {', '.join(names)}" for extra, names in missing.items())
    return f"pip install 'tfdist[{','.join(missing)}]' adds: {what}"


def _print_stack(console: Any, stack: Mapping[str, Any]) -> None:
    from rich.text import Text

    _table(console, "stack", [(key, Text(value)) for key, value in stack_rows(stack)])  # "[cpu]" is no markup
    # Two columns, the reason and the fix under the feature's name: four would wrap every cell at 80.
    rows = []
    for f in stack["features"]:
        text = f"{f['name']}: {f['detail']}" + (f"\n  fix: {f['fix']}" if f["fix"] else "")
        rows.append(("yes" if f["works"] else "[yellow]no[/]", Text(text)))
    _table(console, "tfdist features on this stack", rows)
    line = extras_line(stack["missing_extras"])
    if line:
        console.print(Text(line))


def run(args: argparse.Namespace) -> int:
    """Print the environment report."""
    # A copy taken before TensorFlow is imported: importing it adds TPU_ML_PLATFORM* to os.environ.
    environ = dict(os.environ)
    # This command computes nothing, so TensorFlow's start-up banners would only bury the report.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    from rich.console import Console

    # Importing TensorFlow takes seconds (20 on a busy machine): on a terminal, say so at once.
    with Console(stderr=True).status("tfdist env: importing TensorFlow and reading this machine..."):
        info = collect(environ)
    if args.json:
        json.dump(info, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
    else:
        _print_tables(info)
    return 0
