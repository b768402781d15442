"""The caching model on hand-computed graphs, the partitioners' contracts and the inputs' checks."""

import numpy as np
import pytest
import scipy.sparse as sp

from repro.papers.gpucache import cache_model, partition, schedule, taskgraph
from repro.papers.gpucache.partition import Partition
from repro.papers.gpucache.taskgraph import GraphError, InputSpec, TaskGraph


def graph(n, pairs, name="g"):
    pairs = np.asarray(pairs)
    w = np.ones(len(pairs), np.float32)
    return TaskGraph(name, n, pairs[:, 0], pairs[:, 1], w, w.copy(), np.zeros(n, np.float32))


def test_path_replication_and_loads_by_hand():
    g = graph(5, [(0, 1), (1, 2), (2, 3), (3, 4)])
    p = partition.partition(g, "default", 2)
    assert p.parts.tolist() == [0, 0, 1, 1]
    # part 0 touches {0, 1, 2}, part 1 {2, 3, 4}: 6 copies of 5 vertices
    assert cache_model.replication_factor(g.u, g.v, p.parts, g.n) == pytest.approx(6 / 5)
    s = schedule.from_partition(g, p)
    loads = cache_model.predicted_loads(s, elem_bytes=4, line_bytes=8, wave=2)
    # two vertices per line: block 0 lines {0, 1}, block 1 lines {1, 2}; one wave: lines {0, 1, 2}
    assert loads == {"block_loads": 4.0, "wave_loads": 3.0, "compulsory_lines": 3.0}


def test_wide_rows_load_several_lines_by_hand():
    # the path above with rows of 12 bytes and 8-byte lines: vertex v covers bytes [12v, 12v + 12),
    # lines 0-1, 1-2, 3-4, 4-5, 6-7 for v = 0..4; block 0 {0, 1, 2} -> lines 0..4 (5),
    # block 1 {2, 3, 4} -> lines 3..7 (5); one wave: lines 0..7 (8)
    g = graph(5, [(0, 1), (1, 2), (2, 3), (3, 4)])
    s = schedule.from_partition(g, partition.partition(g, "default", 2))
    loads = cache_model.predicted_loads(s, elem_bytes=12, line_bytes=8, wave=2)
    assert loads == {"block_loads": 10.0, "wave_loads": 8.0, "compulsory_lines": 8.0}


@pytest.mark.parametrize("method", ["default", "edge"])
def test_loads_scale_with_spmm_width(method):
    # spmm rows of 4F bytes and 32-byte sectors: F = 8 is one sector per vertex, F = 16 two, F = 32
    # four: the loads double with F once a row fills a sector, and are below that for F = 4
    g = taskgraph.build(InputSpec("m", "mesh2d", 60, "spmm", width=16))
    s = schedule.from_partition(g, partition.partition(g, method, 16))
    loads = {f: cache_model.predicted_loads(s, 4 * f, 32, 4) for f in (4, 8, 16, 32)}
    for key in ("block_loads", "wave_loads", "compulsory_lines"):
        assert loads[16][key] == 2 * loads[8][key]
        assert loads[32][key] == 4 * loads[8][key]
        assert loads[8][key] / 2 <= loads[4][key] < loads[8][key]
    assert loads[16]["compulsory_lines"] == g.n * 64 / 32


def test_star_edge_partition_balances_what_vertex_partition_cannot():
    leaves = 64
    g = graph(leaves + 1, [(0, i) for i in range(1, leaves + 1)])
    edge = schedule.from_partition(g, partition.partition(g, "edge", 4))
    vertex = schedule.from_partition(g, partition.partition(g, "vertex", 4))
    assert cache_model.block_balance(edge) <= 1.1
    assert cache_model.block_balance(vertex) == pytest.approx(4.0)  # every task follows the centre
    # the centre is copied into every part, each leaf once: (64 + 4) / 65
    rf = cache_model.replication_factor(g.u, g.v, partition.partition(g, "edge", 4).parts, g.n)
    assert rf == pytest.approx((leaves + 4) / (leaves + 1))


def test_first_touch_relabel_by_hand():
    new = schedule.first_touch(np.array([3, 0]), np.array([1, 3]), 4)
    assert new.tolist() == [2, 1, 3, 0]  # order of first touch: 3, 1, 0; untouched 2 last


def test_split_and_connect_chains_incident_tasks():
    g = graph(4, [(0, 1), (0, 2), (0, 3)])
    chain = partition.incidence_chains(g).toarray()
    assert chain.tolist() == [[0, 1, 0], [1, 0, 1], [0, 1, 0]]


def test_schedule_groups_tasks_by_part_and_keeps_default_order_inside():
    g = graph(5, [(0, 1), (1, 2), (2, 3), (3, 4)])
    s = schedule.from_partition(g, Partition("edge", np.array([1, 0, 1, 0]), 2, 0.0))
    assert s.part_start.tolist() == [0, 2, 4]
    old = np.argsort(s.new_id)  # original id of each new label
    assert [(old[a], old[b]) for a, b in zip(s.a, s.b)] == [(1, 2), (3, 4), (0, 1), (2, 3)]


@pytest.mark.parametrize("method", ["random", "vertex", "edge", "hypergraph"])
def test_same_seed_same_partition(method):
    g = taskgraph.build(InputSpec("m", "mesh2d", 30))
    a, b = (partition.partition(g, method, 8, seed=3).parts for _ in range(2))
    assert np.array_equal(a, b)
    assert set(np.unique(a)) <= set(range(8))


def test_edge_partition_is_balanced_and_beats_default_on_a_shuffled_mesh():
    g = taskgraph.build(InputSpec("d", "delaunay2d", 3000, "flux"))
    k = g.m // 256
    rf = {m: cache_model.replication_factor(g.u, g.v, partition.partition(g, m, k).parts, g.n)
          for m in ("default", "edge")}
    assert rf["edge"] < 0.6 * rf["default"]
    assert cache_model.block_balance(schedule.from_partition(g, partition.partition(g, "edge", k))) < 1.1


def test_bad_inputs_are_refused_with_the_problem_named():
    with pytest.raises(GraphError, match="empty"):
        graph(3, np.zeros((0, 2), int))
    with pytest.raises(GraphError, match="2 connected components"):
        graph(4, [(0, 1), (2, 3)])
    with pytest.raises(GraphError, match="u < v"):
        graph(3, [(1, 1), (0, 1)])
    with pytest.raises(GraphError, match="3 x 4: .*square"):
        taskgraph.from_matrix("rect", sp.random(3, 4, density=0.5, random_state=0))
    g = graph(3, [(0, 1), (1, 2)])
    with pytest.raises(ValueError, match="k=3 is above the task count 2"):
        partition.partition(g, "edge", 3)
    with pytest.raises(ValueError, match="positive"):
        partition.partition(g, "edge", 0)
    with pytest.raises(ValueError, match="unknown method 'metis'"):
        partition.partition(g, "metis", 1)
    with pytest.raises(ValueError, match="kernel: unknown kernel 'spgemm'"):
        taskgraph.build(InputSpec("x", "mesh2d", 10, "spgemm"))
    with pytest.raises(ValueError, match=r"width: kernel spmm needs .* multiple of 4.*got 6"):
        taskgraph.build(InputSpec("x", "mesh2d", 10, "spmm", width=6))
    with pytest.raises(ValueError, match="graph: unknown graph 'grid'"):
        taskgraph.build(InputSpec("x", "grid", 10))


@pytest.mark.parametrize("graph_kind,kernel", [("mesh3d", "spmv"), ("powerlaw", "spmv"), ("nbody", "pair"),
                                               ("pyamg:bar", "spmv")])
def test_inputs_build_connected_graphs(graph_kind, kernel):
    g = taskgraph.build(InputSpec("x", graph_kind, 8 if graph_kind == "mesh3d" else 2000, kernel))
    assert g.m > g.n / 2 and np.all(g.u < g.v)


@pytest.mark.parametrize("elem_bytes", [4, 8, 12, 16, 32, 48, 64, 128])
def test_distinct_lines_equals_brute_force(elem_bytes):
    rng = np.random.default_rng(elem_bytes)
    a, b = rng.integers(0, 300, 2000), rng.integers(0, 300, 2000)
    group = np.arange(2000) // 150
    brute = {(int(gr), byte // 32) for gr, u, v in zip(group, a, b) for x in (u, v)
             for byte in range(int(x) * elem_bytes, (int(x) + 1) * elem_bytes)}
    assert cache_model.distinct_lines(group, a, b, elem_bytes, 32) == len(brute)
