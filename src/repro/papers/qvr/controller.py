"""The runtime controller that sizes the fovea (Q-VR's interaction-aware workload controller).

Every frame it predicts, for each fovea eccentricity on its grid, the local branch (fovea on the
headset GPU) and the remote branch (pose up, server render, encode, transmit at the estimated
bandwidth, estimated latency, decode), and picks the eccentricity minimising the slower of the
two. If even that misses the latency target it lowers the periphery's resolution (scale 0.75,
then 0.5 of acuity-matched), trading the quality proxy for latency. Its bandwidth and latency
estimates are exponentially weighted averages of what the previous frames measured.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from repro.papers.qvr.foveation import Layers
from repro.papers.qvr.system import SystemParams

SCALES = (1.0, 0.75, 0.5)


@dataclass
class Costs:
    """Per eccentricity index, in seconds (bytes for ``periphery_bytes``), at periphery scale 1."""

    local: np.ndarray
    server: np.ndarray
    encode: np.ndarray
    decode: np.ndarray
    periphery_bytes: np.ndarray
    server_geometry: np.ndarray  # the part of ``server`` that does not shrink with the scale


def costs(layers: Layers, s: SystemParams, geometry_ms: float, pixel_ms: float, full_periphery: bool = False) -> Costs:
    """What rendering the fovea locally and the rest remotely costs at each eccentricity.
    ``full_periphery``: the periphery at full resolution (static collaborative rendering)."""
    g = s.geometry_share_min
    area = layers.fovea_area
    px_remote = (layers.display_px - layers.fovea_px) if full_periphery else layers.periphery_px
    has_remote = px_remote > 0
    local = (geometry_ms * (g + (1 - g) * area) + pixel_ms * layers.fovea_px / layers.display_px) / 1e3
    server_geo = np.where(has_remote, geometry_ms * (g + (1 - g) * (1 - area)) / 1e3 / s.server_speedup, 0.0)
    server = server_geo + pixel_ms * px_remote / layers.display_px / 1e3 / s.server_speedup
    return Costs(local=local, server=server, encode=px_remote / (s.encode_gpx_s * 1e9),
                 decode=px_remote / (s.decode_gpx_s * 1e9), periphery_bytes=px_remote * s.bits_per_px / 8,
                 server_geometry=server_geo)


class Controller:
    def __init__(self, s: SystemParams, bandwidth_bps: float, latency_s: float):
        self.s = s
        self.bw, self.lat = bandwidth_bps, latency_s

    def choose(self, c: Costs, compose_s: float) -> tuple[int, float]:
        """(eccentricity index, periphery scale) for the next frame."""
        target = self.s.latency_target_ms / 1e3 - self.s.tracking_display_ms / 1e3
        best = None
        for scale in SCALES:
            remote = (self.lat + c.server_geometry + (c.server - c.server_geometry + c.encode + c.decode) * scale
                      + 8 * c.periphery_bytes * scale / self.bw + self.lat)
            remote = np.where(c.periphery_bytes > 0, remote, 0.0)
            pred = np.maximum(c.local, remote) + compose_s
            i = int(np.argmin(pred))
            if best is None or pred[i] < best[2]:
                best = (i, scale, pred[i])
            if pred[i] <= target:
                return i, scale
        return best[0], best[1]

    def observe(self, nbytes: float, on_wire_s: float, delay_s: float) -> None:
        """One transfer's measured throughput and its one-way delay beyond the wire time."""
        a = self.s.ewma
        if on_wire_s > 0:
            self.bw = (1 - a) * self.bw + a * 8 * nbytes / on_wire_s
        self.lat = (1 - a) * self.lat + a * max(0.0, delay_s)
