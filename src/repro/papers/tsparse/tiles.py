"""tSparse's tiled format and its two phases around the tile products (Zachariadis et al., Comp. &
Elec. Eng. 88, 2020): a sparse matrix cut into 8x8 tiles, only the non-empty ones kept, each with a
64-bit occupancy bitmap and its values as a dense 8x8 block in half precision.

- :func:`tile`: CSR -> tiles (a CSR over tile rows: ``ptr``, ``col``; ``bits`` as 8 row bytes,
  bit c of byte r set where (r, c) is stored; ``vals`` dense (n_tiles, 8, 8) in fp16 or bf16).
- :func:`symbolic`: the tile pattern product and the task list. For every stored A tile (i, k) and
  every stored B tile (k, j): a pair, dropped when A's occupied columns miss B's occupied rows (the
  bitmaps say the 8x8 product is structurally zero); the pairs sorted by output tile (i, j), so
  each output tile's pairs are one contiguous group (``group_ptr``); each output tile's bitmap is
  the OR over its pairs of the boolean 8x8 products of the bitmaps. An ESC (expand, sort, compress)
  over tiles in torch, one code for the CPU and the GPU, but for the bitmaps: on a GPU one Triton
  launch (:mod:`repro.papers.tsparse.symbolic_kernels`), elsewhere torch (:func:`_torch_out_bits`,
  also the kernel's reference).
- :func:`assemble`: the output tiles (fp32 values, their bitmaps) back to CSR, entries in row and
  column order, the structural pattern kept (an entry whose products cancel stays, as zero).

All torch, on whatever device the inputs are; Triton is imported only for ``bitmaps="triton"``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

T = 8  # the tile edge: the paper's 8x8 tiles (one 64-bit bitmap each)
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}
BITMAPS = ("triton", "torch")  # how symbolic forms the output bitmaps


@dataclass
class Tiled:
    """A matrix as its non-empty 8x8 tiles, in tile-row order then tile-column order."""

    shape: tuple[int, int]
    ptr: torch.Tensor  # (tile rows + 1,) int64: tile-row i's tiles are ptr[i]:ptr[i + 1]
    row: torch.Tensor  # (n_tiles,) int64 tile row
    col: torch.Tensor  # (n_tiles,) int64 tile column
    bits: torch.Tensor  # (n_tiles, 8) uint8 row bytes
    vals: torch.Tensor  # (n_tiles, 8, 8) the values, zero where no entry
    nnz: int

    @property
    def n_tiles(self) -> int:
        return int(self.col.numel())

    @property
    def fill(self) -> float:
        """Mean fill of the stored tiles: entries / (tiles x 64)."""
        return self.nnz / max(self.n_tiles * T * T, 1)

    @property
    def tile_shape(self) -> tuple[int, int]:
        return -(-self.shape[0] // T), -(-self.shape[1] // T)


def csr_tensors(A, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(indptr, indices, data) of a SciPy CSR matrix as int64/int64/float32 tensors on ``device``."""
    return (torch.as_tensor(A.indptr.astype(np.int64), device=device),
            torch.as_tensor(A.indices.astype(np.int64), device=device),
            torch.as_tensor(A.data.astype(np.float32), device=device))


def tile(indptr: torch.Tensor, indices: torch.Tensor, data: torch.Tensor, shape: tuple[int, int],
         dtype: torch.dtype = torch.float16) -> Tiled:
    """The 8x8 tiling of a CSR matrix (sorted or not; no duplicates) with values cast to ``dtype``."""
    dev = indptr.device
    m, n = shape
    rows = torch.repeat_interleave(torch.arange(m, device=dev), indptr[1:] - indptr[:-1])
    ntr, ntc = -(-m // T), -(-n // T)
    key = (rows // T) * ntc + indices // T
    keys, inv = torch.unique(key, sorted=True, return_inverse=True)
    slot = inv * (T * T) + (rows % T) * T + indices % T
    vals = torch.zeros(keys.numel() * T * T, dtype=torch.float32, device=dev)
    vals[slot] = data.to(torch.float32)
    occupied = torch.zeros(keys.numel() * T * T, dtype=torch.bool, device=dev)
    occupied[slot] = True
    bits = _pack_bits(occupied.view(-1, T, T))
    trow = keys // ntc
    ptr = torch.zeros(ntr + 1, dtype=torch.int64, device=dev)
    ptr[1:] = torch.cumsum(torch.bincount(trow, minlength=ntr), 0)
    return Tiled((m, n), ptr, trow, keys % ntc, bits, vals.view(-1, T, T).to(dtype), int(indices.numel()))


def _pack_bits(flags: torch.Tensor) -> torch.Tensor:
    """(..., 8) bool -> (...) uint8, bit c set where flag c is (the shifts made on the device: a
    host tensor moved there would cost a copy and a sync)."""
    return (flags.to(torch.int64) << torch.arange(T, device=flags.device)).sum(-1).to(torch.uint8)


def _words(bits: torch.Tensor) -> torch.Tensor:
    """(n, 8) uint8 row bytes as n int64 words, byte r at bits 8r..8r+7."""
    return bits.contiguous().view(torch.int64).view(-1)


def _or_rows(bits: torch.Tensor) -> torch.Tensor:
    """The OR of each tile's 8 row bytes, its occupied columns: the word folded onto its low byte in
    three shift-ORs (int64; the bits above the low byte are not cleared)."""
    w = _words(bits)
    for s in (32, 16, 8):
        w = w | (w >> s)
    return w


def _nonempty_rows(bits: torch.Tensor) -> torch.Tensor:
    """A byte per tile, bit r set where row r has an entry."""
    return _pack_bits(bits != 0)


def _segment_or(row_bytes: torch.Tensor, group: torch.Tensor, n_groups: int) -> torch.Tensor:
    """(n_groups, 8) uint8: the OR of the (P, 8) row bytes of each group, bit plane by bit plane (the
    8 bytes as one int64; torch has no OR reduction): P int64s of memory, not the 64 bools a pair
    that unpacking would take."""
    words = row_bytes.contiguous().view(torch.int64).view(-1)
    out = torch.zeros(n_groups, dtype=torch.int64, device=row_bytes.device)
    for b in range(T * T):
        plane = torch.zeros(n_groups, dtype=torch.int64, device=row_bytes.device)
        plane.scatter_reduce_(0, group, (words >> b) & 1, reduce="amax")
        out |= plane << b
    return out.view(torch.uint8).view(n_groups, T)


@dataclass
class Pairs:
    """The task list: output tile o multiplies pairs group_ptr[o]:group_ptr[o + 1] of (pair_a, pair_b)."""

    shape: tuple[int, int]
    pair_a: torch.Tensor  # (P,) int32 A tile index
    pair_b: torch.Tensor  # (P,) int32 B tile index
    group_ptr: torch.Tensor  # (n_out + 1,) int32
    out_row: torch.Tensor  # (n_out,) int64 tile row of each output tile
    out_col: torch.Tensor  # (n_out,) int64 tile column
    out_bits: torch.Tensor  # (n_out, 8) uint8 row bytes of each output tile
    candidates: int  # pairs before the bitmap test

    @property
    def n_pairs(self) -> int:
        return int(self.pair_a.numel())

    @property
    def n_out(self) -> int:
        return int(self.out_row.numel())


def _torch_out_bits(a_bits: torch.Tensor, b_bits: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """(n_out, 8) uint8: each output tile's bitmap from its pairs' (P, 8) A and B bitmaps, grouped
    by output tile (``counts`` pairs each): row byte r = OR over the pairs, over the bits k of A's
    row byte r, of B's row byte k. 8 steps over the pairs, then :func:`_segment_or`."""
    prod = torch.zeros_like(a_bits)
    for k in range(T):
        has_k = ((a_bits >> k) & 1).bool()
        prod |= torch.where(has_k, b_bits[:, k:k + 1], torch.zeros_like(b_bits[:, :1]))
    group = torch.repeat_interleave(torch.arange(counts.numel(), device=a_bits.device), counts)
    return _segment_or(prod, group, counts.numel())


def symbolic(A: Tiled, B: Tiled, bitmaps: str | None = None) -> Pairs:
    """The tile pattern product of A and B, its task list grouped by output tile, and the output
    tiles' bitmaps, formed by ``bitmaps``: "triton" (one launch; the default on a CUDA device) or
    "torch" (the default elsewhere). With "triton", three host syncs, each for a size: the
    candidate pairs, the pairs kept, the output tiles ("torch" adds a fourth)."""
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"inner dimensions differ: A is {A.shape}, B is {B.shape}")
    dev = A.ptr.device
    bitmaps = bitmaps or ("triton" if dev.type == "cuda" else "torch")
    if bitmaps not in BITMAPS:
        raise ValueError(f"symbolic: unknown bitmaps {bitmaps!r}; choose from {', '.join(BITMAPS)}")
    # expand: every A tile (i, k) meets every B tile of tile row k; its pairs take B's tiles in order
    first = B.ptr[A.col]
    per_a = B.ptr[A.col + 1] - first
    pa = torch.repeat_interleave(torch.arange(A.n_tiles, device=dev), per_a)
    candidates = int(pa.numel())
    to_b = first - (torch.cumsum(per_a, 0) - per_a)  # pair index -> B tile index, per A tile
    pb = torch.arange(candidates, device=dev) + to_b[pa]
    # the bitmap test: A's occupied columns against B's occupied rows
    kept = torch.nonzero(_or_rows(A.bits)[pa] & _nonempty_rows(B.bits)[pb]).view(-1)
    pa, pb = pa[kept], pb[kept]
    # sort by output tile, compress into groups
    ntc = B.tile_shape[1]
    key, order = torch.sort(A.row[pa] * ntc + B.col[pb], stable=True)
    pa, pb = pa[order], pb[order]
    out_key, counts = torch.unique_consecutive(key, return_counts=True)
    group_ptr = torch.nn.functional.pad(torch.cumsum(counts, 0, dtype=torch.int32), (1, 0))
    pa32, pb32 = pa.to(torch.int32), pb.to(torch.int32)
    if bitmaps == "triton":
        from repro.papers.tsparse import symbolic_kernels

        out_bits = symbolic_kernels.out_bits(A.bits, B.bits, pa32, pb32, group_ptr)
    else:
        out_bits = _torch_out_bits(A.bits[pa], B.bits[pb], counts)
    return Pairs((A.shape[0], B.shape[1]), pa32, pb32, group_ptr, out_key // ntc, out_key % ntc, out_bits,
                 candidates)


def assemble(pairs: Pairs, out_vals: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """CSR (indptr int64, indices int64, data float32) of the product from its output tiles'
    values (n_out, 8, 8) and the bitmaps: every structural entry, in row then column order.

    The output tiles are in (tile row, tile column) order, so CSR order is, tile row by tile row,
    row r of every tile of that row in turn: the row bytes are permuted into that order first (the
    j-th of tile row i's n_i tiles puts its byte r at 8 ptr[i] + r n_i + j) and the entries then
    come out of one nonzero already sorted, with no sort over the entries and one host sync (their
    number)."""
    dev = out_vals.device
    m, n_out = pairs.shape[0], pairs.n_out
    out_row = pairs.out_row
    tile_ptr = torch.searchsorted(out_row, torch.arange(-(-m // T) + 1, device=dev))
    row_start = tile_ptr[out_row]
    per_row = tile_ptr[out_row + 1] - row_start
    ranks = torch.arange(T, device=dev)
    pos = (torch.arange(n_out, device=dev) + (T - 1) * row_start)[:, None] + ranks * per_row[:, None]
    slot = torch.empty(n_out * T, dtype=torch.int64, device=dev)  # CSR-ordered byte -> tile * 8 + row
    slot[pos.view(-1)] = torch.arange(n_out * T, device=dev)
    set_bits = ((pairs.out_bits.view(-1)[slot, None] >> ranks.to(torch.uint8)) & 1).bool()
    q, c = set_bits.nonzero(as_tuple=True)  # CSR order: byte, then column
    s = slot[q]
    t = s // T
    rows = out_row[t] * T + s % T
    cols = pairs.out_col[t] * T + c
    indptr = torch.searchsorted(rows, torch.arange(m + 1, device=dev))
    return indptr, cols, out_vals.reshape(-1, T)[s, c].to(torch.float32)
