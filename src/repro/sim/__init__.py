"""Discrete-event simulation components shared by the simulator papers (OO-VR, Q-VR, ...).

Built on SimPy: every component is a set of SimPy resources plus generator methods that a
SimPy process ``yield from``s, so models compose them without a hand-written event loop.

- :mod:`repro.sim.params`: parameter checks that fail before any work, naming the key.
- :mod:`repro.sim.engine`: an Environment that counts processed events (simulated events/s), and a
  process-pool map for independent simulations.
- :mod:`repro.sim.memory`: a memory (or any bandwidth-limited port) with bandwidth and latency.
- :mod:`repro.sim.link`: directed links in a crossbar or a link per pair; remote accesses are priced by them.
- :mod:`repro.sim.cache`: an LRU footprint cache of named buffers.
- :mod:`repro.sim.gpu`: a GPU module: compute pipeline, local memory and a buffer cache.
- :mod:`repro.sim.network`: a wide-area network with a bandwidth trace, latency, jitter, drops.
- :mod:`repro.sim.server`: a remote render server (GPU plus video encoder).
- :mod:`repro.sim.compositor`: waits for a frame's parts and merges them.
- :mod:`repro.sim.sensitivity`: one-at-a-time screening of assumed parameters, and curves.
- :mod:`repro.sim.figures`: the sensitivity figure drawn from those tables.
"""
