"""Keras 2 idioms of Horovod's examples accepted on Keras 3: ``compile(experimental_run_tf_function=...)``
dropped, ``opt.variables()`` callable, and XLA kept off for ``hvd.DistributedOptimizer`` (no host calls)."""

from __future__ import annotations

import functools
from typing import Any


class CallableList(list):
    """A list that also answers ``()`` with itself: Keras 3's ``optimizer.variables`` for Keras 2 code."""

    def __call__(self) -> CallableList:
        return self


def install() -> None:
    """Apply both adaptations once per process."""
    from keras.src.optimizers import base_optimizer
    from keras.src.trainers import trainer

    if getattr(trainer.Trainer.compile, "_tfdist_horovod", False):
        return
    original_compile = trainer.Trainer.compile

    @functools.wraps(original_compile)
    def compile(self: Any, *args: Any, experimental_run_tf_function: Any = None, **kwargs: Any) -> Any:
        del experimental_run_tf_function
        optimizer = kwargs.get("optimizer", args[0] if args else None)
        if hasattr(optimizer, "_hvd_options") and kwargs.get("jit_compile", "auto") == "auto":
            # Keras turns XLA on by itself on GPUs; XLA cannot compile the all-reduce (a host call).
            kwargs["jit_compile"] = False
        return original_compile(self, *args, **kwargs)

    compile._tfdist_horovod = True  # type: ignore[attr-defined]
    trainer.Trainer.compile = compile

    original_variables = base_optimizer.BaseOptimizer.variables
    base_optimizer.BaseOptimizer.variables = property(
        lambda self: CallableList(original_variables.fget(self)), doc=original_variables.__doc__
    )
