"""The bit-decomposed GEMM on the GPU: pack torch integer tensors into bit planes on the device and run
kernels/qgtc_bmma.cu through CuPy on torch's current stream (bitplanes.py is its NumPy twin).

    C = int_matmul(qa, a_bits, qb, b_bits)   # qa: M x K, qb: K x N unsigned ints (CUDA tensors) -> int32 M x N

Packed operands can be kept and reused (an adjacency's planes across epochs, the GEMM benchmark's):

    pa, pb = pack(qa, a_bits), pack(qb.T, b_bits, row_multiple=8)
    C = run(pa, pb, M, N)

Float operands quantize and pack in one kernel (what the quantized layers' inference runs):

    pa, lo, scale, rowsum = quantize_pack(x, bits)

Nothing here imports CuPy or torch at module load.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from repro import kernels
from repro.papers.qgtc.bitplanes import TILE_K, TILE_M, TILE_N, WORD, check_bits

STEM = "qgtc_bmma"
WARPS = 4  # warps per block (qgtc_bmma.cu's WARPS)
VARIANTS = [(nt, ks) for ks in (1, 2, 4) for nt in (1, 2, 4, 8)]  # the (NT, KS) pairs instantiated in the .cu


def kernel_name(nt: int, ks: int) -> str:
    return f"qgtc_bmma_n{nt}_k{ks}"


@dataclass(frozen=True)
class DevicePlanes:
    """Planes of an unsigned matrix on the GPU: words (bits, rows_padded, k_words) int32; rows and k
    before padding."""

    words: Any
    rows: int
    k: int

    @property
    def bits(self) -> int:
        return self.words.shape[0]


def pack(q, bits: int, row_multiple: int = TILE_M) -> DevicePlanes:
    """Bit planes of an unsigned integer CUDA tensor (rows x k, values < 2^bits), as bitplanes.pack."""
    import torch

    bits = check_bits(bits)
    rows, k = q.shape
    rp = -(-max(rows, 1) // row_multiple) * row_multiple
    kp = -(-max(k, 1) // TILE_K) * TILE_K
    padded = torch.zeros((rp, kp), dtype=torch.int32, device=q.device)
    padded[:rows, :k] = q
    shifts = torch.arange(bits, device=q.device, dtype=torch.int32).view(bits, 1, 1)
    planes = ((padded.unsqueeze(0) >> shifts) & 1).view(bits, rp, kp // WORD, WORD).to(torch.int64)
    words = (planes << torch.arange(WORD, device=q.device, dtype=torch.int64)).sum(dim=3)
    words = torch.where(words >= 1 << 31, words - (1 << 32), words).to(torch.int32)  # the uint32 bits as int32
    return DevicePlanes(words.contiguous(), rows, k)


def _address(t):
    """A CUDA tensor's address as a kernel's pointer argument; a null pointer for None."""
    import numpy as np

    return np.uint64(t.data_ptr() if t is not None else 0)


PACK_THREADS = 256  # qgtc_quantize_pack: eight warps a block, a warp a row


def quantize_pack(x, bits: int, row_multiple: int = TILE_M, codes: bool = False, kernels_dir: Path | None = None):
    """The planes of a float32 CUDA matrix (rows x k, any strides: x.T packs without a copy) quantized
    as layers.quantize does, in one kernel (qgtc_quantize_pack) after torch.aminmax: (DevicePlanes,
    lo, scale, rowsum) with lo and scale 0-d float32 tensors and rowsum the int32 sum of each row's
    codes, all on x's device with no synchronisation. codes=True: x holds codes already (a 0/1
    adjacency at 1 bit): packed as they are, lo and scale None."""
    import cupy
    import numpy as np
    import torch

    bits = check_bits(bits)
    if x.dtype != torch.float32 or x.dim() != 2 or x.device.type != "cuda":
        raise ValueError(f"quantize_pack takes a 2-D float32 CUDA tensor, got {x.dtype} {tuple(x.shape)} on {x.device}")
    rows, k = x.shape
    rp = -(-max(rows, 1) // row_multiple) * row_multiple
    k_words = -(-max(k, 1) // TILE_K) * TILE_K // WORD
    dev = x.device
    device = dev.index if dev.index is not None else torch.cuda.current_device()
    words = torch.empty((bits, rp, k_words), dtype=torch.int32, device=dev)
    rowsum = torch.empty(rows, dtype=torch.int32, device=dev)
    if codes:
        lo = hi = scale = None
    else:
        lo, hi = torch.aminmax(x)
        scale = torch.empty((), dtype=torch.float32, device=dev)

    blocks = max(1, min(-(-rp // (PACK_THREADS // 32)), 8 * kernels.sm_count(device)))
    with cupy.cuda.Device(device):
        fn = kernels.function(STEM, "qgtc_quantize_pack", device, kernels_dir)
        with kernels.launch_stream(True, device):
            fn((blocks, 1, 1), (PACK_THREADS, 1, 1),
               (_address(x), np.int64(x.stride(0)), np.int64(x.stride(1)), np.int32(rows), np.int32(k), _address(lo),
                _address(hi), np.int32(bits), _address(words), np.int32(rp), np.int32(k_words), _address(rowsum),
                _address(scale)))
    return DevicePlanes(words, rows, k), lo, scale, rowsum


def choose(m_tiles: int, n_tiles: int, k_tiles: int, sms: int) -> tuple[int, int]:
    """(NT, KS): as many n tiles per warp as N has (up to 8), then split k over 2 or 4 warps while the
    grid has fewer than 8 warps per SM and each warp keeps at least two k tiles."""
    nt = next(v for v in (1, 2, 4, 8) if v >= min(n_tiles, 8))
    ks = 1
    while ks < 4 and m_tiles * -(-n_tiles // nt) * ks < 8 * sms and k_tiles >= 4 * ks:
        ks *= 2
    return nt, ks


@dataclass(frozen=True)
class Recover:
    """The float product in the kernel's epilogue instead of the integer one (layers' recovery identity,
    bit for bit): A ~ lo_a + s_a Q_a and B ~ lo_b + s_b Q_b with 0-d float32 CUDA tensors (None: lo 0,
    scale 1, as a 0/1 adjacency), and the codes' row sums of A and column sums of B (int32 CUDA
    tensors of a.rows and b.rows; None where the term's lo is 0)."""

    lo_a: Any = None
    s_a: Any = None
    lo_b: Any = None
    s_b: Any = None
    rowsum_a: Any = None
    colsum_b: Any = None

    def pointers(self) -> tuple:
        return tuple(_address(t) for t in (self.lo_a, self.s_a, self.lo_b, self.s_b, self.rowsum_a, self.colsum_b))


def bind(a: DevicePlanes, b: DevicePlanes, out=None, skip_zero_tiles: bool = True, counters=None,
         variant: tuple[int, int] | None = None, kernels_dir: Path | None = None, recover: Recover | None = None):
    """Check the operands once and return (launch, out): launch() computes out = A B^T (int32, a.rows x
    b.rows; float32 through `recover`'s epilogue where given) from A's planes and B^T's (packed with
    row_multiple 8) with no per-call checks, so that a repeated call costs one kernel launch.
    counters: an int64 CUDA tensor of 2 that receives (A tiles visited, tiles jumped) added up."""
    import cupy
    import numpy as np
    import torch

    if a.k != b.k or a.words.shape[2] != b.words.shape[2]:
        raise ValueError(f"inner dimensions differ: A has k = {a.k}, B has k = {b.k}")
    m, n = a.rows, b.rows
    want = torch.float32 if recover is not None else torch.int32
    if out is None:
        out = torch.empty((m, n), dtype=want, device=a.words.device)
    if out.dtype != want:
        raise ValueError(f"out is {out.dtype}; the {'float epilogue' if recover is not None else 'integer product'} "
                         f"writes {want}")
    device = a.words.device.index if a.words.device.index is not None else torch.cuda.current_device()
    m_tiles, n_tiles = a.words.shape[1] // TILE_M, b.words.shape[1] // TILE_N
    k_tiles = a.words.shape[2] * WORD // TILE_K
    nt, ks = variant or choose(m_tiles, n_tiles, k_tiles, kernels.sm_count(device))
    if (nt, ks) not in VARIANTS:
        raise ValueError(f"no kernel for NT = {nt}, KS = {ks}; instantiated: {VARIANTS}")
    with cupy.cuda.Device(device):
        fn = kernels.function(STEM, kernel_name(nt, ks), device, kernels_dir)
    grid, block = (-(-m_tiles // (WARPS // ks)), -(-n_tiles // nt), 1), (WARPS * 32, 1, 1)
    int_out, float_out = (None, out) if recover is not None else (out, None)
    args = (_address(a.words), np.int32(a.bits), np.int64(a.words[0].numel()),
            _address(b.words), np.int32(b.bits), np.int64(b.words[0].numel()),
            np.int32(m_tiles), np.int32(n_tiles), np.int32(k_tiles), _address(int_out),
            np.int32(m), np.int32(n), np.int64(out.stride(0)), np.int32(bool(skip_zero_tiles)),
            _address(counters),
            *(recover or Recover()).pointers(), _address(float_out), np.int32(a.k))
    with cupy.cuda.Device(device):
        bound = kernels.Launch(fn, grid, block, args)  # the arguments fixed: a call is one cuLaunchKernel

    def launch():
        bound.start(True, device)
    return launch, out


def run(a: DevicePlanes, b: DevicePlanes, out=None, skip_zero_tiles: bool = True, counters=None,
        variant: tuple[int, int] | None = None, kernels_dir: Path | None = None, recover: Recover | None = None):
    """C = A B^T (int32, a.rows x b.rows; the float product where `recover` is given), one call of
    bind's launch."""
    launch, out = bind(a, b, out, skip_zero_tiles, counters, variant, kernels_dir, recover)
    launch()
    return out


def int_matmul(qa, a_bits: int, qb, b_bits: int, skip_zero_tiles: bool = True, kernels_dir: Path | None = None):
    """qa (M x K, a_bits) @ qb (K x N, b_bits) as int32 on the GPU, through bit planes."""
    return run(pack(qa, a_bits), pack(qb.T, b_bits, TILE_N), skip_zero_tiles=skip_zero_tiles,
               kernels_dir=kernels_dir)


def peak_tops(iters: int = 4096, blocks_per_sm: int = 4, warps: int = 8, repeats: int = 10,
              kernels_dir: Path | None = None) -> dict[str, float]:
    """The b1 MMA issue rate (TOPS, 2 * 16 * 8 * 256 operations per MMA) from qgtc_b1_peak: register
    operands, 8 independent chains per warp, enough warps for every SM; the median of CUDA-event timings."""
    import cupy
    import numpy as np
    import torch

    from repro.timing import time_cuda

    device = torch.cuda.current_device()
    sms = kernels.sm_count(device)
    with cupy.cuda.Device(device):
        fn = kernels.function(STEM, "qgtc_b1_peak", device, kernels_dir)
    blocks, threads = sms * blocks_per_sm, warps * 32
    out = torch.empty(blocks * threads, dtype=torch.int32, device="cuda")

    def launch():
        with cupy.cuda.Device(device), kernels.launch_stream(True, device):
            fn((blocks, 1, 1), (threads, 1, 1), (np.int32(iters), np.uint64(out.data_ptr())))

    t = time_cuda(launch, warmup=2, repeats=repeats).median_s
    ops = 2.0 * 16 * 8 * 256 * 8 * iters * blocks * warps  # 8 = PEAK_CHAINS
    return {"peak_b1_tops": ops / t / 1e12, "peak_time_s": t}
