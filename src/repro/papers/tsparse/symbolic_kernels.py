"""The output tiles' bitmaps in Triton, in ONE launch: the GPU path of
:func:`repro.papers.tsparse.tiles.symbolic`'s last step (its torch path, the CPU's and the
reference, costs about 300 small launches: an 8-step product loop over the pairs and a 64-plane OR
reduction).

A tile's bitmap is its 8 row bytes read as one int64 (byte r = row r, bit c = column c). Lane o of a
program owns output tile o: it walks its group of pairs group_ptr[o]:group_ptr[o + 1], loads the
pair's A and B words, forms their boolean product (row r of A @ B is the OR of B's rows k over the
bits k set in A's row r) and ORs it into its accumulator; lanes whose group has ended load zeros.
The product per k is word-parallel over the 8 rows: ``(a >> k) & 0x0101..01`` has bit 8r set where
A[r, k] is, spread to a 0xFF mask over byte r; B's row byte k is broadcast to all 8 bytes; their AND
is row k's contribution to every row.

Without a CUDA GPU the module runs the kernel in Triton's interpreter
(:func:`repro.kernels.triton_interpreter.without_gpu`): slow, for correctness on small shapes.
"""

from __future__ import annotations

import torch

from repro.kernels import triton_interpreter

triton_interpreter.without_gpu()

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from repro.papers.tsparse.tiles import T  # noqa: E402

BLOCK = 128  # output tiles a program: one a lane


@triton.jit
def _out_bits(a_ptr, b_ptr, pa_ptr, pb_ptr, gptr_ptr, out_ptr, n_out, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = o < n_out
    start = tl.load(gptr_ptr + o, mask=live, other=0).to(tl.int64)
    end = tl.load(gptr_ptr + o + 1, mask=live, other=0).to(tl.int64)
    low = 0x0101010101010101  # bit 0 of every byte
    acc = tl.zeros((BLOCK,), dtype=tl.int64)
    for step in range(0, tl.max(end - start, axis=0)):
        p = start + step
        on = p < end
        a = tl.load(a_ptr + tl.load(pa_ptr + p, mask=on, other=0).to(tl.int64), mask=on, other=0)
        b = tl.load(b_ptr + tl.load(pb_ptr + p, mask=on, other=0).to(tl.int64), mask=on, other=0)
        for k in tl.static_range(8):
            rows = (a >> k) & low  # bit 8r: A[r, k]
            rows = (rows << 8) - rows  # byte r: 0xFF where A[r, k] (x 255 with no signed overflow)
            acc |= rows & (((b >> (8 * k)) & 0xFF) * low)  # B's row k in every byte
    tl.store(out_ptr + o, acc, mask=live)


def out_bits(a_bits: torch.Tensor, b_bits: torch.Tensor, pair_a: torch.Tensor, pair_b: torch.Tensor,
             group_ptr: torch.Tensor) -> torch.Tensor:
    """(n_out, 8) uint8 row bytes of each output tile: the OR over its group's pairs (pair_a, pair_b
    index the (n, 8) uint8 bitmaps a_bits, b_bits) of the boolean tile products."""
    n_out = group_ptr.numel() - 1
    out = torch.empty(n_out, dtype=torch.int64, device=a_bits.device)
    if n_out:
        words = [x.contiguous().view(torch.int64).view(-1) for x in (a_bits, b_bits)]
        _out_bits[(triton.cdiv(n_out, BLOCK),)](*words, pair_a, pair_b, group_ptr, out, n_out, BLOCK=BLOCK)
    return out.view(torch.uint8).view(n_out, T)
