"""Q-VR's workloads: games (rendering cost on the headset GPU) and seeded per-frame variation.

The paper evaluates real-world games; we have no traces, so each :class:`GameSpec` gives the
headset GPU's full-resolution frame time split into a geometry part (per frame) and a pixel part
(proportional to shaded pixels), every value assumed. Frame-to-frame cost varies as a lognormal
AR(1) process (scene changes), seeded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from repro.sim.params import non_negative, positive


@dataclass
class GameSpec:
    name: str = "game"
    geometry_ms: float = 5.0  # headset GPU, per frame, whole view
    pixel_ms: float = 40.0  # headset GPU, all display pixels at full resolution
    cv: float = 0.15  # frame-to-frame variation of both parts
    corr_frames: float = 30.0  # correlation length of that variation, frames

    def check(self, key: str = "games") -> "GameSpec":
        k = f"{key}.{self.name}"
        non_negative(f"{k}.geometry_ms", self.geometry_ms)
        positive(f"{k}.pixel_ms", self.pixel_ms)
        non_negative(f"{k}.cv", self.cv)
        positive(f"{k}.corr_frames", self.corr_frames)
        return self


def frame_factors(game: GameSpec, frames: int, seed: int) -> np.ndarray:
    """Per-frame multipliers of the game's cost, mean 1."""
    if game.cv == 0:
        return np.ones(frames)
    rng = np.random.default_rng(seed)
    sigma = math.sqrt(math.log1p(game.cv ** 2))
    phi = math.exp(-1.0 / game.corr_frames)
    x = np.empty(frames)
    x[0] = rng.normal(0, sigma)
    noise = rng.normal(0, sigma * math.sqrt(1 - phi ** 2), frames)
    for k in range(1, frames):
        x[k] = phi * x[k - 1] + noise[k]
    return np.exp(x - sigma ** 2 / 2)
