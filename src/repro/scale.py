"""Which scale to run: `smoke` (tiny, CPU-friendly), `paper` (the paper's sizes, on a GPU) or
`auto` (paper when a CUDA GPU is visible). Kept free of heavy imports: Snakemake calls this at
every start."""

from __future__ import annotations

import shutil
import subprocess

SCALES = ("smoke", "paper")


def has_gpu() -> bool:
    """A CUDA GPU is visible (asks nvidia-smi; does not import torch)."""
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


def resolve_scale(scale: str, gpu: bool | None = None) -> str:
    if scale == "auto":
        return "paper" if (has_gpu() if gpu is None else gpu) else "smoke"
    if scale not in SCALES:
        raise ValueError(f"scale: must be one of smoke, paper, auto; got {scale!r}")
    return scale
