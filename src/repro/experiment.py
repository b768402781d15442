"""The contract between the runner and every paper's experiment functions.

An experiment is a pure function ``fn(params, ctx) -> Result`` decorated with
:func:`experiment`. The decorator names the dataclass that validates its parameters and
whether it needs a CUDA GPU. The runner (:mod:`repro.pipeline.run`) composes the Hydra config,
validates it against that dataclass, builds the :class:`Context`, calls the function and
writes the run record; tests call the function directly with a hand-made context.

Modules that hold experiments must not import CuPy (or anything GPU-only) at module load:
the CPU machines import them too.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pandas as pd


STAGES = "stages"  # Context.stage's folder under a run's out_dir


class NeedsGPU(RuntimeError):
    """Raised when a GPU-only step runs on a machine without a CUDA GPU."""


@dataclass
class Context:
    """What the runner hands an experiment."""

    out_dir: Path
    scale: str = "smoke"  # "smoke" (CPU, tiny) or "paper" (GPU, paper-sized)
    device: str = "cpu"  # "cuda" or "cpu"
    seed: int = 0
    inputs: dict[str, Path] = field(default_factory=dict)  # named input files from the DAG
    gpus: int = 0  # CUDA GPUs this run holds (CUDA_VISIBLE_DEVICES lists them); 0 on the CPU
    results: Path = Path("results")  # the results root (inputs are below it; sweeps read their points there)
    log: logging.Logger = field(default_factory=lambda: logging.getLogger("repro"))
    stage_key: str = ""  # what a stage's value depends on (the runner's digest of params, scale, device, seed, code)
    resumed: list[str] = field(default_factory=list)  # stages this run took from a killed run's files

    def stage(self, name: str, compute: Callable[[], Any]) -> Any:
        """compute(), saved under ``out_dir/stages/<name>.pkl`` so that a rerun of a killed run with
        the same stage_key takes it from there instead (the name goes to ``resumed``). For the long
        independent parts of one experiment (a graph, a matrix): a run cut off by a time limit
        resumes where it stopped. The runner removes the stages once the record is written."""
        import pickle

        from repro.atomic import atomic_write

        path = self.out_dir / STAGES / f"{name}.pkl"
        if path.exists():
            try:
                saved = pickle.loads(path.read_bytes())
            except Exception as exc:  # a torn or foreign file: computed again, not trusted
                self.log.warning("stage %s: %s unreadable (%s): computing it again", name, path, exc)
            else:
                if isinstance(saved, dict) and saved.get("key") == self.stage_key:
                    self.resumed.append(name)
                    self.log.info("stage %s: taken from %s (a killed run of this configuration)", name, path)
                    return saved["value"]
        value = compute()
        blob = pickle.dumps({"key": self.stage_key, "value": value})
        atomic_write(path, lambda fh: fh.write(blob))
        return value

    def progress(self, iterable, total: int | None = None, desc: str = ""):
        """Wrap an iterable with a progress bar on a terminal, plain log lines otherwise."""
        from repro.progress import progress

        return progress(iterable, total=total, desc=desc, log=self.log)


@dataclass
class Result:
    """What an experiment returns; the runner turns it into a run record.

    metrics: scalar results (the claims ledger reads these by key).
    tables: named DataFrames, written as ``<name>.csv`` next to the record.
    artifacts: other files the experiment wrote under ``ctx.out_dir`` (name -> path).
    tags: free-form strings (e.g. which fallback was taken).
    """

    metrics: dict[str, float] = field(default_factory=dict)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    artifacts: dict[str, Path] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ExperimentSpec:
    fn: Callable[[Any, Context], Result]
    params: type
    needs_gpu: bool

    def __call__(self, params, ctx: Context) -> Result:
        return self.fn(params, ctx)


def experiment(*, params: type, needs_gpu: bool = False):
    """Mark ``fn(params, ctx) -> Result`` as an experiment with a validated parameter dataclass."""
    if not dataclasses.is_dataclass(params):
        raise TypeError(f"params must be a dataclass, got {params!r}")

    def wrap(fn):
        return ExperimentSpec(fn=fn, params=params, needs_gpu=needs_gpu)

    return wrap


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a hard dependency
        return False
    return torch.cuda.is_available()


def load_entry(entry: str) -> ExperimentSpec:
    """Import ``'package.module:function'`` and check it is an experiment."""
    import importlib

    module_name, _, attr = entry.partition(":")
    if not attr:
        raise ValueError(f"experiment entry must look like 'package.module:function', got {entry!r}")
    module = importlib.import_module(module_name)
    spec = getattr(module, attr, None)
    if not isinstance(spec, ExperimentSpec):
        raise TypeError(f"{entry} is not decorated with @repro.experiment.experiment")
    return spec


def eprint(*args) -> None:
    print(*args, file=sys.stderr, flush=True)
