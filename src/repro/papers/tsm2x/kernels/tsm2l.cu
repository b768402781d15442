// TSM2L: C (m x n) = A (m x k) * B (k x n) for a tall-and-skinny A (m up to 1e7, k <= 16) and a
// small n (<= 16). Rivera et al., "TSM2X", JPDC 2021. Layouts: see tsm2_common.cuh.
//
// The whole of B fits in shared memory and the product is pure streaming: read A once (m * k) and
// write C once (m * n). Each thread owns G groups of V consecutive rows (group g of the block is
// TPB * V contiguous rows, so every load and store of a warp is coalesced). It first issues all
// its G * KP loads of A (so they are in flight while B is staged), then stages B (KP x N,
// zero-padded), and finally computes and stores one V x N block of C per group with streaming
// vector stores. k is masked at run time against the instantiated KP >= k, n against N >= n.
//
// tsm2l_stream is the grid-stride form (v2): a few blocks per SM stage B once and walk the rows,
// loading the next V-row tile of A while computing and storing the current one, so per-block
// costs (B staging, barrier, block launch) are paid once per SM slot instead of once per
// TPB * V * G rows. The grid size (blocks per SM) is a launch parameter the tuner picks.

#include "tsm2_common.cuh"

namespace tsm2 {

template <typename T, int KP, int N, int TPB, int V, int G>
__device__ __forceinline__ void tsm2l(int m, int n, int k, const T* __restrict__ A, long long lda,
                                      const T* __restrict__ B, long long ldb_k, long long ldb_n,
                                      T* __restrict__ C, long long ldc, int a_vec, int c_vec) {
  __shared__ __align__(16) T Bs[KP * N];
  const int base = blockIdx.x * (TPB * V * G) + threadIdx.x * V;

  T a[G][KP][V];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    const int i0 = base + g * TPB * V;
    const int rows = max(0, min(V, m - i0));
    const T* pa = A + (rows > 0 ? i0 : 0);
#pragma unroll
    for (int c = 0; c < KP; ++c) load_rows<T, V>(a[g][c], pa + (long long)c * lda, a_vec, c < k ? rows : 0);
  }

  stage_b<T, N, KP, TPB>(Bs, B, ldb_k, ldb_n, 0, k, n);
  __syncthreads();

#pragma unroll
  for (int g = 0; g < G; ++g) {
    const int i0 = base + g * TPB * V;
    const int rows = max(0, min(V, m - i0));
    T acc[V][N];
#pragma unroll
    for (int r = 0; r < V; ++r)
#pragma unroll
      for (int j = 0; j < N; ++j) acc[r][j] = T(0);
    fma_tile<T, KP, V, N>(acc, a[g], Bs);
    if (rows > 0) {
#pragma unroll
      for (int j = 0; j < N; ++j) {  // constant j: acc stays in registers; not store_block: the
        if (j >= n) break;           // compiler schedules the G-group loop differently with it
        T col[V];
        column<T, V, N>(col, acc, j);
        store_rows<T, V>(C + i0 + (long long)j * ldc, col, c_vec, rows);
      }
    }
  }
}

// A's V x KP tile at rows [i0, i0 + V) (rows past m and columns past k read 0).
template <typename T, int KP, int V>
__device__ __forceinline__ void load_tile(T (&a)[KP][V], const T* __restrict__ A, long long lda, long long i0,
                                          int m, int k, int a_vec) {
  const int rows = (int)max(0LL, min((long long)V, (long long)m - i0));
  const T* pa = A + (rows > 0 ? i0 : 0);
#pragma unroll
  for (int c = 0; c < KP; ++c) load_rows<T, V>(a[c], pa + (long long)c * lda, a_vec, c < k ? rows : 0);
}

template <typename T, int KP, int N, int TPB, int V>
__device__ __forceinline__ void tsm2l_stream(int m, int n, int k, const T* __restrict__ A, long long lda,
                                             const T* __restrict__ B, long long ldb_k, long long ldb_n,
                                             T* __restrict__ C, long long ldc, int a_vec, int c_vec) {
  __shared__ __align__(16) T Bs[KP * N];
  // 32-bit row indices: m < 2^31 and the stride < 2^21, so i0 + stride < 2^32 never wraps
  const unsigned stride = gridDim.x * TPB * V;
  unsigned i0 = blockIdx.x * TPB * V + threadIdx.x * V;
  T a[KP][V];
  load_tile<T, KP, V>(a, A, lda, i0, m, k, a_vec);  // in flight while B is staged
  stage_b<T, N, KP, TPB>(Bs, B, ldb_k, ldb_n, 0, k, n);
  __syncthreads();
  for (; i0 < (unsigned)m; i0 += stride) {  // no barrier inside: threads may leave at different times
    T next[KP][V];
    load_tile<T, KP, V>(next, A, lda, (long long)i0 + stride, m, k, a_vec);
    T acc[V][N];
#pragma unroll
    for (int r = 0; r < V; ++r)
#pragma unroll
      for (int j = 0; j < N; ++j) acc[r][j] = T(0);
    fma_tile<T, KP, V, N>(acc, a, Bs);
    store_block<T, V, N>(C, i0, ldc, acc, n, c_vec, (int)min((long long)V, (long long)m - (long long)i0));
#pragma unroll
    for (int c = 0; c < KP; ++c)
#pragma unroll
      for (int r = 0; r < V; ++r) a[c][r] = next[c][r];
  }
}

}  // namespace tsm2

// One extern "C" entry per variant: tsm2l_<dtype>_k<KP>_n<N>_t<TPB>_v<V>_g<G>. The Python side
// (repro.papers.tsm2x.tsm2.TSM2L_VARIANTS) lists the same set; a CPU test checks they agree.
#define TSM2L_VARIANT(TN, T, KP, N, TPB, V, G)                                                           \
  extern "C" __global__ void __launch_bounds__(TPB) tsm2l_##TN##_k##KP##_n##N##_t##TPB##_v##V##_g##G(       \
      int m, int n, int k, const T* __restrict__ A, long long lda, const T* __restrict__ B, long long ldb_k, \
      long long ldb_n, T* __restrict__ C, long long ldc, int a_vec, int c_vec) {                          \
    tsm2::tsm2l<T, KP, N, TPB, V, G>(m, n, k, A, lda, B, ldb_k, ldb_n, C, ldc, a_vec, c_vec);            \
  }

#define TSM2L_STREAM_VARIANT(TN, T, KP, N, TPB, V)                                                        \
  extern "C" __global__ void __launch_bounds__(TPB) tsm2l_##TN##_k##KP##_n##N##_t##TPB##_v##V##_stream(     \
      int m, int n, int k, const T* __restrict__ A, long long lda, const T* __restrict__ B, long long ldb_k, \
      long long ldb_n, T* __restrict__ C, long long ldc, int a_vec, int c_vec) {                          \
    tsm2::tsm2l_stream<T, KP, N, TPB, V>(m, n, k, A, lda, B, ldb_k, ldb_n, C, ldc, a_vec, c_vec);         \
  }

TSM2L_VARIANT(f32, float, 2, 2, 128, 4, 1)
TSM2L_VARIANT(f32, float, 2, 2, 256, 4, 1)
TSM2L_VARIANT(f32, float, 2, 2, 128, 4, 2)
TSM2L_VARIANT(f32, float, 2, 4, 128, 4, 1)
TSM2L_VARIANT(f32, float, 2, 4, 256, 4, 1)
TSM2L_VARIANT(f32, float, 2, 4, 128, 4, 2)
TSM2L_VARIANT(f32, float, 2, 8, 128, 4, 1)
TSM2L_VARIANT(f32, float, 2, 8, 256, 4, 1)
TSM2L_VARIANT(f32, float, 2, 8, 128, 4, 2)
TSM2L_VARIANT(f32, float, 2, 16, 128, 4, 1)
TSM2L_VARIANT(f32, float, 2, 16, 256, 4, 1)
TSM2L_VARIANT(f32, float, 2, 16, 128, 4, 2)
TSM2L_VARIANT(f32, float, 4, 2, 128, 4, 1)
TSM2L_VARIANT(f32, float, 4, 2, 256, 4, 1)
TSM2L_VARIANT(f32, float, 4, 2, 128, 4, 2)
TSM2L_VARIANT(f32, float, 4, 4, 128, 4, 1)
TSM2L_VARIANT(f32, float, 4, 4, 256, 4, 1)
TSM2L_VARIANT(f32, float, 4, 4, 128, 4, 2)
TSM2L_VARIANT(f32, float, 4, 8, 128, 4, 1)
TSM2L_VARIANT(f32, float, 4, 8, 256, 4, 1)
TSM2L_VARIANT(f32, float, 4, 8, 128, 4, 2)
TSM2L_VARIANT(f32, float, 4, 16, 128, 4, 1)
TSM2L_VARIANT(f32, float, 4, 16, 256, 4, 1)
TSM2L_VARIANT(f32, float, 4, 16, 128, 4, 2)
TSM2L_VARIANT(f32, float, 8, 2, 128, 4, 1)
TSM2L_VARIANT(f32, float, 8, 2, 256, 4, 1)
TSM2L_VARIANT(f32, float, 8, 2, 128, 4, 2)
TSM2L_VARIANT(f32, float, 8, 4, 128, 4, 1)
TSM2L_VARIANT(f32, float, 8, 4, 256, 4, 1)
TSM2L_VARIANT(f32, float, 8, 4, 128, 4, 2)
TSM2L_VARIANT(f32, float, 8, 8, 128, 4, 1)
TSM2L_VARIANT(f32, float, 8, 8, 256, 4, 1)
TSM2L_VARIANT(f32, float, 8, 8, 128, 4, 2)
TSM2L_VARIANT(f32, float, 8, 16, 128, 4, 1)
TSM2L_VARIANT(f32, float, 8, 16, 256, 4, 1)
TSM2L_VARIANT(f32, float, 8, 16, 128, 4, 2)
TSM2L_VARIANT(f32, float, 16, 2, 128, 4, 1)
TSM2L_VARIANT(f32, float, 16, 2, 256, 4, 1)
TSM2L_VARIANT(f32, float, 16, 4, 128, 4, 1)
TSM2L_VARIANT(f32, float, 16, 4, 256, 4, 1)
TSM2L_VARIANT(f32, float, 16, 8, 128, 4, 1)
TSM2L_VARIANT(f32, float, 16, 8, 256, 4, 1)
TSM2L_VARIANT(f32, float, 16, 16, 128, 4, 1)
TSM2L_VARIANT(f32, float, 16, 16, 256, 4, 1)
TSM2L_VARIANT(f64, double, 2, 2, 128, 2, 1)
TSM2L_VARIANT(f64, double, 2, 2, 256, 2, 1)
TSM2L_VARIANT(f64, double, 2, 2, 128, 2, 2)
TSM2L_VARIANT(f64, double, 2, 4, 128, 2, 1)
TSM2L_VARIANT(f64, double, 2, 4, 256, 2, 1)
TSM2L_VARIANT(f64, double, 2, 4, 128, 2, 2)
TSM2L_VARIANT(f64, double, 2, 8, 128, 2, 1)
TSM2L_VARIANT(f64, double, 2, 8, 256, 2, 1)
TSM2L_VARIANT(f64, double, 2, 8, 128, 2, 2)
TSM2L_VARIANT(f64, double, 2, 16, 128, 2, 1)
TSM2L_VARIANT(f64, double, 2, 16, 256, 2, 1)
TSM2L_VARIANT(f64, double, 2, 16, 128, 2, 2)
TSM2L_VARIANT(f64, double, 4, 2, 128, 2, 1)
TSM2L_VARIANT(f64, double, 4, 2, 256, 2, 1)
TSM2L_VARIANT(f64, double, 4, 2, 128, 2, 2)
TSM2L_VARIANT(f64, double, 4, 4, 128, 2, 1)
TSM2L_VARIANT(f64, double, 4, 4, 256, 2, 1)
TSM2L_VARIANT(f64, double, 4, 4, 128, 2, 2)
TSM2L_VARIANT(f64, double, 4, 8, 128, 2, 1)
TSM2L_VARIANT(f64, double, 4, 8, 256, 2, 1)
TSM2L_VARIANT(f64, double, 4, 8, 128, 2, 2)
TSM2L_VARIANT(f64, double, 4, 16, 128, 2, 1)
TSM2L_VARIANT(f64, double, 4, 16, 256, 2, 1)
TSM2L_VARIANT(f64, double, 4, 16, 128, 2, 2)
TSM2L_VARIANT(f64, double, 8, 2, 128, 2, 1)
TSM2L_VARIANT(f64, double, 8, 2, 256, 2, 1)
TSM2L_VARIANT(f64, double, 8, 2, 128, 2, 2)
TSM2L_VARIANT(f64, double, 8, 4, 128, 2, 1)
TSM2L_VARIANT(f64, double, 8, 4, 256, 2, 1)
TSM2L_VARIANT(f64, double, 8, 4, 128, 2, 2)
TSM2L_VARIANT(f64, double, 8, 8, 128, 2, 1)
TSM2L_VARIANT(f64, double, 8, 8, 256, 2, 1)
TSM2L_VARIANT(f64, double, 8, 8, 128, 2, 2)
TSM2L_VARIANT(f64, double, 8, 16, 128, 2, 1)
TSM2L_VARIANT(f64, double, 8, 16, 256, 2, 1)
TSM2L_VARIANT(f64, double, 8, 16, 128, 2, 2)
TSM2L_VARIANT(f64, double, 16, 2, 128, 2, 1)
TSM2L_VARIANT(f64, double, 16, 2, 256, 2, 1)
TSM2L_VARIANT(f64, double, 16, 4, 128, 2, 1)
TSM2L_VARIANT(f64, double, 16, 4, 256, 2, 1)
TSM2L_VARIANT(f64, double, 16, 8, 128, 2, 1)
TSM2L_VARIANT(f64, double, 16, 8, 256, 2, 1)
TSM2L_VARIANT(f64, double, 16, 16, 128, 2, 1)
TSM2L_VARIANT(f64, double, 16, 16, 256, 2, 1)
TSM2L_STREAM_VARIANT(f32, float, 2, 2, 256, 4)
TSM2L_STREAM_VARIANT(f32, float, 2, 4, 256, 4)
TSM2L_STREAM_VARIANT(f32, float, 2, 8, 256, 4)
TSM2L_STREAM_VARIANT(f32, float, 2, 16, 256, 4)
TSM2L_STREAM_VARIANT(f32, float, 4, 2, 256, 4)
TSM2L_STREAM_VARIANT(f32, float, 4, 4, 256, 4)
TSM2L_STREAM_VARIANT(f32, float, 4, 8, 256, 4)
TSM2L_STREAM_VARIANT(f32, float, 4, 16, 256, 4)
TSM2L_STREAM_VARIANT(f32, float, 8, 2, 256, 4)
TSM2L_STREAM_VARIANT(f32, float, 8, 4, 256, 4)
TSM2L_STREAM_VARIANT(f32, float, 8, 8, 256, 4)
TSM2L_STREAM_VARIANT(f32, float, 8, 16, 256, 4)
TSM2L_STREAM_VARIANT(f32, float, 16, 2, 256, 4)
TSM2L_STREAM_VARIANT(f32, float, 16, 4, 256, 4)
TSM2L_STREAM_VARIANT(f32, float, 16, 8, 256, 4)
TSM2L_STREAM_VARIANT(f32, float, 16, 16, 256, 4)
TSM2L_STREAM_VARIANT(f64, double, 2, 2, 256, 2)
TSM2L_STREAM_VARIANT(f64, double, 2, 4, 256, 2)
TSM2L_STREAM_VARIANT(f64, double, 2, 8, 256, 2)
TSM2L_STREAM_VARIANT(f64, double, 2, 16, 256, 2)
TSM2L_STREAM_VARIANT(f64, double, 4, 2, 256, 2)
TSM2L_STREAM_VARIANT(f64, double, 4, 4, 256, 2)
TSM2L_STREAM_VARIANT(f64, double, 4, 8, 256, 2)
TSM2L_STREAM_VARIANT(f64, double, 4, 16, 256, 2)
TSM2L_STREAM_VARIANT(f64, double, 8, 2, 256, 2)
TSM2L_STREAM_VARIANT(f64, double, 8, 4, 256, 2)
TSM2L_STREAM_VARIANT(f64, double, 8, 8, 256, 2)
TSM2L_STREAM_VARIANT(f64, double, 8, 16, 256, 2)
TSM2L_STREAM_VARIANT(f64, double, 16, 2, 256, 2)
TSM2L_STREAM_VARIANT(f64, double, 16, 4, 256, 2)
TSM2L_STREAM_VARIANT(f64, double, 16, 8, 256, 2)
TSM2L_STREAM_VARIANT(f64, double, 16, 16, 256, 2)
