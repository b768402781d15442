"""Launching kernels/tsparse_mma.cu (the mma.sync m16n8k16 variant: one warp per output tile, two
8x8 pairs per MMA) from CuPy on torch's stream. GPU only; mma_twin.py is its NumPy twin."""

from __future__ import annotations

import torch

from repro import kernels
from repro.papers.tsparse.tiles import T, Pairs

WARPS_PER_BLOCK = 4  # as in the .cu
NAMES = {torch.float16: "tsparse_mma_f16", torch.bfloat16: "tsparse_mma_bf16"}


def tile_products(a_vals: torch.Tensor, b_vals: torch.Tensor, pairs: Pairs, kernels_dir=None) -> torch.Tensor:
    """(n_out, 8, 8) fp32 on the GPU: each output tile's sum over its pairs."""
    import cupy

    if a_vals.dtype not in NAMES or b_vals.dtype != a_vals.dtype or not a_vals.is_cuda:
        raise ValueError(f"tile values must both be CUDA float16 or bfloat16, got {a_vals.dtype} and {b_vals.dtype}")
    device = a_vals.device.index or 0
    out = torch.empty((pairs.n_out, T, T), dtype=torch.float32, device=a_vals.device)
    if pairs.n_out:
        fn = kernels.function("tsparse_mma", NAMES[a_vals.dtype], device, kernels_dir)
        a_vals, b_vals = a_vals.contiguous(), b_vals.contiguous()  # held until the launch is queued
        args = tuple(cupy.uint64(x.data_ptr()) for x in (a_vals, b_vals, pairs.pair_a, pairs.pair_b, pairs.group_ptr, out))
        blocks = -(-pairs.n_out // WARPS_PER_BLOCK)
        with cupy.cuda.Device(device), kernels.launch_stream(True, device):
            fn((blocks,), (WARPS_PER_BLOCK * 32,), args + (cupy.int32(pairs.n_out),))
    return out
