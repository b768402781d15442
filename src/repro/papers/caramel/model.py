"""A SimPy model of data-parallel iterations: a measured gradient timeline, an all-reduce plan and a
ring all-reduce over one link kind.

Each iteration runs forward (``forward_s``) then backward (``backward_s``); a plan's message may start
``release_s`` into backward. All-reduces run one at a time (one communicator, as NCCL and gloo issue
them), each as ``2 (p - 1)`` ring steps of ``n / p`` bytes through a :class:`repro.sim.link.Link` of the
link's bandwidth and alpha, so a lone all-reduce takes exactly ``links.ring_allreduce_s``. Arms differ in
their plan and in what the next forward waits for:

- ``no_overlap``, ``ddp``, ``horovod``, ``caramel_ddp``: the optimizer step waits for every all-reduce
  (DDP's finalize, Horovod's synchronize), so the next forward starts when backward and the last
  all-reduce have ended; all-reduces go in plan order (FIFO).
- ``caramel``: the paper's transfer boundaries: the next forward needs a parameter only when it reaches
  the parameter's layer (``need_s``), so it waits per layer, and released all-reduces go earliest-needed
  first (non-preemptive; chunks give the preemption points).

Compute is not slowed by communication (no contention for SMs or memory) and the optimizer step takes
no time: both assumed, and both favour overlap in every arm alike. The iteration time is the steady
state: the mean gap between forward starts after the first iteration."""

from __future__ import annotations

import simpy

import pandas as pd

from repro.papers.caramel import plan as plans
from repro.papers.caramel.links import LinkSpec
from repro.sim.engine import CountingEnvironment
from repro.sim.link import Link

ARMS = ("no_overlap", "ddp", "horovod", "caramel_ddp", "caramel")


def make_plan(arm: str, tl: pd.DataFrame, world: int, link: LinkSpec, caramel: plans.CaramelParams,
              fusion_mb: float = 64.0, cycle_ms: float = 5.0) -> list[plans.Message]:
    if arm == "no_overlap":
        return plans.no_overlap(tl)
    if arm == "ddp":
        return plans.ddp(tl)
    if arm == "horovod":
        return plans.horovod(tl, fusion_mb, cycle_ms)
    if arm in ("caramel", "caramel_ddp"):
        return plans.caramel(tl, world, link, caramel)
    raise ValueError(f"unknown arm {arm!r}; known: {', '.join(ARMS)}")


def allreduce(env: simpy.Environment, link: Link, nbytes: float, world: int):
    """Generator: one ring all-reduce: 2 (p - 1) steps of n / p bytes through the link."""
    for _ in range(2 * (world - 1)):
        yield from link.transfer(nbytes / world)


def simulate(tl: pd.DataFrame, messages: list[plans.Message], world: int, link: LinkSpec,
             boundaries: bool = False, iterations: int = 4) -> dict[str, float]:
    """Steady-state iteration time (s: the mean gap between forward starts, the first iteration left
    out) and the link's busy share, over ``iterations`` (>= 3) iterations."""
    if iterations < 3:
        raise ValueError(f"iterations: need at least 3 for a steady-state gap, got {iterations}")
    env = CountingEnvironment()
    wire = Link(env, link.bandwidth, link.alpha, name=link.name)
    comm = simpy.PriorityResource(env, capacity=1)
    forward_s, backward_s = float(tl["forward_s"].iloc[0]), float(tl["backward_s"].iloc[0])
    need = tl.set_index("index")["need_s"].to_dict()
    order = sorted(range(len(messages)), key=lambda k: (messages[k].need_s, k)) if boundaries else range(len(messages))
    rank = {k: r for r, k in enumerate(order)}
    done = [[env.event() for _ in messages] for _ in range(iterations)]
    by_param: dict[int, list[int]] = {}
    for k, m in enumerate(messages):
        for i in m.params:
            by_param.setdefault(i, []).append(k)
    starts = []

    def send(it: int, k: int, t_backward: float):
        m = messages[k]
        yield env.timeout(max(0.0, t_backward + m.release_s - env.now))
        with comm.request(priority=(it, rank[k])) as req:
            yield req
            yield from allreduce(env, wire, m.nbytes, world)
        done[it][k].succeed()

    def forward(it: int):
        if it == 0 or not boundaries:
            yield env.timeout(forward_s)
            return
        elapsed = 0.0  # forward compute done so far; waits for all-reduces come on top
        for i in sorted(need, key=lambda i: (need[i], i)):
            wait = [done[it - 1][k] for k in by_param.get(i, [])]
            yield env.timeout(max(0.0, need[i] - elapsed))
            elapsed = need[i]
            if wait:
                yield env.all_of(wait)
        yield env.timeout(max(0.0, forward_s - elapsed))

    def training():
        for it in range(iterations):
            starts.append(env.now)
            yield from forward(it)
            t_backward = env.now
            for k in range(len(messages)):
                env.process(send(it, k, t_backward))
            yield env.timeout(backward_s)
            if not boundaries:
                yield env.all_of(done[it])
        yield env.all_of(done[-1])

    env.process(training())
    env.run()
    gaps = [b - a for a, b in zip(starts[1:-1], starts[2:])]
    iteration = sum(gaps) / len(gaps)
    return {"iteration_s": iteration, "link_busy": wire.busy / env.now if env.now else 0.0,
            "compute_s": forward_s + backward_s, "events": float(env.events)}


def run_arm(arm: str, tl: pd.DataFrame, world: int, link: LinkSpec, caramel: plans.CaramelParams,
            fusion_mb: float = 64.0, cycle_ms: float = 5.0, iterations: int = 4) -> dict[str, float]:
    messages = make_plan(arm, tl, world, link, caramel, fusion_mb, cycle_ms)
    out = simulate(tl, messages, world, link, boundaries=arm == "caramel", iterations=iterations)
    return {**out, **plans.summary(messages)}
