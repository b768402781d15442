"""The matrix generators against direct constructions, their statistics, and bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp

from repro.data import matrices as M
from repro.papers.sptrsv import schedule


def ic0_reference(A: sp.csr_matrix) -> np.ndarray:
    """IC(0) by the textbook row loop on a dense copy (small A only): L keeps A's lower pattern."""
    A = A.toarray()
    n = A.shape[0]
    L = np.zeros_like(A)
    for i in range(n):
        for j in range(i + 1):
            if A[i, j] == 0:
                continue
            s = A[i, j] - L[i, :j] @ L[j, :j]
            L[i, j] = math.sqrt(s) if i == j else s / L[j, j]
    return L


def poisson_matrix(shape) -> sp.csr_matrix:
    ones = [sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(s, s)) for s in shape]
    eye = [sp.identity(s) for s in shape]
    A = 0
    for a in range(len(shape)):  # x fastest: kron(..., z, y, x)
        factors = [ones[b] if b == a else eye[b] for b in range(len(shape))][::-1]
        term = factors[0]
        for f in factors[1:]:
            term = sp.kron(term, f)
        A = A + term
    return sp.csr_matrix(A)


@pytest.mark.parametrize("shape", [(5, 4), (3, 4, 2), (1, 7)])
def test_poisson_ic0_matches_the_textbook_factor(shape):
    L = M.poisson(shape)
    np.testing.assert_allclose(L.toarray(), ic0_reference(poisson_matrix(shape)), rtol=1e-13, atol=1e-14)


def test_poisson_ilu0_is_unit_lower_and_scales_ic0():
    ic, ilu = M.poisson((6, 5)), M.poisson((6, 5), factor="ilu0")
    np.testing.assert_allclose(ilu.diagonal(), 1.0)
    np.testing.assert_allclose(ilu.toarray(), ic.toarray() / ic.diagonal()[None, :], rtol=1e-14)


@pytest.mark.parametrize("shape, levels", [((30, 20), 49), ((6, 7, 8), 19)])
def test_poisson_levels_are_the_wavefronts(shape, levels):
    assert schedule.analyse(M.poisson(shape)).levels == levels


def test_random_families_are_checked_and_deep():
    P = M.powerlaw(5000, seed=3, min_offset=50)
    B = M.banded(3000, bandwidth=8, density=0.5, seed=1)
    for L in (P, B):
        assert (abs(L.diagonal()) > abs(sp.tril(L, k=-1)).sum(axis=1).A.ravel()).all()  # strictly dominant
    assert schedule.analyse(P).levels >= 5000 // (50 * 10)
    assert schedule.analyse(B).levels > 300
    np.testing.assert_array_equal(M.powerlaw(5000, seed=3, min_offset=50).data, P.data)  # seeded


@pytest.mark.parametrize("example", M.GALLERY)
def test_gallery_lower_triangles(example):
    L = M.gallery(example)
    assert L.shape[0] > 100 and (L.diagonal() != 0).all()


def test_stats_on_a_chain():
    n = 50
    L = sp.diags([np.full(n - 1, -1.0), np.full(n, 2.0)], [-1, 0], format="csr")
    s = schedule.stats(L)
    assert (s["rows"], s["nnz"], s["levels"], s["critical_path"]) == (n, 2 * n - 1, n, 2 * n - 1)


@pytest.mark.parametrize("make, match", [
    (lambda: np.eye(3), "expected a scipy.sparse matrix"),
    (lambda: sp.csr_matrix(np.ones((2, 3))), "must be square"),
    (lambda: sp.csr_matrix(np.array([[1.0, 2.0], [0.0, 1.0]])), r"not lower triangular: entry \(0, 1\)"),
    (lambda: sp.csr_matrix(np.array([[1.0, 0.0], [3.0, 0.0]])), "singular: zero or missing diagonal at row 1"),
    (lambda: sp.csr_matrix(np.array([[1.0, 0.0], [np.nan, 1.0]])), r"non-finite value nan at \(1, 0\)"),
    (lambda: sp.csr_matrix(np.eye(2, dtype=complex)), "must be real"),
])
def test_check_lower_names_the_problem(make, match):
    with pytest.raises(M.MatrixError, match=match):
        M.check_lower(make())


@pytest.mark.parametrize("entry, match", [
    ({"name": "p", "kind": "poisson", "shape": [3]}, "2 or 3 positive sizes"),
    ({"name": "p", "kind": "poisson", "shape": [3, 3], "factor": "lu"}, "factor must be"),
    ({"name": "q", "kind": "spiral"}, "unknown kind 'spiral'"),
    ({"name": "g", "kind": "gallery", "example": "nope"}, "unknown example 'nope'"),
    ({"name": "b", "kind": "banded", "n": 10, "density": 0}, "0 < density <= 1"),
    ({"name": "b", "kind": "banded", "n": 10, "width": 3}, "matrix b: .*width"),
])
def test_bad_specs(entry, match):
    with pytest.raises(M.MatrixError, match=match):
        M.specs([entry])[0].build()


def test_specs_need_unique_names():
    with pytest.raises(M.MatrixError, match="duplicate names"):
        M.specs([{"name": "a", "kind": "banded", "n": 5}] * 2)
    with pytest.raises(M.MatrixError, match="needs 'name' and 'kind'"):
        M.specs([{"kind": "banded"}])
