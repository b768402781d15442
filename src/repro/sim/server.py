"""A remote render server: a GPU pipeline and a video encoder, each a FIFO SimPy resource."""

from __future__ import annotations

import simpy

from repro.sim.params import non_negative


class Server:
    def __init__(self, env: simpy.Environment):
        self.env = env
        self.gpu = simpy.Resource(env, capacity=1)
        self.encoder = simpy.Resource(env, capacity=1)
        self.busy = 0.0

    def _hold(self, resource: simpy.Resource, seconds: float):
        non_negative("server time", seconds)
        with resource.request() as req:
            yield req
            yield self.env.timeout(seconds)

    def render(self, seconds: float):
        """Generator: render for ``seconds`` of server GPU time."""
        self.busy += seconds
        yield from self._hold(self.gpu, seconds)

    def encode(self, seconds: float):
        yield from self._hold(self.encoder, seconds)
