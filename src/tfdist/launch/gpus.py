"""Count this node's GPUs without importing TensorFlow (the launcher must start fast)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping

from tfdist.env.base import parse_gpu_list


def visible_gpus(environ: Mapping[str, str]) -> list[str]:
    """GPU ids the launcher may hand out: CUDA_VISIBLE_DEVICES if set, else NVML, else ``nvidia-smi -L``."""
    if "CUDA_VISIBLE_DEVICES" in environ:
        return list(parse_gpu_list(environ["CUDA_VISIBLE_DEVICES"], "CUDA_VISIBLE_DEVICES"))
    try:
        import pynvml  # nvidia-ml-py, installed with the gpu extra

        pynvml.nvmlInit()
        try:
            return [str(i) for i in range(pynvml.nvmlDeviceGetCount())]
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no library, no driver, or no device: fall through to nvidia-smi
        pass
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=15, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [str(i) for i, _ in enumerate(row for row in out.stdout.splitlines() if row.startswith("GPU "))]
