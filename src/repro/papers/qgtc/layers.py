"""Quantized GNN layers on the bit-decomposed GEMM (QGTC's Cluster-GCN and batched GIN), and their float
reference.

Every product of a layer goes through `qmatmul(a, b, a_bits, b_bits, backend)`: both operands are
quantized per tensor to unsigned integers (min-max, QGTC's scheme: x ~ lo + s q, q in [0, 2^bits)),
the integer product Q_a Q_b runs as a bit-decomposed GEMM, and the float product is recovered exactly
from it and the row and column sums of the codes:

    A B ~ s_a s_b Q_a Q_b + s_a lo_b rowsum(Q_a) + lo_a s_b colsum(Q_b) + lo_a lo_b K.

A binary adjacency is exact at 1 bit (lo = 0, s = 1). Backends: "twin" (bitplanes.py, NumPy: the CPU),
"gpu" (bmma.py: the b1 MMA kernel), "exact" (float64 matmul of the codes: a test oracle). Training uses
the straight-through estimator (the backward pass multiplies the gradient by the dequantized operands
in float), as quantization-aware training does; QGTC's own artifact times inference only.

- aggregation (both models): mean over the neighbourhood with a self loop, (A + I) H / deg, with A + I
  as a 1-bit operand packed once per forward pass (`Binary`) and the row scaling exact, in float;
- `QGCN`: layers H' = act(aggregate(H W)) (QGTC's order: the update X W first, then A times it);
- `QGIN`: layers H' = MLP(aggregate_sum(H)) with a two-layer MLP (GIN with eps = 0: (A + I) H).
`bits=None` gives the float reference of the same model (plain matmuls, same parameters).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from repro.papers.qgtc import bitplanes


def quantize(x: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(codes int32, lo, scale): x ~ lo + scale * codes, codes in [0, 2^bits), per-tensor min-max; lo and
    scale are 0-d tensors on x's device (no synchronisation); a constant x has scale 0 and codes 0."""
    levels = (1 << bitplanes.check_bits(bits)) - 1
    lo, hi = torch.aminmax(x)
    # A tensor divisor, not the Python int: CUDA divides by a Python scalar as a multiply by its float32
    # reciprocal, a scale one ulp off the CPU's, and at 2 bits that flips codes at rounding ties; the
    # flips then spread through the layers (every output of a QGCN differed from the twin's).
    scale = (hi - lo) / torch.full_like(hi, levels)
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.clamp(torch.round((x - lo) / safe), 0, levels).to(torch.int32)
    return q, lo, scale


def quantize_dequantize(x: torch.Tensor, bits: int) -> torch.Tensor:
    """x rounded to its b-bit grid (what the quantized products see)."""
    q, lo, scale = quantize(x, bits)
    return (lo + scale * q).to(x.dtype)


def int_matmul(qa: torch.Tensor, a_bits: int, qb: torch.Tensor, b_bits: int, backend: str) -> torch.Tensor:
    """Q_a Q_b as float64 through the chosen backend."""
    if backend == "twin":
        c, _ = bitplanes.int_matmul(qa.cpu().numpy(), a_bits, qb.cpu().numpy(), b_bits)
        return torch.from_numpy(c.astype(np.float64)).to(qa.device)
    if backend == "gpu":
        from repro.papers.qgtc import bmma

        return bmma.int_matmul(qa, a_bits, qb, b_bits).to(torch.float64)
    if backend == "exact":
        return qa.double() @ qb.double()
    raise ValueError(f"backend must be twin, gpu or exact, got {backend!r}")


def _recover(prod, lo_a, s_a, rowsum_a, lo_b, s_b, colsum_b, k: int) -> torch.Tensor:
    """The float product (float64) from the integer one and the codes' row sums of A (a column) and
    column sums of B (a row): the module doc's identity."""
    lo_a, s_a, lo_b, s_b = (v.double() for v in (lo_a, s_a, lo_b, s_b))
    return (s_a * s_b * prod + s_a * lo_b * rowsum_a.double() + lo_a * s_b * colsum_b.double()
            + lo_a * lo_b * k)


def _product(a, b, a_bits, b_bits, backend):
    """The float product from the integer one (module doc), and both operands' codes, lo and scale."""
    qa, lo_a, s_a = quantize(a.detach(), a_bits)
    qb, lo_b, s_b = quantize(b.detach(), b_bits)
    prod = int_matmul(qa, a_bits, qb, b_bits, backend)
    y = _recover(prod, lo_a, s_a, qa.sum(1, keepdim=True, dtype=torch.float64), lo_b, s_b,
                 qb.sum(0, keepdim=True, dtype=torch.float64), a.shape[1])
    return y.to(a.dtype), (qa, lo_a, s_a), (qb, lo_b, s_b)


def _product_fused(a, b, a_bits, b_bits):
    """_product's float product on the GPU, the same numbers in three kernels: each operand quantized
    and packed by one (bmma.quantize_pack; no codes kept), the product recovered in the GEMM's
    epilogue (bmma.Recover): inference's path."""
    from repro.papers.qgtc import bmma

    pa, lo_a, s_a, rowsum_a = bmma.quantize_pack(a.detach(), a_bits)
    pb, lo_b, s_b, colsum_b = bmma.quantize_pack(b.detach().T, b_bits, bitplanes.TILE_N)
    return bmma.run(pa, pb, recover=bmma.Recover(lo_a, s_a, lo_b, s_b, rowsum_a, colsum_b)).to(a.dtype)


class _QMatmul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b, a_bits, b_bits, backend):
        y, (qa, lo_a, s_a), (qb, lo_b, s_b) = _product(a, b, a_bits, b_bits, backend)
        ctx.save_for_backward((lo_a.double() + s_a.double() * qa).to(a.dtype),
                              (lo_b.double() + s_b.double() * qb).to(b.dtype))
        return y

    @staticmethod
    def backward(ctx, grad):
        a_hat, b_hat = ctx.saved_tensors
        return grad @ b_hat.T, a_hat.T @ grad, None, None, None


def qmatmul(a: torch.Tensor, b: torch.Tensor, a_bits: int | None, b_bits: int | None, backend: str) -> torch.Tensor:
    """a @ b with both operands quantized (a_bits, b_bits), or in float where bits is None. Without
    gradients (inference) nothing is kept for a backward pass."""
    if a_bits is None or b_bits is None:
        return a @ b
    if torch.is_grad_enabled() and (a.requires_grad or b.requires_grad):
        return _QMatmul.apply(a, b, a_bits, b_bits, backend)
    if backend == "gpu" and a.dtype == b.dtype == torch.float32:
        return _product_fused(a, b, a_bits, b_bits)
    return _product(a, b, a_bits, b_bits, backend)[0]


class Binary:
    """A 0/1 matrix (an adjacency with its self loops) decomposed once per forward pass and used by every
    layer, as QGTC packs a batch's adjacency once (val2bit) for all its layers: exact at 1 bit, its
    planes packed for the backend (on the GPU by bmma.quantize_pack, no codes kept), its row sums kept
    for the recovery of the float product."""

    def __init__(self, dense: torch.Tensor, backend: str):
        self.dense, self.backend = dense, backend
        self.codes, self.planes = None, None
        if backend == "gpu":
            from repro.papers.qgtc import bmma

            self.planes, _, _, self.degrees = bmma.quantize_pack(dense.to(torch.float32), 1, codes=True)
            self.rowsum = self.degrees[:, None].to(torch.float64)
            return
        self.codes = dense.to(torch.int32)
        self.rowsum = dense.sum(1, keepdim=True, dtype=torch.float64)
        if backend == "twin":
            self.planes = bitplanes.pack(self.codes.cpu().numpy(), 1)

    def times(self, qh: torch.Tensor, bits: int) -> torch.Tensor:
        """The integer product A Q_h (float64): on the GPU from the planes and Q_h's planes (the
        aggregation packs H itself, by quantize_pack), on the twin from the packed planes, else exactly."""
        if self.backend == "gpu":
            from repro.papers.qgtc import bmma

            return bmma.run(self.planes, bmma.pack(qh.T, bits, bitplanes.TILE_N)).to(torch.float64)
        if self.backend == "twin":
            c, _ = bitplanes.bitgemm(self.planes, bitplanes.pack(qh.cpu().numpy().T, bits, bitplanes.TILE_N))
            return torch.from_numpy(c.astype(np.float64)).to(qh.device)
        return int_matmul(self.codes, 1, qh, bits, self.backend)


def _aggregate(adj: Binary, h: torch.Tensor, bits: int) -> torch.Tensor:
    """(A + I) H from A's planes and H quantized to `bits`: on the GPU H quantized and packed by one
    kernel and the product recovered in the GEMM's, elsewhere quantize then Binary.times; the same
    numbers."""
    if adj.backend == "gpu":  # the recovery in the GEMM's epilogue (A binary: lo 0, scale 1)
        from repro.papers.qgtc import bmma

        ph, lo, scale, _ = bmma.quantize_pack(h.detach().T, bits, bitplanes.TILE_N)
        return bmma.run(adj.planes, ph, recover=bmma.Recover(lo_b=lo, s_b=scale, rowsum_a=adj.degrees)).to(h.dtype)
    qh, lo, scale = quantize(h.detach(), bits)
    return (scale.double() * adj.times(qh, bits) + lo.double() * adj.rowsum).to(h.dtype)


class _Aggregate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, adj, bits):
        ctx.adj = adj
        return _aggregate(adj, h, bits)

    @staticmethod
    def backward(ctx, grad):
        return ctx.adj.dense.T @ grad, None, None  # straight through: the adjacency is exact


def aggregate(adj: Binary | torch.Tensor, h: torch.Tensor, bits: int | None) -> torch.Tensor:
    """(A + I) @ h with h quantized to `bits` and A's planes packed once (a Binary); in float where bits
    is None (then adj may be the dense matrix)."""
    if bits is None:
        return (adj.dense if isinstance(adj, Binary) else adj) @ h
    if torch.is_grad_enabled() and h.requires_grad:
        return _Aggregate.apply(h, adj, bits)
    return _aggregate(adj, h, bits)


def with_self_loops(adjacency: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(A + I as a dense 0/1 float matrix, 1 / its row sums as a column)."""
    a = ((adjacency + torch.eye(adjacency.shape[0], dtype=adjacency.dtype, device=adjacency.device)) > 0)
    a = a.to(torch.float32)
    return a, 1.0 / a.sum(1, keepdim=True)


class QGCN(nn.Module):
    """Cluster-GCN's layers on quantized products: dims [in, hidden..., classes]."""

    def __init__(self, dims: list[int], bits: int | None, backend: str = "twin", seed: int = 0):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.weights = nn.ParameterList(
            nn.Parameter(torch.randn(i, o, generator=gen) * (2.0 / (i + o)) ** 0.5) for i, o in zip(dims, dims[1:]))
        self.biases = nn.ParameterList(nn.Parameter(torch.zeros(o)) for o in dims[1:])
        self.bits, self.backend = bits, backend

    def forward(self, adj_loops: torch.Tensor, deg_inv: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        adj = Binary(adj_loops, self.backend) if self.bits is not None else adj_loops
        for li, (w, b) in enumerate(zip(self.weights, self.biases)):
            h = qmatmul(h, w, self.bits, self.bits, self.backend)
            h = aggregate(adj, h, self.bits) * deg_inv + b
            if li < len(self.weights) - 1:
                h = torch.relu(h)
        return h


class QGIN(nn.Module):
    """Batched GIN's layers (eps = 0) on quantized products: sum aggregation over A + I, then a
    two-layer MLP per layer; dims [in, hidden..., classes]."""

    def __init__(self, dims: list[int], bits: int | None, backend: str = "twin", seed: int = 0):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)

        def weight(i, o):
            return nn.Parameter(torch.randn(i, o, generator=gen) * (2.0 / (i + o)) ** 0.5)
        self.w1 = nn.ParameterList(weight(i, o) for i, o in zip(dims, dims[1:]))
        self.w2 = nn.ParameterList(weight(o, o) for o in dims[1:])
        self.bits, self.backend = bits, backend

    def forward(self, adj_loops: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        adj = Binary(adj_loops, self.backend) if self.bits is not None else adj_loops
        for li, (w1, w2) in enumerate(zip(self.w1, self.w2)):
            h = aggregate(adj, h, self.bits)
            h = qmatmul(torch.relu(qmatmul(h, w1, self.bits, self.bits, self.backend)), w2, self.bits, self.bits,
                        self.backend)
            if li < len(self.w1) - 1:
                h = torch.relu(h)
        return h
