"""A wide-area network link: bandwidth that follows a trace, one-way latency, jitter and drops.

A message is sent as segments through one FIFO channel (so messages queue behind each other);
each segment holds the channel for ``bits / bandwidth(now)`` and is lost with probability
``drop_rate``, in which case it is resent after ``rto`` (the resend occupies the channel again).
The message arrives ``latency + jitter`` after its last segment left, jitter drawn from an
exponential of mean ``jitter`` per message. With ``cv = jitter = drop_rate = 0`` the delivery time
of a lone message of ``b`` bytes is exactly ``8 b / bandwidth + latency`` (the validation case).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import simpy

from repro.sim.params import fraction, non_negative, positive


@dataclass
class NetworkProfile:
    """A network's statistics; ``make_trace`` turns one into a seeded bandwidth trace."""

    name: str = "network"
    mean_mbps: float = 100.0  # mean downlink bandwidth, Mbit/s
    cv: float = 0.0  # coefficient of variation of the bandwidth (lognormal)
    corr_s: float = 1.0  # correlation time of the bandwidth process, s
    step_s: float = 0.05  # the trace's resolution, s
    latency_ms: float = 0.0  # one-way base latency, ms
    jitter_ms: float = 0.0  # mean extra one-way delay per message (exponential), ms
    drop_rate: float = 0.0  # probability that a segment is lost
    segment_bytes: int = 16384  # bytes per segment (a burst of packets)
    rto_ms: float = 10.0  # retransmission timeout after a loss, ms

    def check(self, key: str = "network") -> "NetworkProfile":
        positive(f"{key}.{self.name}.mean_mbps", self.mean_mbps)
        non_negative(f"{key}.{self.name}.cv", self.cv)
        positive(f"{key}.{self.name}.corr_s", self.corr_s)
        positive(f"{key}.{self.name}.step_s", self.step_s)
        non_negative(f"{key}.{self.name}.latency_ms", self.latency_ms)
        non_negative(f"{key}.{self.name}.jitter_ms", self.jitter_ms)
        fraction(f"{key}.{self.name}.drop_rate", self.drop_rate, upper_open=True)
        positive(f"{key}.{self.name}.segment_bytes", self.segment_bytes)
        non_negative(f"{key}.{self.name}.rto_ms", self.rto_ms)
        return self


class BandwidthTrace:
    """Piecewise-constant bandwidth (bit/s) on steps of ``step_s``; holds its last value after the end."""

    def __init__(self, bps: np.ndarray, step_s: float):
        self.bps = np.asarray(bps, dtype=float)
        if self.bps.size == 0 or not np.all(self.bps > 0):
            raise ValueError("a bandwidth trace needs at least one value, all > 0")
        self.step_s = positive("trace.step_s", step_s)

    def at(self, t: float) -> float:
        return float(self.bps[min(int(t / self.step_s), self.bps.size - 1)])

    @property
    def mean_bps(self) -> float:
        return float(self.bps.mean())


def make_trace(profile: NetworkProfile, duration_s: float, seed: int) -> BandwidthTrace:
    """A lognormal AR(1) bandwidth process with the profile's mean, cv and correlation time."""
    profile.check()
    n = max(1, math.ceil(duration_s / profile.step_s))
    if profile.cv == 0:
        return BandwidthTrace(np.full(n, profile.mean_mbps * 1e6), profile.step_s)
    rng = np.random.default_rng(seed)
    sigma = math.sqrt(math.log1p(profile.cv ** 2))
    mu = math.log(profile.mean_mbps * 1e6) - sigma ** 2 / 2
    phi = math.exp(-profile.step_s / profile.corr_s)
    x = np.empty(n)
    x[0] = rng.normal(0, sigma)
    noise = rng.normal(0, sigma * math.sqrt(1 - phi ** 2), n)
    for k in range(1, n):
        x[k] = phi * x[k - 1] + noise[k]
    return BandwidthTrace(np.exp(mu + x), profile.step_s)


class Network:
    def __init__(self, env: simpy.Environment, profile: NetworkProfile, trace: BandwidthTrace, seed: int):
        self.env, self.profile, self.trace = env, profile.check(), trace
        self.channel = simpy.Resource(env, capacity=1)
        self.rng = np.random.default_rng(seed)
        self.bytes = 0.0
        self.drops = 0
        self.segments = 0

    def send(self, nbytes: float):
        """Generator: deliver ``nbytes``; returns the time the channel spent on it (s)."""
        p = self.profile
        on_wire = 0.0
        left = float(nbytes)
        with self.channel.request() as req:
            yield req
            while left > 0:
                seg = min(left, p.segment_bytes)
                hold = 8 * seg / self.trace.at(self.env.now)
                yield self.env.timeout(hold)
                on_wire += hold
                self.segments += 1
                if p.drop_rate and self.rng.random() < p.drop_rate:
                    self.drops += 1
                    yield self.env.timeout(p.rto_ms / 1e3)
                    continue
                left -= seg
        self.bytes += nbytes
        delay = p.latency_ms / 1e3
        if p.jitter_ms:
            delay += self.rng.exponential(p.jitter_ms / 1e3)
        if delay > 0:
            yield self.env.timeout(delay)
        return on_wire

    def one_way(self):
        """Generator: a tiny message (a pose update): latency and jitter only."""
        p = self.profile
        delay = p.latency_ms / 1e3 + (self.rng.exponential(p.jitter_ms / 1e3) if p.jitter_ms else 0.0)
        if delay > 0:
            yield self.env.timeout(delay)
