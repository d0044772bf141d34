"""``tfdist.fit``: synchronous data-parallel training with Keras ergonomics under any strategy.

Picks the trainer for the model's strategy: :class:`tfdist.train.loop.SyncTrainer`, or
:class:`tfdist.train.ps.ParameterServerTrainer` under ParameterServerStrategy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tfdist.errors import ConfigError
from tfdist.train.data import sample_inputs
from tfdist.train.loop import SyncTrainer, ensure_built, is_parameter_server, strategy_of
from tfdist.train.options import FitOptions
from tfdist.train.ps import ParameterServerTrainer


def fit(
    model: Any,
    train_data: Any,
    *,
    epochs: int,
    validation_data: Any = None,
    callbacks: Sequence[Any] = (),
    **options: Any,
) -> Any:
    """Train ``model`` (built and compiled in the strategy's scope) and return a Keras ``History``.

    ``train_data``: a tf.data.Dataset batched by the GLOBAL batch, a ``dataset_fn(input_context)``
    returning per-replica batches (with ``steps_per_epoch`` and ``batch_size``), or NumPy ``(x, y)`` with
    ``batch_size`` (global). Keyword options are those of :class:`tfdist.train.options.FitOptions`:
    ``batch_size``, ``steps_per_epoch``, ``validation_batch_size``, ``verbose``, ``checkpoint_dir``,
    ``checkpoint_every``, ``keep_checkpoints``, ``lr_scaling`` (linear/sqrt/none), ``warmup_epochs``,
    ``shuffle``, ``seed``, ``run_dir``, ``tensorboard_dir``, ``jit_compile``, ``log_every`` (steps between
    reads of the results: progress, stop requests).

    Losses are averaged over the global batch; metrics are summed over every replica and worker, so all
    workers return the same history. With ``checkpoint_dir`` the run saves every ``checkpoint_every``
    steps and at each epoch end, and resumes from the newest checkpoint. SIGTERM/SIGUSR2 checkpoint at the
    next step boundary on all workers, then raise SystemExit(128 + signal).
    """
    try:
        fit_options = FitOptions(epochs=epochs, **options)
    except TypeError as exc:
        raise ConfigError(f"tfdist.fit: {exc}") from None
    # One sample for everything that needs the data's structure: a dataset_fn is called, and a pipeline
    # with run-time shapes read, once.
    sample = sample_inputs(train_data)
    ensure_built(model, sample[0])
    trainer = ParameterServerTrainer if is_parameter_server(strategy_of(model)) else SyncTrainer
    return trainer(model, train_data, validation_data, callbacks, fit_options, sample).run()
