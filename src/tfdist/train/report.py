"""Chief-only output of a training run: progress lines, TensorBoard scalars, metrics.json, curves PNG."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from tfdist import files
from tfdist.errors import require

#: What ``tfdist.fit`` writes in its ``run_dir`` (named here: the worker contract's room sits above).
METRICS, CURVES = "metrics.json", "curves.png"


class Reporter:
    """Prints progress on the chief (a rich bar on a terminal, plain lines otherwise) and writes run files."""

    def __init__(
        self,
        *,
        is_chief: bool,
        verbose: int,
        epochs: int,
        steps_per_epoch: int | None,
        run_dir: str | None,
        tensorboard_dir: str | None,
    ) -> None:
        self.active = is_chief and verbose > 0
        self.is_chief = is_chief
        self.epochs, self.steps = epochs, steps_per_epoch
        self.run_dir, self.tensorboard_dir = run_dir, tensorboard_dir
        self._writer: Any = None
        self._progress: Any = None
        self._task: Any = None
        self.tty = sys.stdout.isatty()
        if run_dir:  # before training, not after it
            require_plots()
        if is_chief and tensorboard_dir:
            import importlib.util

            import tensorflow as tf

            if importlib.util.find_spec("tensorboard") is None:
                print(
                    "tfdist: TensorBoard is not installed; no scalars are written (pip install tensorboard).",
                    file=sys.stderr,
                )
            else:
                self._writer = tf.summary.create_file_writer(tensorboard_dir)

    def epoch_start(self, epoch: int) -> None:
        """Open the progress bar of ``epoch`` (0-based)."""
        if self.active and self.tty:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._progress = Progress(
                TextColumn(f"epoch {epoch + 1}/{self.epochs}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                TextColumn("{task.fields[info]}"),
                transient=True,
            )
            self._progress.start()
            self._task = self._progress.add_task("train", total=self.steps, info="")

    def step(self, done: int, loss: float, examples_per_sec: float) -> None:
        """Advance the bar to ``done`` steps of this epoch."""
        if self._progress is not None:
            self._progress.update(
                self._task, completed=done, info=f"loss {loss:.4f} · {examples_per_sec:,.0f} ex/s"
            )

    def epoch_end(self, epoch: int, logs: dict[str, float], seconds: float) -> None:
        """Close the bar, print the epoch line, write TensorBoard scalars."""
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        if self.active:
            parts = " - ".join(
                f"{k} {v:.4f}" if k != "examples_per_sec" else f"{v:,.0f} ex/s" for k, v in logs.items()
            )
            print(f"epoch {epoch + 1}/{self.epochs} - {seconds:.1f}s - {parts}", flush=True)
        if self._writer is not None:
            import tensorflow as tf

            with self._writer.as_default():
                for key, value in logs.items():
                    tf.summary.scalar(key, value, step=epoch + 1)
            self._writer.flush()

    def message(self, text: str) -> None:
        """A line from the chief only."""
        if self.active:
            print(text, flush=True)

    def finish(self, history: dict[str, list[float]], summary: dict[str, Any]) -> None:
        """Write metrics.json and curves.png into the run directory (chief only, atomically)."""
        if not (self.is_chief and self.run_dir):
            return
        os.makedirs(self.run_dir, exist_ok=True)
        payload = {"history": history, **summary, "written_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
        files.write_json(os.path.join(self.run_dir, METRICS), payload, indent=2, default=str)
        plot_curves(history, os.path.join(self.run_dir, CURVES))


def require_plots() -> Any:
    """matplotlib, or the one line naming the extra that installs it (curves.png, the bench's plots)."""
    return require("matplotlib", "matplotlib", "plots", "a run directory's plots")


def plot_curves(history: dict[str, list[float]], path: str) -> None:
    """Loss and metric curves per epoch (train and validation), one panel per quantity."""
    require_plots().use("Agg")
    import matplotlib.pyplot as plt

    names = [k for k in history if not k.startswith("val_") and k != "examples_per_sec"]
    if not names or not history[names[0]]:
        return
    fig, axes = plt.subplots(1, len(names), figsize=(5 * len(names), 3.5), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        epochs = range(1, len(history[name]) + 1)
        ax.plot(epochs, history[name], marker="o", label="train")
        if f"val_{name}" in history:
            ax.plot(epochs, history[f"val_{name}"], marker="o", label="validation")
        ax.set_xlabel("epoch")
        ax.set_title(name)
        ax.legend()
    fig.tight_layout()
    with files.atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=90)
    plt.close(fig)
