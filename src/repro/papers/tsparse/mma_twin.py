"""The NumPy twin of kernels/tsparse_mma.cu: the same flat offsets per lane (lane = 4 g + t), the
fragments assembled into the MMA's operands as the PTX ISA lays out mma.m16n8k16 (.f16/.bf16), the
16x16 @ 16x8 product in fp32, and each lane's two output values written where the kernel writes
them. What CI checks of the CUDA kernel's index math (the kernel itself needs a GPU)."""

from __future__ import annotations

import numpy as np

LANES = np.arange(32)
G, TQ = LANES // 4, LANES % 4  # the lane's group g and thread-in-group t


def tile_products(a_vals: np.ndarray, b_vals: np.ndarray, pair_a: np.ndarray, pair_b: np.ndarray,
                  group_ptr: np.ndarray) -> np.ndarray:
    """(n_out, 8, 8) fp32 from fp32 copies of the half-precision tiles, as the kernel computes it."""
    a_flat = np.ascontiguousarray(a_vals, dtype=np.float32).ravel()
    b_flat = np.ascontiguousarray(b_vals, dtype=np.float32).ravel()
    n_out = len(group_ptr) - 1
    out = np.zeros(n_out * 64, dtype=np.float32)
    for o in range(n_out):
        start, end = int(group_ptr[o]), int(group_ptr[o + 1])
        c = np.zeros((16, 8), dtype=np.float32)
        for s in range(start, end, 2):
            regs_a = np.zeros((2, 32, 2), dtype=np.float32)  # a[h] of each lane: two halves
            regs_b = np.zeros((2, 32, 2), dtype=np.float32)
            for h in range(2):
                if s + h < end:
                    at, bt = int(pair_a[s + h]) * 64, int(pair_b[s + h]) * 64
                    regs_a[h, :, 0] = a_flat[at + G * 8 + 2 * TQ]
                    regs_a[h, :, 1] = a_flat[at + G * 8 + 2 * TQ + 1]
                    regs_b[h, :, 0] = b_flat[bt + (2 * TQ) * 8 + G]
                    regs_b[h, :, 1] = b_flat[bt + (2 * TQ + 1) * 8 + G]
            # PTX fragments: a0 = A[g][2t, 2t+1] (regs_a[0]), a1 = a3 = 0 (rows 8-15), a2 = A[g][2t+8, 2t+9]
            # (regs_a[1]); b0 = B[2t, 2t+1][g] (regs_b[0]), b1 = B[2t+8, 2t+9][g] (regs_b[1])
            A = np.zeros((16, 16), dtype=np.float32)
            B = np.zeros((16, 8), dtype=np.float32)
            for j in range(2):
                A[G, 2 * TQ + j] = regs_a[0, :, j]
                A[G, 2 * TQ + 8 + j] = regs_a[1, :, j]
                B[2 * TQ + j, G] = regs_b[0, :, j]
                B[2 * TQ + 8 + j, G] = regs_b[1, :, j]
            c += A @ B
        # c0, c1 = C[g][2t, 2t+1], stored at o * 64 + g * 8 + 2t
        out[o * 64 + G * 8 + 2 * TQ] = c[G, 2 * TQ]
        out[o * 64 + G * 8 + 2 * TQ + 1] = c[G, 2 * TQ + 1]
    return out.reshape(n_out, 8, 8)
