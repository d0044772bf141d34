"""Chief-aware model saving: every worker saves (collectives may run), only the chief's file is kept."""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

from tfdist.errors import ConfigError


def save_model(model: Any, path: str) -> str | None:
    """Save ``model`` to ``path`` on the chief; other workers write to a temporary directory and delete it.

    ``path`` ending in ``.keras`` saves the whole model, ``.weights.h5`` the weights; any other path is a
    SavedModel export directory (``model.export``), written under a temporary name first. Returns the
    path on the chief, None elsewhere.
    """
    from tfdist import context

    chief = context.current().environment.is_chief
    target = os.path.abspath(path)
    if chief:
        os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
        if not os.access(os.path.dirname(target), os.W_OK):
            raise ConfigError(f"cannot save the model to {path!r}: the directory is not writable.")
    scratch = tempfile.mkdtemp(prefix="tfdist-save-", dir=os.path.dirname(target) if chief else None)
    try:
        name = os.path.basename(target)
        temp_target = os.path.join(scratch, name)
        if name.endswith(".keras"):
            model.save(temp_target)
        elif name.endswith(".weights.h5"):
            model.save_weights(temp_target)
        else:
            model.export(temp_target)
        if not chief:
            return None
        if os.path.isdir(target) and not os.path.isdir(temp_target):
            raise ConfigError(f"cannot save the model to {path!r}: a directory is in the way.")
        if os.path.isdir(target):
            shutil.rmtree(target)
        os.replace(temp_target, target)
        return target
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
