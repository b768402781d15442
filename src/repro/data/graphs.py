"""Synthetic graphs with the sizes of real GNN datasets, and METIS partitions as Cluster-GCN uses them.

The real graphs cannot be fetched here (no network for the datasets' hosts; OGB's downloader fails), so a
graph is generated with a dataset's node, edge, feature and class counts (DATASETS):

- structure: a Chung-Lu graph over power-law expected degrees (exponent `gamma`), with a planted
  partition: every node has a class, and an edge's far end is drawn from its own class with probability
  `p_in`, else from any class, each by degree weight; undirected, no self loops or repeats, trimmed to
  the dataset's edge count;
- labels: the planted classes (none of these synthetic graphs has real labels; PPI's 121 labels are
  multi-label in the original and are one planted class per node here);
- features: a random class centroid per class plus unit Gaussian noise, scaled by `signal`, so that
  neither the features alone nor the structure alone determine the label.

`gamma`, `p_in` and `signal` are assumed (no dataset states them): they make a learnable task, not a
copy of the dataset's structure beyond its sizes. `metis_parts` splits a graph into balanced parts
(pymetis), and `cluster_batches` groups parts into Cluster-GCN's batches.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp


@dataclass(frozen=True)
class GraphSpec:
    nodes: int
    edges: int  # directed edges of the CSR (each undirected edge counted both ways)
    features: int
    classes: int


# Node and edge counts: the datasets table of QGTC (PPoPP 2022), which reuses GNNAdvisor's (OSDI 2021);
# feature and class counts of proteins, artist and soc-BlogCatalog as the artifact's run script passes
# them (0_7a_eval_QGTC_cluster_GCN.py); PPI and ogbn-arxiv as DGL and OGB ship them. The counts were
# written from those tables, not re-read from the PDFs here.
DATASETS = {
    "proteins": GraphSpec(43_471, 162_088, 29, 2),
    "artist": GraphSpec(50_515, 1_638_396, 100, 12),
    "soc-BlogCatalog": GraphSpec(88_784, 2_093_195, 128, 39),
    "ppi": GraphSpec(56_944, 818_716, 50, 121),
    "ogbn-arxiv": GraphSpec(169_343, 1_166_243, 128, 40),
}


@dataclass
class Graph:
    adjacency: sp.csr_matrix  # symmetric, binary, no self loops (int8)
    features: np.ndarray  # float32 (nodes, features)
    labels: np.ndarray  # int64 (nodes,)
    name: str

    @property
    def nodes(self) -> int:
        return self.adjacency.shape[0]

    @property
    def edges(self) -> int:
        return int(self.adjacency.nnz)


def spec(name: str, scale: float = 1.0) -> GraphSpec:
    """A dataset's sizes, nodes and edges multiplied by `scale` (features and classes kept)."""
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; known: {sorted(DATASETS)}")
    s = DATASETS[name]
    return GraphSpec(max(int(s.nodes * scale), s.classes), max(int(s.edges * scale), 2), s.features, s.classes)


def power_law_graph(s: GraphSpec, seed: int = 0, gamma: float = 2.5, p_in: float = 0.8, signal: float = 1.0,
                    name: str = "") -> Graph:
    """A planted-partition Chung-Lu graph with the sizes of `s` (see the module doc)."""
    rng = np.random.default_rng(seed)
    n, classes = s.nodes, s.classes
    labels = rng.integers(0, classes, n)
    weights = (1.0 - rng.random(n)) ** (-1.0 / (gamma - 1.0))  # Pareto: P(w > x) ~ x^-(gamma - 1)
    target = s.edges // 2  # undirected edges
    order = np.argsort(labels, kind="stable")
    bounds = np.searchsorted(labels[order], np.arange(classes + 1))
    cum_class = np.cumsum(weights[order])  # by class, to draw within a class by weight
    cum_all = np.cumsum(weights)
    pairs = np.empty((0, 2), np.int64)
    for _ in range(64):  # top up until the target is reached (repeats are dropped)
        draw = int((target - len(pairs)) * 2) + 16
        u = np.searchsorted(cum_all, rng.random(draw) * cum_all[-1])
        v = np.searchsorted(cum_all, rng.random(draw) * cum_all[-1])
        inside = rng.random(draw) < p_in
        lo, hi = bounds[labels[u[inside]]], bounds[labels[u[inside]] + 1]
        base = np.where(lo > 0, cum_class[np.maximum(lo - 1, 0)], 0.0)
        pick = base + rng.random(inside.sum()) * (cum_class[hi - 1] - base)
        v[inside] = order[np.minimum(np.searchsorted(cum_class, pick), hi - 1)]
        new = np.stack([np.minimum(u, v), np.maximum(u, v)], 1)
        new = new[new[:, 0] != new[:, 1]]
        pairs = np.unique(np.concatenate([pairs, new]), axis=0)
        if len(pairs) >= target:
            break
    pairs = pairs[rng.permutation(len(pairs))[:target]]
    adj = sp.coo_matrix((np.ones(len(pairs), np.int8), (pairs[:, 0], pairs[:, 1])), shape=(n, n))
    adj = (adj + adj.T).tocsr()
    adj.sort_indices()
    centroids = rng.standard_normal((classes, s.features)).astype(np.float32)
    features = signal * centroids[labels] + rng.standard_normal((n, s.features)).astype(np.float32)
    return Graph(adj, features.astype(np.float32), labels.astype(np.int64), name)


def dataset_graph(name: str, scale: float = 1.0, seed: int = 0, **kw) -> Graph:
    """The synthetic graph with dataset `name`'s sizes (times `scale`)."""
    return power_law_graph(spec(name, scale), seed=seed, name=name, **kw)


def metis_parts(adjacency: sp.csr_matrix, parts: int, seed: int = 0) -> np.ndarray:
    """METIS k-way part of every node of a symmetric CSR graph (pymetis), as Cluster-GCN partitions."""
    import pymetis

    n = adjacency.shape[0]
    if parts <= 1 or n <= parts:
        return np.zeros(n, np.int64) if parts <= 1 else np.arange(n, dtype=np.int64) % max(parts, 1)
    graph = pymetis.CSRAdjacency(adj_starts=adjacency.indptr.astype(np.int32), adjacent=adjacency.indices.astype(np.int32))
    _, membership = pymetis.part_graph(parts, adjacency=graph, options=pymetis.Options(seed=seed))
    return np.asarray(membership, dtype=np.int64)


def cluster_batches(parts: np.ndarray, clusters_per_batch: int, seed: int = 0) -> list[np.ndarray]:
    """Cluster-GCN's batches for one epoch: the parts shuffled and grouped `clusters_per_batch` at a time;
    each batch is the sorted node ids of its parts."""
    rng = np.random.default_rng(seed)
    k = int(parts.max()) + 1 if len(parts) else 0
    order = np.argsort(parts, kind="stable")
    starts = np.searchsorted(parts[order], np.arange(k + 1))
    shuffled = rng.permutation(k)
    return [np.sort(np.concatenate([order[starts[c]:starts[c + 1]] for c in shuffled[i:i + clusters_per_batch]]))
            for i in range(0, k, clusters_per_batch)]
