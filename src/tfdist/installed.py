"""Which release of a module this Python would import, found by the module, not a distribution name
(``keras`` from keras, keras-nightly or a cluster's build). Nothing is imported."""

from __future__ import annotations

import functools
import os
import re
import sys
from dataclasses import dataclass

#: A version written in a module's own source, for a build without package metadata.
_SOURCE_VERSIONS = {"keras": ("src/version.py",)}
_VERSION = re.compile(r"""^__version__\s*=\s*["']([^"']+)["']""", re.MULTILINE)


@dataclass(frozen=True)
class Found:
    """A module as this Python finds it: its version (None: not found), the distribution that installed
    it (``""``: none, e.g. a source tree on PYTHONPATH) and its directory."""

    module: str
    version: str | None
    distribution: str
    path: str


def find(module: str) -> Found:
    """``module``'s release and where it comes from (a top-level module name: ``keras``, ``tensorflow``).
    Input/Output: ``"keras"`` -> ``Found("keras", "3.16.0.dev2026102704", "keras-nightly", ".../keras")``."""
    path = _location(module)
    if not path:
        return Found(module, None, "", "")
    for name in _owners().get(module, ()):
        dist = _distribution(name, module, path)
        if dist is not None:
            return Found(module, dist[1], dist[0], path)
    loaded = sys.modules.get(module)
    version = getattr(loaded, "__version__", None) if loaded is not None else None
    return Found(module, version if isinstance(version, str) else _source_version(module, path), "", path)


def _location(module: str) -> str:
    import importlib.util

    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return ""
    if spec is None:
        return ""
    if spec.submodule_search_locations:
        return os.path.abspath(next(iter(spec.submodule_search_locations)))
    return os.path.abspath(spec.origin or "")


@functools.cache
def _owners() -> dict[str, list[str]]:
    from importlib import metadata

    return dict(metadata.packages_distributions())


def _distribution(name: str, module: str, path: str) -> tuple[str, str] | None:
    """(normalised name, version) of distribution ``name`` when it installed ``module`` at ``path``: with
    two installed (keras beside keras-nightly) the one whose files Python imports."""
    from importlib import metadata

    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None
    where = os.path.abspath(str(dist.locate_file(module)))
    if where != path and where != os.path.splitext(path)[0]:
        return None
    return re.sub(r"[-_.]+", "-", dist.metadata["Name"]).lower(), dist.version


def _source_version(module: str, path: str) -> str | None:
    for relative in _SOURCE_VERSIONS.get(module, ()):
        try:
            with open(os.path.join(path, relative), encoding="utf-8") as fh:
                match = _VERSION.search(fh.read())
        except OSError:
            continue
        if match:
            return match[1]
    return None
