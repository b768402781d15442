"""The synthetic graphs with the paper datasets' sizes (repro.data.graphs) and Cluster-GCN's METIS
batches."""

from __future__ import annotations

import numpy as np
import pytest

from repro.data import graphs


def test_sizes_structure_and_planted_labels():
    s = graphs.spec("artist", 0.02)
    g = graphs.dataset_graph("artist", 0.02, seed=1)
    adj = g.adjacency
    assert (g.nodes, g.features.shape, g.labels.max() + 1) == (s.nodes, (s.nodes, 100), 12)
    assert g.edges == s.edges // 2 * 2  # the dataset's directed edge count, each undirected edge both ways
    assert (adj != adj.T).nnz == 0 and adj.diagonal().sum() == 0 and set(np.unique(adj.data)) == {1}
    rows, cols = adj.nonzero()
    same = (g.labels[rows] == g.labels[cols]).mean()
    assert 0.5 < same < 0.9  # p_in = 0.8 less the repeats dropped (dense classes repeat more); chance 1/12
    deg = np.asarray(adj.sum(1)).ravel()
    assert deg.max() > 8 * deg.mean()  # power-law: hubs far above the mean degree


def test_same_seed_same_graph_and_other_seed_another():
    a, b, c = (graphs.dataset_graph("proteins", 0.01, seed=s) for s in (3, 3, 4))
    assert (a.adjacency != b.adjacency).nnz == 0 and np.array_equal(a.features, b.features)
    assert (a.adjacency != c.adjacency).nnz > 0


def test_every_dataset_is_known_and_unknown_ones_are_refused():
    assert set(graphs.DATASETS) == {"proteins", "artist", "soc-BlogCatalog", "ppi", "ogbn-arxiv"}
    assert graphs.spec("ogbn-arxiv") == graphs.GraphSpec(169_343, 1_166_243, 128, 40)
    with pytest.raises(ValueError, match="unknown dataset"):
        graphs.spec("reddit")


def test_metis_parts_are_balanced_and_cut_fewer_edges_than_random_parts():
    g = graphs.dataset_graph("ppi", 0.02, seed=0)
    parts = graphs.metis_parts(g.adjacency, 16, seed=0)
    sizes = np.bincount(parts, minlength=16)
    assert sizes.min() > 0 and sizes.max() <= 1.1 * g.nodes / 16 + 1
    rows, cols = g.adjacency.nonzero()
    random = np.random.default_rng(12345).integers(0, 16, g.nodes)  # not the graph's seed: its labels come from it
    assert (parts[rows] != parts[cols]).mean() < 0.8 * (random[rows] != random[cols]).mean()
    batches = graphs.cluster_batches(parts, 3, seed=0)
    assert len(batches) == 6 and np.array_equal(np.sort(np.concatenate(batches)), np.arange(g.nodes))
