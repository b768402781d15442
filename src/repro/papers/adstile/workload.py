"""The ADS workload the scheduler model runs: DNN latency curves (measured by ``adstile/curves``),
chains of DNNs with a rate and a shared end-to-end deadline, and per-job execution-time variation.

Imports no torch and no SimPy: the schedule step reads the curves record, the curves step writes it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


@dataclass
class ChainSpec:
    name: str = ""
    hz: float = 10.0                                  # release rate of the chain's source (sensor)
    stages: list[str] = field(default_factory=list)   # DNN names, run in order on each frame


class Curve:
    """A DNN's latency (s) on k tiles: measured points interpolated (in 1/latency, i.e. throughput),
    outside them the Amdahl fit latency = serial + parallel / k of the measured points. A point slower
    than one with fewer tiles is lowered to it (a DNN given more tiles can leave some idle)."""

    def __init__(self, units, latency_s):
        order = np.argsort(units)
        self.k = np.asarray(units, float)[order]
        lat = np.asarray(latency_s, float)[order]
        if len(self.k) == 0 or np.any(lat <= 0) or np.any(self.k <= 0):
            raise ValueError("a latency curve needs at least one point with positive units and latency")
        self.lat = np.minimum.accumulate(lat)
        if len(self.k) >= 2:
            a = np.vstack([np.ones_like(self.k), 1.0 / self.k]).T
            serial, parallel = np.linalg.lstsq(a, self.lat, rcond=None)[0]
        else:
            serial, parallel = 0.0, self.lat[0] * self.k[0]
        self.serial, self.parallel = max(0.0, float(serial)), max(1e-12, float(parallel))

    def __call__(self, k: float) -> float:
        if k <= 0:
            return math.inf
        if self.k[0] <= k <= self.k[-1] and len(self.k) >= 2:
            return 1.0 / float(np.interp(k, self.k, 1.0 / self.lat))
        fit = self.serial + self.parallel / k
        edge = self.k[0] if k < self.k[0] else self.k[-1]   # continuous at the measured range's edge
        return fit * float(np.interp(edge, self.k, self.lat)) / (self.serial + self.parallel / edge)


def variation(rng: np.random.Generator, n: int, vmax: float, shape: float) -> np.ndarray:
    """Execution-time factors in [1, vmax]: 1 + (vmax - 1) U^shape (U uniform; shape > 1 puts most jobs
    near the fastest, the tail up to vmax)."""
    return 1.0 + (vmax - 1.0) * rng.random(n) ** shape


def variation_quantile(q: float, vmax: float, shape: float) -> float:
    """The q-quantile of ``variation``'s factor."""
    return 1.0 + (vmax - 1.0) * q ** shape
