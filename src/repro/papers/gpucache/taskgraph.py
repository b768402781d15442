"""The task graph of the caching model and the inputs it is built from.

A task graph has ``n`` data objects (vertices) and ``m`` tasks (edges): task ``t`` reads and
updates the data of vertices ``u[t]`` and ``v[t]`` (``u < v``). Its default order is the order the
kernel's author would loop in: the row-major (CSR) order of the matrix or edge list as built.

Inputs (``InputSpec.graph``):
- ``mesh2d`` / ``mesh3d``: the 5- / 7-point Poisson matrix of a size x size (x size) grid
  (pyamg.gallery.poisson), natural numbering;
- ``powerlaw``: an R-MAT graph (Graph500 parameters a, b, c = 0.57, 0.19, 0.19, edge factor 8) on
  ``size`` vertices, labels shuffled as Graph500 does, its largest connected component kept;
- ``pyamg:<name>``: one of the small real matrices pyamg ships (airfoil, bar, knot, ...);
- ``delaunay2d``: the Delaunay triangulation of ``size`` uniform random points (an unstructured
  mesh whose numbering follows point creation, not space);
- ``nbody``: the interacting pairs (within a cutoff giving about 12 neighbours per body) of
  ``size`` bodies uniform in a cube, one cutoff n-body step's pair list.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from repro.papers.gpucache import distinct

KERNELS = ("spmv", "flux", "pair", "spmm")
GRAPHS = ("mesh2d", "mesh3d", "powerlaw", "delaunay2d", "nbody", "pyamg:<name>")
VERTEX_BYTES = {"spmv": 8, "flux": 32, "pair": 32}  # bytes read + written per vertex (fp32 x,y; float4 in, out)


def vertex_bytes(spec: "InputSpec") -> int:
    """Bytes of per-vertex data the input's kernel reads + writes (spmm: F floats in, F out)."""
    return 8 * spec.width if spec.kernel == "spmm" else VERTEX_BYTES[spec.kernel]


class GraphError(ValueError):
    """A task graph the model cannot use (empty, disconnected, out-of-range ids, bad matrix)."""


@dataclass
class TaskGraph:
    """Tasks ``(u[t], v[t])`` over ``n`` vertices, with per-task weights in both directions
    (``w_uv`` scales v's data into u's result, ``w_vu`` the reverse) and a per-vertex diagonal."""

    name: str
    n: int
    u: np.ndarray
    v: np.ndarray
    w_uv: np.ndarray
    w_vu: np.ndarray
    diag: np.ndarray
    coords: np.ndarray | None = field(default=None, repr=False)  # vertex positions where the input has them

    def __post_init__(self):
        self.u = np.ascontiguousarray(self.u, dtype=np.int64)
        self.v = np.ascontiguousarray(self.v, dtype=np.int64)
        validate(self)

    @property
    def m(self) -> int:
        return len(self.u)

    def adjacency(self) -> sp.csr_matrix:
        """The symmetric 0/1 vertex adjacency (data graph) in CSR."""
        ones = np.ones(self.m, dtype=np.int32)
        a = sp.coo_matrix((ones, (self.u, self.v)), shape=(self.n, self.n))
        return (a + a.T).tocsr()


def validate(g: TaskGraph) -> None:
    """GraphError naming the problem: no tasks, ids out of range or equal, or not one component."""
    if g.n <= 0 or g.m == 0:
        raise GraphError(f"{g.name}: empty task graph ({g.n} vertices, {g.m} tasks)")
    if len(g.v) != g.m or len(g.w_uv) != g.m or len(g.w_vu) != g.m or len(g.diag) != g.n:
        raise GraphError(f"{g.name}: u, v, w_uv, w_vu must have one entry per task and diag one per vertex")
    lo, hi = min(g.u.min(), g.v.min()), max(g.u.max(), g.v.max())
    if lo < 0 or hi >= g.n:
        raise GraphError(f"{g.name}: vertex ids must lie in [0, {g.n}), got [{lo}, {hi}]")
    if np.any(g.u >= g.v):
        raise GraphError(f"{g.name}: every task must have u < v (self-loops and reversed pairs are not tasks)")
    ncomp, _ = connected_components(g.adjacency(), directed=False)
    if ncomp != 1:
        raise GraphError(f"{g.name}: the data graph has {ncomp} connected components; the model needs one "
                         "(partition each component on its own, or keep the largest)")


def from_matrix(name: str, a, coords: np.ndarray | None = None) -> TaskGraph:
    """The task graph of SpMV with a square sparse matrix: one task per pair {i, j}, i < j, with
    a nonzero in either triangle, computing y[i] += A[i, j] x[j] and y[j] += A[j, i] x[i]."""
    a = sp.csr_matrix(a)
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise GraphError(f"{name}: the matrix is {a.shape[0]} x {a.shape[1]}: SpMV's task graph needs a square matrix")
    a.sum_duplicates()
    pattern = abs(a) + abs(a.T)
    upper = sp.triu(pattern, k=1).tocsr()
    upper.eliminate_zeros()
    coo = upper.tocoo()
    u, v = coo.row.astype(np.int64), coo.col.astype(np.int64)  # CSR (row-major) order
    w_uv = np.asarray(a[u, v]).ravel().astype(np.float32)
    w_vu = np.asarray(a[v, u]).ravel().astype(np.float32)
    return TaskGraph(name, a.shape[0], u, v, w_uv, w_vu, a.diagonal().astype(np.float32), coords)


def from_pairs(name: str, n: int, pairs: np.ndarray, coords: np.ndarray | None = None,
               weights: np.ndarray | None = None) -> TaskGraph:
    """The task graph of an undirected pair list (duplicates merged), in (u, v) row-major order."""
    pairs = np.sort(np.asarray(pairs, dtype=np.int64).reshape(-1, 2), axis=1)
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    pairs, first = distinct.rows_and_first(pairs)
    w = np.ones(len(pairs), np.float32) if weights is None else np.asarray(weights, np.float32)[first]
    return TaskGraph(name, n, pairs[:, 0], pairs[:, 1], w, w.copy(), np.zeros(n, np.float32), coords)


def largest_component(pairs: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The pairs of the largest connected component relabelled to 0..n'-1 in id order, and the
    original ids of its vertices."""
    a = sp.coo_matrix((np.ones(len(pairs)), (pairs[:, 0], pairs[:, 1])), shape=(n, n))
    _, labels = connected_components(a + a.T, directed=False)
    keep = labels == np.bincount(labels).argmax()
    new_id = np.cumsum(keep) - 1
    inside = keep[pairs[:, 0]] & keep[pairs[:, 1]]
    return new_id[pairs[inside]], np.flatnonzero(keep)


def rmat_pairs(n: int, edge_factor: int, rng: np.random.Generator, abc=(0.57, 0.19, 0.19)) -> np.ndarray:
    """R-MAT edge list on 2**ceil(log2 n) ids folded into [0, n): Graph500's generator, vectorised."""
    scale = max(1, int(np.ceil(np.log2(n))))
    m = n * edge_factor
    a, b, c = abc
    src = np.zeros(m, np.int64)
    dst = np.zeros(m, np.int64)
    for bit in range(scale):
        r = rng.random(m)
        right = (r >= a) & (r < a + b) | (r >= a + b + c)  # quadrants b and d set the column bit
        down = r >= a + b  # quadrants c and d set the row bit
        src |= down.astype(np.int64) << bit
        dst |= right.astype(np.int64) << bit
    perm = rng.permutation(1 << scale)  # Graph500 shuffles the labels
    return np.stack([perm[src] % n, perm[dst] % n], axis=1)


@dataclass
class InputSpec:
    """One input of the model and the reorder run."""

    name: str = "mesh2d"        # label in tables and figures
    graph: str = "mesh2d"       # mesh2d | mesh3d | powerlaw | delaunay2d | nbody | pyamg:<name>
    size: int = 64              # grid side (meshes), vertex count (powerlaw), points (delaunay2d), bodies (nbody)
    kernel: str = "spmv"        # spmv | flux (cfd-like) | pair (n-body forces) | spmm (F right-hand sides)
    seed: int = 0               # generator seed of the random inputs
    width: int = 0              # spmm only: F, floats per vertex (a multiple of 4); 0 for the others


def check_spec(spec: InputSpec) -> None:
    graph_ok = spec.graph in GRAPHS[:-1] or (spec.graph.startswith("pyamg:") and len(spec.graph) > 6)
    if not graph_ok:
        raise ValueError(f"inputs[{spec.name}].graph: unknown graph {spec.graph!r}; known: {', '.join(GRAPHS)}")
    if spec.kernel not in KERNELS:
        raise ValueError(f"inputs[{spec.name}].kernel: unknown kernel {spec.kernel!r}; known: {', '.join(KERNELS)}")
    if spec.kernel == "spmm" and (spec.width <= 0 or spec.width % 4):
        raise ValueError(f"inputs[{spec.name}].width: kernel spmm needs F = width floats per vertex, "
                         f"a positive multiple of 4 (float4 loads), got {spec.width}")
    if spec.kernel != "spmm" and spec.width:
        raise ValueError(f"inputs[{spec.name}].width: only kernel spmm has a width; "
                         f"{spec.kernel} has fixed per-vertex data, got width {spec.width}")
    if spec.size < 2 and not spec.graph.startswith("pyamg:"):
        raise ValueError(f"inputs[{spec.name}].size: must be >= 2, got {spec.size}")


def build(spec: InputSpec) -> TaskGraph:
    """The task graph of one input (deterministic in spec.seed)."""
    check_spec(spec)
    rng = np.random.default_rng(spec.seed)
    s = spec.size
    if spec.graph in ("mesh2d", "mesh3d"):
        import pyamg

        grid = (s, s) if spec.graph == "mesh2d" else (s, s, s)
        return from_matrix(spec.name, pyamg.gallery.poisson(grid, format="csr", dtype=np.float32))
    if spec.graph.startswith("pyamg:"):
        import pyamg

        return from_matrix(spec.name, pyamg.gallery.load_example(spec.graph[6:])["A"])
    if spec.graph == "powerlaw":
        pairs, kept = largest_component(np.sort(rmat_pairs(s, 8, rng), axis=1), s)
        weights = rng.uniform(0.5, 1.5, len(pairs)).astype(np.float32)
        return from_pairs(spec.name, len(kept), pairs, weights=weights)
    if spec.graph == "delaunay2d":
        from scipy.spatial import Delaunay

        pts = rng.random((s, 2))
        tri = Delaunay(pts).simplices
        pairs = np.concatenate([tri[:, [0, 1]], tri[:, [1, 2]], tri[:, [0, 2]]])
        lengths = np.linalg.norm(pts[pairs[:, 0]] - pts[pairs[:, 1]], axis=1)
        return from_pairs(spec.name, s, pairs, coords=pts, weights=lengths)
    # nbody: cutoff radius for about 12 neighbours per body in the unit cube
    from scipy.spatial import cKDTree

    pts = rng.random((s, 3))
    cutoff = (12 / s * 3 / (4 * np.pi)) ** (1 / 3)
    pairs, kept = largest_component(cKDTree(pts).query_pairs(cutoff, output_type="ndarray"), s)
    return from_pairs(spec.name, len(kept), pairs, coords=pts[kept])
