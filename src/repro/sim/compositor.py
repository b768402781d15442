"""A compositor: waits until every part of a frame is ready, then merges them on its own unit."""

from __future__ import annotations

import simpy

from repro.sim.params import non_negative


class Compositor:
    def __init__(self, env: simpy.Environment, name: str = "compositor"):
        self.env, self.name = env, name
        self.unit = simpy.Resource(env, capacity=1)
        self.busy = 0.0

    def compose(self, parts: list[simpy.Event], seconds: float):
        """Generator: wait for all ``parts`` (SimPy events), then hold the unit for ``seconds``."""
        non_negative(f"{self.name} time", seconds)
        if parts:
            yield simpy.AllOf(self.env, parts)
        with self.unit.request() as req:
            yield req
            yield self.env.timeout(seconds)
        self.busy += seconds
