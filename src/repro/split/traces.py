"""Bandwidth traces with regime changes, the dynamic network Edgent's change-point detection tracks:
a sequence of regimes, each a stretch of ``repro.sim.network.make_trace``'s lognormal AR(1) process
around its own mean (drawn log-uniformly from a range), so the trace has level shifts (a change of
cell, of load) as well as the fluctuation within a regime."""

from __future__ import annotations

import numpy as np

from repro.sim.network import BandwidthTrace, NetworkProfile, make_trace


def regime_trace(low_mbps: float, high_mbps: float, regimes: int, regime_s: float, cv: float, corr_s: float,
                 step_s: float, seed: int) -> tuple[BandwidthTrace, np.ndarray]:
    """The trace and each step's regime mean (bit/s): ``regimes`` stretches of ``regime_s`` seconds."""
    if not 0 < low_mbps <= high_mbps:
        raise ValueError(f"need 0 < low_mbps <= high_mbps, got {low_mbps} and {high_mbps}")
    rng = np.random.default_rng(seed)
    means = np.exp(rng.uniform(np.log(low_mbps), np.log(high_mbps), regimes))
    parts, levels = [], []
    for k, mean in enumerate(means):
        profile = NetworkProfile(name=f"regime{k}", mean_mbps=float(mean), cv=cv, corr_s=corr_s, step_s=step_s)
        part = make_trace(profile, regime_s, seed=int(rng.integers(2**31))).bps
        parts.append(part)
        levels.append(np.full(part.size, mean * 1e6))
    return BandwidthTrace(np.concatenate(parts), step_s), np.concatenate(levels)
