"""The NumPy twin of the batched tile products: every output tile's sum over its pairs of
A tile @ B tile, the half-precision inputs widened exactly to fp32 and the products accumulated in
fp32 (what the tensor cores do). What CI checks the Triton kernel and SciPy against."""

from __future__ import annotations

import numpy as np
import torch

from repro.papers.tsparse.tiles import T, Pairs


def as_f32(vals: torch.Tensor) -> np.ndarray:
    """fp16/bf16 tile values as an fp32 NumPy array (exact: both widen to fp32 without rounding)."""
    return vals.detach().to("cpu", torch.float32).numpy()


def tile_products(a_vals: torch.Tensor, b_vals: torch.Tensor, pairs: Pairs) -> np.ndarray:
    """(n_out, 8, 8) fp32: output tile o = sum over its pairs p of a_vals[pair_a[p]] @ b_vals[pair_b[p]]."""
    if pairs.n_pairs == 0:
        return np.zeros((0, T, T), dtype=np.float32)
    pa = pairs.pair_a.cpu().numpy()
    pb = pairs.pair_b.cpu().numpy()
    prods = np.matmul(as_f32(a_vals)[pa], as_f32(b_vals)[pb])  # (P, 8, 8), fp32
    return np.add.reduceat(prods, pairs.group_ptr[:-1].cpu().numpy().astype(np.int64), axis=0)
