"""tSparse's SpGEMM end to end, phase by phase: tile both operands (the conversion), the symbolic
phase (tile pattern product, task list, output bitmaps), the numeric phase (the batched tile
products: ``triton`` on tensor cores, ``mma``, the CUDA C mma.sync m16n8k16 variant (GPU only), or
``twin``, the NumPy twin) and the CSR assembly."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch

from repro.papers.tsparse import twin
from repro.papers.tsparse.tiles import Pairs, Tiled, assemble, csr_tensors, symbolic, tile

NUMERIC = ("triton", "mma", "twin")


def numeric(A: Tiled, B: Tiled, pairs: Pairs, how: str, kernels_dir=None) -> torch.Tensor:
    """(n_out, 8, 8) fp32 output tiles on A's device (``kernels_dir``: the cubins, for ``mma``)."""
    if how == "triton":
        from repro.papers.tsparse import tile_mma

        return tile_mma.tile_products(A.vals, B.vals, pairs)
    if how == "mma":
        from repro.papers.tsparse import mma

        return mma.tile_products(A.vals, B.vals, pairs, kernels_dir)
    if how == "twin":
        return torch.from_numpy(twin.tile_products(A.vals, B.vals, pairs)).to(A.vals.device)
    raise ValueError(f"numeric: unknown implementation {how!r}; choose from {', '.join(NUMERIC)}")


@dataclass
class Product:
    A: Tiled
    B: Tiled
    pairs: Pairs
    csr: tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # indptr, indices, data (fp32)

    def scipy(self) -> sp.csr_matrix:
        indptr, indices, data = (x.cpu().numpy() for x in self.csr)
        return sp.csr_matrix((data.astype(np.float64), indices, indptr), shape=self.pairs.shape)


def multiply(A: sp.csr_matrix, B: sp.csr_matrix | None = None, dtype: torch.dtype = torch.float16,
             how: str = "triton", device: str | torch.device = "cpu", kernels_dir=None) -> Product:
    """A @ B (A @ A when B is None) through the tiles, inputs rounded to ``dtype``."""
    ta = tile(*csr_tensors(A, device), A.shape, dtype)
    tb = ta if B is None else tile(*csr_tensors(B, device), B.shape, dtype)
    pairs = symbolic(ta, tb)
    return Product(ta, tb, pairs, assemble(pairs, numeric(ta, tb, pairs, how, kernels_dir)))
