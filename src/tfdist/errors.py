"""Exception hierarchy. User mistakes raise :class:`ConfigError` (the CLI prints it on one line, exit 2);
messages say what was received, where it came from, and how to fix it."""

from __future__ import annotations

import importlib
from types import ModuleType


class TfdistError(Exception):
    """Base class of every error tfdist raises on purpose."""


class ConfigError(TfdistError):
    """A user-supplied value (flag, argument, environment variable, file) is invalid."""


class SetupError(TfdistError):
    """Something the machine should provide is missing (a library, a command such as ``sbatch``)."""


def require(module: str, package: str, extra: str, needed_for: str) -> ModuleType:
    """``module`` imported, or a SetupError (one line, exit code 2) naming the extra that installs it:
    ``tfdist k8s needs PyYAML. Hint: pip install 'tfdist[k8s]'.``"""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise SetupError(f"{needed_for} needs {package}. Hint: pip install 'tfdist[{extra}]'.") from None


class NonFiniteLossError(TfdistError):
    """Training produced a NaN or infinite loss; the run stopped there on every worker."""


class WorkerFailedError(TfdistError):
    """A worker process of a launched group failed first; carries its identity for reporting."""

    def __init__(self, name: str, code: int, log_path: str | None, how: str) -> None:
        self.name = name
        self.code = code
        self.log_path = log_path
        self.how = how
        where = f", log: {log_path}" if log_path else ""
        super().__init__(f"worker {name} failed first: {how} (exit code {code}){where}")


class CollectiveError(TfdistError):
    """The job's processes stopped meeting in their collectives (a timeout, or different collectives); the
    message is the failure report's line: the step, the collective, who had not arrived."""
