"""Run a function right after a module is first imported, without importing it now (importing Keras
eagerly would add seconds to every launched process): a ``sys.meta_path`` finder wraps the real loader."""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

Hook = Callable[[ModuleType], None]


class _HookedLoader(importlib.abc.Loader):
    def __init__(self, loader: Any, hook: Hook) -> None:
        self._loader = loader
        self._hook = hook

    def create_module(self, spec: Any) -> ModuleType | None:
        module: ModuleType | None = self._loader.create_module(spec)
        return module

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        self._hook(module)

    def __getattr__(self, name: str) -> Any:  # get_source, is_package, … for tracebacks and inspect
        return getattr(self._loader, name)


class AfterImport(importlib.abc.MetaPathFinder):
    """Calls ``hooks[name](module)`` once, right after module ``name`` has been executed."""

    def __init__(self, hooks: dict[str, Hook]) -> None:
        self._hooks = dict(hooks)

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        hook = self._hooks.get(fullname)
        if hook is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    del self._hooks[fullname]  # once: a reload is the user's business
                    spec.loader = _HookedLoader(spec.loader, hook)
                return spec
        return None


def after_import(name: str, hook: Hook) -> None:
    """Call ``hook(module)`` when ``name`` is imported; at once if it already is."""
    if name in sys.modules:
        hook(sys.modules[name])
        return
    for finder in sys.meta_path:
        if isinstance(finder, AfterImport):
            finder._hooks[name] = hook
            return
    sys.meta_path.insert(0, AfterImport({name: hook}))
