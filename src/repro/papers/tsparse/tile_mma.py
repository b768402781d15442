"""The batched tile products in Triton, on tensor cores (fp16 or bf16 in, fp32 accumulate): one
program per output tile, walking its group of pairs four at a time with one 16x16x16 ``tl.dot``.

tl.dot needs M, N, K >= 16 and a tile is 8x8, so four pairs share one MMA: A's four tiles sit in
the 2x2 quadrants of a 16x16 operand (pair 2g + h at block row h, block column g) and B's in the
quadrants of the other (pair 2g + h at block row g, block column h). The product's top-left quadrant
is then A_0 B_0 + A_2 B_2 and its bottom-right A_1 B_1 + A_3 B_3, both terms of the same output
tile; the off-diagonal quadrants mix pairs and are dropped. Half of the MMA's work is useful (the
paper's Volta wmma m16n16k16 has the same shape problem). A pair index past the group's end loads
zeros. Each program adds its two diagonal quadrants and stores the 8x8 fp32 tile.

Without a CUDA GPU the module runs the kernel in Triton's interpreter
(:func:`repro.kernels.triton_interpreter.without_gpu`, with its bf16 fix): slow, for correctness on
small shapes.
"""

from __future__ import annotations

import torch

from repro.kernels import triton_interpreter

triton_interpreter.without_gpu()

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from repro.papers.tsparse.tiles import T, Pairs  # noqa: E402

DTYPES = (torch.float16, torch.bfloat16)
PAIRS_PER_DOT = 4  # four 8x8 pairs fill the 16x16x16 MMA's diagonal quadrants


@triton.jit
def _tile_products(a_ptr, b_ptr, pa_ptr, pb_ptr, gptr_ptr, out_ptr):
    o = tl.program_id(0)
    start = tl.load(gptr_ptr + o)
    end = tl.load(gptr_ptr + o + 1)
    i = tl.arange(0, 16)
    h_row, r = i[:, None] // 8, i[:, None] % 8  # A operand: block row h, row r of the tile
    g_col, c = i[None, :] // 8, i[None, :] % 8  # A operand: block column g, column c
    q_a = 2 * g_col + h_row  # A quadrant (h, g) holds pair 2g + h
    q_b = 2 * h_row + g_col  # B quadrant (g, h) holds pair 2g + h (rows: g, columns: h)
    acc = tl.zeros((16, 16), dtype=tl.float32)
    for base in range(start, end, 4):
        in_a = base + q_a < end
        in_b = base + q_b < end
        ta = tl.load(pa_ptr + base + q_a, mask=in_a, other=0).to(tl.int64)
        tb = tl.load(pb_ptr + base + q_b, mask=in_b, other=0).to(tl.int64)
        a = tl.load(a_ptr + ta * 64 + r * 8 + c, mask=in_a, other=0.0)
        b = tl.load(b_ptr + tb * 64 + r * 8 + c, mask=in_b, other=0.0)
        acc = tl.dot(a, b, acc)
    diag = tl.where(h_row == g_col, acc, 0.0)  # the top-left and bottom-right quadrants
    out = tl.sum(tl.sum(tl.reshape(diag, (2, 8, 2, 8)), axis=2), axis=0)
    rr = tl.arange(0, 8)
    tl.store(out_ptr + o.to(tl.int64) * 64 + rr[:, None] * 8 + rr[None, :], out)


def tile_products(a_vals: torch.Tensor, b_vals: torch.Tensor, pairs: Pairs) -> torch.Tensor:
    """(n_out, 8, 8) fp32 on the operands' device: each output tile's sum over its pairs."""
    if a_vals.dtype not in DTYPES or b_vals.dtype != a_vals.dtype:
        raise ValueError(f"tile values must both be float16 or bfloat16, got {a_vals.dtype} and {b_vals.dtype}")
    out = torch.empty((pairs.n_out, T, T), dtype=torch.float32, device=a_vals.device)
    if pairs.n_out:
        _tile_products[(pairs.n_out,)](a_vals.contiguous(), b_vals.contiguous(), pairs.pair_a, pairs.pair_b,
                                       pairs.group_ptr, out)
    return out
