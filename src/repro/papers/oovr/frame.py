"""One frame on the NUMA multi-GPU: the SimPy processes that run a :class:`~repro.papers.oovr.plans.Plan`.

Each GPM runs its queue's tasks in order. A task holds the GPM's pipeline for its compute time
while its memory traffic flows: cache misses of its buffers and its render-target writes, each
priced where the bytes live (local DRAM, or the owner's DRAM and the owner->reader link at once);
the task ends when both are done. With ``steal`` an idle GPM takes the last batch of the queue
with the most predicted work left. When every GPM is done, composition runs: ``master`` sends
every other GPM's covered pixels to GPM 0, which composites them in software; ``distributed``
sends each GPM's pixels of strip k to GPM k, and all GPMs composite their strips in hardware.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import simpy

from repro.papers.oovr.plans import INTERLEAVED, OWN, Plan
from repro.papers.oovr.system import SystemParams
from repro.sim.engine import CountingEnvironment
from repro.sim.gpu import NUMASystem


@dataclass
class FrameResult:
    frame_s: float  # rendering + composition
    render_s: float
    compose_s: float
    remote_bytes: float  # bytes over inter-GPM links
    busy_s: np.ndarray  # per GPM, time spent on tasks
    imbalance: float  # max / mean of busy_s over the GPMs that rendered this frame
    events: int
    stolen: int


def _owners(home: int, nbytes: float, reader: int, g: int, out: dict[int, float]) -> None:
    if home == INTERLEAVED:
        for k in range(g):
            out[k] = out.get(k, 0.0) + nbytes / g
    else:
        k = reader if home == OWN else home
        out[k] = out.get(k, 0.0) + nbytes


def simulate(plan: Plan, s: SystemParams) -> FrameResult:
    s.check()
    g = s.gpms
    env = CountingEnvironment()
    numa = NUMASystem(env, g, s.dram_gbps * 1e9, s.link_gbps * 1e9, cache_bytes=s.cache_mb * 2 ** 20,
                      topology_kind=s.topology)
    queues = [list(q) for q in plan.queues]
    left = [sum(b.cost for b in q) for q in queues]
    cover = np.zeros((g, g))
    busy = np.zeros(g)
    stolen = [0]

    def next_batch(k: int):
        if queues[k]:
            left[k] -= queues[k][0].cost
            return queues[k].pop(0)
        if not plan.steal:
            return None
        victim = max(range(g), key=lambda j: (left[j] if len(queues[j]) > 0 else -1.0))
        if not queues[victim]:
            return None
        stolen[0] += 1
        left[victim] -= queues[victim][-1].cost
        return queues[victim].pop()

    def gpm(k: int):
        unit = numa.gpms[k]
        while (batch := next_batch(k)) is not None:
            for task in batch.tasks:
                t0 = env.now
                owners: dict[int, float] = {}
                for key, nbytes, home in task.reads:
                    miss = unit.cache.read(key, nbytes)
                    if miss:
                        _owners(home, miss, k, g, owners)
                _owners(task.fb_home, task.fb_bytes, k, g, owners)
                memory = env.process(numa.read_spread(k, owners))
                yield from unit.compute(task.compute_s)
                yield memory
                busy[k] += env.now - t0
                cover[k] += task.cover

    renders = [env.process(gpm(k)) for k in range(g)]
    marks = {}

    def compose():
        yield simpy.AllOf(env, renders)
        marks["render"] = env.now
        px = np.minimum(cover, plan.strip_px)  # a GPM's layer covers at most its strip
        bpp = s.compose_bytes_per_px
        if plan.compose == "master":
            sends = [env.process(numa.read(0, k, px[k].sum() * bpp)) for k in range(1, g)]
            if sends:
                yield simpy.AllOf(env, sends)
            yield env.process(numa.gpms[0].compute(px[1:].sum() / (s.sw_compose_rate_g * 1e9)))
        elif plan.compose == "distributed":
            def owner(r: int):
                sends = [env.process(numa.read(r, k, px[k, r] * bpp)) for k in range(g) if k != r]
                if sends:
                    yield simpy.AllOf(env, sends)
                yield env.process(numa.gpms[r].compute((px[:, r].sum() - px[r, r]) / (s.hw_compose_rate_g * 1e9)))
            yield simpy.AllOf(env, [env.process(owner(r)) for r in range(g)])

    env.process(compose())
    env.run()
    render = marks["render"]
    active = busy[busy > 0]
    return FrameResult(frame_s=env.now, render_s=render, compose_s=env.now - render,
                       remote_bytes=numa.remote_bytes, busy_s=busy,
                       imbalance=float(active.max() / active.mean()) if active.size else 1.0,
                       events=env.events, stolen=stolen[0])
