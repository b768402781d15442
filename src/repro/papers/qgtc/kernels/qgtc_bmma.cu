// QGTC's bit-decomposed GEMM (Wang, Feng, Ding, PPoPP 2022) on the b1 tensor-core MMA of sm_80+:
// C (M x N, int32, row-major) = sum_{i < a_bits, j < b_bits} 2^(i+j) * popc(A_i AND B_j), where A_i
// is bit plane i of an unsigned a_bits-wide M x K matrix and B_j bit plane j of the K x N one, both
// packed by rows of K bits (bitplanes.py, the NumPy twin, says how): A as planes[a_bits][Mp][Kw]
// (Mp a multiple of 16), B as its transpose, planes[b_bits][Np][Kw] (Np a multiple of 8), with
// Kw = 8 * k_tiles 32-bit words per row (K padded with zero bits to a multiple of 256).
//
// One warp owns a 16 x (8 * NT) tile of C and runs mma.sync.m16n8k256 .and.popc over its k range for
// every plane pair; each pair's counts are shifted by i + j into the running total, so only two sets
// of NT accumulators live in registers whatever the bit widths (holding all a_bits + b_bits - 1
// weights at once would need up to 15 * 4 * NT registers). KS warps of a block split the k tiles of
// one output tile and add their totals through shared memory, so that small M still fills the SMs.
//
// Zero-tile jumping: before the MMAs of a 16 x 256 tile of A plane i, the warp votes whether any of
// its bits is set; an empty tile (most of a sparse adjacency's) costs its A loads and nothing more.
//
// Fragments (PTX ISA, m16n8k256 .b1): lane = 4 * g + t; a0/a2 hold row g, a1/a3 row g + 8; a0/a1 the
// k bits 32t..32t+31 of the MMA's 256, a2/a3 the bits 128 + 32t..; b0/b1 column g, the same k bits as
// a0/a2. AND + POPC is blind to the order of k, so each lane reads two adjacent words of memory
// (2t, 2t + 1) as its (a0, a2) and (b0, b1): one 8-byte load per row and the same k permutation on
// both operands.

#include <cstdint>

namespace qgtc {

__device__ __forceinline__ void mma_b1(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                       uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k256.row.col.s32.b1.b1.s32.and.popc "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

constexpr int WARPS = 4;  // warps per block

// The float epilogue (layers._recover's identity, when Cf is given instead of C): with A ~ lo_a + s_a Q_a
// and B ~ lo_b + s_b Q_b (device scalars; a null pointer: lo 0, scale 1), the codes' row sums of A and
// column sums of B (null where the term's lo is 0) and K the real reduction length,
//   Cf = float(((s_a s_b) C + (s_a lo_b) rowsum_a) + (lo_a s_b) colsum_b) + (lo_a lo_b) K)
// in float64, each operation rounded on its own (_rn: no FMA contraction), in the order the torch
// recovery computes it, so the two agree bit for bit.
struct Recover {
  const float* lo_a;
  const float* s_a;
  const float* lo_b;
  const float* s_b;
  const int* rowsum_a;
  const int* colsum_b;
  float* Cf;
  int k;
};

__device__ __forceinline__ float recover(const Recover& e, int total, int row, int col) {
  const double sa = e.s_a ? (double)*e.s_a : 1.0, la = e.lo_a ? (double)*e.lo_a : 0.0;
  const double sb = e.s_b ? (double)*e.s_b : 1.0, lb = e.lo_b ? (double)*e.lo_b : 0.0;
  const double ra = e.rowsum_a ? (double)e.rowsum_a[row] : 0.0, cb = e.colsum_b ? (double)e.colsum_b[col] : 0.0;
  double y = __dmul_rn(__dmul_rn(sa, sb), (double)total);
  y = __dadd_rn(y, __dmul_rn(__dmul_rn(sa, lb), ra));
  y = __dadd_rn(y, __dmul_rn(__dmul_rn(la, sb), cb));
  y = __dadd_rn(y, __dmul_rn(__dmul_rn(la, lb), (double)e.k));
  return (float)y;
}

template <int NT, int KS>
__device__ __forceinline__ void bmma(const uint32_t* __restrict__ A, int a_bits, long long a_plane,
                                     const uint32_t* __restrict__ B, int b_bits, long long b_plane,
                                     int m_tiles, int n_tiles, int k_tiles, int* __restrict__ C, int M, int N,
                                     long long ldc, int skip_zero, unsigned long long* __restrict__ counters,
                                     const Recover& epilogue) {
  static_assert(WARPS % KS == 0, "the k split must divide the block's warps");
  constexpr int ROWS_PER_BLOCK = WARPS / KS;  // row tiles per block
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int mt = blockIdx.x * ROWS_PER_BLOCK + warp / KS;
  const int ks = warp % KS;
  const int nt0 = blockIdx.y * NT;
  const long long kw = 8LL * k_tiles;  // words per packed row
  const bool active = mt < m_tiles;     // uniform per warp

  int total[NT][4];
#pragma unroll
  for (int n = 0; n < NT; ++n)
#pragma unroll
    for (int r = 0; r < 4; ++r) total[n][r] = 0;
  unsigned long long visited = 0, jumped = 0;

  if (active) {
    for (int i = 0; i < a_bits; ++i) {
      const uint32_t* pa = A + i * a_plane + (long long)(mt * 16 + g) * kw + 2 * t;
      for (int j = 0; j < b_bits; ++j) {
        const uint32_t* pb = B + j * b_plane + 2 * t;
        int acc[NT][4];
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
          for (int r = 0; r < 4; ++r) acc[n][r] = 0;
#pragma unroll 2
        for (int kt = ks; kt < k_tiles; kt += KS) {
          const uint2 lo = *reinterpret_cast<const uint2*>(pa + 8LL * kt);
          const uint2 hi = *reinterpret_cast<const uint2*>(pa + 8 * kw + 8LL * kt);
          if (j == 0) ++visited;
          if (skip_zero && !__any_sync(0xffffffffu, (lo.x | lo.y | hi.x | hi.y) != 0u)) {
            if (j == 0) ++jumped;
            continue;
          }
#pragma unroll
          for (int n = 0; n < NT; ++n) {
            if (nt0 + n < n_tiles) {
              const uint2 b = *reinterpret_cast<const uint2*>(pb + (long long)((nt0 + n) * 8 + g) * kw + 8LL * kt);
              mma_b1(acc[n], lo.x, hi.x, lo.y, hi.y, b.x, b.y);
            }
          }
        }
        const int shift = i + j;
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
          for (int r = 0; r < 4; ++r) total[n][r] += acc[n][r] << shift;
      }
    }
  }

  if (KS > 1) {  // add the k split's partial totals; warp ks == 0 of each row tile stores
    __shared__ int red[WARPS][NT * 4][32];
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int r = 0; r < 4; ++r) red[warp][n * 4 + r][lane] = total[n][r];
    __syncthreads();
    if (ks == 0) {
#pragma unroll
      for (int s = 1; s < KS; ++s)
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
          for (int r = 0; r < 4; ++r) total[n][r] += red[warp + s][n * 4 + r][lane];
    }
  }

  if (active && ks == 0) {
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      const int col = (nt0 + n) * 8 + 2 * t;
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int row = mt * 16 + g + (r >= 2 ? 8 : 0);
        const int cc = col + (r & 1);
        if (row < M && cc < N) {
          if (epilogue.Cf != nullptr) {
            epilogue.Cf[(long long)row * ldc + cc] = recover(epilogue, total[n][r], row, cc);
          } else {
            C[(long long)row * ldc + cc] = total[n][r];
          }
        }
      }
    }
  }
  if (counters != nullptr && active && lane == 0) {
    atomicAdd(counters, visited);
    atomicAdd(counters + 1, jumped);
  }
}

// The b1 MMA's issue rate: every warp runs `iters` rounds of CH independent m16n8k256 AND+POPC MMAs on
// register operands (no memory traffic), then stores one sum so the work is not dead. 2 * 16 * 8 * 256
// operations per MMA.
constexpr int PEAK_CHAINS = 8;

__device__ __forceinline__ void b1_peak(int iters, int* __restrict__ out) {
  const uint32_t seed = 0x9e3779b9u * (threadIdx.x + 1) ^ blockIdx.x;
  const uint32_t a0 = seed, a1 = seed * 3u, a2 = seed * 5u, a3 = seed * 7u, b0 = seed * 11u, b1 = seed * 13u;
  int acc[PEAK_CHAINS][4];
#pragma unroll
  for (int c = 0; c < PEAK_CHAINS; ++c)
#pragma unroll
    for (int r = 0; r < 4; ++r) acc[c][r] = 0;
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int c = 0; c < PEAK_CHAINS; ++c) mma_b1(acc[c], a0, a1, a2, a3, b0, b1);
  }
  int s = 0;
#pragma unroll
  for (int c = 0; c < PEAK_CHAINS; ++c) s += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

// Quantize and pack in one pass (QGTC fuses them too, its val2bit): a float32 matrix X (rows x k, element
// (r, c) at X[r * xs0 + c * xs1], so X and X^T pack without a copy) to the planes above, with the
// arithmetic of layers.quantize, IEEE float32 throughout (no fast math): scale = (hi - lo) / levels,
// q = clamp(rint((x - lo) / (scale > 0 ? scale : 1)), 0, levels), levels = 2^bits - 1, lo and hi the
// matrix's min and max (device scalars from torch.aminmax: no synchronisation). lo == nullptr packs X
// as codes already (lo 0, scale 1: a 0/1 adjacency). One warp a row (grid-stride): lane j holds element
// 32 w + j of word w, one __ballot_sync a plane makes the word (bit j <- lane j, as bitplanes.pack);
// padded rows and columns are zero words. rowsum (or nullptr) gets each real row's sum of codes, the
// recovery's row sums; scale_out (or nullptr) the scale, written by the first thread.
__device__ __forceinline__ void quantize_pack(const float* __restrict__ X, long long xs0, long long xs1, int rows,
                                              int k, const float* __restrict__ lo_p, const float* __restrict__ hi_p,
                                              int bits, uint32_t* __restrict__ words, int rows_padded, int k_words,
                                              int* __restrict__ rowsum, float* __restrict__ scale_out) {
  const int lane = threadIdx.x & 31;
  const int warps = (gridDim.x * blockDim.x) >> 5;
  const float levels = (float)((1 << bits) - 1);
  float lo = 0.f, safe = 1.f;
  if (lo_p != nullptr) {
    lo = *lo_p;
    const float scale = (*hi_p - lo) / levels;
    safe = scale > 0.f ? scale : 1.f;
    if (scale_out != nullptr && blockIdx.x == 0 && threadIdx.x == 0) *scale_out = scale;
  }
  const long long plane = (long long)rows_padded * k_words;
  for (int r = (blockIdx.x * blockDim.x + threadIdx.x) >> 5; r < rows_padded; r += warps) {
    int sum = 0;
#pragma unroll 4  // independent words: four loads in flight, not one (an adjacency row is 72 words and more)
    for (int w = 0; w < k_words; ++w) {
      const int c = w * 32 + lane;
      int q = 0;
      if (r < rows && c < k) {
        const float x = X[(long long)r * xs0 + (long long)c * xs1];
        q = (int)fminf(fmaxf(rintf((x - lo) / safe), 0.f), levels);
      }
      sum += q;
      for (int b = 0; b < bits; ++b) {
        const uint32_t word = __ballot_sync(0xffffffffu, (q >> b) & 1);
        if (lane == 0) words[b * plane + (long long)r * k_words + w] = word;
      }
    }
    if (rowsum != nullptr && r < rows) {
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
      if (lane == 0) rowsum[r] = sum;
    }
  }
}

}  // namespace qgtc

#define QGTC_BMMA(NT, KS)                                                                                      \
  extern "C" __global__ void __launch_bounds__(qgtc::WARPS * 32) qgtc_bmma_n##NT##_k##KS(                      \
      const uint32_t* A, int a_bits, long long a_plane, const uint32_t* B, int b_bits, long long b_plane,       \
      int m_tiles, int n_tiles, int k_tiles, int* C, int M, int N, long long ldc, int skip_zero,               \
      unsigned long long* counters, const float* lo_a, const float* s_a, const float* lo_b, const float* s_b,   \
      const int* rowsum_a, const int* colsum_b, float* Cf, int k) {                                            \
    const qgtc::Recover epilogue{lo_a, s_a, lo_b, s_b, rowsum_a, colsum_b, Cf, k};                               \
    qgtc::bmma<NT, KS>(A, a_bits, a_plane, B, b_bits, b_plane, m_tiles, n_tiles, k_tiles, C, M, N, ldc,         \
                       skip_zero, counters, epilogue);                                                         \
  }

// BMMA_VARIANT lines: bmma.py's VARIANTS lists the same (NT, KS) pairs.
QGTC_BMMA(1, 1)
QGTC_BMMA(2, 1)
QGTC_BMMA(4, 1)
QGTC_BMMA(8, 1)
QGTC_BMMA(1, 2)
QGTC_BMMA(2, 2)
QGTC_BMMA(4, 2)
QGTC_BMMA(8, 2)
QGTC_BMMA(1, 4)
QGTC_BMMA(2, 4)
QGTC_BMMA(4, 4)
QGTC_BMMA(8, 4)

extern "C" __global__ void qgtc_b1_peak(int iters, int* out) { qgtc::b1_peak(iters, out); }

extern "C" __global__ void qgtc_quantize_pack(const float* X, long long xs0, long long xs1, int rows, int k,
                                              const float* lo, const float* hi, int bits, uint32_t* words,
                                              int rows_padded, int k_words, int* rowsum, float* scale_out) {
  qgtc::quantize_pack(X, xs0, xs1, rows, k, lo, hi, bits, words, rows_padded, k_words, rowsum, scale_out);
}
