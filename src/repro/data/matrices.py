"""Generated sparse test matrices and the checks they pass (shared by sptrsv and tsparse).

Lower-triangular families (SpTRSV's deep dependency chains, 1e5 to 1e7 rows at paper scale):

- ``poisson``: the IC(0) lower factor of the 2D 5-point or 3D 7-point Poisson matrix in natural
  order (``factor="ic0"``), or ILU(0)'s unit lower factor (``factor="ilu0"``; for a symmetric
  matrix it is the IC(0) factor with its columns divided by their diagonal). Both keep A's lower
  pattern; a 2D grid nx x ny has nx + ny - 1 levels.
- ``powerlaw``: a random DAG whose rows have power-law (Zipf) numbers of dependencies, each at an
  offset of at least ``min_offset`` rows with a Pareto tail, so chains are about n / min_offset deep.
- ``banded``: every entry of a lower band of width ``bandwidth`` kept with probability ``density``.
- ``gallery``: the lower triangle of a small real matrix shipped by PyAMG (``pyamg.gallery``).

General square families (SpGEMM operands, chosen to span the fill of small dense tiles):

- ``laplacian``: the 2D 5-point or 3D 7-point Poisson operator itself (values 2d and -1).
- ``fem``: a banded finite-element-like matrix: a chain of nodes with ``dofs`` unknowns each, every
  node coupled to the nodes within ``reach`` by a dense dofs x dofs block (dense blocks on a band:
  high tile fill).
- ``block_diagonal``: dense-ish diagonal blocks of ``block`` rows, each entry kept with
  probability ``density`` (the diagonal always).
- ``rmat``: an R-MAT power-law graph (Chakrabarti, Zhan, Faloutsos, SDM 2004) of 2^scale vertices
  and edge_factor * 2^scale edges, Graph500's quadrant probabilities by default (low tile fill).
- ``gallery_full``: one of PyAMG's small real matrices, whole.

Random families put off-diagonal values in [-1, 1]; the lower-triangular ones make each diagonal
larger than its row's off-diagonal sum, so solutions stay bounded. Every lower matrix goes through
:func:`check_lower`, every general one through :func:`check_square`.

Any family takes ``reorder="rcm"`` (:func:`rcm`): the same graph in reverse Cuthill-McKee order
(SciPy's, on the symmetrised pattern). A lower matrix L is read as the lower half of the symmetric
S = L + L^T - diag(L) and becomes the lower triangle of P S P^T: the pattern an IC(0) or ILU(0)
factor of the reordered matrix has (they keep its lower pattern), with L's off-diagonal values and a
diagonal of 1 + |row off-diagonal sum| (so not that factor's values: a triangular solve's speed
depends on the pattern, its stability on the dominant diagonal). A general matrix becomes P A P^T.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

GALLERY = ("airfoil", "bar", "knot", "unit_square", "unit_cube", "recirc_flow", "local_disc_galerkin_diffusion")


class MatrixError(ValueError):
    """A matrix an experiment cannot take; the message names the problem and where."""


def check_square(A, name: str = "A") -> sp.csr_matrix:
    """Canonical CSR (duplicates summed, sorted, int32 indices, float64) of a square real matrix
    with finite values; otherwise MatrixError naming the problem."""
    if not sp.issparse(A):
        raise MatrixError(f"{name}: expected a scipy.sparse matrix, got {type(A).__name__}")
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise MatrixError(f"{name}: must be square, got shape {A.shape}")
    if A.dtype.kind not in "fiu":
        raise MatrixError(f"{name}: must be real, got dtype {A.dtype}")
    A = sp.csr_matrix(A, dtype=np.float64)
    A.sum_duplicates()
    A.sort_indices()
    if A.shape[0] == 0:
        raise MatrixError(f"{name}: has no rows")
    bad = ~np.isfinite(A.data)
    if bad.any():
        k = int(np.argmax(bad))
        row = int(np.searchsorted(A.indptr, k, side="right") - 1)
        raise MatrixError(f"{name}: non-finite value {A.data[k]} at ({row}, {A.indices[k]})")
    return sp.csr_matrix((A.data, A.indices.astype(np.int32), A.indptr.astype(np.int64 if A.nnz >= 2**31 else np.int32)),
                         shape=A.shape)


def check_lower(L, name: str = "L") -> sp.csr_matrix:
    """Canonical CSR (sorted, int32 indices, float64) of a square lower-triangular matrix with a
    non-zero finite diagonal and finite values; otherwise MatrixError naming the first bad entry."""
    L = check_square(L, name)
    n = L.shape[0]
    rows = np.repeat(np.arange(n), np.diff(L.indptr))
    upper = L.indices > rows
    if upper.any():
        k = int(np.argmax(upper))
        raise MatrixError(f"{name}: not lower triangular: entry ({rows[k]}, {L.indices[k]}) is above the diagonal")
    diag = np.zeros(n)
    on = L.indices == rows
    diag[rows[on]] = L.data[on]
    if (diag == 0).any():
        i = int(np.argmax(diag == 0))
        raise MatrixError(f"{name}: singular: zero or missing diagonal at row {i}")
    return L


def poisson(shape: tuple[int, ...], factor: str = "ic0") -> sp.csr_matrix:
    """IC(0) (or ILU(0) unit) lower factor of the 2D/3D Poisson matrix on a grid of ``shape``.

    IC(0) keeps A's lower pattern: for point p with lower neighbours q (one per axis),
    L[p, q] = -1 / L[q, q] and L[p, p] = sqrt(2 d - sum_q L[p, q]^2) (d = dimensions). Points with
    the same coordinate sum depend only on the previous sum, so each such wavefront is one
    vectorised step."""
    if len(shape) not in (2, 3) or any(int(s) < 1 for s in shape):
        raise MatrixError(f"poisson: shape must be 2 or 3 positive sizes, got {shape!r}")
    if factor not in ("ic0", "ilu0"):
        raise MatrixError(f"poisson: factor must be 'ic0' or 'ilu0', got {factor!r}")
    shape = tuple(int(s) for s in shape)
    n = math.prod(shape)
    strides = [math.prod(shape[:a]) for a in range(len(shape))]  # x fastest: index = x + nx*y (+ nx*ny*z)
    coords = np.indices(shape[::-1]).reshape(len(shape), -1)[::-1]  # coords[a][p] for p in natural order
    wave = coords.sum(axis=0)
    order = np.argsort(wave, kind="stable")
    bounds = np.searchsorted(wave[order], np.arange(wave.max() + 2))
    d = np.zeros(n)
    off = [np.zeros(n) for _ in shape]  # off[a][p] = L[p, p - strides[a]] (0 where p has no such neighbour)
    centre = 2.0 * len(shape)
    for s in range(len(bounds) - 1):
        p = order[bounds[s]:bounds[s + 1]]
        acc = np.full(p.size, centre)
        for a, stride in enumerate(strides):
            has = coords[a][p] > 0
            q = p[has] - stride
            off[a][p[has]] = -1.0 / d[q]
            acc[has] -= off[a][p[has]] ** 2
        d[p] = np.sqrt(acc)
    idx = np.arange(n)
    rows, cols, vals = [idx], [idx], [d]
    for a, stride in enumerate(strides):
        has = coords[a] > 0
        rows.append(idx[has])
        cols.append(idx[has] - stride)
        vals.append(off[a][has])
    rows, cols, vals = np.concatenate(rows), np.concatenate(cols), np.concatenate(vals)
    if factor == "ilu0":
        vals = vals / d[cols]
    return check_lower(sp.coo_matrix((vals, (rows, cols)), shape=(n, n)), f"poisson{shape}")


def _with_diagonal(n: int, rows: np.ndarray, cols: np.ndarray, rng: np.random.Generator, name: str) -> sp.csr_matrix:
    """Random off-diagonal values in [-1, 1] at (rows, cols), a diagonal 1 + |row off-diagonal sum|."""
    vals = rng.uniform(-1.0, 1.0, rows.size)
    off = sp.coo_matrix((vals, (rows, cols)), shape=(n, n)).tocsr()
    off.sum_duplicates()
    diag = 1.0 + np.asarray(abs(off).sum(axis=1)).ravel()
    return check_lower(off + sp.diags(diag), name)


def powerlaw(n: int, seed: int = 0, min_offset: int = 500, alpha: float = 2.5, max_degree: int = 64,
             tail: float = 1.5) -> sp.csr_matrix:
    """A random lower-triangular DAG: row i has min(Zipf(alpha), max_degree) dependencies at offsets
    min_offset * Pareto(tail) (rounded, distinct, at most i)."""
    if n < 1 or min_offset < 1 or alpha <= 1 or max_degree < 1 or tail <= 0:
        raise MatrixError(f"powerlaw: need n, min_offset, max_degree >= 1, alpha > 1, tail > 0; got "
                          f"n={n}, min_offset={min_offset}, alpha={alpha}, max_degree={max_degree}, tail={tail}")
    rng = np.random.default_rng(seed)
    deg = np.minimum(rng.zipf(alpha, n), max_degree)
    rows = np.repeat(np.arange(n), deg)
    offsets = np.ceil(min_offset * (1.0 + rng.pareto(tail, rows.size))).astype(np.int64)
    cols = rows - offsets
    keep = cols >= 0
    return _with_diagonal(n, rows[keep], cols[keep], rng, f"powerlaw(n={n})")


def banded(n: int, bandwidth: int = 16, density: float = 0.25, seed: int = 0) -> sp.csr_matrix:
    """A lower band of ``bandwidth`` sub-diagonals, each entry kept with probability ``density``."""
    if n < 1 or bandwidth < 1 or not 0 < density <= 1:
        raise MatrixError(f"banded: need n, bandwidth >= 1 and 0 < density <= 1; got n={n}, "
                          f"bandwidth={bandwidth}, density={density}")
    rng = np.random.default_rng(seed)
    rows = np.repeat(np.arange(n), bandwidth)
    cols = rows - np.tile(np.arange(1, bandwidth + 1), n)
    keep = (cols >= 0) & (rng.random(rows.size) < density)
    return _with_diagonal(n, rows[keep], cols[keep], rng, f"banded(n={n})")


def gallery(example: str) -> sp.csr_matrix:
    """The lower triangle of PyAMG's example matrix ``example`` (one of GALLERY)."""
    return check_lower(sp.tril(_load_example(example)), f"gallery:{example}")


def laplacian(shape: tuple[int, ...]) -> sp.csr_matrix:
    """The 2D 5-point or 3D 7-point Poisson operator on a grid of ``shape`` (x fastest)."""
    if len(shape) not in (2, 3) or any(int(s) < 1 for s in shape):
        raise MatrixError(f"laplacian: shape must be 2 or 3 positive sizes, got {shape!r}")
    shape = tuple(int(s) for s in shape)
    A = sp.csr_matrix((math.prod(shape),) * 2)
    for a in range(len(shape)):
        term = sp.identity(1)
        for b in reversed(range(len(shape))):  # kron(..., z, y, x): x fastest
            f = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(shape[b], shape[b])) if b == a else sp.identity(shape[b])
            term = sp.kron(term, f)
        A = A + term
    return check_square(A, f"laplacian{shape}")


def fem(nodes: int, dofs: int = 3, reach: int = 2, seed: int = 0) -> sp.csr_matrix:
    """A symmetric banded FEM-like matrix: ``nodes`` nodes of ``dofs`` unknowns on a chain, node i
    coupled to every node within ``reach`` by a dense dofs x dofs block of values in [-1, 1]."""
    if nodes < 1 or dofs < 1 or reach < 0:
        raise MatrixError(f"fem: need nodes, dofs >= 1 and reach >= 0; got nodes={nodes}, dofs={dofs}, reach={reach}")
    rng = np.random.default_rng(seed)
    offs = np.arange(-reach, reach + 1)
    ni = np.repeat(np.arange(nodes), offs.size)
    nj = ni + np.tile(offs, nodes)
    keep = (nj >= 0) & (nj < nodes) & (nj >= ni)  # upper node pairs; mirrored below
    ni, nj = ni[keep], nj[keep]
    d = np.arange(dofs)
    rows = (ni[:, None, None] * dofs + d[None, :, None]).repeat(dofs, axis=2).ravel()
    cols = (nj[:, None, None] * dofs + d[None, None, :]).repeat(dofs, axis=1).ravel()
    vals = rng.uniform(-1.0, 1.0, rows.size)
    n = nodes * dofs
    U = sp.coo_matrix((vals, (rows, cols)), shape=(n, n)).tocsr()
    return check_square(sp.triu(U) + sp.triu(U, k=1).T, f"fem(nodes={nodes}, dofs={dofs})")


def block_diagonal(n: int, block: int = 16, density: float = 0.5, seed: int = 0) -> sp.csr_matrix:
    """Diagonal blocks of ``block`` rows (the last one shorter), each entry kept with probability
    ``density``, the diagonal always; values in [-1, 1]."""
    if n < 1 or block < 1 or not 0 < density <= 1:
        raise MatrixError(f"block_diagonal: need n, block >= 1 and 0 < density <= 1; got n={n}, block={block}, "
                          f"density={density}")
    rng = np.random.default_rng(seed)
    rows = np.repeat(np.arange(n), block)
    cols = (rows // block) * block + np.tile(np.arange(block), n)
    keep = (cols < n) & ((rng.random(rows.size) < density) | (rows == cols))
    rows, cols = rows[keep], cols[keep]
    return check_square(sp.coo_matrix((rng.uniform(-1.0, 1.0, rows.size), (rows, cols)), shape=(n, n)),
                        f"block_diagonal(n={n})")


def rmat(scale: int, edge_factor: int = 8, probs: tuple[float, float, float, float] = (0.57, 0.19, 0.19, 0.05),
         seed: int = 0) -> sp.csr_matrix:
    """An R-MAT graph's adjacency with values in [-1, 1]: 2^scale vertices, edge_factor * 2^scale
    edges each placed by ``scale`` recursive quadrant choices (a, b, c, d; Graph500's by default),
    duplicates summed, vertex labels randomly permuted (as Graph500 does, so hubs are not all in the
    first tile rows)."""
    if scale < 1 or edge_factor < 1 or len(probs) != 4 or min(probs) < 0 or not math.isclose(sum(probs), 1.0):
        raise MatrixError(f"rmat: need scale, edge_factor >= 1 and 4 probabilities summing to 1; got scale={scale}, "
                          f"edge_factor={edge_factor}, probs={probs}")
    rng = np.random.default_rng(seed)
    n, m = 1 << scale, edge_factor << scale
    rows = np.zeros(m, dtype=np.int64)
    cols = np.zeros(m, dtype=np.int64)
    cum = np.cumsum(probs)
    for bit in range(scale):
        q = np.searchsorted(cum, rng.random(m), side="right").clip(max=3)
        rows |= (q >> 1) << bit
        cols |= (q & 1) << bit
    perm = rng.permutation(n)
    return check_square(sp.coo_matrix((rng.uniform(-1.0, 1.0, m), (perm[rows], perm[cols])), shape=(n, n)),
                        f"rmat(scale={scale})")


def gallery_full(example: str) -> sp.csr_matrix:
    """PyAMG's example matrix ``example`` (one of GALLERY), whole."""
    return check_square(_load_example(example), f"gallery:{example}")


def rcm_order(A) -> np.ndarray:
    """The reverse Cuthill-McKee order of A's symmetrised pattern (scipy.sparse.csgraph)."""
    from scipy.sparse.csgraph import reverse_cuthill_mckee

    A = sp.csr_matrix(A)
    pattern = sp.csr_matrix((np.ones(A.nnz, dtype=np.int8), A.indices, A.indptr), shape=A.shape)
    return np.asarray(reverse_cuthill_mckee((pattern + pattern.T).tocsr(), symmetric_mode=True), dtype=np.int64)


def rcm(A, lower: bool, name: str = "A") -> sp.csr_matrix:
    """A in RCM order (module doc): for a lower matrix, the lower triangle of the reordered symmetric
    matrix it is half of, with a dominant diagonal; else P A P^T."""
    order = rcm_order(A)
    if not lower:
        return check_square(sp.csr_matrix(A)[order][:, order], f"{name} (rcm)")
    L = sp.csr_matrix(A)
    off = sp.tril(L, k=-1)
    S = (off + off.T).tocsr()[order][:, order]
    low = sp.tril(S, k=-1).tocsr()
    low.sum_duplicates()
    diag = 1.0 + np.asarray(abs(low).sum(axis=1)).ravel()
    return check_lower(low + sp.diags(diag), f"{name} (rcm)")


def rcm_over_natural(names, orders, values) -> list[float]:
    """value(<matrix>_rcm) / value(<matrix>) for each RCM variant (order "rcm") whose natural-order
    matrix (its name without "_rcm") is among the rows: how far the order moves a quantity."""
    natural = {n: v for n, o, v in zip(names, orders, values) if o != "rcm"}
    return [v / natural[n.removesuffix("_rcm")] for n, o, v in zip(names, orders, values)
            if o == "rcm" and n.removesuffix("_rcm") in natural]


LOWER = ("poisson", "powerlaw", "banded", "gallery")  # the families that make lower-triangular matrices


def _load_example(example: str):
    if example not in GALLERY:
        raise MatrixError(f"gallery: unknown example {example!r}; choose from {', '.join(GALLERY)}")
    try:
        from pyamg.gallery import load_example
    except ImportError:
        raise MatrixError(f"gallery:{example}: needs PyAMG (pip install pyamg)") from None
    return load_example(example)["A"]


@dataclass(frozen=True)
class MatrixSpec:
    """One matrix of an experiment: ``kind`` (a key of MAKERS) and its arguments."""

    name: str
    kind: str
    args: dict

    def build(self) -> sp.csr_matrix:
        if self.kind not in MAKERS:
            raise MatrixError(f"matrix {self.name}: unknown kind {self.kind!r}; choose from {', '.join(MAKERS)}")
        args = dict(self.args)
        order = args.pop("reorder", None)
        if order not in (None, "rcm"):
            raise MatrixError(f"matrix {self.name}: reorder must be 'rcm' (or absent), got {order!r}")
        for key in ("shape", "probs"):
            if key in args:
                args[key] = tuple(args[key])
        try:
            A = MAKERS[self.kind](**args)
        except TypeError as exc:
            raise MatrixError(f"matrix {self.name}: {exc}") from None
        return A if order is None else rcm(A, self.kind in LOWER, self.name)

    @property
    def reorder(self) -> str:
        """The ordering the matrix is built in: "natural" (its family's own) or "rcm"."""
        return self.args.get("reorder") or "natural"


MAKERS = {"poisson": poisson, "powerlaw": powerlaw, "banded": banded, "gallery": gallery, "laplacian": laplacian,
          "fem": fem, "block_diagonal": block_diagonal, "rmat": rmat, "gallery_full": gallery_full}


def specs(entries: list[dict]) -> list[MatrixSpec]:
    """MatrixSpecs from an experiment's ``matrices`` list of {name, kind, ...arguments}."""
    out = []
    for i, e in enumerate(entries):
        e = dict(e)
        if "name" not in e or "kind" not in e:
            raise MatrixError(f"matrices[{i}]: needs 'name' and 'kind', got {sorted(e)}")
        out.append(MatrixSpec(e.pop("name"), e.pop("kind"), e))
    names = [s.name for s in out]
    if len(set(names)) != len(names):
        raise MatrixError(f"matrices: duplicate names in {names}")
    return out
