"""A user's model (a workload, ``script.py:function``, a ``.keras`` file's config) as a
:class:`~tfdist.estimate.plan.ModelSummary`, built in Keras 3's ``StatelessScope`` (no weight allocated);
a subclassed model is called once on a symbolic input with every layer's call recorded."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import sys
import zipfile
from contextlib import contextmanager
from typing import Any

from tfdist.errors import ConfigError
from tfdist.estimate.plan import LayerOutput, ModelSummary, optimizer_slots

#: Keras optimizer class names the estimate knows, lower-cased.
KERAS_OPTIMIZERS = ("sgd", "adam", "adamw", "rmsprop")


@contextmanager
def _no_weights() -> Any:
    """Keras variables created inside record their shape only (no value is allocated)."""
    from keras.src.backend.common.stateless_scope import StatelessScope

    with StatelessScope():
        yield


def from_workload(name: str, input_shape: tuple[int, ...], classes: int) -> ModelSummary:
    """A built-in workload (:mod:`tfdist.workloads.models`) at ``input_shape`` with ``classes`` outputs."""
    from tfdist.workloads import models

    if name not in models.NAMES:
        raise ConfigError(f"unknown workload {name!r}; choose one of {', '.join(models.NAMES)}.")
    with _no_weights():
        try:
            model = models.build(name, input_shape, classes)
        except ValueError as exc:
            raise ConfigError(
                f"--workload {name} at --input-shape {input_shape}: {_first_line(exc)}"
            ) from None
        return summarize(model, None)


def from_script(spec: str, input_shape: tuple[int, ...] | None = None) -> ModelSummary:
    """``path.py:function``: import the script, call ``function()`` and summarize the model it returns."""
    path, func_name = check_script(spec)
    module = _import_script(path)
    builder = getattr(module, func_name, None)
    if not callable(builder):
        raise ConfigError(
            f"{path} has no function {func_name!r}. Hint: name the function that returns the model."
        )
    import keras

    try:
        with _no_weights():
            model = _call_builder(spec, builder)
            if isinstance(model, keras.Model):
                return summarize(model, input_shape)
    except ValueError as exc:
        if "stateless scope" not in str(exc):
            raise ConfigError(f"{spec}(): {_first_line(exc)}") from None
        # The builder makes a variable from a value (compile() and optimizers do): build it for real, its
        # weights allocated once in host memory.
        model = _call_builder(spec, builder)
    if not isinstance(model, keras.Model):
        raise ConfigError(
            f"{spec}() returned {type(model).__name__}, not a Keras model. Hint: return the model it builds."
        )
    return summarize(model, input_shape)


def _call_builder(spec: str, builder: Any) -> Any:
    try:
        return builder()
    except TypeError as exc:
        raise ConfigError(
            f"{spec}(): {_first_line(exc)}. Hint: the function is called with no arguments."
        ) from None


def from_keras_file(path: str, input_shape: tuple[int, ...] | None = None) -> ModelSummary:
    """A saved ``.keras`` archive: the model rebuilt from its config, the weights file left unread."""
    if not os.path.isfile(path):
        raise ConfigError(f"{path}: no such file.")
    try:
        with zipfile.ZipFile(path) as archive:
            config = json.loads(archive.read("config.json"))
    except (zipfile.BadZipFile, KeyError, json.JSONDecodeError):
        raise ConfigError(
            f"{path} is not a .keras archive (no config.json inside). Hint: model.save('m.keras')."
        ) from None
    import keras

    with _no_weights():
        try:
            # Without its compile_config: compiling would create the optimizer's variables from values.
            model = keras.saving.deserialize_keras_object({**config, "compile_config": None})
        except Exception as exc:  # custom layers not importable here, or a config of another Keras
            raise ConfigError(f"{path}: Keras cannot rebuild the model: {_first_line(exc)}") from None
        compiled = _compiled_optimizer((config.get("compile_config") or {}).get("optimizer"))
        return summarize(model, input_shape, compiled)


def summarize(
    model: Any, input_shape: tuple[int, ...] | None, optimizer: tuple[str, int] | None = None
) -> ModelSummary:
    """Trainable variable sizes, layer outputs and the compiled optimizer of a Keras model."""
    import numpy as np

    layers = _functional_outputs(model) if _is_graph(model) else _recorded_outputs(model, input_shape)
    if optimizer is None and getattr(model, "optimizer", None) is not None:
        opt = model.optimizer
        optimizer = _compiled_optimizer({"class_name": type(opt).__name__, "config": opt.get_config()})
    inputs = getattr(model, "inputs", None) if _is_graph(model) else None
    input_elements = (
        sum(_elements(t.shape, "the model's input") for t in inputs)
        if inputs
        else _elements((None, *(input_shape or ())), "--input-shape")
    )
    trainable = tuple(math.prod(v.shape) for v in model.trainable_weights)
    if not trainable and not model.built:
        raise ConfigError(
            f"model {model.name!r} has no weights yet. Hint: pass --input-shape so it can be built."
        )
    return ModelSummary(
        name=model.name,
        trainable=trainable,
        non_trainable=sum(math.prod(v.shape) for v in model.non_trainable_weights),
        layers=tuple(layers),
        input_elements=input_elements,
        variable_bytes=max((np.dtype(str(v.dtype)).itemsize for v in model.weights), default=4),
        optimizer=optimizer,
    )


def _is_graph(model: Any) -> bool:
    """A functional model, or a Sequential that starts with an Input: its layers know their outputs."""
    import keras
    from keras.src.models.functional import Functional

    sequential = isinstance(model, keras.Sequential) and getattr(model, "_functional", None) is not None
    return isinstance(model, Functional) or sequential


def _functional_outputs(model: Any) -> list[LayerOutput]:
    out: list[LayerOutput] = []
    for layer in model.layers:
        if _is_graph(layer):
            out += _functional_outputs(layer)
            continue
        tensors = layer.output if isinstance(layer.output, (list, tuple)) else [layer.output]
        out += [
            LayerOutput(layer.name, type(layer).__name__, _elements(t.shape, layer.name)) for t in tensors
        ]
    return out


def _recorded_outputs(model: Any, input_shape: tuple[int, ...] | None) -> list[LayerOutput]:
    """Call a subclassed model on a symbolic input and record every inner layer's output."""
    import keras
    from keras.src.layers.layer import Layer

    if input_shape is None:
        raise ConfigError(
            f"model {model.name!r} is subclassed: its layer outputs need an input. Hint: pass --input-shape."
        )
    seen: list[LayerOutput] = []
    original = Layer.__call__

    def recording(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        if self is not model and not isinstance(self, keras.Model):
            for tensor in keras.tree.flatten(result):
                seen.append(LayerOutput(self.name, type(self).__name__, _elements(tensor.shape, self.name)))
        return result

    Layer.__call__ = recording
    try:
        model(keras.KerasTensor((None, *input_shape)))
    except Exception as exc:  # the user's call() refused the shape
        raise ConfigError(
            f"model {model.name!r} on --input-shape {input_shape}: {_first_line(exc)}"
        ) from None
    finally:
        Layer.__call__ = original
    return seen


def _compiled_optimizer(entry: Any) -> tuple[str, int] | None:
    """(name, slots) of a serialized optimizer, or None when absent or unknown to the estimate."""
    if not isinstance(entry, dict):
        return None
    name = str(entry.get("class_name", "")).lower()
    if name not in KERAS_OPTIMIZERS:
        return None
    config = entry.get("config") or {}
    slots = optimizer_slots(name, config)
    shown = "momentum" if name == "sgd" and slots else name
    return shown, slots


def _elements(shape: Any, where: str) -> int:
    dims = tuple(shape)[1:]
    if any(d is None for d in dims):
        raise ConfigError(
            f"{where} has an unknown dimension in {tuple(shape)}: activations need fixed shapes. "
            "Hint: give the model's Input a full shape."
        )
    return math.prod(int(d) for d in dims)


def check_script(spec: str) -> tuple[str, str]:
    """``SCRIPT.py:FUNCTION`` split, the script found and the function defined in it, read without
    importing anything (the import brings TensorFlow: seconds before a typo would be named)."""
    path, func_name = ([*spec.rsplit(":", 1), ""])[:2]  # the function after the last colon
    if not path or not func_name:
        raise ConfigError(f"{spec!r} is not SCRIPT.py:FUNCTION. Hint: tfdist estimate train.py:build_model")
    if not os.path.isfile(path):
        raise ConfigError(f"{path}: no such file. Hint: give the script's path, then :FUNCTION.")
    _check_defined(path, func_name)
    return path, func_name


def _check_defined(path: str, name: str) -> None:
    """A name the script does not define at its top level is a mistake found before importing it (which
    imports TensorFlow, seconds): one line, with the closest names it does define."""
    import ast
    import difflib

    try:
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), path)
    except SyntaxError as exc:
        raise ConfigError(f"{path}:{exc.lineno}: {exc.msg}") from None
    defined: list[str] = []
    if not _top_level_names(tree.body, defined):
        return  # a name made some other way (a loop, globals(), a star import): let the import say
    if name in defined:
        return
    close = difflib.get_close_matches(name, defined, n=3)
    hint = f"did you mean {', '.join(close)}?" if close else "name the function that returns the model."
    raise ConfigError(f"{path} has no function {name!r}. Hint: {hint}")


def _top_level_names(body: list[Any], defined: list[str]) -> bool:
    """Add the names ``body`` defines to ``defined``; False where it may define others unseen."""
    import ast

    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defined.append(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            if any(alias.name == "*" for alias in node.names):
                return False
            defined += [(alias.asname or alias.name).split(".")[0] for alias in node.names]
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defined += [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
        elif isinstance(node, ast.If | ast.Try | ast.With):
            blocks = [node.body, getattr(node, "orelse", []), getattr(node, "finalbody", [])]
            blocks += [h.body for h in getattr(node, "handlers", [])]
            if not all(_top_level_names(block, defined) for block in blocks):
                return False
        elif isinstance(node, ast.For | ast.While | ast.AsyncFor | ast.AsyncWith | ast.Global):
            return False
    return True


def _import_script(path: str) -> Any:
    """Import ``path`` as a module named after its file; its ``__main__`` block does not run."""
    name = f"_tfdist_estimate_{os.path.splitext(os.path.basename(path))[0]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"{path} is not a Python script.")
    module = importlib.util.module_from_spec(spec)
    folder = os.path.dirname(os.path.abspath(path))
    sys.path.insert(0, folder)  # the script's own imports of its neighbours
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise ConfigError(f"{path}:{exc.lineno}: {exc.msg}") from None
    finally:
        sys.path.remove(folder)
    return module


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
