"""A grouped layout (tw, sbw, tvw) laid out once for the gather GEMM, and back.

The GEMM is feature-major, as the layers chain: Y = W^T X with X (K, M) (K input features, each a
contiguous row over the M tokens/pixels) and Y (rows, M). Group g computes
Y[out_rows[g]] = Wg @ X[kidx[g]], Wg the group's kept weights (width x kpad_g, its columns' kept K
rows, zero-padded), so its dense tile runs on tensor cores and X is gathered by whole rows.

compact=True (TW, TVW): Y holds only the kept output columns, in order (y_cols says which; pruned
  columns are removed features, as in the shrunk ideal GEMM).
compact=False (Shfl-BW): Y has all N rows, and each group's rows go back to their original
  positions (the unshuffle, done by the kernel's epilogue).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from repro.papers.sparse_gemm.patterns import Layout

K_ALIGN = 64  # each group's kept K rows padded to a multiple of this (cuSPARSELt's tiles need 64)


@dataclass
class Packed:
    w: torch.Tensor  # (kstart[-1] * width,) group g's (width, kpad_g) block row-major at kstart[g] * width
    kidx: torch.Tensor  # int32 (kstart[-1],): the X row each packed K position reads (padding: 0)
    kstart: torch.Tensor  # int32 (n_groups + 1,): start of each group's K positions
    klen: torch.Tensor  # int32 (n_groups,): kept K rows of each group
    out_rows: torch.Tensor  # int32 (n_groups, width): the Y row of each group row (-1: padding)
    y_cols: torch.Tensor  # int64 (n_out,): the layer's output column of each Y row
    k: int  # the layer's K and N
    n: int
    width: int

    @property
    def n_groups(self) -> int:
        return self.klen.numel()

    @property
    def n_out(self) -> int:
        return self.y_cols.numel()

    @property
    def nnz(self) -> int:
        """Kept weights (the useful multiply-adds per output token)."""
        counts = (self.out_rows >= 0).sum(1)
        return int((counts.long() * self.klen.long()).sum())

    def to(self, device) -> "Packed":
        return Packed(*(getattr(self, f).to(device) for f in ("w", "kidx", "kstart", "klen", "out_rows", "y_cols")),
                      self.k, self.n, self.width)

    def group_block(self, g: int) -> torch.Tensor:
        """Group g's (width, kpad_g) weight block (a view)."""
        s, e = int(self.kstart[g]), int(self.kstart[g + 1])
        return self.w[s * self.width:e * self.width].view(self.width, e - s)


def pack(weight: torch.Tensor, layout: Layout, width: int, compact: bool, dtype=None) -> Packed:
    """Lay out the kept weights of ``weight`` (K, N) in GEMM form for ``layout``'s groups (each at
    most ``width`` columns). Weights outside the mask are dropped (tvw: the 2:4 zeros stay zeros)."""
    if layout.groups is None:
        raise ValueError(f"a {layout.pattern} layout has no groups to pack")
    k, n = weight.shape
    if layout.mask.shape != weight.shape:
        raise ValueError(f"mask {tuple(layout.mask.shape)} does not match weight {tuple(weight.shape)}")
    dtype = dtype or weight.dtype
    masked = (weight * layout.mask.to(weight.device)).to(dtype)
    blocks, kidx, kstart, klen, out_rows = [], [], [0], [], []
    y_cols, next_row = [], 0
    for g in layout.groups:
        g = type(g)(g.cols.to(weight.device), g.rows.to(weight.device))
        if g.cols.numel() > width:
            raise ValueError(f"a group of {g.cols.numel()} columns does not fit width {width}")
        kg = g.rows.numel()
        kpad = -(-kg // K_ALIGN) * K_ALIGN
        block = torch.zeros(width, kpad, dtype=dtype, device=weight.device)
        block[:g.cols.numel(), :kg] = masked[g.rows[:, None], g.cols[None, :]].t()
        blocks.append(block.flatten())
        kidx.append(torch.cat([g.rows, g.rows.new_zeros(kpad - kg)]))
        kstart.append(kstart[-1] + kpad)
        klen.append(kg)
        rows = torch.full((width,), -1, dtype=torch.int64)
        if compact:
            rows[:g.cols.numel()] = torch.arange(next_row, next_row + g.cols.numel())
            next_row += g.cols.numel()
            y_cols.append(g.cols.cpu())
        else:
            rows[:g.cols.numel()] = g.cols.cpu()
        out_rows.append(rows)
    dev = weight.device
    return Packed(w=torch.cat(blocks), kidx=torch.cat(kidx).to(dev, torch.int32),
                  kstart=torch.tensor(kstart, dtype=torch.int32, device=dev),
                  klen=torch.tensor(klen, dtype=torch.int32, device=dev),
                  out_rows=torch.stack(out_rows).to(dev, torch.int32),
                  y_cols=torch.cat(y_cols).to(dev) if compact else torch.arange(n, device=dev), k=k, n=n, width=width)


def unpack(packed: Packed) -> torch.Tensor:
    """The dense-equivalent (K, N) weight that ``packed`` computes with (zeros where pruned)."""
    dense = torch.zeros(packed.k, packed.n, dtype=packed.w.dtype)
    cpu = packed.to("cpu")
    for g in range(cpu.n_groups):
        kg = int(cpu.klen[g])
        rows = cpu.kidx[int(cpu.kstart[g]):int(cpu.kstart[g]) + kg].long()
        live = cpu.out_rows[g] >= 0
        cols = cpu.y_cols[cpu.out_rows[g][live].long()]
        dense[rows[:, None], cols[None, :]] = cpu.group_block(g)[live, :kg].t()
    return dense


def expand(y: torch.Tensor, packed: Packed) -> torch.Tensor:
    """A compact Y (kept columns only) as the full (N, M) output: zero rows for pruned columns."""
    full = y.new_zeros(packed.n, y.shape[1])
    full[packed.y_cols.to(y.device)] = y
    return full
