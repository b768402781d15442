"""Seeded synthetic VR scenes: a frame is two views of N objects with triangles and textures.

The paper profiles real-game traces for each object's viewport, triangle count and texture data
(§Evaluation); we have no traces, so each scene is drawn from a :class:`SceneSpec` whose every
field is assumed (documented in ``config/experiment/oovr/scenes.yaml``). Textures come from a pool
with Zipf popularity, so objects share them; both views of an object use the same geometry and
textures, so the eyes share everything but a small disparity shift.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from repro.sim.params import ParamError, count, non_negative, positive


@dataclass
class SceneSpec:
    name: str = "scene"
    objects: int = 200  # draw-call objects per view
    width: int = 1280  # pixels per eye
    height: int = 1024
    triangles_m: float = 1.0  # triangles per view, millions
    textures: int = 200  # texture pool size
    texture_kb: float = 512.0  # mean texture size, KiB (lognormal, sigma 0.7)
    textures_per_object: float = 2.0  # mean textures an object binds (1 + Poisson)
    sharing: float = 1.0  # Zipf exponent of texture popularity: higher = more sharing between objects
    depth_complexity: float = 2.5  # fragments per screen pixel (overdraw)
    size_sigma: float = 1.2  # lognormal sigma of object screen area
    triangle_sigma: float = 1.0  # lognormal sigma of triangles per object
    disparity: float = 0.03  # right-eye shift of every object, fraction of the width

    def check(self, key: str = "scenes") -> "SceneSpec":
        k = f"{key}.{self.name}"
        count(f"{k}.objects", self.objects)
        count(f"{k}.width", self.width)
        count(f"{k}.height", self.height)
        positive(f"{k}.triangles_m", self.triangles_m)
        count(f"{k}.textures", self.textures)
        positive(f"{k}.texture_kb", self.texture_kb)
        non_negative(f"{k}.textures_per_object", self.textures_per_object)
        non_negative(f"{k}.sharing", self.sharing)
        positive(f"{k}.depth_complexity", self.depth_complexity)
        non_negative(f"{k}.size_sigma", self.size_sigma)
        non_negative(f"{k}.triangle_sigma", self.triangle_sigma)
        if not 0 <= self.disparity < 1:
            raise ParamError(f"{k}.disparity: must be in [0, 1), got {self.disparity!r}")
        return self


@dataclass
class Scene:
    """One frame's objects. Per object o: ``tris[o]``, ``frags[o]`` (fragments per view), its box
    ``x0[o], x1[o]`` in view pixels (left eye; the right eye adds ``shift``) and ``tex[o]`` (texture
    ids); per texture t: ``tex_bytes[t]``."""

    spec: SceneSpec
    tris: np.ndarray
    frags: np.ndarray
    x0: np.ndarray
    x1: np.ndarray
    shift: float
    tex: list[np.ndarray]
    tex_bytes: np.ndarray

    @property
    def n(self) -> int:
        return len(self.tris)

    def users(self) -> dict[int, list[int]]:
        """Texture id -> objects that bind it."""
        out: dict[int, list[int]] = {}
        for o, ts in enumerate(self.tex):
            for t in ts:
                out.setdefault(int(t), []).append(o)
        return out


def generate(spec: SceneSpec, seed: int, frame: int = 0) -> Scene:
    """The scene's objects (fixed by ``seed``) seen from frame ``frame``'s camera (positions vary)."""
    spec.check()
    rng = np.random.default_rng(seed)
    n = spec.objects
    tris = rng.lognormal(0.0, spec.triangle_sigma, n)
    tris = np.maximum(1.0, tris / tris.sum() * spec.triangles_m * 1e6)
    area = rng.lognormal(0.0, spec.size_sigma, n)
    pop = 1.0 / np.arange(1, spec.textures + 1) ** spec.sharing
    pop /= pop.sum()
    perm = rng.permutation(spec.textures)  # popularity rank -> texture id
    tex = []
    for _ in range(n):
        k = min(spec.textures, 1 + rng.poisson(max(0.0, spec.textures_per_object - 1)))
        tex.append(perm[rng.choice(spec.textures, size=k, replace=False, p=pop)])
    tex_bytes = rng.lognormal(math.log(spec.texture_kb * 1024) - 0.7 ** 2 / 2, 0.7, spec.textures)

    cam = np.random.default_rng([seed, frame + 1])
    screen = spec.width * spec.height
    a = area * cam.lognormal(0.0, 0.1, n)  # the camera moves: coverage changes a little per frame
    frags = a / a.sum() * spec.depth_complexity * screen
    side = np.minimum(np.sqrt(frags), spec.width)  # square footprint in the view, at most a view wide
    cx = cam.uniform(0, spec.width, n)
    x0 = np.clip(cx - side / 2, 0, spec.width - 1)
    x1 = np.clip(cx + side / 2, x0 + 1, spec.width)
    return Scene(spec, tris, frags, x0, x1, spec.disparity * spec.width, tex, tex_bytes)
