"""Link kinds for the all-reduce model: alpha (seconds per ring step) and bandwidth (bytes/s per
direction of each ring link), each cited or marked assumed.

A ring all-reduce of ``n`` bytes over ``p`` ranks is ``2 (p - 1)`` steps of ``n / p`` bytes, so it takes
``2 (p - 1) (alpha + n / (p * bandwidth))`` (Thakur, Rabenseifner, Gropp 2005; Patarasuk and Yuan 2009).
"""

from __future__ import annotations

from dataclasses import dataclass

from repro.sim.params import positive, non_negative


@dataclass
class LinkSpec:
    name: str = "eth10"
    gbps: float = 10.0  # bandwidth per direction, Gbit/s
    alpha_us: float = 25.0  # per ring step: software, wire and switch latency, microseconds
    why: str = ""  # where gbps and alpha come from

    def check(self, key: str = "links") -> "LinkSpec":
        positive(f"{key}.{self.name}.gbps", self.gbps)
        non_negative(f"{key}.{self.name}.alpha_us", self.alpha_us)
        return self

    @property
    def bandwidth(self) -> float:
        """Bytes per second."""
        return self.gbps * 1e9 / 8

    @property
    def alpha(self) -> float:
        return self.alpha_us * 1e-6


def ring_allreduce_s(nbytes: float, world: int, link: LinkSpec) -> float:
    """The alpha-beta time of one ring all-reduce (the closed form the SimPy model must reproduce)."""
    if world < 2 or nbytes <= 0:
        return 0.0
    return 2 * (world - 1) * (link.alpha + nbytes / world / link.bandwidth)


def fit(sizes, seconds, world: int, name: str = "fitted") -> LinkSpec:
    """Least-squares alpha and bandwidth from measured all-reduce times (``ring_allreduce_s`` inverted):
    t = 2 (p - 1) alpha + 2 (p - 1) / p * n / B is linear in (1, n)."""
    import numpy as np

    n, t = np.asarray(sizes, float), np.asarray(seconds, float)
    steps = 2 * (world - 1)
    slope, intercept = np.polyfit(n, t, 1)
    if not slope > 0:
        raise ValueError(f"{name}: all-reduce times do not grow with size ({list(zip(n, t))}); no bandwidth to fit")
    bandwidth = steps / world / slope
    return LinkSpec(name=name, gbps=bandwidth * 8 / 1e9, alpha_us=max(intercept, 0.0) / steps * 1e6,
                    why=f"fitted to {len(n)} measured all-reduce sizes")
