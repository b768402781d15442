// TSM2R with a shared-memory copy pipeline: C (m x n) = A (m x k) * B (k x n), n <= 16.
// Rivera et al., "TSM2X", JPDC 2021. Layouts: see tsm2_common.cuh (column-major A and C, B with any
// strides). tsm2r.cu streams A through registers with one tile of prefetch; here the prefetch depth
// is set by shared memory instead of registers, and every warp runs its own pipeline.
//
// Work: a warp owns one slab of WR = 32 * V consecutive rows and one part of the k range; each lane
// keeps the V x N accumulators of its V rows. A block has 4 warps: 4 / KW slabs, each slab's k range
// split KW ways among its warps; a cluster of S blocks (grid.y) splits it S ways more, so a slab's k
// range has S * KW parts. (With m = 10240 and V = 4 there are 80 slabs: without the in-block split
// the 8-way cluster split gives 640 warps, under 5 per SM.)
//
// Pipeline (per warp, no block barrier in the main loop): a ring of STAGES slots in shared memory,
// each holding KT columns of the slab's A and the matching KT rows of B. Lane l copies its own V
// rows of each column with one cp.async (8 or 16 bytes when A is aligned for it, else one per
// element) and, with the other lanes, the slot's KT x N values of B (one element per cp.async, into
// row-major Bs[kk * N + j], read back with broadcast vector loads). Copies are issued STAGES - 1
// tiles ahead, so each warp has up to (STAGES - 1) * KT * WR elements of A in flight however many
// registers the accumulators take; cp.async.wait_group + __syncwarp make a slot's copies visible to
// the warp, and a slot is refilled only after the warp's next __syncwarp, when every lane is done
// reading it. Rows past m, columns past the part's k range and B entries past n are zero-filled by
// the copy (src-size 0), so the FMAs need no tests.
//
// Epilogue: without a split (S = KW = 1) each lane stores its block. Otherwise each warp leaves its
// partials in shared memory (reusing the ring), and after a block (S = 1) or cluster barrier block
// rank b of the cluster adds, for its 1/S share of the block's RB x n tile, the partials of every
// rank s and in-block part q in the fixed order (s, q) = (0, 0), (0, 1), ...: deterministic, no
// atomics, no workspace, one launch.
//
// Shared memory is dynamic (the fp32 ring is 54 KB, over the 48 KB static limit): the launch passes
// SMEM bytes, the instantiation line states them and a static_assert checks the layout needs them.

#include <cooperative_groups.h>

#include "tsm2_common.cuh"

namespace cg = cooperative_groups;

namespace tsm2 {

// ---- cp.async (sm_80+) to a shared-memory address; src_bytes < BYTES zero-fills the rest -----------

template <int BYTES>
__device__ __forceinline__ void cp_async(unsigned dst, const void* src, int src_bytes) {
  if constexpr (BYTES == 16) {  // .cg: L2 only (A is read once)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(dst), "l"(src), "n"(BYTES), "r"(src_bytes)
                 : "memory");
  }
}
template <int BYTES>
__device__ __forceinline__ void cp_async(unsigned dst, const void* src) {
  if constexpr (BYTES == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(dst), "l"(src), "n"(BYTES) : "memory");
  }
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int PENDING>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING) : "memory"); }
__device__ __forceinline__ unsigned shared_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// V consecutive elements from shared memory (aligned to V * sizeof(T) when that is 8 or 16 bytes).
template <typename T, int V>
__device__ __forceinline__ void load_shared(T (&d)[V], const T* p) {
  if constexpr (V * sizeof(T) == 16 && sizeof(T) == 4) {
    const float4 v = *reinterpret_cast<const float4*>(p);
    d[0] = v.x; d[1] = v.y; d[2] = v.z; d[3] = v.w;
  } else if constexpr (V * sizeof(T) == 16) {
    const double2 v = *reinterpret_cast<const double2*>(p);
    d[0] = v.x; d[1] = v.y;
  } else {
#pragma unroll
    for (int r = 0; r < V; ++r) d[r] = p[r];
  }
}

// Bytes of dynamic shared memory the kernel needs: the larger of the ring and the partials.
template <typename T, int N, int V, int S, int KW, int KT, int STAGES>
constexpr int pipelined_smem_bytes() {
  constexpr int WARPS = 4, WR = 32 * V;
  constexpr int ring = WARPS * STAGES * KT * (WR + N) * (int)sizeof(T);
  constexpr int red = S > 1 || KW > 1 ? WARPS * WR * N * (int)sizeof(T) : 0;
  return ring > red ? ring : red;
}

template <typename T, int N, int V, int S, int KW, int KT, int STAGES>
__device__ __forceinline__ void tsm2r_pipelined(int m, int n, int k, const T* __restrict__ A, long long lda,
                                                const T* __restrict__ B, long long ldb_k, long long ldb_n,
                                                T* __restrict__ C, long long ldc, int a_vec, int c_vec) {
  constexpr int TPB = 128, WARPS = TPB / 32;
  static_assert(WARPS % KW == 0, "the block's warps must split into whole slabs");
  constexpr int WR = 32 * V;                          // rows per warp (one slab)
  constexpr int RB = WARPS / KW * WR;                 // rows per block
  constexpr int A_SLOT = KT * WR, B_SLOT = KT * N;    // elements
  constexpr int WARP_RING = STAGES * (A_SLOT + B_SLOT);
  constexpr bool REDUCE = S > 1 || KW > 1;             // partials [q][j][row] in the ring's place
  static_assert(STAGES >= 2 && (A_SLOT * (int)sizeof(T)) % 16 == 0 && (B_SLOT * (int)sizeof(T)) % 16 == 0,
                "slots must keep 16-byte alignment");
  extern __shared__ __align__(16) unsigned char smem[];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int slab = warp / KW, q = warp % KW;
  const int row0 = blockIdx.x * RB;
  const int i0 = row0 + slab * WR + lane * V;
  const int rows = max(0, min(V, m - i0));  // how many of this lane's rows exist
  const T* pa = A + (rows > 0 ? i0 : 0);

  // This warp's k range: part blockIdx.y * KW + q of S * KW, a whole number of KT tiles.
  constexpr int PARTS = S * KW;
  const int per_part = ((k + PARTS - 1) / PARTS + KT - 1) / KT * KT;
  const int kbeg = min(k, ((int)blockIdx.y * KW + q) * per_part);
  const int kend = min(k, kbeg + per_part);
  const int ntiles = (kend - kbeg + KT - 1) / KT;

  T* ring_a = reinterpret_cast<T*>(smem) + warp * WARP_RING;  // [STAGES][KT][WR]
  T* ring_b = ring_a + STAGES * A_SLOT;                         // [STAGES][KT][N]

  // Copy state, advanced one tile per issue: this lane's A rows at the next tile's first column,
  // and the B elements it copies (element e = kk + KT * j of a tile; consecutive lanes take
  // consecutive kk, so the reads of a column-major B are coalesced). Shared addresses are 32-bit.
  const T* next_a = pa + (long long)kbeg * lda;
  constexpr int BE = (KT * N + 31) / 32;  // B elements per lane per tile
  const T* next_b[BE];
  unsigned b_dst[BE];
  int b_kk[BE];
  bool b_own[BE], b_col[BE];
  const unsigned a_dst = shared_address(ring_a + lane * V), b_base = shared_address(ring_b);
#pragma unroll
  for (int i = 0; i < BE; ++i) {
    const int e = lane + 32 * i, kk = e % KT, j = e / KT;
    b_own[i] = e < KT * N;
    b_col[i] = j < n;
    b_dst[i] = b_base + (kk * N + j) * (unsigned)sizeof(T);
    b_kk[i] = kk;
    next_b[i] = B + (long long)(kbeg + kk) * ldb_k + (long long)j * ldb_n;
  }
  const long long a_step = (long long)KT * lda, b_step = (long long)KT * ldb_k;
  constexpr unsigned A_SLOT_BYTES = A_SLOT * sizeof(T), B_SLOT_BYTES = B_SLOT * sizeof(T);

  // Copy the next tile (its first `cols` columns exist) into `slot`.
  auto issue = [&](int slot, int cols) {
    const unsigned sa = a_dst + slot * A_SLOT_BYTES, sb = slot * B_SLOT_BYTES;
    constexpr int VB = V * (int)sizeof(T);  // bytes of one lane's rows in one column
    if (cols == KT) {                       // every tile but the last
      if (a_vec && rows == V) {             // every lane but the last rows'
        const T* p = next_a;
#pragma unroll
        for (int c = 0; c < KT; ++c, p += lda) cp_async<VB>(sa + c * WR * (int)sizeof(T), p);
      } else if (a_vec) {
        const T* p = rows > 0 ? next_a : A;
#pragma unroll
        for (int c = 0; c < KT; ++c, p += rows > 0 ? lda : 0)
          cp_async<VB>(sa + c * WR * (int)sizeof(T), p, rows * (int)sizeof(T));
      } else {
#pragma unroll
        for (int c = 0; c < KT; ++c)
#pragma unroll
          for (int r = 0; r < V; ++r)
            cp_async<(int)sizeof(T)>(sa + (c * WR + r) * (int)sizeof(T), r < rows ? next_a + c * lda + r : A,
                                     r < rows ? (int)sizeof(T) : 0);
      }
#pragma unroll
      for (int i = 0; i < BE; ++i)
        if (b_own[i]) cp_async<(int)sizeof(T)>(b_dst[i] + sb, b_col[i] ? next_b[i] : B, b_col[i] ? (int)sizeof(T) : 0);
    } else {  // the last tile of this warp's k range: columns past it read zero
#pragma unroll
      for (int c = 0; c < KT; ++c)
#pragma unroll
        for (int r = 0; r < V; ++r) {
          const bool ok = c < cols && r < rows;
          cp_async<(int)sizeof(T)>(sa + (c * WR + r) * (int)sizeof(T), ok ? next_a + c * lda + r : A,
                                   ok ? (int)sizeof(T) : 0);
        }
#pragma unroll
      for (int i = 0; i < BE; ++i) {
        const bool ok = b_col[i] && b_kk[i] < cols;
        if (b_own[i]) cp_async<(int)sizeof(T)>(b_dst[i] + sb, ok ? next_b[i] : B, ok ? (int)sizeof(T) : 0);
      }
    }
    next_a += a_step;
#pragma unroll
    for (int i = 0; i < BE; ++i) next_b[i] += b_step;
  };

  T acc[V][N];
#pragma unroll
  for (int r = 0; r < V; ++r)
#pragma unroll
    for (int j = 0; j < N; ++j) acc[r][j] = T(0);

  // One commit group per tile, empty ones included, so that group t always holds tile t.
#pragma unroll
  for (int t = 0; t < STAGES - 1; ++t) {
    if (t < ntiles) issue(t, min(KT, kend - kbeg - t * KT));
    cp_async_commit();
  }
  // Tile t is read from slot t % STAGES and tile t + STAGES - 1 copied into slot (t - 1) % STAGES;
  // STAGES tiles per trip make both slots compile-time constants.
  auto step = [&](int t, int rd) {
    cp_async_wait<STAGES - 2>();  // this lane's copies of tile t have landed ...
    __syncwarp();                 // ... and every lane's; every lane is done with tile t - 1's slot
    const int tn = t + STAGES - 1;
    if (tn < ntiles) issue((rd + STAGES - 1) % STAGES, min(KT, kend - kbeg - tn * KT));
    cp_async_commit();
#pragma unroll
    for (int c = 0; c < KT; ++c) {  // one column at a time: KT x V values of A need not be live at once
      T a[1][V];
      load_shared<T, V>(a[0], ring_a + rd * A_SLOT + c * WR + lane * V);
      fma_tile<T, 1, V, N>(acc, a, ring_b + rd * B_SLOT + c * N);
    }
  };
  for (int t0 = 0; t0 < ntiles; t0 += STAGES) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s)
      if (t0 + s < ntiles) step(t0 + s, s);
  }

  if constexpr (!REDUCE) {
    if (rows > 0) store_block<T, V, N>(C, i0, ldc, acc, n, c_vec, rows);
  } else {
    cp_async_wait<0>();
    __syncthreads();  // every warp is done with the ring, which the partials reuse
    T* red = reinterpret_cast<T*>(smem);
    {
      T* p = red + q * (N * RB) + slab * WR + lane * V;
#pragma unroll
      for (int j = 0; j < N; ++j)
#pragma unroll
        for (int r = 0; r < V; ++r) p[j * RB + r] = acc[r][j];
    }
    // Rank b of the cluster reduces elements [b * share, (b + 1) * share) of the n * RB used ones
    // (element e = j * RB + row), V at a time; consecutive threads take consecutive rows.
    const T* parts[S];
    int rank = 0;
    if constexpr (S > 1) {
      cg::cluster_group cluster = cg::this_cluster();
      cluster.sync();  // all partials of the cluster are written
      rank = (int)cluster.block_rank();
#pragma unroll
      for (int s = 0; s < S; ++s) parts[s] = cluster.map_shared_rank(red, s);
    } else {
      __syncthreads();
      parts[0] = red;
    }
    const int used = n * RB;
    const int share = ((used + S - 1) / S + V - 1) / V * V;
    const int lo = rank * share, hi = min(used, lo + share);
    for (int e = lo + (int)threadIdx.x * V; e < hi; e += TPB * V) {
      T sum[V];
#pragma unroll
      for (int r = 0; r < V; ++r) sum[r] = T(0);
#pragma unroll
      for (int s = 0; s < S; ++s)  // fixed order: deterministic
#pragma unroll
        for (int p = 0; p < KW; ++p)
#pragma unroll
          for (int r = 0; r < V; ++r) sum[r] += parts[s][p * (N * RB) + e + r];
      const int j = e / RB, i = row0 + e % RB;
      store_rows<T, V>(C + i + (long long)j * ldc, sum, c_vec, max(0, min(V, m - i)));
    }
    if constexpr (S > 1) cg::this_cluster().sync();  // keep this block's partials until the others have read them
  }
}

}  // namespace tsm2

// One extern "C" entry per variant: tsm2r_<dtype>_n<N>_t128_v<V>_s<S>_w<KW>_p<KT>x<STAGES>, launched with
// SMEM bytes of dynamic shared memory. The Python side (repro.papers.tsm2x.tsm2.TSM2R_VARIANTS, the variants with
// stages) lists the same set and computes the same bytes; a CPU test checks both against these lines.
#define TSM2RP_CLUSTER_1
#define TSM2RP_CLUSTER_2 __cluster_dims__(1, 2, 1)
#define TSM2RP_CLUSTER_3 __cluster_dims__(1, 3, 1)
#define TSM2RP_CLUSTER_4 __cluster_dims__(1, 4, 1)
#define TSM2RP_CLUSTER_5 __cluster_dims__(1, 5, 1)
#define TSM2RP_CLUSTER_6 __cluster_dims__(1, 6, 1)
#define TSM2RP_CLUSTER_7 __cluster_dims__(1, 7, 1)
#define TSM2RP_CLUSTER_8 __cluster_dims__(1, 8, 1)
#define TSM2R_PIPELINED_VARIANT(TN, T, N, V, S, KW, KT, STAGES, SMEM)                                         \
  static_assert(tsm2::pipelined_smem_bytes<T, N, V, S, KW, KT, STAGES>() == SMEM, "shared memory bytes");    \
  extern "C" __global__ void __launch_bounds__(128, 4) TSM2RP_CLUSTER_##S                                     \
      tsm2r_##TN##_n##N##_t128_v##V##_s##S##_w##KW##_p##KT##x##STAGES(                                        \
          int m, int n, int k, const T* __restrict__ A, long long lda, const T* __restrict__ B, long long ldb_k, \
          long long ldb_n, T* __restrict__ C, long long ldc, int a_vec, int c_vec) {                             \
    tsm2::tsm2r_pipelined<T, N, V, S, KW, KT, STAGES>(m, n, k, A, lda, B, ldb_k, ldb_n, C, ldc, a_vec, c_vec);  \
  }

TSM2R_PIPELINED_VARIANT(f32, float, 2, 4, 1, 1, 8, 3, 49920)
TSM2R_PIPELINED_VARIANT(f32, float, 2, 4, 1, 2, 8, 3, 49920)
TSM2R_PIPELINED_VARIANT(f32, float, 2, 4, 1, 4, 8, 3, 49920)
TSM2R_PIPELINED_VARIANT(f32, float, 2, 4, 2, 1, 8, 3, 49920)
TSM2R_PIPELINED_VARIANT(f32, float, 2, 4, 2, 2, 8, 3, 49920)
TSM2R_PIPELINED_VARIANT(f32, float, 2, 4, 2, 4, 8, 3, 49920)
TSM2R_PIPELINED_VARIANT(f32, float, 2, 4, 3, 1, 8, 3, 49920)
TSM2R_PIPELINED_VARIANT(f32, float, 2, 4, 3, 2, 8, 3, 49920)
TSM2R_PIPELINED_VARIANT(f32, float, 2, 4, 3, 4, 8, 3, 49920)
TSM2R_PIPELINED_VARIANT(f32, float, 2, 4, 4, 1, 8, 3, 49920)
TSM2R_PIPELINED_VARIANT(f32, float, 2, 4, 4, 2, 8, 3, 49920)
TSM2R_PIPELINED_VARIANT(f32, float, 2, 4, 4, 4, 8, 3, 49920)
TSM2R_PIPELINED_VARIANT(f32, float, 2, 4, 5, 1, 8, 3, 49920)
TSM2R_PIPELINED_VARIANT(f32, float, 2, 4, 5, 2, 8, 3, 49920)
TSM2R_PIPELINED_VARIANT(f32, float, 2, 4, 5, 4, 8, 3, 49920)
TSM2R_PIPELINED_VARIANT(f32, float, 2, 4, 6, 1, 8, 3, 49920)
TSM2R_PIPELINED_VARIANT(f32, float, 2, 4, 6, 2, 8, 3, 49920)
TSM2R_PIPELINED_VARIANT(f32, float, 2, 4, 6, 4, 8, 3, 49920)
TSM2R_PIPELINED_VARIANT(f32, float, 2, 4, 7, 1, 8, 3, 49920)
TSM2R_PIPELINED_VARIANT(f32, float, 2, 4, 7, 2, 8, 3, 49920)
TSM2R_PIPELINED_VARIANT(f32, float, 2, 4, 7, 4, 8, 3, 49920)
TSM2R_PIPELINED_VARIANT(f32, float, 2, 4, 8, 1, 8, 3, 49920)
TSM2R_PIPELINED_VARIANT(f32, float, 2, 4, 8, 2, 8, 3, 49920)
TSM2R_PIPELINED_VARIANT(f32, float, 2, 4, 8, 4, 8, 3, 49920)
TSM2R_PIPELINED_VARIANT(f32, float, 4, 4, 1, 1, 8, 3, 50688)
TSM2R_PIPELINED_VARIANT(f32, float, 4, 4, 1, 2, 8, 3, 50688)
TSM2R_PIPELINED_VARIANT(f32, float, 4, 4, 1, 4, 8, 3, 50688)
TSM2R_PIPELINED_VARIANT(f32, float, 4, 4, 2, 1, 8, 3, 50688)
TSM2R_PIPELINED_VARIANT(f32, float, 4, 4, 2, 2, 8, 3, 50688)
TSM2R_PIPELINED_VARIANT(f32, float, 4, 4, 2, 4, 8, 3, 50688)
TSM2R_PIPELINED_VARIANT(f32, float, 4, 4, 3, 1, 8, 3, 50688)
TSM2R_PIPELINED_VARIANT(f32, float, 4, 4, 3, 2, 8, 3, 50688)
TSM2R_PIPELINED_VARIANT(f32, float, 4, 4, 3, 4, 8, 3, 50688)
TSM2R_PIPELINED_VARIANT(f32, float, 4, 4, 4, 1, 8, 3, 50688)
TSM2R_PIPELINED_VARIANT(f32, float, 4, 4, 4, 2, 8, 3, 50688)
TSM2R_PIPELINED_VARIANT(f32, float, 4, 4, 4, 4, 8, 3, 50688)
TSM2R_PIPELINED_VARIANT(f32, float, 4, 4, 5, 1, 8, 3, 50688)
TSM2R_PIPELINED_VARIANT(f32, float, 4, 4, 5, 2, 8, 3, 50688)
TSM2R_PIPELINED_VARIANT(f32, float, 4, 4, 5, 4, 8, 3, 50688)
TSM2R_PIPELINED_VARIANT(f32, float, 4, 4, 6, 1, 8, 3, 50688)
TSM2R_PIPELINED_VARIANT(f32, float, 4, 4, 6, 2, 8, 3, 50688)
TSM2R_PIPELINED_VARIANT(f32, float, 4, 4, 6, 4, 8, 3, 50688)
TSM2R_PIPELINED_VARIANT(f32, float, 4, 4, 7, 1, 8, 3, 50688)
TSM2R_PIPELINED_VARIANT(f32, float, 4, 4, 7, 2, 8, 3, 50688)
TSM2R_PIPELINED_VARIANT(f32, float, 4, 4, 7, 4, 8, 3, 50688)
TSM2R_PIPELINED_VARIANT(f32, float, 4, 4, 8, 1, 8, 3, 50688)
TSM2R_PIPELINED_VARIANT(f32, float, 4, 4, 8, 2, 8, 3, 50688)
TSM2R_PIPELINED_VARIANT(f32, float, 4, 4, 8, 4, 8, 3, 50688)
TSM2R_PIPELINED_VARIANT(f32, float, 8, 4, 1, 1, 8, 3, 52224)
TSM2R_PIPELINED_VARIANT(f32, float, 8, 4, 1, 2, 8, 3, 52224)
TSM2R_PIPELINED_VARIANT(f32, float, 8, 4, 1, 4, 8, 3, 52224)
TSM2R_PIPELINED_VARIANT(f32, float, 8, 4, 2, 1, 8, 3, 52224)
TSM2R_PIPELINED_VARIANT(f32, float, 8, 4, 2, 2, 8, 3, 52224)
TSM2R_PIPELINED_VARIANT(f32, float, 8, 4, 2, 4, 8, 3, 52224)
TSM2R_PIPELINED_VARIANT(f32, float, 8, 4, 3, 1, 8, 3, 52224)
TSM2R_PIPELINED_VARIANT(f32, float, 8, 4, 3, 2, 8, 3, 52224)
TSM2R_PIPELINED_VARIANT(f32, float, 8, 4, 3, 4, 8, 3, 52224)
TSM2R_PIPELINED_VARIANT(f32, float, 8, 4, 4, 1, 8, 3, 52224)
TSM2R_PIPELINED_VARIANT(f32, float, 8, 4, 4, 2, 8, 3, 52224)
TSM2R_PIPELINED_VARIANT(f32, float, 8, 4, 4, 4, 8, 3, 52224)
TSM2R_PIPELINED_VARIANT(f32, float, 8, 4, 5, 1, 8, 3, 52224)
TSM2R_PIPELINED_VARIANT(f32, float, 8, 4, 5, 2, 8, 3, 52224)
TSM2R_PIPELINED_VARIANT(f32, float, 8, 4, 5, 4, 8, 3, 52224)
TSM2R_PIPELINED_VARIANT(f32, float, 8, 4, 6, 1, 8, 3, 52224)
TSM2R_PIPELINED_VARIANT(f32, float, 8, 4, 6, 2, 8, 3, 52224)
TSM2R_PIPELINED_VARIANT(f32, float, 8, 4, 6, 4, 8, 3, 52224)
TSM2R_PIPELINED_VARIANT(f32, float, 8, 4, 7, 1, 8, 3, 52224)
TSM2R_PIPELINED_VARIANT(f32, float, 8, 4, 7, 2, 8, 3, 52224)
TSM2R_PIPELINED_VARIANT(f32, float, 8, 4, 7, 4, 8, 3, 52224)
TSM2R_PIPELINED_VARIANT(f32, float, 8, 4, 8, 1, 8, 3, 52224)
TSM2R_PIPELINED_VARIANT(f32, float, 8, 4, 8, 2, 8, 3, 52224)
TSM2R_PIPELINED_VARIANT(f32, float, 8, 4, 8, 4, 8, 3, 52224)
TSM2R_PIPELINED_VARIANT(f32, float, 16, 4, 1, 1, 8, 3, 55296)
TSM2R_PIPELINED_VARIANT(f32, float, 16, 4, 1, 2, 8, 3, 55296)
TSM2R_PIPELINED_VARIANT(f32, float, 16, 4, 1, 4, 8, 3, 55296)
TSM2R_PIPELINED_VARIANT(f32, float, 16, 4, 2, 1, 8, 3, 55296)
TSM2R_PIPELINED_VARIANT(f32, float, 16, 4, 2, 2, 8, 3, 55296)
TSM2R_PIPELINED_VARIANT(f32, float, 16, 4, 2, 4, 8, 3, 55296)
TSM2R_PIPELINED_VARIANT(f32, float, 16, 4, 3, 1, 8, 3, 55296)
TSM2R_PIPELINED_VARIANT(f32, float, 16, 4, 3, 2, 8, 3, 55296)
TSM2R_PIPELINED_VARIANT(f32, float, 16, 4, 3, 4, 8, 3, 55296)
TSM2R_PIPELINED_VARIANT(f32, float, 16, 4, 4, 1, 8, 3, 55296)
TSM2R_PIPELINED_VARIANT(f32, float, 16, 4, 4, 2, 8, 3, 55296)
TSM2R_PIPELINED_VARIANT(f32, float, 16, 4, 4, 4, 8, 3, 55296)
TSM2R_PIPELINED_VARIANT(f32, float, 16, 4, 5, 1, 8, 3, 55296)
TSM2R_PIPELINED_VARIANT(f32, float, 16, 4, 5, 2, 8, 3, 55296)
TSM2R_PIPELINED_VARIANT(f32, float, 16, 4, 5, 4, 8, 3, 55296)
TSM2R_PIPELINED_VARIANT(f32, float, 16, 4, 6, 1, 8, 3, 55296)
TSM2R_PIPELINED_VARIANT(f32, float, 16, 4, 6, 2, 8, 3, 55296)
TSM2R_PIPELINED_VARIANT(f32, float, 16, 4, 6, 4, 8, 3, 55296)
TSM2R_PIPELINED_VARIANT(f32, float, 16, 4, 7, 1, 8, 3, 55296)
TSM2R_PIPELINED_VARIANT(f32, float, 16, 4, 7, 2, 8, 3, 55296)
TSM2R_PIPELINED_VARIANT(f32, float, 16, 4, 7, 4, 8, 3, 55296)
TSM2R_PIPELINED_VARIANT(f32, float, 16, 4, 8, 1, 8, 3, 55296)
TSM2R_PIPELINED_VARIANT(f32, float, 16, 4, 8, 2, 8, 3, 55296)
TSM2R_PIPELINED_VARIANT(f32, float, 16, 4, 8, 4, 8, 3, 55296)
