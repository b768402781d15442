"""NumPy twin of kernels/tsm2r_pipelined.cu: the same work split, copy ring and epilogue, in float64.

`run(variant, ...)` walks the kernel's blocks, warps and lanes (lanes as NumPy vectors) with the
kernel's own index formulas: each warp's slab and k part, the copies of every tile into its ring
slot (zero-filled where the kernel passes src-size 0; the kernel's vector, partial-row and scalar
copy paths read the same elements), the FMAs
from the ring, and either the direct stores or the partial sums and the cluster reduction in the
kernel's (rank, part) order. Operands are flat arrays addressed like the kernel's pointers (A and C
column-major with leading dimensions, B with any two strides), so padding between columns can be
NaN: reading it, or a ring element never written, gives NaN in C.

The twin also checks the pipeline's order as it goes: a tile is read only from the slot its copy
went to, and a slot is refilled only after the tile in it was read. It returns C and how many
times each element was written (every element of the m x n result exactly once, padding never).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from repro.papers.tsm2x.tsm2 import Variant

TPB, WARPS = 128, 4


@dataclass
class Result:
    c: np.ndarray  # the flat C buffer after the kernel
    writes: np.ndarray  # how many stores hit each element of it


def run(v: Variant, m: int, n: int, k: int, a: np.ndarray, lda: int, b: np.ndarray, ldb_k: int, ldb_n: int,
        c: np.ndarray, ldc: int) -> Result:
    """Execute the pipelined TSM2R variant `v` on flat float64 buffers (c is copied, not changed)."""
    if not v.stages:
        raise ValueError(f"{v.name} is not a pipelined TSM2R variant")
    V, N, S, KW, KT, STAGES = v.vec, v.n, v.split, v.kwarps, v.ktile, v.stages
    WR = 32 * V
    RB = WARPS // KW * WR
    PARTS = S * KW
    per_part = math.ceil(math.ceil(k / PARTS) / KT) * KT
    c, writes = c.copy(), np.zeros(c.shape, dtype=np.int64)
    lanes = np.arange(32)

    def store(idx: np.ndarray, vals: np.ndarray) -> None:
        np.add.at(writes, idx, 1)
        c[idx] = vals

    for bx in range(math.ceil(m / RB)):
        row0 = bx * RB
        red = np.full((S, KW * N * RB), np.nan)  # each rank's partials [q][j][row]
        for by in range(S):
            for warp in range(WARPS):
                slab, q = warp // KW, warp % KW
                i0 = row0 + slab * WR + lanes * V
                rows = np.clip(m - i0, 0, V)
                pa = np.where(rows > 0, i0, 0)
                kbeg = min(k, (by * KW + q) * per_part)
                kend = min(k, kbeg + per_part)
                ntiles = math.ceil((kend - kbeg) / KT)
                acc = _warp(a, lda, b, ldb_k, ldb_n, n, pa, rows, kbeg, kend, ntiles, V, N, KT, STAGES)
                if S == 1 and KW == 1:
                    for j in range(n):
                        for r in range(V):
                            ok = r < rows
                            store((i0 + r + j * ldc)[ok], acc[ok, r, j])
                else:
                    for j in range(N):
                        for r in range(V):
                            red[by, q * (N * RB) + j * RB + slab * WR + lanes * V + r] = acc[:, r, j]
        if S == 1 and KW == 1:
            continue
        used = n * RB
        share = math.ceil(math.ceil(used / S) / V) * V
        threads = np.arange(TPB)
        for rank in range(S):
            lo, hi = rank * share, min(used, rank * share + share)
            for e0 in range(lo, hi, TPB * V):
                e = e0 + threads * V
                e = e[e < hi]
                total = np.zeros((len(e), V))
                for s in range(S):  # the kernel's fixed order
                    for p in range(KW):
                        for r in range(V):
                            total[:, r] += red[s, p * (N * RB) + e + r]
                j, i = e // RB, row0 + e % RB
                valid = np.clip(m - i, 0, V)
                for r in range(V):
                    ok = r < valid
                    store((i + r + j * ldc)[ok], total[ok, r])
    return Result(c, writes)


def _warp(a, lda, b, ldb_k, ldb_n, n, pa, rows, kbeg, kend, ntiles, V, N, KT, STAGES) -> np.ndarray:
    """One warp's main loop: its (32, V, N) accumulators."""
    WR = 32 * V
    lanes = np.arange(32)
    ring_a = np.full((STAGES, KT * WR), np.nan)
    ring_b = np.full((STAGES, KT * N), np.nan)
    holds = [-1] * STAGES  # the tile copied into each slot, -1 once it has been read
    next_a = pa + kbeg * lda
    BE = math.ceil(KT * N / 32)
    e = lanes[:, None] + 32 * np.arange(BE)[None, :]  # (lane, i)
    kk, jj = e % KT, e // KT
    b_own, b_col, b_dst = e < KT * N, jj < n, kk * N + jj
    next_b = (kbeg + kk) * ldb_k + jj * ldb_n

    def copy(ring, slot, dst, src_offsets, ok, flat):
        ring[slot, dst] = np.where(ok, flat[np.where(ok, src_offsets, 0)], 0.0)

    def issue(slot: int, tile: int, cols: int) -> None:
        nonlocal next_a, next_b
        assert holds[slot] == -1, f"slot {slot} refilled while it holds unread tile {holds[slot]}"
        holds[slot] = tile
        for c in range(KT):  # all three of the kernel's A paths read element (c, r) iff this holds
            for r in range(V):
                copy(ring_a, slot, c * WR + lanes * V + r, next_a + c * lda + r, (c < cols) & (r < rows), a)
        for i in range(BE):
            own = b_own[:, i]
            ok = b_col[:, i] & (kk[:, i] < cols)
            ring_b[slot, b_dst[own, i]] = np.where(ok[own], b[np.where(ok, next_b[:, i], 0)][own], 0.0)
        next_a = next_a + KT * lda
        next_b = next_b + KT * ldb_k

    group = {}  # tile -> the cp.async commit group its copies are in
    committed = 0

    def commit() -> None:
        nonlocal committed
        committed += 1

    acc = np.zeros((32, V, N))
    for t in range(STAGES - 1):
        if t < ntiles:
            group[t] = committed
            issue(t, t, min(KT, kend - kbeg - t * KT))
        commit()
    for t in range(ntiles):
        rd = t % STAGES
        # cp.async.wait_group STAGES - 2: all but the newest STAGES - 2 groups are complete
        assert group[t] < committed - (STAGES - 2), f"tile {t} read before its copies are waited for"
        tn = t + STAGES - 1
        if tn < ntiles:
            group[tn] = committed
            issue((rd + STAGES - 1) % STAGES, tn, min(KT, kend - kbeg - tn * KT))
        commit()
        assert holds[rd] == t, f"tile {t} read from slot {rd}, which holds tile {holds[rd]}"
        tile_a = ring_a[rd].reshape(KT, 32, V)
        tile_b = ring_b[rd].reshape(KT, N)
        acc += np.einsum("clr,cj->lrj", tile_a, tile_b)
        holds[rd] = -1
    return acc
