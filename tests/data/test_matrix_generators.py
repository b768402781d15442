"""The general (SpGEMM) families of repro.data.matrices against direct constructions, and bad input.
The lower-triangular families are tested with SpTRSV (tests/sptrsv/test_matrices.py)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from repro.data import matrices as M


@pytest.mark.parametrize("shape", [(5, 4), (3, 4, 2)])
def test_laplacian_is_the_stencil(shape):
    A = M.laplacian(shape)
    n = int(np.prod(shape))
    assert A.shape == (n, n) and (A.diagonal() == 2 * len(shape)).all()
    D = A.toarray()
    coords = np.indices(shape[::-1]).reshape(len(shape), -1)[::-1].T  # x fastest
    dist = np.abs(coords[:, None, :] - coords[None, :, :]).sum(-1)
    np.testing.assert_array_equal(D != 0, dist <= 1)
    assert (D[dist == 1] == -1).all()


def test_fem_is_symmetric_with_dense_node_blocks():
    A = M.fem(12, dofs=3, reach=2, seed=1)
    assert A.shape == (36, 36) and abs(A - A.T).max() == 0
    node = np.arange(36) // 3
    want = np.abs(node[:, None] - node[None, :]) <= 2
    np.testing.assert_array_equal(A.toarray() != 0, want)


def test_block_diagonal_stays_in_its_blocks_and_keeps_the_diagonal():
    A = M.block_diagonal(50, block=16, density=0.4, seed=2)
    r, c = A.nonzero()
    assert (r // 16 == c // 16).all() and (A.diagonal() != 0).all()
    inside = sum(min(16, 50 - s) ** 2 for s in range(0, 50, 16))
    assert 0.3 < A.nnz / inside < 0.6
    np.testing.assert_array_equal(M.block_diagonal(50, 16, 0.4, seed=2).data, A.data)  # seeded


def test_rmat_is_skewed_and_seeded():
    A = M.rmat(12, edge_factor=8, seed=3)
    deg = np.diff(A.indptr)
    assert A.shape == (4096, 4096) and A.nnz <= 8 * 4096
    assert deg.max() > 20 * deg.mean()  # power-law hubs
    assert (deg == 0).sum() > 0.1 * 4096  # and many empty rows
    np.testing.assert_array_equal(M.rmat(12, edge_factor=8, seed=3).indices, A.indices)
    assert not np.array_equal(M.rmat(12, edge_factor=8, seed=4).indices[:100], A.indices[:100])


def test_gallery_full_is_the_whole_matrix():
    A = M.gallery_full("bar")
    np.testing.assert_array_equal(sp.tril(A).toarray(), M.gallery("bar").toarray())
    assert sp.triu(A, k=1).nnz > 0


@pytest.mark.parametrize("entry, match", [
    ({"name": "l", "kind": "laplacian", "shape": [4]}, "2 or 3 positive sizes"),
    ({"name": "f", "kind": "fem", "nodes": 0}, "nodes, dofs >= 1"),
    ({"name": "b", "kind": "block_diagonal", "n": 10, "density": 1.5}, "0 < density <= 1"),
    ({"name": "r", "kind": "rmat", "scale": 4, "probs": [0.5, 0.5, 0.5, 0.5]}, "summing to 1"),
    ({"name": "g", "kind": "gallery_full", "example": "nope"}, "unknown example 'nope'"),
])
def test_bad_specs(entry, match):
    with pytest.raises(M.MatrixError, match=match):
        M.specs([entry])[0].build()


@pytest.mark.parametrize("make, match", [
    (lambda: np.eye(3), "expected a scipy.sparse matrix"),
    (lambda: sp.csr_matrix(np.ones((2, 3))), "must be square"),
    (lambda: sp.csr_matrix(np.array([[1.0, np.inf], [0.0, 1.0]])), r"non-finite value inf at \(0, 1\)"),
])
def test_check_square_names_the_problem(make, match):
    with pytest.raises(M.MatrixError, match=match):
        M.check_square(make())


def test_rcm_of_a_lower_matrix_is_its_graph_reordered_and_diagonally_dominant():
    L = M.banded(600, bandwidth=8, density=0.4, seed=3)
    rng = np.random.default_rng(0)
    shuffle = rng.permutation(600)  # a scrambled order: RCM must bring the band back
    S = (sp.tril(L, -1) + sp.tril(L, -1).T).tocsr()[shuffle][:, shuffle]
    scrambled = M.check_lower(sp.tril(S, -1) + sp.eye(600) * 100, "scrambled")
    R = M.rcm(scrambled, lower=True)
    order = M.rcm_order(scrambled)
    assert R.nnz == scrambled.nnz and sp.tril(R).nnz == R.nnz  # lower, the same number of entries
    want = (S[order][:, order] != 0).astype(int)  # the same graph under the order (S's pattern is symmetric)
    np.testing.assert_array_equal(sp.tril(want, -1).toarray(), sp.tril(R, -1).toarray() != 0)
    def band(X):
        rows, cols = sp.tril(X, -1).nonzero()
        return (rows - cols).max()

    assert band(R) < band(scrambled) / 4  # RCM brings the band back
    off = np.asarray(abs(sp.tril(R, -1)).sum(axis=1)).ravel()
    np.testing.assert_allclose(R.diagonal(), 1 + off)


def test_rcm_of_a_general_matrix_is_a_symmetric_permutation():
    A = M.rmat(8, edge_factor=4, seed=2)
    R = M.rcm(A, lower=False)
    order = M.rcm_order(A)
    np.testing.assert_array_equal(R.toarray(), A.toarray()[np.ix_(order, order)])


def test_a_spec_builds_its_rcm_variant_and_refuses_another_order():
    base, variant = M.specs([{"name": "p", "kind": "poisson", "shape": [12, 9]},
                             {"name": "p_rcm", "kind": "poisson", "shape": [12, 9], "reorder": "rcm"}])
    assert (base.reorder, variant.reorder) == ("natural", "rcm")
    assert variant.build().nnz == base.build().nnz
    (bad,) = M.specs([{"name": "x", "kind": "banded", "n": 50, "reorder": "amd"}])
    with pytest.raises(M.MatrixError, match="matrix x: reorder must be 'rcm'"):
        bad.build()


def test_rcm_over_natural_pairs_a_variant_with_its_natural_order_by_name():
    names, orders = ["a", "a_rcm", "b_rcm", "c"], ["natural", "rcm", "rcm", "natural"]
    assert M.rcm_over_natural(names, orders, [4.0, 1.0, 9.0, 2.0]) == [0.25]  # b_rcm has no b
