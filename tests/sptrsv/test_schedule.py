"""The kernels' NumPy twins against SciPy's spsolve_triangular (fp64, 1e-10 relative), the
multi-GPU partition and task pool, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.linalg import spsolve_triangular

from repro.data import matrices as M
from repro.papers.sptrsv import schedule

CASES = {
    "poisson2d": lambda: M.poisson((25, 18)),
    "poisson3d_ilu0": lambda: M.poisson((7, 6, 5), factor="ilu0"),
    "powerlaw": lambda: M.powerlaw(2500, seed=2, min_offset=15),
    "banded": lambda: M.banded(1500, bandwidth=12, density=0.4, seed=4),
    "gallery": lambda: M.gallery("recirc_flow"),
}
TOL = 1e-10


def rel(x, ref):
    return np.abs(x - ref).max() / np.abs(ref).max()


@pytest.fixture(scope="module", params=list(CASES))
def case(request):
    L = CASES[request.param]()
    b = np.random.default_rng(7).standard_normal(L.shape[0])
    return L, b, spsolve_triangular(L, b, lower=True)


def test_levelset(case):
    L, b, ref = case
    assert rel(schedule.levelset_solve(L, b), ref) <= TOL


@pytest.mark.parametrize("seed, fraction", [(0, 0.5), (1, 0.05), (2, 1.0)])
def test_syncfree_rounds(case, seed, fraction):
    L, b, ref = case
    assert rel(schedule.syncfree_solve(L, b, seed=seed, run_fraction=fraction), ref) <= TOL


def test_syncfree_one_random_ready_row_at_a_time(case):
    L, b, ref = case
    assert rel(schedule.syncfree_solve(L, b, seed=5, sequential=True), ref) <= TOL


@pytest.mark.parametrize("k, workers, grain", [(2, 4, 1), (3, 2, 5), (4, 16, 2), (8, 1, 1)])
@pytest.mark.parametrize("order", ["natural", "levels"])
def test_multigpu_pool(case, k, workers, grain, order):
    L, b, ref = case
    x, trace = schedule.multigpu_solve(L, b, k, workers=workers, grain=grain, seed=k, order=order)
    assert rel(x, ref) <= TOL
    assert trace.local_pushes.sum() + trace.remote_pushes.sum() == L.nnz - L.shape[0]
    assert (trace.tasks >= np.ceil(np.diff(trace.bounds) / grain)).all()


def test_level_order_pools_keep_each_gpus_rows():
    L = M.poisson((12, 10))
    bounds = schedule.partition(L, 3)
    level = schedule.analyse(L).level
    for g, rows in enumerate(schedule.pool_orders(L, bounds, "levels")):
        assert sorted(rows) == list(range(bounds[g], bounds[g + 1]))
        assert (np.diff(level[rows]) >= 0).all()
    with pytest.raises(ValueError, match="pool order must be"):
        schedule.pool_orders(L, bounds, "random")


def test_a_pool_out_of_dependency_order_deadlocks(monkeypatch):
    """The twin detects what the kernel would do with a pool that hands rows before their dependencies."""
    L = M.poisson((6, 5))
    monkeypatch.setattr(schedule, "pool_orders", lambda L, bounds, order, analysis=None:
                        [np.arange(bounds[g + 1] - 1, bounds[g] - 1, -1) for g in range(len(bounds) - 1)])
    with pytest.raises(RuntimeError, match="deadlocked"):
        schedule.multigpu_solve(L, np.ones(30), 2, workers=2)


def test_partition_balances_nonzeros():
    L = M.powerlaw(20000, seed=1, min_offset=30)
    bounds = schedule.partition(L, 4)
    per_gpu = np.diff(L.indptr[bounds])
    assert bounds[0] == 0 and bounds[-1] == L.shape[0] and (np.diff(bounds) > 0).all()
    assert per_gpu.max() / per_gpu.mean() < 1.05


def test_remote_pushes_match_the_partition():
    L = M.poisson((20, 20))
    _, trace = schedule.multigpu_solve(L, np.ones(400), 2)
    strict = sp.tril(L, k=-1).tocoo()
    owner = np.searchsorted(trace.bounds, np.arange(400), side="right") - 1
    crossing = (owner[strict.row] != owner[strict.col]).sum()
    assert trace.remote_pushes.sum() == crossing and 20 <= crossing <= 21  # about one grid row crosses the cut


def test_analysis_of_a_diagonal_matrix():
    a = schedule.analyse(sp.identity(5, format="csr") * 3.0)
    assert a.levels == 1 and a.critical_path == 1 and (a.need == 0).all()


@pytest.mark.parametrize("k, match", [(0, "positive integer"), (2.5, "positive integer"), (11, "10 rows")])
def test_wrong_gpu_count(k, match):
    with pytest.raises(ValueError, match=match):
        schedule.partition(M.banded(10), k)


def test_bad_right_hand_side():
    L = M.poisson((4, 4))
    with pytest.raises(ValueError, match=r"b: expected shape \(16,\)"):
        schedule.levelset_solve(L, np.ones(15))
    with pytest.raises(ValueError, match="b: non-finite value at row 3"):
        schedule.syncfree_solve(L, np.array([1, 1, 1, np.inf] + [1] * 12))


def test_solvers_refuse_a_singular_matrix():
    L = sp.csr_matrix(np.array([[2.0, 0, 0], [1.0, 0, 0], [0, 1.0, 1.0]]))
    for solve in (schedule.levelset_solve, schedule.syncfree_solve):
        with pytest.raises(M.MatrixError, match="singular: zero or missing diagonal at row 1"):
            solve(L, np.ones(3))


@pytest.mark.parametrize("variant", ["push", "pull"])
@pytest.mark.parametrize("blocks, threads, seed, fraction", [(4, 32, 0, 0.5), (1, 8, 1, 1.0), (7, 64, 2, 0.1),
                                                             (3, 256, 3, 0.5)])
def test_chunked_v2_schedule(case, variant, blocks, threads, seed, fraction):
    """The v2 kernels' schedule (chunks of the level order, shared arrays inside a chunk) in an
    adversarial order, any number of persistent blocks."""
    L, b, ref = case
    x, trace = schedule.chunked_solve(L, b, variant, blocks=blocks, threads=threads, seed=seed, run_fraction=fraction)
    assert rel(x, ref) <= TOL
    assert trace.shared_deps + trace.global_deps == L.nnz - L.shape[0]
    assert trace.chunks == -(-L.shape[0] // threads)
    pos = schedule.level_order(schedule.analyse(L).level)[2]
    assert trace.shared_fraction == pytest.approx(schedule.shared_fraction(L, pos, threads))


def test_a_chunk_order_against_the_dependencies_deadlocks():
    """The twin detects what the kernels would do with rows handed out before their dependencies."""
    L = M.poisson((6, 5))
    a = schedule.analyse(L)
    backwards = schedule.Analysis(level=a.level, perm=a.perm[::-1].copy(), level_ptr=a.level_ptr,
                                  critical_path=a.critical_path, need=a.need)
    for variant in ("push", "pull"):
        with pytest.raises(RuntimeError, match="deadlocked"):
            schedule.chunked_solve(L, np.ones(30), variant, blocks=2, threads=4, analysis=backwards)


def test_the_gpu_level_analysis_twin_equals_the_host_analysis(case):
    """row_levels (level_analysis's recurrence, row by row) and level_order (the CuPy code's NumPy
    path) give analyse's levels, level sets and order."""
    L = case[0]
    a = schedule.analyse(L)
    level = schedule.row_levels(L)
    assert np.array_equal(level, a.level)
    perm, level_ptr, pos = schedule.level_order(level)
    assert np.array_equal(perm, a.perm) and np.array_equal(level_ptr, a.level_ptr)
    assert np.array_equal(pos[perm], np.arange(L.shape[0]))


def test_level_order_and_the_v2_rule():
    perm, level_ptr, pos = schedule.level_order(np.array([1, 2, 0, 1], dtype=np.int32))
    assert perm.tolist() == [2, 0, 3, 1] and level_ptr.tolist() == [0, 1, 3, 4] and pos.tolist() == [1, 3, 0, 2]
    assert schedule.v2_variant(5.0) == "pull" and schedule.v2_variant(schedule.PULL_MAX_ROW_NNZ + 0.5) == "push"
    with pytest.raises(ValueError, match="v2 variant must be"):
        schedule.chunked_solve(M.poisson((3, 3)), np.ones(9), "warp")


def test_local_need_counts_each_rows_dependencies_in_its_chunk():
    L = M.powerlaw(700, seed=3, min_offset=2)
    pos = schedule.level_order(schedule.analyse(L).level)[2]
    want = [sum(pos[c] // 16 == pos[i] // 16 for c in L.indices[L.indptr[i]:L.indptr[i + 1] - 1]) for i in range(700)]
    assert schedule.local_need(L.indptr, L.indices, pos, 16).tolist() == want
    one_chunk = schedule.local_need(L.indptr, L.indices, np.zeros(700, dtype=np.int32), 16)
    assert one_chunk.tolist() == (np.diff(L.indptr) - 1).tolist()  # one chunk: every dependency is local


def _check_rounds(L, trace, threads, warp):
    """Each warp's recorded rounds are warp_rounds' static ones: round k computed exactly the rows
    whose round is k."""
    a = schedule.analyse(L)
    pos = schedule.level_order(a.level)[2]
    rnd = schedule.warp_rounds(L, pos, warp)
    want: dict[tuple[int, int], dict[int, set]] = {}
    for r in range(L.shape[0]):
        key = (int(pos[r]) // threads, int(pos[r]) % threads // warp)
        want.setdefault(key, {}).setdefault(int(rnd[r]), set()).add(r)
    assert set(trace.rounds) == set(want)
    for key, rounds in trace.rounds.items():
        assert [set(rows.tolist()) for rows in rounds] == [want[key][k] for k in range(1, len(rounds) + 1)]


@pytest.mark.parametrize("blocks, threads, warp, seed, fraction", [(4, 64, 32, 0, 0.5), (1, 8, 4, 1, 1.0),
                                                                   (7, 256, 32, 2, 0.1), (3, 32, 32, 3, 0.5),
                                                                   (2, 1, 1, 4, 0.5)])
def test_warp_round_v3_schedule(case, blocks, threads, warp, seed, fraction):
    """The v3 kernel's schedule (warps of a chunk in rounds, shared flags between warps, global
    flags released per warp) in an adversarial order; 1-row chunks included."""
    L, b, ref = case
    x, trace = schedule.warp_round_solve(L, b, blocks=blocks, threads=threads, warp=warp, seed=seed,
                                         run_fraction=fraction)
    assert rel(x, ref) <= TOL
    assert trace.warp_deps + trace.shared_deps + trace.global_deps == L.nnz - L.shape[0]
    assert trace.chunks == -(-L.shape[0] // threads)
    pos = schedule.level_order(schedule.analyse(L).level)[2]
    assert trace.warp_deps + trace.shared_deps == schedule.local_need(L.indptr, L.indices, pos, threads).sum()
    _check_rounds(L, trace, threads, warp)


def _chain(n: int) -> sp.csr_matrix:
    return sp.diags([np.full(n, 2.0), np.full(n - 1, -1.0)], [0, -1], format="csr")


@pytest.mark.parametrize("n", [1, 5, 20, 32])
def test_a_pure_in_warp_chain_takes_one_round_a_row(n):
    """A chain inside one warp: each round computes the next row, so the warp takes n rounds."""
    L, b = _chain(n), np.arange(1.0, n + 1)
    x, trace = schedule.warp_round_solve(L, b, blocks=2, threads=256, warp=32, seed=n)
    assert rel(x, spsolve_triangular(L, b, lower=True)) <= TOL
    assert trace.rounds_per_warp == {(0, 0): n}
    assert [r.tolist() for r in trace.rounds[(0, 0)]] == [[i] for i in range(n)]
    assert trace.warp_deps == n - 1 and trace.shared_deps == trace.global_deps == 0


def test_rounds_of_a_chain_across_warps_and_of_independent_rows():
    """A 70-row chain: 32, 32 and 6 rounds in its three warps (the links between warps through shared
    memory, and across chunks of 64 through global memory); a diagonal matrix: one round a warp."""
    L = _chain(70)
    b = np.ones(70)
    x, trace = schedule.warp_round_solve(L, b, blocks=3, threads=64, warp=32, seed=1)
    assert rel(x, spsolve_triangular(L, b, lower=True)) <= TOL
    assert trace.rounds_per_warp == {(0, 0): 32, (0, 1): 32, (1, 0): 6}
    assert (trace.warp_deps, trace.shared_deps, trace.global_deps) == (67, 1, 1)
    D = sp.identity(100, format="csr") * 4.0
    x, trace = schedule.warp_round_solve(D, np.ones(100), threads=64, warp=32)
    assert np.allclose(x, 0.25) and set(trace.rounds_per_warp.values()) == {1} and len(trace.rounds) == 4


def test_warp_rounds_with_empty_rows_and_a_ragged_last_warp():
    """Rows without dependencies among in-warp chains, n not a multiple of the warp or chunk."""
    rng = np.random.default_rng(3)
    n = 301
    dense = np.diag(rng.uniform(1.0, 2.0, n))
    for i in range(1, n):
        if i % 3:  # every third row has only its diagonal
            dense[i, i - 1] = rng.standard_normal()
            if i > 7 and i % 5 == 0:
                dense[i, i - 7] = rng.standard_normal()
    L = sp.csr_matrix(dense)
    b = rng.standard_normal(n)
    ref = spsolve_triangular(L, b, lower=True)
    for blocks, threads, warp in ((3, 64, 32), (2, 32, 8), (5, 256, 32)):
        x, trace = schedule.warp_round_solve(L, b, blocks=blocks, threads=threads, warp=warp, seed=threads)
        assert rel(x, ref) <= TOL
        _check_rounds(L, trace, threads, warp)


def test_a_warp_round_order_against_the_dependencies_deadlocks():
    L = M.poisson((6, 5))
    a = schedule.analyse(L)
    backwards = schedule.Analysis(level=a.level.max() - a.level, perm=a.perm[::-1].copy(),
                                  level_ptr=a.level_ptr, critical_path=a.critical_path, need=a.need)
    with pytest.raises(RuntimeError, match="deadlocked"):
        schedule.warp_round_solve(L, np.ones(30), blocks=2, threads=8, warp=4, analysis=backwards)
    with pytest.raises(ValueError, match="multiple of warp"):
        schedule.warp_round_solve(L, np.ones(30), threads=48, warp=32)
