"""Inter-device links: a directed point-to-point :class:`Link`, and the two topologies built of them.

- :class:`Switched`: each device has one link of ``bandwidth`` each way into a crossbar; a transfer
  from ``src`` to ``dst`` holds ``src``'s egress and ``dst``'s ingress at once, so a device's
  remote bandwidth is ``bandwidth`` however many peers it talks to.
- :class:`FullyConnected`: a link of ``bandwidth`` for every ordered pair, so a device can pull
  ``(n - 1) * bandwidth`` from all its peers together.
"""

from __future__ import annotations

import simpy

from repro.sim.memory import Port
from repro.sim.params import choice, count

TOPOLOGIES = ("switch", "full")


class Link(Port):
    """One direction of a link; ``bytes`` counts what crossed it."""


class Switched:
    def __init__(self, env: simpy.Environment, n: int, bandwidth: float, latency: float = 0.0, name: str = "link"):
        count(f"{name}.devices", n)
        self.env, self.n = env, n
        self.egress = [Link(env, bandwidth, 0.0, name=name) for _ in range(n)]
        self.ingress = [Link(env, bandwidth, latency, name=name) for _ in range(n)]

    def transfer(self, src: int, dst: int, nbytes: float):
        """Generator: ``nbytes`` from ``src`` to ``dst`` through both ports."""
        yield self.env.process(self.egress[src].transfer(nbytes)) & self.env.process(self.ingress[dst].transfer(nbytes))

    @property
    def bytes(self) -> float:
        return sum(link.bytes for link in self.ingress)


class FullyConnected:
    def __init__(self, env: simpy.Environment, n: int, bandwidth: float, latency: float = 0.0, name: str = "link"):
        count(f"{name}.devices", n)
        self.n = n
        self.links = {(s, d): Link(env, bandwidth, latency, name=name)
                      for s in range(n) for d in range(n) if s != d}

    def transfer(self, src: int, dst: int, nbytes: float):
        yield from self.links[src, dst].transfer(nbytes)

    @property
    def bytes(self) -> float:
        return sum(link.bytes for link in self.links.values())


def topology(kind: str, env: simpy.Environment, n: int, bandwidth: float, latency: float = 0.0):
    choice("topology", kind, TOPOLOGIES)
    return (Switched if kind == "switch" else FullyConnected)(env, n, bandwidth, latency)
