"""How each arm distributes a frame over the GPMs: tasks, their data's homes, and composition.

- ``afr`` (alternate-frame): one GPM renders the whole frame (both views, all data local; the other
  GPMs render other frames, which does not shorten this frame's latency).
- ``sfr`` (split-frame, the single programming model): each view is cut into one vertical strip per
  GPM; a GPM renders every object that overlaps its strip (geometry repeated per strip), and every
  buffer, render target included, is interleaved over all GPMs' memories.
- ``object`` (object-level SFR): draws (left views, then right views) go round-robin to GPMs; an
  object's data lives with its left view's GPM, a shared texture with its first user; each GPM
  renders into its own render target; one master GPM composites in software.
- ``oo_app`` (the OO-VR programming model alone): both views of an object in one multi-view task
  (geometry and texels read once), objects grouped into texture-sharing batches, batches
  round-robin, master software composition.
- ``oovr``: ``oo_app`` plus the distribution engine (batches placed by predicted cost, longest
  first, data with them; an idle GPM takes the smallest batch of the most loaded queue) and
  distributed composition (each GPM composites its own strip in hardware).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from repro.papers.oovr.scenes import Scene
from repro.papers.oovr.system import ARMS, SystemParams
from repro.sim.params import choice

INTERLEAVED = -1  # a buffer spread evenly over all GPMs' memories


@dataclass
class Task:
    compute_s: float
    reads: list[tuple[object, float, int]]  # (buffer key, bytes, home GPM or INTERLEAVED)
    fb_bytes: float
    fb_home: int  # GPM holding the render target (INTERLEAVED, or -2 = the GPM that renders it)
    cover: np.ndarray  # pixels this task covers in each strip (for composition)


@dataclass
class Batch:
    tasks: list[Task]
    cost: float  # predicted seconds


@dataclass
class Plan:
    arm: str
    queues: list[list[Batch]]  # per GPM, in order
    steal: bool = False  # an idle GPM takes work from the most loaded queue
    compose: str = "none"  # none | master | distributed
    strip_px: float = 0.0  # pixels of one strip, both views
    batches: int = 0
    meta: dict = field(default_factory=dict)


OWN = -2  # fb_home: the render target of whichever GPM runs the task


def _strip_fracs(x0: float, x1: float, width: int, g: int) -> np.ndarray:
    edges = np.linspace(0, width, g + 1)
    lo, hi = np.maximum(edges[:-1], x0), np.minimum(edges[1:], x1)
    f = np.clip(hi - lo, 0, None)
    return f / f.sum() if f.sum() > 0 else np.eye(g)[min(g - 1, int(x0 * g / width))]


def _task(scene: Scene, s: SystemParams, o: int, frac_frags: float, views: int, cover: np.ndarray,
          homes: tuple[int, dict[int, int]], fb_home: int) -> Task:
    """Object ``o``'s work: ``views`` views in one pass, ``frac_frags`` of each view's fragments."""
    geo_home, tex_home = homes
    frags = scene.frags[o] * frac_frags
    tris = scene.tris[o]
    compute = max(views * tris / (s.tri_rate_g * 1e9), views * frags / (s.frag_rate_g * 1e9))
    texel = frags * s.tex_bytes_per_frag / len(scene.tex[o]) if len(scene.tex[o]) else 0.0
    reads = [(("geo", o), tris * s.vtx_bytes_per_tri, geo_home)]
    for t in scene.tex[o]:
        t = int(t)
        reads.append((("tex", t), min(scene.tex_bytes[t], texel), tex_home.get(t, geo_home)))
    return Task(compute, reads, views * frags * s.fb_bytes_per_frag, fb_home, cover)


def predicted_cost(scene: Scene, s: SystemParams, o: int) -> float:
    """The distribution engine's estimate of an object's two-view cost, from triangles and coverage."""
    return max(2 * scene.tris[o] / (s.tri_rate_g * 1e9), 2 * scene.frags[o] / (s.frag_rate_g * 1e9))


def _covers(scene: Scene, o: int, g: int, views: tuple[int, ...]) -> np.ndarray:
    w = scene.spec.width
    px = scene.frags[o] / scene.spec.depth_complexity
    out = np.zeros(g)
    for v in views:
        sh = scene.shift if v == 1 else 0.0
        out += px * _strip_fracs(min(w - 1, scene.x0[o] + sh), min(w, scene.x1[o] + sh), w, g)
    return out


def sharing_batches(scene: Scene, s: SystemParams) -> list[list[int]]:
    """Texture-sharing-aware batching: objects that bind the same texture join one batch, most
    shared textures first, while the batch's predicted cost stays under total / (gpms * batches_per_gpm)."""
    n = scene.n
    cost = np.array([predicted_cost(scene, s, o) for o in range(n)])
    cap = cost.sum() / (s.gpms * s.batches_per_gpm)
    parent = list(range(n))
    size = cost.copy()

    def root(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for t, objs in sorted(scene.users().items(), key=lambda kv: -len(kv[1])):
        for o in objs[1:]:
            a, b = root(objs[0]), root(o)
            if a != b and size[a] + size[b] <= cap:
                parent[b] = a
                size[a] += size[b]
    groups: dict[int, list[int]] = {}
    for o in range(n):
        groups.setdefault(root(o), []).append(o)
    return sorted(groups.values(), key=lambda objs: objs[0])


def build(scene: Scene, s: SystemParams, arm: str) -> Plan:
    choice("arm", arm, ARMS)
    g, n = s.gpms, scene.n
    strip_px = 2 * scene.spec.width * scene.spec.height / g
    if arm == "afr":
        tasks = [_task(scene, s, o, 1.0, 1, _covers(scene, o, g, (v,)), (0, {}), 0)
                 for v in (0, 1) for o in range(n)]
        queues = [[Batch(tasks, 0.0)]] + [[] for _ in range(g - 1)]
        return Plan(arm, queues, strip_px=strip_px, batches=1)
    if arm == "sfr":
        queues = [[] for _ in range(g)]
        for v in (0, 1):
            sh = scene.shift if v == 1 else 0.0
            w = scene.spec.width
            for o in range(n):
                fr = _strip_fracs(min(w - 1, scene.x0[o] + sh), min(w, scene.x1[o] + sh), w, g)
                for k in np.flatnonzero(fr):
                    cover = np.zeros(g)
                    cover[k] = scene.frags[o] * fr[k] / scene.spec.depth_complexity
                    queues[k].append(Batch([_task(scene, s, o, fr[k], 1, cover, (INTERLEAVED, {}),
                                                   INTERLEAVED)], 0.0))
        return Plan(arm, queues, strip_px=strip_px, batches=sum(map(len, queues)))
    if arm == "object":
        tex_home: dict[int, int] = {}
        for o in range(n):
            for t in scene.tex[o]:
                tex_home.setdefault(int(t), o % g)
        queues = [[] for _ in range(g)]
        for d in range(2 * n):
            o, v = d % n, d // n
            queues[d % g].append(Batch([_task(scene, s, o, 1.0, 1, _covers(scene, o, g, (v,)),
                                              (o % g, tex_home), OWN)], 0.0))
        return Plan(arm, queues, compose="master", strip_px=strip_px, batches=2 * n)
    groups = sharing_batches(scene, s)
    costs = [sum(predicted_cost(scene, s, o) for o in objs) for objs in groups]
    if arm == "oo_app":
        where = [i % g for i in range(len(groups))]
        order = list(range(len(groups)))
    else:  # oovr: longest predicted batch first, onto the least loaded GPM
        order = sorted(range(len(groups)), key=lambda i: -costs[i])
        load, where = np.zeros(g), [0] * len(groups)
        for i in order:
            k = int(np.argmin(load))
            where[i] = k
            load[k] += costs[i]
    home_of_obj = {o: where[i] for i, objs in enumerate(groups) for o in objs}
    tex_home = {}
    for t, objs in scene.users().items():
        homes = [home_of_obj[o] for o in objs]
        tex_home[t] = max(set(homes), key=homes.count)
    queues = [[] for _ in range(g)]
    for i in order:
        tasks = [_task(scene, s, o, 1.0, 2, _covers(scene, o, g, (0, 1)), (home_of_obj[o], tex_home), OWN)
                 for o in groups[i]]
        queues[where[i]].append(Batch(tasks, costs[i]))
    if arm == "oo_app":
        return Plan(arm, queues, compose="master", strip_px=strip_px, batches=len(groups))
    return Plan(arm, queues, steal=True, compose="distributed", strip_px=strip_px, batches=len(groups))
