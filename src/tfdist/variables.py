"""Every ``TFDIST_*`` environment variable tfdist reads: name, type, default, meaning, who sets it. Code
reads them only through :func:`get` (a test greps the source; docs/reference/environment.md is
:func:`markdown_table`). Light: the worker bootstrap imports it before the user's code.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tfdist.errors import ConfigError

_TYPE_WORDS = {
    "int": "an integer",
    "float": "a finite number",
    "str": "a string",
    "flag": "0 or 1",
    "path": "a path",
}


@dataclass(frozen=True)
class Variable:
    """One environment variable and its contract."""

    name: str
    type: str  # int | float | str | flag | path
    default: str | None
    meaning: str
    #: "user" (you may set it), "launcher" (tfdist sets it for its workers; read-only for users)
    set_by: str = "user"

    def parse(self, raw: str) -> Any:
        """``raw`` as this variable's type; ConfigError naming the variable when it is not."""
        text = raw.strip()
        if self.type in ("str", "path"):
            return text
        if self.type == "flag":
            return text.lower() not in ("0", "false", "no", "off")
        try:
            value = int(text) if self.type == "int" else float(text)
        except ValueError:
            value = None
        if value is None or not math.isfinite(value):
            raise ConfigError(
                f"{self.name}={raw!r} is not {_TYPE_WORDS[self.type]} (environment variable). "
                f"Hint: unset it or give {_TYPE_WORDS[self.type]}."
            )
        return value


def _declare(*variables: Variable) -> dict[str, Variable]:
    return {v.name: v for v in variables}


VARIABLES: dict[str, Variable] = _declare(
    Variable(
        "TFDIST_STRATEGY",
        "str",
        "auto",
        "strategy kind: auto, one_device, mirrored, multi_worker, parameter_server, tpu",
    ),
    Variable(
        "TFDIST_BACKEND",
        "str",
        "auto",
        "gradient synchronisation: auto, tf, mpi, horovod (auto = mpi under an MPI process manager)",
    ),
    Variable("TFDIST_COMMUNICATION", "str", "auto", "collective implementation: auto, ring, nccl"),
    # The TF backend hands it to TensorFlow's CommunicationOptions; the MPI backend (tfdist.fit, the Horovod
    # API) checks it itself (tfdist.sync.watch): the job then ends with one line naming the collective and
    # where the other ranks are.
    Variable(
        "TFDIST_COLLECTIVE_TIMEOUT",
        "float",
        "300",
        "seconds a collective may wait for the other ranks before the job fails (tf, mpi backends; 0 = none)",
    ),
    Variable(
        "TFDIST_CPU_REPLICAS", "int", None, "split the CPU into N logical devices (MirroredStrategy on CPU)"
    ),
    Variable("TFDIST_GPUS_PER_WORKER", "str", None, "'all': each task drives every GPU of its node"),
    Variable(
        "TFDIST_PORT", "int", None, "first port of a Slurm job's tasks (default: derived from the job id)"
    ),
    Variable("TFDIST_RDZV_TOKEN", "str", None, "the secret of a --rdzv rendezvous (the same on every node)"),
    Variable("TFDIST_KERAS_PATCH", "flag", "1", "0 turns off the Keras model.fit fix"),
    Variable("TFDIST_REQUEUE", "flag", "1", "0: a preempted Slurm job is not requeued"),
    Variable("TFDIST_LOG_LEVEL", "str", "INFO", "tfdist's log level (DEBUG, INFO, WARNING)"),
    Variable("TFDIST_BOOTSTRAP", "flag", "1", "0 skips the worker bootstrap in launched processes"),
    Variable(
        "TFDIST_MPI_SHM", "flag", "1", "0: the MPI backend all-reduces through MPI alone, no shared memory"
    ),
    Variable(
        "TFDIST_COMPRESSION",
        "str",
        "none",
        "MPI backend: gradients across nodes as none, fp16 or bf16 (16-bit floats: lossy, half the bytes)",
    ),
    Variable(
        "TFDIST_BUCKET_MB",
        "str",
        "auto",
        "MPI backend, across nodes: gradient bucket size in MB, each summed while the backward pass goes on "
        "(0: one sum after it; auto: 2 when the first steps' sum takes a fifth of a step or more and each "
        "rank has a spare core, else 0)",
    ),
    Variable(
        "TFDIST_SHARD_OPTIMIZER",
        "flag",
        "0",
        "MPI backend, tfdist.fit: 1 keeps each rank's optimizer slots for 1/N of the weights (ZeRO stage 1; "
        "with gradient buckets each bucket's gradients are released once sent, stage 2; the fit option "
        "shard_optimizer wins)",
    ),
    Variable(
        "TFDIST_BUCKET_AUTO_SHARE",
        "float",
        "0.2",
        "MPI backend, TFDIST_BUCKET_MB=auto: buckets once the sum after the backward pass takes this share "
        "of a step (0 to 1)",
    ),
    Variable("TFDIST_API_TOKEN", "str", None, "redacted by tfdist env (an example of a secret it hides)"),
    Variable("TFDIST_RANK", "int", None, "this worker's training rank", "launcher"),
    Variable("TFDIST_LOCAL_RANK", "int", "0", "this worker's index on its node", "launcher"),
    Variable("TFDIST_WORLD_SIZE", "int", "1", "training processes in the job", "launcher"),
    Variable("TFDIST_LOCAL_WORLD_SIZE", "int", "1", "training processes on this node", "launcher"),
    Variable("TFDIST_ROLE", "str", None, "chief, worker, ps or evaluator", "launcher"),
    Variable("TFDIST_RUN_DIR", "path", None, "the run directory of the launch or the Slurm job", "launcher"),
    Variable(
        "TFDIST_ATTEMPT_DIR", "path", None, "this attempt's directory (error and join records)", "launcher"
    ),
    Variable("TFDIST_RESTART_COUNT", "int", "0", "how many times the job was restarted", "launcher"),
    Variable(
        "TFDIST_HEARTBEAT_FILE", "path", None, "touched by the training loop for the watchdog", "launcher"
    ),
    Variable(
        "TFDIST_HOROVOD_SHIM",
        "flag",
        "0",
        "1: `import horovod` gets tfdist's Horovod API (--backend horovod without Horovod)",
        "launcher",
    ),
    Variable(
        "TFDIST_K8S_SERVICE",
        "str",
        None,
        "the headless Service through which a Kubernetes job's pods reach each other (in the manifest)",
        "launcher",
    ),
)


def get(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """The value of ``name`` in ``environ`` (default: this process's), parsed; its default when unset
    or empty (None when it has none)."""
    variable = VARIABLES[name]
    raw = (os.environ if environ is None else environ).get(name)
    if raw is None or raw.strip() == "":
        return None if variable.default is None else variable.parse(variable.default)
    return variable.parse(raw)


def is_set(name: str, environ: Mapping[str, str] | None = None) -> bool:
    """True when ``name`` is set to something non-empty."""
    assert name in VARIABLES, name
    return bool((os.environ if environ is None else environ).get(name, "").strip())


def markdown_table() -> str:
    """The docs' table of variables (a test keeps docs/reference/environment.md equal to this)."""
    rows = ["| Variable | Type | Default | Set by | Meaning |", "|---|---|---|---|---|"]
    for v in VARIABLES.values():
        default = f"`{v.default}`" if v.default is not None else "—"
        rows.append(f"| `{v.name}` | {v.type} | {default} | {v.set_by} | {v.meaning} |")
    return "\n".join(rows)


def raw(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The text of ``name`` as set (None when unset), for values passed on untouched."""
    assert name in VARIABLES, name
    return (os.environ if environ is None else environ).get(name)


#: The values of TF_USE_LEGACY_KERAS that TensorFlow reads as "on" (tensorflow/__init__.py).
LEGACY_KERAS_ON = ("true", "True", "1")


def tf_uses_legacy_keras(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``tf.keras`` is Keras 2 (``tf_keras``) here: TensorFlow's reading of TF_USE_LEGACY_KERAS."""
    return (os.environ if environ is None else environ).get("TF_USE_LEGACY_KERAS") in LEGACY_KERAS_ON
