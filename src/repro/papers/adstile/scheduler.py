"""A SimPy model of chains of DNNs sharing the tiles (SMs) of one accelerator, under five policies.

Each chain releases a frame every period; its stages run in order, and the frame must leave the last
stage by the chain's end-to-end deadline. A job's latency on k tiles is its DNN's measured curve times
the job's execution-time factor (``workload.variation``), times ``interference`` while another job runs
at the same time (the slowdown of a DNN on SMs of its own while another runs beside it: measured where
the SM partitions can be disjoint, else assumed; schedule.py). Jobs progress as
fluids: the scheduler recomputes every job's rate at each release, completion and check.

Reallocation: a job that starts on tiles not holding its weights, or whose tile count changes while it
runs, stalls for ``restart_us`` plus the bytes moved over ``migrate_gbps`` (weights at a start; weights
and live features during a run, in proportion to the tiles changed), holding its tiles: that held but
idle tile-time is the waste. The policies:

- ``reservation``: every task (chain stage) owns a fixed partition sized for the worst-case factor;
  weights stay resident, nothing moves, jobs of a task queue on its partition.
- ``fixed_priority`` / ``edf``: the same per-task tile counts, taken from one pool when a job starts
  (non-preemptive, lower-priority jobs backfill free tiles); rate-monotonic by chain rate, or earliest
  end-to-end deadline first. A job placed on tiles that last held another task reloads its weights.
- ``work_conserving``: every ready job runs at once on an equal share of all tiles (FIFO when there are
  more jobs than tiles); each release and completion re-shares the tiles, moving the affected jobs.
  Deadlines play no part.
- ``ads_tile``: the isolation-aware policy. The chains are placed in isolation domains: each chain in
  its own, or all in one (the colocation with fewer tiles is kept). A domain's tiles hold the weights of
  every DNN placed there and run its jobs one after another, earliest deadline first, so nothing moves
  inside it (assumed: the tiles' memory holds those weights). A chain's own domain is sized so that
  the chain meets its deadline at the ``quantile`` of the execution-time factor (the probabilistic
  latency model), or at the worst case, whichever needs fewer tiles in all; an elastic pool lends extra
  tiles where the chain would miss: at a job's start (predicted from the quantile, DAG-aware: the
  chain's later stages count) and at most once more, when a running job passes its quantile latency
  (predicted from its progress); they return at the job's end. A shared domain's size is searched, with
  no pool. Reallocation happens only at those two points, at most twice per job.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import simpy

from repro.papers.adstile.workload import ChainSpec, Curve, variation, variation_quantile
from repro.sim.engine import CountingEnvironment

POLICIES = ("reservation", "fixed_priority", "edf", "work_conserving", "ads_tile")
EPS = 1e-12


@dataclass
class ModelParams:
    vmax: float = 3.3              # paper (abstract): DNN execution time varies by up to 3.3x
    variation_shape: float = 4.0   # assumed: factor 1 + (vmax - 1) U^4: median 1.14, p90 2.5 (most frames fast)
    restart_us: float = 50.0       # assumed: stop, drain and restart a DNN on its tiles
    migrate_gbps: float = 1000.0   # assumed: bytes moved between tiles / from DRAM during a reallocation
    quantile: float = 0.9          # assumed (the paper's value is not in what we read): ADS-Tile sizes domains at this quantile
    interference: float = 1.0      # slowdown while another job runs; the experiment sets it from the curves record
    horizon_s: float = 2.0         # simulated time: frames released in [0, horizon)


@dataclass
class Task:
    chain: int
    stage: int
    dnn: str
    curve: Curve
    weight_bytes: float
    feature_bytes: float


@dataclass
class Job:
    task: Task
    frame: int
    deadline: float                # the chain's absolute end-to-end deadline
    factor: float
    progress: float = 0.0          # fraction of the work done
    k: int = 0                     # tiles held
    rate: float = 0.0              # work fraction per second while not stalled
    stall_until: float = 0.0
    checked: bool = False          # ads_tile: the one in-run check done
    check_at: float = math.inf
    borrowed: int = 0
    tiles: list[int] = field(default_factory=list)


@dataclass
class Stats:
    misses: int = 0
    frames: int = 0
    jobs: int = 0
    reallocations: int = 0
    stall_tile_s: float = 0.0
    held_tile_s: float = 0.0
    busy_tile_s: float = 0.0
    worst_slack_s: float = math.inf
    events: int = 0

    @property
    def waste_pct(self) -> float:
        return 100.0 * self.stall_tile_s / self.held_tile_s if self.held_tile_s > 0 else 0.0


def chain_latency(tasks: list[Task], ks: list[int], factor: float) -> float:
    return sum(t.curve(k) for t, k in zip(tasks, ks)) * factor


def size_stages(tasks: list[Task], deadline: float, factor: float, tiles_max: int) -> list[int] | None:
    """Fewest tiles per stage (greedy on the largest latency cut per tile) so that the chain, every
    stage on its own tiles, meets ``deadline`` at ``factor``; None if tiles_max each cannot."""
    ks = [1] * len(tasks)
    while chain_latency(tasks, ks, factor) > deadline:
        gains = [(t.curve(k) - t.curve(k + 1)) if k < tiles_max else -1.0 for t, k in zip(tasks, ks)]
        best = int(np.argmax(gains))
        if gains[best] <= 0:
            return None
        ks[best] += 1
    return ks


def size_domain(tasks: list[Task], deadline: float, factor: float, tiles_max: int) -> int | None:
    """Fewest tiles of one domain that runs the chain's stages one after another within ``deadline``."""
    lo, hi = 1, tiles_max
    if chain_latency(tasks, [hi] * len(tasks), factor) > deadline:
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if chain_latency(tasks, [mid] * len(tasks), factor) <= deadline:
            hi = mid
        else:
            lo = mid + 1
    return lo


class Machine:
    """One simulation: ``tiles`` tiles, a policy and its sizing (``per_task``: tiles per task index;
    ``domains``: tiles per chain and ``elastic`` for ads_tile)."""

    def __init__(self, policy: str, chains: list[ChainSpec], deadlines: list[float], tasks: list[list[Task]],
                 tiles: int, mp: ModelParams, factors: list[np.ndarray], per_task: dict | None = None,
                 domains: list[int] | None = None, groups: list[int] | None = None, elastic: int = 0,
                 stop_on_miss: bool = True):
        self.policy, self.chains, self.deadlines, self.tasks = policy, chains, deadlines, tasks
        self.tiles, self.mp, self.factors = tiles, mp, factors
        self.per_task, self.domains, self.elastic = per_task or {}, domains or [], elastic
        self.groups = groups if groups is not None else list(range(len(chains)))  # chain -> its domain
        self.stop_on_miss = stop_on_miss
        self.env = CountingEnvironment()
        self.stats = Stats()
        self.ready: list[Job] = []
        self.running: list[Job] = []
        self.free_elastic = elastic
        self.resident: list[object] = [None] * tiles   # fixed_priority / edf: the task whose weights a tile holds
        self.free_ids = set(range(tiles))
        self.busy_task: set = set()                    # reservation: tasks whose partition runs a job
        self.busy_domain: set = set()                  # ads_tile: domains running a job
        self.last = 0.0
        self.wake = self.env.event()
        self.q_factor = variation_quantile(mp.quantile, mp.vmax, mp.variation_shape)
        self.sources_done = False

    # --- the fluid: progress, rates, stalls ---------------------------------------------------------
    def advance(self) -> None:
        now = self.env.now
        for j in self.running:
            work = max(0.0, now - max(self.last, j.stall_until))
            j.progress = min(1.0, j.progress + j.rate * work)
            self.stats.held_tile_s += j.k * (now - self.last)
            self.stats.busy_tile_s += j.k * work
        self.last = now

    def rate(self, job: Job) -> float:
        slow = self.mp.interference if len(self.running) > 1 else 1.0
        return 1.0 / (job.task.curve(job.k) * job.factor * slow)

    def stall(self, job: Job, moved_bytes: float) -> None:
        cost = self.mp.restart_us * 1e-6 + moved_bytes / (self.mp.migrate_gbps * 1e9)
        job.stall_until = max(self.env.now, job.stall_until) + cost
        self.stats.stall_tile_s += job.k * cost
        self.stats.reallocations += 1

    def start(self, job: Job, k: int, moved_bytes: float | None) -> None:
        job.k = k
        self.ready.remove(job)
        self.running.append(job)
        job.stall_until = self.env.now
        if moved_bytes is not None:
            self.stall(job, moved_bytes)

    def finish_time(self, job: Job) -> float:
        return max(self.env.now, job.stall_until) + (1.0 - job.progress) / job.rate

    # --- chains --------------------------------------------------------------------------------------
    def source(self, c: int):
        spec = self.chains[c]
        period = 1.0 / spec.hz
        frames = int(math.ceil(self.mp.horizon_s * spec.hz - EPS))
        for f in range(frames):
            yield self.env.timeout(max(0.0, f * period - self.env.now))
            self.release(Job(self.tasks[c][0], f, self.env.now + self.deadlines[c], float(self.factors[c][f, 0])))
            self.stats.frames += 1

    def release(self, job: Job) -> None:
        self.ready.append(job)
        if not self.wake.triggered:
            self.wake.succeed()

    def complete(self, job: Job) -> None:
        self.running.remove(job)
        self.stats.jobs += 1
        t = job.task
        self.release_tiles(job)
        if t.stage + 1 < len(self.tasks[t.chain]):
            nxt = self.tasks[t.chain][t.stage + 1]
            self.ready.append(Job(nxt, job.frame, job.deadline, float(self.factors[t.chain][job.frame, t.stage + 1])))
        else:
            slack = job.deadline - self.env.now
            self.stats.worst_slack_s = min(self.stats.worst_slack_s, slack)
            if slack < -1e-9:
                self.stats.misses += 1

    def release_tiles(self, job: Job) -> None:
        if self.policy == "reservation":
            self.busy_task.discard((job.task.chain, job.task.stage))
        elif self.policy == "ads_tile":
            self.busy_domain.discard(self.groups[job.task.chain])
            self.free_elastic += job.borrowed
        elif self.policy in ("fixed_priority", "edf"):
            self.free_ids.update(job.tiles)

    # --- policies ------------------------------------------------------------------------------------
    def dispatch(self, changed: bool) -> None:
        getattr(self, f"_{self.policy}")(changed)

    def _reservation(self, changed: bool) -> None:
        for job in sorted(self.ready, key=lambda j: (j.deadline, j.task.stage)):
            key = (job.task.chain, job.task.stage)
            if key not in self.busy_task:
                self.busy_task.add(key)
                self.start(job, self.per_task[key], None)

    def _pooled(self, key) -> None:
        for job in sorted(self.ready, key=key):
            need = self.per_task[(job.task.chain, job.task.stage)]
            if need > len(self.free_ids):
                continue
            own = [i for i in self.free_ids if self.resident[i] is job.task]
            other = [i for i in self.free_ids if self.resident[i] is not job.task]
            job.tiles = (own + other)[:need]
            self.free_ids.difference_update(job.tiles)
            new = sum(1 for i in job.tiles if self.resident[i] is not job.task)
            for i in job.tiles:
                self.resident[i] = job.task
            self.start(job, need, job.task.weight_bytes * new / need if new else None)

    def _fixed_priority(self, changed: bool) -> None:
        self._pooled(lambda j: (-self.chains[j.task.chain].hz, j.task.chain, j.deadline, j.task.stage))

    def _edf(self, changed: bool) -> None:
        self._pooled(lambda j: (j.deadline, j.task.stage))

    def _work_conserving(self, changed: bool) -> None:
        if not changed:
            return
        jobs = (self.running + self.ready)[:self.tiles]  # FIFO: running first, then in release order
        n = len(jobs)
        for i, job in enumerate(jobs):
            k = self.tiles // n + (1 if i < self.tiles % n else 0)
            if job in self.running:
                if job.k != k:
                    moved = (job.task.weight_bytes + job.task.feature_bytes) * abs(k - job.k) / max(k, job.k)
                    job.k = k
                    self.stall(job, moved)
            else:
                self.start(job, k, job.task.weight_bytes)

    def _ads_tile(self, changed: bool) -> None:
        now = self.env.now
        for job in sorted(self.ready, key=lambda j: (j.deadline, j.task.stage)):
            d = self.groups[job.task.chain]
            if d in self.busy_domain:
                continue
            self.busy_domain.add(d)
            g = self.domains[d]
            extra = self.borrow(job, g, now, None)
            self.start(job, g + extra, job.task.weight_bytes * extra / (g + extra) if extra else None)
            job.check_at = job.stall_until + job.task.curve(job.k) * self.q_factor * self.mp.interference
        for job in self.running:
            if not job.checked and job.check_at <= now + EPS and job.progress < 1.0:
                job.checked = True
                extra = self.borrow(job, job.k, now, job)
                if extra:
                    moved = (job.task.weight_bytes + job.task.feature_bytes) * extra / (job.k + extra)
                    job.k += extra
                    self.stall(job, moved)

    def later_stages(self, job: Job, k: int) -> float:
        rest = self.tasks[job.task.chain][job.task.stage + 1:]
        return sum(t.curve(k) for t in rest) * self.q_factor * self.mp.interference

    def borrow(self, job: Job, k: int, now: float, running: Job | None) -> int:
        """Elastic tiles this job takes so that the chain is predicted to meet its deadline (all the
        free ones if none suffice, none if it already does)."""
        g = self.domains[self.groups[job.task.chain]]

        def predicted(extra: int) -> float:
            kk = k + extra
            if running is None:
                this = job.task.curve(kk) * self.q_factor * self.mp.interference
            else:  # observed progress: the job's own rate so far, scaled to kk tiles
                this = (1.0 - job.progress) * job.task.curve(kk) * job.factor * self.mp.interference
            return now + this + self.later_stages(job, g)

        if predicted(0) <= job.deadline or self.free_elastic == 0:
            return 0
        extra = next((e for e in range(1, self.free_elastic + 1) if predicted(e) <= job.deadline), self.free_elastic)
        self.free_elastic -= extra
        job.borrowed += extra
        return extra

    # --- the scheduler process -----------------------------------------------------------------------
    def scheduler(self):
        while True:
            changed = self.wake.triggered   # a release
            if changed:
                self.wake = self.env.event()
            self.advance()
            for job in [j for j in self.running if j.progress >= 1.0 - 1e-9]:
                self.complete(job)
                changed = True
            if self.stop_on_miss and self.stats.misses:
                return
            self.dispatch(changed)
            for j in self.running:
                j.rate = self.rate(j)
            times = [self.finish_time(j) for j in self.running]
            times += [j.check_at for j in self.running if not j.checked and j.check_at > self.env.now + EPS]
            if not times and not self.ready and self.sources_done:
                return
            if times:
                yield self.env.timeout(max(0.0, min(times) - self.env.now)) | self.wake
            else:
                yield self.wake

    def run(self) -> Stats:
        procs = [self.env.process(self.source(c)) for c in range(len(self.chains))]

        def watch():
            yield simpy.AllOf(self.env, procs)
            self.sources_done = True
            if not self.wake.triggered:
                self.wake.succeed()

        self.env.process(watch())
        sched = self.env.process(self.scheduler())
        try:
            self.env.run(until=sched)
        except RuntimeError as e:  # work waits that no event can start: counted as misses below
            if "No scheduled events left" not in str(e):
                raise
        left = len(self.ready) + len(self.running)
        if left and not self.stats.misses:
            self.stats.misses += left   # unfinished work: the model could not keep up
        self.stats.events = self.env.events
        return self.stats


# --- sizing and the fewest tiles per policy ------------------------------------------------------------

def build_tasks(chains: list[ChainSpec], curves: dict[str, Curve], sizes: dict[str, tuple[float, float]]) -> list[list[Task]]:
    """Every chain's stages as tasks; ``sizes``: DNN -> (weight bytes, largest feature-map bytes)."""
    for spec in chains:
        for dnn in spec.stages:
            if dnn not in curves:
                raise ValueError(f"chains.{spec.name}: no latency curve for DNN {dnn!r}; measured: {', '.join(sorted(curves))}")
    return [[Task(c, s, dnn, curves[dnn], *sizes[dnn]) for s, dnn in enumerate(spec.stages)] for c, spec in enumerate(chains)]


def draw_factors(chains: list[ChainSpec], mp: ModelParams, seed: int) -> list[np.ndarray]:
    """Each chain's execution-time factors (frames x stages), shared by every policy (common random numbers)."""
    rng = np.random.default_rng(seed)
    out = []
    for spec in chains:
        frames = int(math.ceil(mp.horizon_s * spec.hz - EPS))
        out.append(variation(rng, frames * len(spec.stages), mp.vmax, mp.variation_shape).reshape(frames, len(spec.stages)))
    return out


@dataclass
class Point:
    policy: str
    tiles: float                 # fewest tiles with no deadline miss (NaN: none up to the limit)
    stats: Stats | None
    events: int                  # simulated events spent finding it


def simulate(policy: str, chains, tasks, deadlines, tiles: int, mp: ModelParams, factors, stop_on_miss=True, **sizing) -> Stats:
    return Machine(policy, chains, deadlines, tasks, tiles, mp, factors, stop_on_miss=stop_on_miss, **sizing).run()


def _search(meets, lo: int, hi: int) -> int | None:
    """Smallest n in [lo, hi] with meets(n), assuming more tiles never make a miss (None if hi misses)."""
    if lo > hi or not meets(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if meets(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def fewest_tiles(policy: str, chains, tasks, deadlines, mp: ModelParams, factors, limit: int) -> Point:
    """The fewest tiles (up to ``limit``) with which ``policy`` meets every deadline, and the full run there."""
    events = 0

    def run(tiles: int, stop=True, **sizing) -> Stats:
        nonlocal events
        st = simulate(policy, chains, tasks, deadlines, tiles, mp, factors, stop_on_miss=stop, **sizing)
        events += st.events
        return st

    def done(tiles, **sizing) -> Point:
        if tiles is None:
            return Point(policy, math.nan, None, events)
        st = run(tiles, stop=False, **sizing)
        return Point(policy, float(tiles), st, events)

    worst = mp.vmax * mp.interference
    if policy in ("reservation", "fixed_priority", "edf"):
        ks = [size_stages(t, d, worst, limit) for t, d in zip(tasks, deadlines)]
        if any(k is None for k in ks):
            return done(None)
        per_task = {(c, s): k for c, kc in enumerate(ks) for s, k in enumerate(kc)}
        if policy == "reservation":
            total = sum(per_task.values())
            return done(total if total <= limit and not run(total, per_task=per_task).misses else None, per_task=per_task)
        found = _search(lambda n: not run(n, per_task=per_task).misses, max(per_task.values()), limit)
        return done(found, per_task=per_task)
    if policy == "work_conserving":
        return done(_search(lambda n: not run(n).misses, 1, limit))
    best = None
    for q in sorted({mp.quantile, 1.0}):  # domains at the quantile with an elastic pool; at the worst case
        factor = variation_quantile(q, mp.vmax, mp.variation_shape) * mp.interference
        domains = [size_domain(t, d, factor, limit) for t, d in zip(tasks, deadlines)]
        if any(g is None for g in domains) or sum(domains) > limit:
            continue
        base = sum(domains)
        e = _search(lambda n: not run(base + n, domains=domains, elastic=n).misses, 0, limit - base)
        if e is not None and (best is None or base + e < best[0]):
            best = (base + e, dict(domains=domains, elastic=e))
    # every chain in one domain: frames run one at a time on all its tiles, earliest deadline first
    shared = dict(groups=[0] * len(tasks), elastic=0)
    g = _search(lambda n: not run(n, domains=[n], **shared).misses, 1, limit if best is None else best[0] - 1)
    if g is not None:
        best = (g, dict(domains=[g], **shared))
    if best is None:
        return done(None)
    return done(best[0], **best[1])
