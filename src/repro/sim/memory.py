"""A bandwidth-limited port (a DRAM channel, a link end): transfers queue FIFO and each holds the
port for ``bytes / bandwidth``, so concurrent users share its bandwidth; ``latency`` is added
after the port is released (it delays the requester, not the port)."""

from __future__ import annotations

import math

import simpy

from repro.sim.params import non_negative, positive


class Port:
    def __init__(self, env: simpy.Environment, bandwidth: float, latency: float = 0.0, name: str = "port"):
        """bandwidth in bytes/s (``inf``: transfers take no time), latency in s."""
        self.env, self.name = env, name
        self.bandwidth = positive(f"{name}.bandwidth", bandwidth, allow_inf=True)
        self.latency = non_negative(f"{name}.latency", latency)
        self.resource = simpy.Resource(env, capacity=1)
        self.bytes = 0.0
        self.busy = 0.0

    def service_time(self, nbytes: float) -> float:
        return 0.0 if math.isinf(self.bandwidth) else nbytes / self.bandwidth

    def transfer(self, nbytes: float):
        """Generator: move ``nbytes`` through the port (``yield from port.transfer(n)``)."""
        if nbytes <= 0:
            return
        self.bytes += nbytes
        hold = self.service_time(nbytes)
        if hold > 0:
            with self.resource.request() as req:
                yield req
                yield self.env.timeout(hold)
            self.busy += hold
        if self.latency > 0:
            yield self.env.timeout(self.latency)
