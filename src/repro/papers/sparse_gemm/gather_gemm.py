"""The gather GEMM in Triton: every group's shrunk dense GEMM of a packed layout (TW tiles, Shfl-BW
groups, TVW tiles with their 2:4 zeros) in ONE launch, on tensor cores (fp16 or bf16 in, fp32
accumulate, the input dtype out).

Program (g, mb) computes Y[out_rows[g], mb*BM : (mb+1)*BM] = Wg @ X[kidx[g], same columns]: Wg is
read as aligned (width x BK) slices of its packed block (plain vector loads, or TMA through a
device-side tensor descriptor: Config.tma), X as BK whole-row segments of BM tokens (each one
coalesced load; the per-step index load and per-row addresses still cost 5-20 % against Triton's own
dense pointer-load loop on an H100, and a row gather cannot use TMA on Hopper), and the epilogue
stores each output row where out_rows says (compact for TW, the unshuffle for Shfl-BW).

What keeps the loop close to a dense one:
- packing.pack starts and pads every group's K positions to a multiple of K_ALIGN, and the kernel
  says so (tl.multiple_of): weight rows load as aligned 16-byte vectors with no mask, and the loop
  runs over the padded length (the padding's weights are zero and its X rows masked to zero);
- no mask on M when M is a multiple of BM (EVEN_M, decided at launch);
- programs run in super-rows of group_m m-blocks (m-blocks fastest, then groups), so a group's
  weights and the group_m X slabs they meet are read from HBM about once, where groups-fastest order
  would stream a weight larger than L2 (K = 11008, N = 4096: 90 MB) again for every m-block.
Triton pipelines the kidx load one stage ahead of the X gather that uses it (num_stages deep).

Without a CUDA GPU the module runs the kernel in Triton's interpreter
(:func:`repro.kernels.triton_interpreter.without_gpu`, before Triton loads; its bf16 fixes): slow, for
correctness on small shapes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from repro.kernels import triton_interpreter

triton_interpreter.without_gpu()

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from repro.papers.sparse_gemm.packing import K_ALIGN as _K_ALIGN, Packed  # noqa: E402

DTYPES = (torch.float16, torch.bfloat16)
K_ALIGN = tl.constexpr(_K_ALIGN)
SMEM_BYTES = 200 * 1024  # of the H200's 227 KiB per block: room for the epilogue's scratch


@dataclass(frozen=True)
class Config:
    bm: int = 128  # tokens per program (the MMA's N)
    bk: int = 64  # K rows per step (divides K_ALIGN: the loop runs over whole padded steps)
    warps: int = 8
    stages: int = 3  # software-pipeline depth of the loads
    group_m: int = 8  # m-blocks per super-row of the program order (1: groups fastest)
    tma: bool = False  # weights through TMA (a device-side tensor descriptor per program)

    @property
    def name(self) -> str:
        return f"bm{self.bm}_bk{self.bk}_w{self.warps}_s{self.stages}_g{self.group_m}" + ("_tma" if self.tma else "")

    def fits(self, width: int, itemsize: int = 2) -> bool:
        """Shared memory for the pipelined operand tiles, at most 128 fp32 accumulators a thread,
        and a K step that divides the packing's alignment."""
        smem = self.stages * (width * self.bk + self.bk * self.bm) * itemsize
        return (smem <= SMEM_BYTES and width * self.bm <= 128 * 32 * self.warps and _K_ALIGN % self.bk == 0
                and self.group_m >= 1)

    def as_dict(self) -> dict:
        return asdict(self)


CANDIDATES = [Config(bm, bk, w, s, gm, tma) for bm, bk, w, s, gm, tma in (
    (128, 64, 4, 4, 8, False), (128, 64, 4, 3, 8, False), (128, 64, 8, 3, 8, False), (128, 64, 8, 4, 8, False),
    (256, 64, 8, 3, 8, False), (64, 64, 4, 4, 8, False), (128, 64, 4, 4, 1, False), (128, 64, 4, 4, 16, False),
    (128, 64, 4, 4, 8, True), (128, 64, 8, 4, 8, True), (256, 64, 8, 4, 8, True),
)]


def candidates(width: int) -> list[Config]:
    """The configurations the tuner tries for groups of ``width`` rows."""
    return [c for c in CANDIDATES if c.fits(width)]


@triton.jit(do_not_specialize=["n_groups"])  # one compile per config, whatever the group count
def _gather_gemm(x_ptr, w_ptr, y_ptr, kidx_ptr, kstart_ptr, klen_ptr, out_rows_ptr, M, n_groups,
                 stride_x, stride_y, WIDTH: tl.constexpr, BM: tl.constexpr, BK: tl.constexpr,
                 GROUP_M: tl.constexpr, EVEN_M: tl.constexpr, W_TMA: tl.constexpr):
    # program order: super-rows of GROUP_M m-blocks; inside one, m-blocks fastest, then groups, so a
    # group's weights serve GROUP_M m-blocks from L2 and the GROUP_M X slabs stay there too
    pid = tl.program_id(0)
    n_mb = tl.cdiv(M, BM)
    per_super = GROUP_M * n_groups
    first_mb = (pid // per_super) * GROUP_M
    rows_here = tl.minimum(n_mb - first_mb, GROUP_M)
    mb = first_mb + (pid % per_super) % rows_here
    g = (pid % per_super) // rows_here
    # every group's K positions start at, and are padded to, a multiple of K_ALIGN (packing.pack):
    # whole, aligned, unmasked weight rows; padding weights are zero and its X rows are masked off
    ks = tl.multiple_of(tl.load(kstart_ptr + g), K_ALIGN)
    kpad = tl.multiple_of(tl.load(kstart_ptr + g + 1) - ks, K_ALIGN)
    kl = tl.load(klen_ptr + g)
    rm = mb * BM + tl.arange(0, BM)
    rv = tl.arange(0, WIDTH)
    rk = tl.arange(0, BK)
    m_in = rm < M
    if W_TMA:
        w_desc = tl.make_tensor_descriptor(w_ptr + ks.to(tl.int64) * WIDTH, shape=[WIDTH, kpad], strides=[kpad, 1],
                                           block_shape=[WIDTH, BK])
    else:
        w_base = w_ptr + ks.to(tl.int64) * WIDTH + rv[:, None].to(tl.int64) * kpad + rk[None, :]
    acc = tl.zeros((WIDTH, BM), dtype=tl.float32)
    for k0 in range(0, kpad, BK):
        kk = k0 + rk
        rows = tl.load(kidx_ptr + ks + kk)
        x_ptrs = x_ptr + rows[:, None].to(tl.int64) * stride_x + rm[None, :]
        if EVEN_M:
            x = tl.load(x_ptrs, mask=(kk < kl)[:, None], other=0.0)
        else:
            x = tl.load(x_ptrs, mask=(kk < kl)[:, None] & m_in[None, :], other=0.0)
        if W_TMA:
            w = w_desc.load([0, k0])
        else:
            w = tl.load(w_base + k0)
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
    if config.tma:
        _tma_scratch()
    grid = (packed.n_groups * triton.cdiv(m, config.bm),)
    _gather_gemm[grid](x, packed.w, out, packed.kidx, packed.kstart, packed.klen, packed.out_rows, m,
                       packed.n_groups, x.stride(0), out.stride(0), WIDTH=packed.width, BM=config.bm,
                       BK=config.bk, GROUP_M=config.group_m, EVEN_M=m % config.bm == 0, W_TMA=config.tma,
                       num_warps=config.warps, num_stages=config.stages)
    return out


_scratch_set = False


def _tma_scratch() -> None:
    """Device-side tensor descriptors live in global scratch that Triton asks the host for."""
    global _scratch_set
    if not _scratch_set:
        triton.set_allocator(lambda size, alignment, stream: torch.empty(size, dtype=torch.int8,
                                                                         device="cuda" if torch.cuda.is_available()
                                                                         else "cpu"))
        _scratch_set = True
