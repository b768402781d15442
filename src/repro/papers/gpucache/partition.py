"""Partitioners of a task graph's tasks into ``k`` parts (one part = one thread block's tasks).

- ``default``: the tasks in their default order, cut into k consecutive chunks;
- ``random``: a seeded random order, cut the same way;
- ``vertex``: METIS (pymetis) partitions the *data* graph's vertices into k balanced parts and
  each task goes to its first endpoint's part: the classic vertex-partition model, which balances
  data, not tasks, and minimises cut edges, not copies;
- ``edge``: the balanced edge partition by split-and-connect (Li et al., SIGMETRICS 2017): every
  vertex of degree d is split into d copies, one per incident task, the copies chained by unit
  auxiliary edges, and a balanced vertex partition of that split graph (METIS) partitions the tasks.
  The dominant task edges of the split graph are contracted (each task is one vertex of weight 1),
  which is the split graph with those edges uncuttable. A vertex whose chain is cut c times lands in
  at most c + 1 parts, so the cut bounds the copies;
- ``hypergraph``: Mt-KaHyPar with the connectivity - 1 objective on the hypergraph whose nodes are
  tasks and whose hyperedges are the data vertices: the exact copy count, and the expensive model.

Every partitioner returns one part id per task; the same seed gives the same partition.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from repro.papers.gpucache.taskgraph import TaskGraph

PARTITIONERS = ("default", "random", "vertex", "edge", "hypergraph")


@dataclass
class Partition:
    method: str
    parts: np.ndarray  # part id of each task, in [0, k)
    k: int
    seconds: float     # wall time of the partitioner itself (building its input included)


def check_k(g: TaskGraph, k: int) -> None:
    if not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"{g.name}: partition count k must be a positive integer, got {k!r}")
    if k > g.m:
        raise ValueError(f"{g.name}: partition count k={k} is above the task count {g.m}")


def chunks(m: int, k: int) -> np.ndarray:
    """Part ids cutting m tasks in their given order into k consecutive, near-equal chunks."""
    return (np.arange(m, dtype=np.int64) * k) // m


def incidence_chains(g: TaskGraph) -> sp.csr_matrix:
    """The contracted split graph of split-and-connect: tasks as vertices, consecutive tasks of
    each data vertex's incidence list (in task order) joined by a unit edge (symmetric CSR)."""
    ends = np.concatenate([g.u, g.v])
    tasks = np.concatenate([np.arange(g.m), np.arange(g.m)])
    order = np.lexsort((tasks, ends))
    ends, tasks = ends[order], tasks[order]
    same = ends[1:] == ends[:-1]
    a, b = tasks[:-1][same], tasks[1:][same]
    chain = sp.coo_matrix((np.ones(len(a), np.int32), (a, b)), shape=(g.m, g.m))
    chain = (chain + chain.T).tocsr()
    chain.sum_duplicates()  # two tasks sharing both endpoints are joined twice: weight 2
    return chain


def metis(adjacency: sp.csr_matrix, k: int, seed: int, weighted: bool) -> np.ndarray:
    """METIS k-way parts of a symmetric CSR graph (edge weights used when ``weighted``)."""
    import pymetis

    if k == 1:
        return np.zeros(adjacency.shape[0], np.int64)
    graph = pymetis.CSRAdjacency(adj_starts=adjacency.indptr.astype(np.int32),
                                 adjacent=adjacency.indices.astype(np.int32))
    opts = pymetis.Options(seed=seed)
    eweights = adjacency.data.astype(np.int32) if weighted else None
    _, parts = pymetis.part_graph(k, adjacency=graph, eweights=eweights, options=opts)
    return np.asarray(parts, dtype=np.int64)


def hypergraph(g: TaskGraph, k: int, seed: int, threads: int, epsilon: float) -> np.ndarray:
    """Mt-KaHyPar (deterministic preset, km1) parts of the task/data hypergraph."""
    import mtkahypar

    init = _mtkahypar(threads)
    mtkahypar.set_seed(seed)
    ctx = init.context_from_preset(mtkahypar.PresetType.DETERMINISTIC)
    ctx.set_partitioning_parameters(k, epsilon, mtkahypar.Objective.KM1)
    ctx.logging = False
    ends = np.concatenate([g.u, g.v])
    tasks = np.concatenate([np.arange(g.m), np.arange(g.m)])
    order = np.argsort(ends, kind="stable")
    pins = np.split(tasks[order], np.cumsum(np.bincount(ends, minlength=g.n))[:-1])
    hg = init.create_hypergraph(ctx, g.m, g.n, [p.tolist() for p in pins])
    return np.asarray(hg.partition(ctx).get_partition(), dtype=np.int64)


_MTKAHYPAR: dict[str, object] = {}


def _mtkahypar(threads: int):
    """Mt-KaHyPar's initializer: it may be made once per process (its thread pool), so it is kept."""
    import mtkahypar

    if "init" not in _MTKAHYPAR:
        _MTKAHYPAR["init"] = mtkahypar.initialize(threads, False)
    return _MTKAHYPAR["init"]


def partition(g: TaskGraph, method: str, k: int, seed: int = 0, threads: int = 1,
              epsilon: float = 0.03) -> Partition:
    """Partition g's tasks into k parts with ``method`` (one of PARTITIONERS)."""
    if method not in PARTITIONERS:
        raise ValueError(f"partitioner: unknown method {method!r}; known: {', '.join(PARTITIONERS)}")
    check_k(g, k)
    t0 = time.perf_counter()
    if method == "default":
        parts = chunks(g.m, k)
    elif method == "random":
        parts = np.empty(g.m, np.int64)
        parts[np.random.default_rng(seed).permutation(g.m)] = chunks(g.m, k)
    elif method == "vertex":
        parts = metis(g.adjacency(), min(k, g.n), seed, weighted=False)[g.u]
    elif method == "edge":
        parts = metis(incidence_chains(g), k, seed, weighted=True)
    else:
        parts = hypergraph(g, k, seed, threads, epsilon)
    return Partition(method, parts, k, time.perf_counter() - t0)
