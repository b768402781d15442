"""GPU modules with compute and local memory, and a NUMA system of them joined by links.

A :class:`GPUModule` has a compute pipeline (a SimPy resource held for each task's compute time),
a local memory :class:`~repro.sim.memory.Port` and a :class:`~repro.sim.cache.BufferCache`.
:class:`NUMASystem` prices a read by where its bytes live: local bytes through the reader's
memory, remote bytes through the owner's memory and the owner->reader link at once."""

from __future__ import annotations

import simpy

from repro.sim.cache import BufferCache
from repro.sim.link import topology
from repro.sim.memory import Port
from repro.sim.params import count, non_negative


class GPUModule:
    def __init__(self, env: simpy.Environment, index: int, memory_bandwidth: float, cache_bytes: float = 0.0,
                 memory_latency: float = 0.0, name: str = "gpm"):
        self.env, self.index = env, index
        self.pipeline = simpy.Resource(env, capacity=1)
        self.memory = Port(env, memory_bandwidth, memory_latency, name=f"{name}.memory")
        self.cache = BufferCache(cache_bytes, name=f"{name}.cache")
        self.busy = 0.0  # time the pipeline was held

    def compute(self, seconds: float):
        """Generator: hold the compute pipeline for ``seconds``."""
        non_negative("compute time", seconds)
        with self.pipeline.request() as req:
            yield req
            yield self.env.timeout(seconds)
        self.busy += seconds


class NUMASystem:
    """``n`` GPU modules joined by links of ``link_bandwidth`` bytes/s in a ``topology``
    (:mod:`repro.sim.link`: ``switch`` or ``full``)."""

    def __init__(self, env: simpy.Environment, n: int, memory_bandwidth: float, link_bandwidth: float,
                 cache_bytes: float = 0.0, link_latency: float = 0.0, memory_latency: float = 0.0,
                 topology_kind: str = "switch"):
        count("gpms", n)
        self.env = env
        self.gpms = [GPUModule(env, i, memory_bandwidth, cache_bytes, memory_latency, name=f"gpm{i}") for i in range(n)]
        self.links = topology(topology_kind, env, n, link_bandwidth, link_latency)

    def read(self, reader: int, owner: int, nbytes: float):
        """Generator: ``reader`` reads (or writes) ``nbytes`` that live in ``owner``'s memory."""
        if nbytes <= 0:
            return
        if reader == owner:
            yield from self.gpms[owner].memory.transfer(nbytes)
            return
        link = self.env.process(self.links.transfer(owner, reader, nbytes))
        memory = self.env.process(self.gpms[owner].memory.transfer(nbytes))
        yield link & memory

    def read_spread(self, reader: int, per_owner: dict[int, float]):
        """Generator: reads from several owners at once (bytes per owner), done when all are."""
        parts = [(owner, b) for owner, b in per_owner.items() if b > 0]
        if len(parts) == 1:
            yield from self.read(reader, *parts[0])
        elif parts:
            yield simpy.AllOf(self.env, [self.env.process(self.read(reader, owner, b)) for owner, b in parts])

    @property
    def remote_bytes(self) -> float:
        return self.links.bytes
