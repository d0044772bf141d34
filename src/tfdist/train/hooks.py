"""Small per-step helpers of the training loop: stop requests, heartbeats, the learning-rate schedule."""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from tfdist import resize, variables
from tfdist.train.scaling import lr_at


@dataclass
class StopRequest:
    """Set by SIGTERM / SIGUSR2 or a resize request; honoured at the next step boundary everywhere."""

    signum: int = 0
    old: dict[int, Any] = field(default_factory=dict)

    @property
    def requested(self) -> bool:
        """This worker's vote to stop at the next step boundary."""
        return bool(self.signum) or resize.requested()

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.signum = signum

    def install(self) -> None:
        """Catch the signals (only possible from the main thread)."""
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGUSR2):
                self.old[sig] = signal.signal(sig, self)

    def restore(self) -> None:
        """Put the previous handlers back."""
        for sig, old in self.old.items():
            signal.signal(sig, old)


class Heartbeat:
    """Touches TFDIST_HEARTBEAT_FILE at most once a second so the launcher's watchdog sees progress."""

    def __init__(self) -> None:
        self.path = variables.raw("TFDIST_HEARTBEAT_FILE")
        self.last = 0.0

    def beat(self) -> None:
        """Record progress (cheap: one utime per second at most)."""
        now = time.monotonic()
        if self.path and now - self.last >= 1.0:
            self.last = now
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            with open(self.path, "a"):
                os.utime(self.path)


class LearningRate:
    """Warm-up then the scaled rate; assigns the optimizer's variable only when the value changes."""

    def __init__(self, optimizer: Any, base: float, target: float, warmup_steps: int) -> None:
        self.optimizer, self.base, self.target, self.warmup = optimizer, base, target, warmup_steps
        self.current: float | None = None

    def update(self, step: int) -> None:
        """Set the rate for ``step`` (an assignment per step would cost a dispatch, so only on change)."""
        value = lr_at(step, self.base, self.target, self.warmup)
        if self.current is None and value == self.base and self.target == self.base and not self.warmup:
            # Nothing to change: also the case of a LearningRateSchedule, which has no variable to assign.
            self.current = value
        if value != self.current:
            self.optimizer.learning_rate.assign(value)
            self.current = value
