"""Which scale to run: `smoke` (tiny, CPU-friendly), `paper` (the paper's sizes, on a GPU) or
`auto` (paper when a CUDA GPU is visible). Kept free of heavy imports: Snakemake calls this at
every start."""

from __future__ import annotations

import shutil
import subprocess

SCALES = ("smoke", "paper")


def gpu_count() -> int:
    """CUDA GPUs on the machine (asks nvidia-smi; does not import torch)."""
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(line.startswith("GPU ") for line in out.stdout.splitlines()) if out.returncode == 0 else 0


def has_gpu() -> bool:
    """A CUDA GPU is visible (asks nvidia-smi; does not import torch)."""
    return gpu_count() > 0


def resolve_scale(scale: str, gpu: bool | None = None) -> str:
    if scale == "auto":
        return "paper" if (has_gpu() if gpu is None else gpu) else "smoke"
    if scale not in SCALES:
        raise ValueError(f"scale: must be one of smoke, paper, auto; got {scale!r}")
    return scale


def param_layers(exp_cfg, scale: str) -> list:
    """An experiment file's parameter layers at ``scale``, merged left to right: ``params``, and
    at smoke scale its ``smoke`` section on top (the one rule repro.pipeline.run and the sweeps share)."""
    return [exp_cfg.get("params") or {}] + ([exp_cfg.get("smoke") or {}] if scale == "smoke" else [])
