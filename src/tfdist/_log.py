"""Logging helpers: one logger per module, messages prefixed with the process's rank when distributed."""

from __future__ import annotations

import logging
import sys

from tfdist import variables

_CONFIGURED = False


def _prefix() -> str:
    # The launcher sets TFDIST_RANK for every worker; a plain process has no prefix.
    rank = variables.raw("TFDIST_RANK")
    return f"[tfdist r{rank}] " if rank is not None else "[tfdist] "


def get_logger(name: str) -> logging.Logger:
    """Return a logger under the ``tfdist`` namespace, configuring the stderr handler once."""
    global _CONFIGURED
    if not _CONFIGURED:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(_prefix() + "%(levelname)s %(message)s"))
        root = logging.getLogger("tfdist")
        root.addHandler(handler)
        root.setLevel(str(variables.get("TFDIST_LOG_LEVEL")).upper())
        root.propagate = False
        _CONFIGURED = True
    return logging.getLogger(name if name.startswith("tfdist") else f"tfdist.{name}")
