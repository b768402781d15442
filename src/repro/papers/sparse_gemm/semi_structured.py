"""The 2:4 paths on the sparse tensor cores, through torch.sparse.to_sparse_semi_structured (cuSPARSELt
where torch has it, else its CUTLASS kernels): plain 2:4 over a whole weight, and TVW.

TVW runs one cuSPARSELt GEMM per packed tile, not a Triton kernel: Triton (3.6) has no sparse MMA,
so a Triton TVW kernel could only multiply the 2:4 zeros on the dense tensor cores (that is the
gather GEMM on the TVW packing, which the benchmark times beside it). cuSPARSELt multiplies dense
operands, so each tile's kept rows of X are gathered first (index_select into one reused buffer);
the tile's output then goes into its rows of Y. Both steps cost memory traffic the Triton gather
GEMM does not pay: the benchmark says how much.
"""

from __future__ import annotations

import torch

from repro.papers.sparse_gemm.packing import Packed


def backend() -> str:
    """Which library to_sparse_semi_structured uses here."""
    from torch.sparse import SparseSemiStructuredTensor

    cslt = torch.backends.cusparselt.is_available() and not SparseSemiStructuredTensor._FORCE_CUTLASS
    return "cuSPARSELt" if cslt else "CUTLASS"


def compress(weight_t: torch.Tensor):
    """A row-major (rows, K) 2:4-along-K weight as a semi-structured tensor."""
    from torch.sparse import to_sparse_semi_structured

    return to_sparse_semi_structured(weight_t.contiguous())


class Dense24:
    """Y (N, M) = W^T X for a 2:4 W^T (N, K), X (K, M)."""

    def __init__(self, weight_t: torch.Tensor):
        self.sparse = compress(weight_t)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mm(self.sparse, x)


class TVW:
    """TVW of a compact packing: per tile, gather its kept X rows, multiply on the sparse tensor
    cores, write its rows of Y (n_out, M)."""

    def __init__(self, packed: Packed):
        self.packed = packed
        self.tiles = []
        next_row = 0
        for g in range(packed.n_groups):
            live = int((packed.out_rows[g] >= 0).sum())
            start, end = int(packed.kstart[g]), int(packed.kstart[g + 1])
            self.tiles.append((compress(packed.group_block(g)), packed.kidx[start:end].long(), next_row, live))
            next_row += live
        self.kmax = max(int(packed.kstart[g + 1] - packed.kstart[g]) for g in range(packed.n_groups))
        self._buffer: torch.Tensor | None = None

    def __call__(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        m = x.shape[1]
        if self._buffer is None or self._buffer.shape[1] != m or self._buffer.dtype != x.dtype:
            self._buffer = torch.empty(self.kmax, m, dtype=x.dtype, device=x.device)
        for sparse, rows, first, live in self.tiles:
            gathered = self._buffer[:rows.numel()]
            torch.index_select(x, 0, rows, out=gathered)
            out[first:first + live].copy_(torch.mm(sparse, gathered)[:live])
        return out
