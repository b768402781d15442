"""Pick the fastest gather-GEMM configuration for one problem, and remember it.

For a key (kernel, dtype, M, K, N, sparsity) the tuner runs every candidate configuration once into
a NaN-poisoned output and compares it with the fp32 reference of the same packed weights (check);
a wrong one (or one that fails to compile or launch) is recorded in Choice.errors and never timed.
The others are timed (timer) and the fastest is cached in a JSON file keyed by GPU name and key, so
a rerun with the same cache tunes nothing. The run record carries the cache (artifact) and one table
row per key (table()). The timer and checker are arguments: tests drive choose() with fakes.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import pandas as pd

from repro.tuning import ChoiceCache

CACHE_VERSION = 1
log = logging.getLogger("repro")

UNIT_ROUNDOFF = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}


def tolerance(dtype: str) -> float:
    """Accepted max |Y - ref| / max |ref| against the fp32 reference: the output's rounding to its
    dtype (u) with room for fp32 accumulation order: 4u."""
    return 4 * UNIT_ROUNDOFF[dtype]


def shape_key(kernel: str, dtype: str, m: int, k: int, n: int, sparsity: float) -> str:
    return f"{kernel}/{dtype}/m{m}/k{k}/n{n}/s{sparsity:g}"


@dataclass
class Choice:
    key: str
    config: dict  # the winner's fields (gather_gemm.Config)
    name: str  # the winner's name
    times_us: dict[str, float]
    errors: dict[str, str] = field(default_factory=dict)


class Tuner:
    """Times candidates per key and keeps the winners in ``cache_path`` (JSON; None = in memory)."""

    def __init__(self, cache_path: Path | None, gpu_name: str):
        self.gpu_name = gpu_name
        self.cache = ChoiceCache(cache_path, gpu_name, CACHE_VERSION)

    def lookup(self, key: str) -> Choice | None:
        entry = self.cache.get(key)
        return Choice(**entry) if entry is not None else None

    def choose(self, key: str, configs: Sequence, timer: Callable[[object], float],
               check: Callable[[object], float], tol: float) -> Choice:
        """The cached choice for ``key``, or: check every config (relative error <= tol, NaN = wrong),
        time the good ones with timer(config) -> seconds, keep the fastest."""
        cached = self.lookup(key)
        if cached is not None:
            return cached
        times, errors, by_name = {}, {}, {}
        for config in configs:
            name = config.name
            by_name[name] = config
            try:
                err = float(check(config))
                if not err <= tol:
                    errors[name] = f"WrongResult: relative max error {err:.3g} > tolerance {tol:.3g}"
                    log.warning("tuner: %s is wrong on %s: %s", name, key, errors[name])
                    continue
                times[name] = timer(config) * 1e6
            except Exception as exc:  # a config that cannot compile or launch must not stop the others
                errors[name] = f"{type(exc).__name__}: {exc}"
                log.warning("tuner: %s failed on %s: %s", name, key, errors[name])
        if not times:
            raise RuntimeError(f"no configuration ran correctly for {key}: {errors}")
        best = min(times, key=times.__getitem__)
        choice = Choice(key, by_name[best].as_dict(), best, times, errors)
        self.cache.put(key, asdict(choice))
        return choice

    def table(self, keys: Sequence[str]) -> pd.DataFrame:
        """One row per key: the chosen configuration, its time, how many candidates ran or failed."""
        rows = []
        for key in keys:
            c = self.lookup(key)
            if c is not None:
                rows.append(dict(key=key, gpu=self.gpu_name, chosen=c.name, t_us=c.times_us[c.name],
                                 candidates=len(c.times_us) + len(c.errors), failed=len(c.errors),
                                 times_us=json.dumps(c.times_us, sort_keys=True),
                                 errors=json.dumps(c.errors, sort_keys=True)))
        return pd.DataFrame(rows)
