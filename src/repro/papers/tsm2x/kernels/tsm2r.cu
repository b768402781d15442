// TSM2R: C (m x n) = A (m x k) * B (k x n) for a large, regular A and a small n (<= 16).
// Rivera et al., "TSM2X: High-performance tall-and-skinny matrix-matrix multiplication on GPUs",
// JPDC 2021. Layouts: see tsm2_common.cuh (column-major A and C, B with any strides).
//
// One thread owns V consecutive rows of C and keeps their V x N accumulators in registers. The
// block (TPB threads, RB = TPB * V rows) walks its k range in tiles of KT columns of A:
//   - A is streamed through registers with double buffering: the loads of tile t + 1 are issued
//     before the FMAs of tile t, so every thread always has KT * V * sizeof(T) = 128 bytes in
//     flight (HBM needs tens of KB in flight per SM to run at full speed);
//   - B is staged BK rows at a time in shared memory and read with broadcast vector loads.
//
// Split K (S > 1). With m = 10240 there are only m / V threads of work per k range, too few to
// keep 132 SMs' worth of loads in flight, so the k range is split S ways across a thread-block
// cluster of S blocks (grid.y = S, __cluster_dims__(1, S, 1)). Each block leaves its partial
// V x N sums in its own shared memory; after a cluster barrier, block q adds the S partials of
// its 1/S share of the RB x n tile through distributed shared memory, always in the order
// 0, 1, ..., S-1, and writes C. The result is deterministic (no atomics, no workspace in global
// memory, no second launch); the price is that S is at most 8 (the portable cluster size).
//
// Fast path: a thread whose V rows all exist and whose A is aligned for V-wide loads (a_vec)
// loads full tiles with vector loads and no tests; the last, partial k tile, the last rows and
// unaligned A take the masked scalar path. Which path is taken is uniform per thread and tile.

#include <cooperative_groups.h>

#include "tsm2_common.cuh"

namespace cg = cooperative_groups;

namespace tsm2 {

template <typename T, int N, int TPB, int V, int S>
__device__ __forceinline__ void tsm2r(int m, int n, int k, const T* __restrict__ A, long long lda,
                                      const T* __restrict__ B, long long ldb_k, long long ldb_n,
                                      T* __restrict__ C, long long ldc, int a_vec, int c_vec) {
  constexpr int KT = 128 / (V * (int)sizeof(T));  // A columns per register tile (128 B per thread)
  constexpr int BK = 64;                          // B rows per shared-memory stage
  constexpr int RB = TPB * V;                     // rows of C per block
  static_assert(BK % KT == 0, "a B stage must hold whole A tiles");
  constexpr int SMEM_B = BK * N * (int)sizeof(T);
  constexpr int SMEM_RED = S > 1 ? RB * N * (int)sizeof(T) : 0;  // partial sums, reuses the B stage
  __shared__ __align__(16) unsigned char smem[SMEM_B > SMEM_RED ? SMEM_B : SMEM_RED];
  T* Bs = reinterpret_cast<T*>(smem);

  const int tid = threadIdx.x;
  const int row0 = blockIdx.x * RB;
  const int i0 = row0 + tid * V;
  const int rows = max(0, min(V, m - i0));  // how many of this thread's rows exist
  const T* pa = A + (rows > 0 ? i0 : 0);

  // This block's k range: split s of S, a whole number of KT tiles (only the last one may be short).
  const int per_split = ((k + S - 1) / S + KT - 1) / KT * KT;
  const int kbeg = min(k, (int)blockIdx.y * per_split);
  const int kend = min(k, kbeg + per_split);
  const int ntiles = (kend - kbeg + KT - 1) / KT;

  T acc[V][N];
#pragma unroll
  for (int r = 0; r < V; ++r)
#pragma unroll
    for (int j = 0; j < N; ++j) acc[r][j] = T(0);

  // Load A tile t (columns kbeg + t*KT ...) into a; masked where columns or rows run out.
  auto load_tile = [&](T (&a)[KT][V], int t) {
    const int kt = kbeg + t * KT;
    const int cols = min(KT, kend - kt);
    if (a_vec && rows == V && cols == KT) {
#pragma unroll
      for (int c = 0; c < KT; ++c) load_v(a[c], pa + (long long)(kt + c) * lda);
    } else {
#pragma unroll
      for (int c = 0; c < KT; ++c) load_rows<T, V>(a[c], pa + (long long)(kt + c) * lda, false, c < cols ? rows : 0);
    }
  };
  // Prefetch tile t + 1 into nxt, (re)stage B when tile t starts a new stage, then FMA tile t.
  auto step = [&](T (&cur)[KT][V], T (&nxt)[KT][V], int t) {
    if (t + 1 < ntiles) load_tile(nxt, t + 1);
    const int off = (t * KT) % BK;
    if (off == 0) {
      const int k0 = kbeg + t * KT;
      __syncthreads();  // everyone is done with the previous stage
      stage_b<T, N, BK, TPB>(Bs, B, ldb_k, ldb_n, k0, min(BK, kend - k0), n);
      __syncthreads();
    }
    fma_tile<T, KT, V, N>(acc, cur, Bs + off * N);
  };

  T a0[KT][V], a1[KT][V];
  if (ntiles > 0) load_tile(a0, 0);
  for (int t = 0; t < ntiles; t += 2) {  // two steps per trip so the buffers swap roles without copies
    step(a0, a1, t);
    if (t + 1 < ntiles) step(a1, a0, t + 1);
  }

  if constexpr (S == 1) {
    if (rows > 0) store_block<T, V, N>(C, i0, ldc, acc, n, c_vec, rows);
  } else {
    // Partial sums -> own shared memory as red[j * RB + local row] (column-major tile).
    __syncthreads();  // the B stage is being reused
    T* red = reinterpret_cast<T*>(smem);
#pragma unroll
    for (int j = 0; j < N; ++j) {
      T col[V];
      column<T, V, N>(col, acc, j);
      T* p = red + j * RB + tid * V;
#pragma unroll
      for (int r = 0; r < V; ++r) p[r] = col[r];
    }
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();  // all partials of the cluster are written

    // Block q reduces elements [q * share, (q + 1) * share) of the n * RB used ones, V at a time;
    // consecutive threads take consecutive rows of one column: coalesced C stores.
    const int used = n * RB;
    const int share = ((used + S - 1) / S + V - 1) / V * V;
    const int q = (int)cluster.block_rank();
    const int lo = q * share, hi = min(used, lo + share);
    const T* parts[S];
#pragma unroll
    for (int s = 0; s < S; ++s) parts[s] = cluster.map_shared_rank(red, s);
    for (int e = lo + tid * V; e < hi; e += TPB * V) {
      T sum[V];
#pragma unroll
      for (int r = 0; r < V; ++r) sum[r] = T(0);
#pragma unroll
      for (int s = 0; s < S; ++s) {  // fixed order: deterministic
#pragma unroll
        for (int r = 0; r < V; ++r) sum[r] += parts[s][e + r];
      }
      const int j = e / RB, i = row0 + e % RB;
      store_rows<T, V>(C + i + (long long)j * ldc, sum, c_vec, max(0, min(V, m - i)));
    }
    cluster.sync();  // keep this block's shared memory alive until the others have read it
  }
}

}  // namespace tsm2

// One extern "C" entry per variant: tsm2r_<dtype>_n<N>_t<TPB>_v<V>_s<S>. The Python side
// (repro.papers.tsm2x.tsm2.TSM2R_VARIANTS) lists the same set; a CPU test checks they agree.
#define TSM2R_CLUSTER_1
#define TSM2R_CLUSTER_2 __cluster_dims__(1, 2, 1)
#define TSM2R_CLUSTER_4 __cluster_dims__(1, 4, 1)
#define TSM2R_CLUSTER_8 __cluster_dims__(1, 8, 1)
#define TSM2R_VARIANT(TN, T, N, TPB, V, S)                                                              \
  extern "C" __global__ void __launch_bounds__(TPB) TSM2R_CLUSTER_##S tsm2r_##TN##_n##N##_t##TPB##_v##V##_s##S( \
      int m, int n, int k, const T* __restrict__ A, long long lda, const T* __restrict__ B, long long ldb_k, \
      long long ldb_n, T* __restrict__ C, long long ldc, int a_vec, int c_vec) {                         \
    tsm2::tsm2r<T, N, TPB, V, S>(m, n, k, A, lda, B, ldb_k, ldb_n, C, ldc, a_vec, c_vec);               \
  }

TSM2R_VARIANT(f32, float, 2, 64, 4, 1)
TSM2R_VARIANT(f32, float, 2, 64, 4, 2)
TSM2R_VARIANT(f32, float, 2, 64, 4, 4)
TSM2R_VARIANT(f32, float, 2, 64, 4, 8)
TSM2R_VARIANT(f32, float, 2, 128, 4, 1)
TSM2R_VARIANT(f32, float, 2, 128, 4, 2)
TSM2R_VARIANT(f32, float, 2, 128, 4, 4)
TSM2R_VARIANT(f32, float, 2, 128, 4, 8)
TSM2R_VARIANT(f32, float, 2, 128, 2, 1)
TSM2R_VARIANT(f32, float, 2, 128, 2, 2)
TSM2R_VARIANT(f32, float, 2, 128, 2, 4)
TSM2R_VARIANT(f32, float, 2, 128, 2, 8)
TSM2R_VARIANT(f32, float, 4, 64, 4, 1)
TSM2R_VARIANT(f32, float, 4, 64, 4, 2)
TSM2R_VARIANT(f32, float, 4, 64, 4, 4)
TSM2R_VARIANT(f32, float, 4, 64, 4, 8)
TSM2R_VARIANT(f32, float, 4, 128, 4, 1)
TSM2R_VARIANT(f32, float, 4, 128, 4, 2)
TSM2R_VARIANT(f32, float, 4, 128, 4, 4)
TSM2R_VARIANT(f32, float, 4, 128, 4, 8)
TSM2R_VARIANT(f32, float, 4, 128, 2, 1)
TSM2R_VARIANT(f32, float, 4, 128, 2, 2)
TSM2R_VARIANT(f32, float, 4, 128, 2, 4)
TSM2R_VARIANT(f32, float, 4, 128, 2, 8)
TSM2R_VARIANT(f32, float, 8, 64, 4, 1)
TSM2R_VARIANT(f32, float, 8, 64, 4, 2)
TSM2R_VARIANT(f32, float, 8, 64, 4, 4)
TSM2R_VARIANT(f32, float, 8, 64, 4, 8)
TSM2R_VARIANT(f32, float, 8, 128, 4, 1)
TSM2R_VARIANT(f32, float, 8, 128, 4, 2)
TSM2R_VARIANT(f32, float, 8, 128, 4, 4)
TSM2R_VARIANT(f32, float, 8, 128, 4, 8)
TSM2R_VARIANT(f32, float, 8, 128, 2, 1)
TSM2R_VARIANT(f32, float, 8, 128, 2, 2)
TSM2R_VARIANT(f32, float, 8, 128, 2, 4)
TSM2R_VARIANT(f32, float, 8, 128, 2, 8)
TSM2R_VARIANT(f32, float, 16, 64, 4, 1)
TSM2R_VARIANT(f32, float, 16, 64, 4, 2)
TSM2R_VARIANT(f32, float, 16, 64, 4, 4)
TSM2R_VARIANT(f32, float, 16, 64, 4, 8)
TSM2R_VARIANT(f32, float, 16, 128, 4, 1)
TSM2R_VARIANT(f32, float, 16, 128, 4, 2)
TSM2R_VARIANT(f32, float, 16, 128, 4, 4)
TSM2R_VARIANT(f32, float, 16, 128, 4, 8)
TSM2R_VARIANT(f32, float, 16, 128, 2, 1)
TSM2R_VARIANT(f32, float, 16, 128, 2, 2)
TSM2R_VARIANT(f32, float, 16, 128, 2, 4)
TSM2R_VARIANT(f32, float, 16, 128, 2, 8)
TSM2R_VARIANT(f64, double, 2, 64, 2, 1)
TSM2R_VARIANT(f64, double, 2, 64, 2, 2)
TSM2R_VARIANT(f64, double, 2, 64, 2, 4)
TSM2R_VARIANT(f64, double, 2, 64, 2, 8)
TSM2R_VARIANT(f64, double, 2, 128, 2, 1)
TSM2R_VARIANT(f64, double, 2, 128, 2, 2)
TSM2R_VARIANT(f64, double, 2, 128, 2, 4)
TSM2R_VARIANT(f64, double, 2, 128, 2, 8)
TSM2R_VARIANT(f64, double, 2, 128, 1, 1)
TSM2R_VARIANT(f64, double, 2, 128, 1, 2)
TSM2R_VARIANT(f64, double, 2, 128, 1, 4)
TSM2R_VARIANT(f64, double, 2, 128, 1, 8)
TSM2R_VARIANT(f64, double, 4, 64, 2, 1)
TSM2R_VARIANT(f64, double, 4, 64, 2, 2)
TSM2R_VARIANT(f64, double, 4, 64, 2, 4)
TSM2R_VARIANT(f64, double, 4, 64, 2, 8)
TSM2R_VARIANT(f64, double, 4, 128, 2, 1)
TSM2R_VARIANT(f64, double, 4, 128, 2, 2)
TSM2R_VARIANT(f64, double, 4, 128, 2, 4)
TSM2R_VARIANT(f64, double, 4, 128, 2, 8)
TSM2R_VARIANT(f64, double, 4, 128, 1, 1)
TSM2R_VARIANT(f64, double, 4, 128, 1, 2)
TSM2R_VARIANT(f64, double, 4, 128, 1, 4)
TSM2R_VARIANT(f64, double, 4, 128, 1, 8)
TSM2R_VARIANT(f64, double, 8, 64, 2, 1)
TSM2R_VARIANT(f64, double, 8, 64, 2, 2)
TSM2R_VARIANT(f64, double, 8, 64, 2, 4)
TSM2R_VARIANT(f64, double, 8, 64, 2, 8)
TSM2R_VARIANT(f64, double, 8, 128, 2, 1)
TSM2R_VARIANT(f64, double, 8, 128, 2, 2)
TSM2R_VARIANT(f64, double, 8, 128, 2, 4)
TSM2R_VARIANT(f64, double, 8, 128, 2, 8)
TSM2R_VARIANT(f64, double, 8, 128, 1, 1)
TSM2R_VARIANT(f64, double, 8, 128, 1, 2)
TSM2R_VARIANT(f64, double, 8, 128, 1, 4)
TSM2R_VARIANT(f64, double, 8, 128, 1, 8)
TSM2R_VARIANT(f64, double, 16, 64, 2, 1)
TSM2R_VARIANT(f64, double, 16, 64, 2, 2)
TSM2R_VARIANT(f64, double, 16, 64, 2, 4)
TSM2R_VARIANT(f64, double, 16, 64, 2, 8)
TSM2R_VARIANT(f64, double, 16, 128, 2, 1)
TSM2R_VARIANT(f64, double, 16, 128, 2, 2)
TSM2R_VARIANT(f64, double, 16, 128, 2, 4)
TSM2R_VARIANT(f64, double, 16, 128, 2, 8)
TSM2R_VARIANT(f64, double, 16, 128, 1, 1)
TSM2R_VARIANT(f64, double, 16, 128, 1, 2)
TSM2R_VARIANT(f64, double, 16, 128, 1, 4)
TSM2R_VARIANT(f64, double, 16, 128, 1, 8)
