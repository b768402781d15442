"""Eccentricity-based foveation: how many pixels each layer needs, and a quality proxy.

Acuity follows the linear minimum-angle-of-resolution model ``MAR(e) = mar0 + slope * e`` (degrees
per cycle at eccentricity ``e``). A display pixel at ``e`` needs a sampling density, relative to
full resolution, of ``min(1, (2 / MAR(e)) / ppd)^2`` (two pixels per cycle; ``ppd`` the display's
pixels per degree). The fovea (``e <= e1``) is rendered at full resolution; the periphery at that
density times ``scale`` (1 = matched to acuity). The quality proxy is the acuity-weighted share of
the required density that is delivered: 1 when every pixel gets at least what acuity resolves.
Gaze is at the view centre; eccentricity uses the small-angle distance from it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from repro.papers.qvr.system import SystemParams


@dataclass
class Layers:
    """Per eccentricity ``e1[i]`` (degrees), both eyes: full-resolution fovea pixels, the periphery's
    pixels at acuity-matched density, and the share of the view's area inside the fovea."""

    e1: np.ndarray
    fovea_px: np.ndarray
    periphery_px: np.ndarray
    fovea_area: np.ndarray
    display_px: float
    _density: np.ndarray  # per sample: required relative density
    _ecc: np.ndarray  # per sample: eccentricity
    _weight: np.ndarray  # per sample: acuity weight

    def index(self, e1: float) -> int:
        return int(np.argmin(np.abs(self.e1 - e1)))

    def quality(self, i: int, scale: float) -> float:
        """Acuity-weighted delivered / required density with the periphery at ``scale``."""
        outside = self._ecc > self.e1[i]
        got = np.where(outside, np.minimum(1.0, scale), 1.0)
        return float((self._weight * got).sum() / self._weight.sum())


def layers(s: SystemParams, step_deg: float | None = None, samples: int = 160) -> Layers:
    """The layer table on a grid of eccentricities from 0 to the view's corner (all local)."""
    ppd = s.width / s.fov_deg
    deg_per_px = 1.0 / ppd
    xs = (np.arange(samples) + 0.5) / samples * s.width - s.width / 2
    ys = (np.arange(samples) + 0.5) / samples * s.height - s.height / 2
    ecc = np.hypot(*np.meshgrid(xs, ys)).ravel() * deg_per_px
    mar = s.mar0_deg + s.mar_slope * ecc
    density = np.minimum(1.0, (2.0 / mar) / ppd) ** 2
    weight = 1.0 / mar ** 2
    per_sample = 2 * s.width * s.height / ecc.size  # display pixels per sample, both eyes
    step = step_deg or s.fovea_step_deg
    e1 = np.arange(0.0, ecc.max() + step, step)
    inside = ecc[None, :] <= e1[:, None]
    fovea = inside.sum(axis=1) * per_sample
    periphery = np.where(inside, 0.0, density[None, :]).sum(axis=1) * per_sample
    return Layers(e1=e1, fovea_px=fovea, periphery_px=periphery, fovea_area=inside.mean(axis=1),
                  display_px=2.0 * s.width * s.height, _density=density, _ecc=ecc, _weight=weight)
