"""The gather GEMM in Triton: every group's shrunk dense GEMM of a packed layout (TW tiles, Shfl-BW
groups, TVW tiles with their 2:4 zeros) in ONE launch, on tensor cores (fp16 or bf16 in, fp32
accumulate, the input dtype out).

Program (g, mb) computes Y[out_rows[g], mb*BM : (mb+1)*BM] = Wg @ X[kidx[g], same columns]: Wg is
read as contiguous (width x BK) slices of its packed block, X as BK whole-row segments of BM tokens
(the gather along K costs nothing: each row segment is one coalesced load), and the epilogue stores
each output row where out_rows says (compact for TW, the unshuffle for Shfl-BW). Programs run groups
fastest, so the (K x BM) slab of X that every group of an m-block gathers from stays in L2. Rows past
M and group rows past a group's width (out_rows = -1) are masked; so are K positions past klen[g], so
padding reads nothing.

Without a CUDA GPU the module runs the kernel in Triton's interpreter (TRITON_INTERPRET=1 is set
before Triton loads, with interpreter.patch for bf16): slow, for correctness on small shapes.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from repro.papers.sparse_gemm import interpreter  # noqa: E402
from repro.papers.sparse_gemm.packing import Packed  # noqa: E402

if interpreter.interpreting():
    interpreter.patch()

DTYPES = (torch.float16, torch.bfloat16)
SMEM_BYTES = 200 * 1024  # of the H200's 227 KiB per block: room for the epilogue's scratch


@dataclass(frozen=True)
class Config:
    bm: int = 128  # tokens per program (the MMA's N)
    bk: int = 64  # K rows per step
    warps: int = 8
    stages: int = 3  # software-pipeline depth of the loads

    @property
    def name(self) -> str:
        return f"bm{self.bm}_bk{self.bk}_w{self.warps}_s{self.stages}"

    def fits(self, width: int, itemsize: int = 2) -> bool:
        """Shared memory for the pipelined operand tiles, and at most 128 fp32 accumulators a thread."""
        smem = self.stages * (width * self.bk + self.bk * self.bm) * itemsize
        return smem <= SMEM_BYTES and width * self.bm <= 128 * 32 * self.warps

    def as_dict(self) -> dict:
        return asdict(self)


CANDIDATES = [Config(bm, bk, w, s) for bm, bk, w, s in (
    (128, 64, 4, 4), (128, 64, 8, 3), (128, 64, 8, 4), (256, 64, 8, 3), (256, 64, 8, 4),
    (256, 32, 8, 4), (128, 128, 8, 3), (64, 64, 4, 4),
)]


def candidates(width: int) -> list[Config]:
    """The configurations the tuner tries for groups of ``width`` rows."""
    return [c for c in CANDIDATES if c.fits(width)]


@triton.jit(do_not_specialize=["n_groups"])  # one compile per config, whatever the group count
def _gather_gemm(x_ptr, w_ptr, y_ptr, kidx_ptr, kstart_ptr, klen_ptr, out_rows_ptr, M, n_groups,
                 stride_x, stride_y, WIDTH: tl.constexpr, BM: tl.constexpr, BK: tl.constexpr):
    pid = tl.program_id(0)
    g = pid % n_groups
    mb = pid // n_groups
    ks = tl.load(kstart_ptr + g)
    kpad = tl.load(kstart_ptr + g + 1) - ks
    kl = tl.load(klen_ptr + g)
    rm = mb * BM + tl.arange(0, BM)
    rv = tl.arange(0, WIDTH)
    rk = tl.arange(0, BK)
    m_in = rm < M
    w_base = w_ptr + ks.to(tl.int64) * WIDTH + rv[:, None].to(tl.int64) * kpad
    acc = tl.zeros((WIDTH, BM), dtype=tl.float32)
    for k0 in range(0, kl, BK):
        kk = k0 + rk
        k_in = kk < kl
        rows = tl.load(kidx_ptr + ks + kk, mask=k_in, other=0)
        x = tl.load(x_ptr + rows[:, None].to(tl.int64) * stride_x + rm[None, :], mask=k_in[:, None] & m_in[None, :],
                    other=0.0)
        w = tl.load(w_base + kk[None, :], mask=k_in[None, :], other=0.0)
        acc = tl.dot(w, x, acc)
    out = tl.load(out_rows_ptr + g * WIDTH + rv)
    tl.store(y_ptr + out[:, None].to(tl.int64) * stride_y + rm[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=(out[:, None] >= 0) & m_in[None, :])


def check_operands(x: torch.Tensor, packed: Packed, out: torch.Tensor | None) -> None:
    """Clear errors for operands the kernel cannot take, before any launch."""
    if x.dtype not in DTYPES:
        raise ValueError(f"x must be float16 or bfloat16, got {x.dtype}")
    if packed.w.dtype != x.dtype:
        raise ValueError(f"packed weights are {packed.w.dtype} but x is {x.dtype}: pack with dtype={x.dtype}")
    if x.dim() != 2 or x.shape[0] != packed.k:
        raise ValueError(f"x must be (K={packed.k}, M), got {tuple(x.shape)}")
    if x.stride(1) != 1:
        raise ValueError("x must be row-major (K, M): each input feature a contiguous row")
    if packed.w.device != x.device:
        raise ValueError(f"packed weights are on {packed.w.device} but x is on {x.device}")
    if out is not None and (out.shape != (packed.n_out, x.shape[1]) or out.dtype != x.dtype or out.stride(1) != 1):
        raise ValueError(f"out must be a row-major {x.dtype} ({packed.n_out}, {x.shape[1]}), "
                         f"got {out.dtype} {tuple(out.shape)}")


def gather_gemm(x: torch.Tensor, packed: Packed, out: torch.Tensor | None = None,
                config: Config = Config()) -> torch.Tensor:
    """Y (packed.n_out, M) = the packed layer applied to x (K, M); rows no group writes (none in a
    compact layout) are left as they were."""
    check_operands(x, packed, out)
    if not config.fits(packed.width, x.element_size()):
        raise ValueError(f"config {config.name} does not fit groups of width {packed.width}")
    m = x.shape[1]
    if out is None:
        out = torch.zeros(packed.n_out, m, dtype=x.dtype, device=x.device)
    grid = (packed.n_groups * triton.cdiv(m, config.bm),)
    _gather_gemm[grid](x, packed.w, out, packed.kidx, packed.kstart, packed.klen, packed.out_rows, m,
                       packed.n_groups, x.stride(0), out.stride(0), WIDTH=packed.width, BM=config.bm,
                       BK=config.bk, num_warps=config.warps, num_stages=config.stages)
    return out
