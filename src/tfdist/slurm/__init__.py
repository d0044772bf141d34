"""Slurm: job scripts (pure rendering) and the client commands that submit and watch them."""

from __future__ import annotations

from tfdist.slurm.script import SbatchSpec, render_sbatch

__all__ = ["SbatchSpec", "render_sbatch"]
