"""``import horovod…`` answered by tfdist's Horovod API (``--backend horovod`` without Horovod): a meta-path
finder makes the aliased names the very modules of ``tfdist.horovod…``; other ``horovod.*`` names raise."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import Any

ALIASES = {
    "horovod": "tfdist.horovod",
    "horovod.tensorflow": "tfdist.horovod.tensorflow",
    "horovod.tensorflow.keras": "tfdist.horovod.tensorflow.keras",
    "horovod.tensorflow.keras.callbacks": "tfdist.horovod.tensorflow.keras.callbacks",
    "horovod.keras": "tfdist.horovod.tensorflow.keras",
    "horovod.keras.callbacks": "tfdist.horovod.tensorflow.keras.callbacks",
    "horovod.tensorflow.elastic": "tfdist.horovod.tensorflow.elastic",
    "horovod.tensorflow.keras.elastic": "tfdist.horovod.tensorflow.keras.elastic",
    "horovod.keras.elastic": "tfdist.horovod.tensorflow.keras.elastic",
}


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target
        self.own_spec: Any = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.target)
        self.own_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import system set __spec__ to the alias's: give the module back its own.
        module.__spec__ = self.own_spec


class HorovodAliasFinder(importlib.abc.MetaPathFinder):
    """Resolves ``horovod`` and its TensorFlow modules to tfdist's implementation."""

    def find_spec(
        self, fullname: str, path: Any = None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "horovod" and not fullname.startswith("horovod."):
            return None
        if fullname not in ALIASES:
            raise ModuleNotFoundError(
                f"No module named {fullname!r}: Horovod is not installed, and tfdist provides only "
                "horovod.tensorflow and horovod.tensorflow.keras (horovod.keras).",
                name=fullname,
            )
        target_name = ALIASES[fullname]
        is_package = importlib.util.find_spec(target_name).submodule_search_locations is not None  # type: ignore[union-attr]
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(target_name), is_package=is_package)


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, HorovodAliasFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, HorovodAliasFinder())
