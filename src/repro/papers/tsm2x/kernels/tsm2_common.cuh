// Shared pieces of the TSM2R and TSM2L kernels (Rivera et al., JPDC 2021).
//
// Layout (both kernels): A (m x k) and C (m x n) are column-major with leading dimensions lda and
// ldc (element (i, j) at X[i + j * ld]); B (k x n) is tiny and may have any strides (ldb_k
// between rows, ldb_n between columns). Each thread owns V consecutive rows of A and C, so a warp
// reads 32 * V consecutive elements of one column per load: fully coalesced, and V-wide vector
// loads (float4 / float2 / double2) when the caller says A is aligned for them (a_vec), else
// scalar loads. Rows past m and columns past k / n are masked to zero, so the FMAs need no tests.
#pragma once

#include <cuda_runtime.h>

namespace tsm2 {

// ---- V-wide streaming loads / stores (evict-first: A and C are touched once) ------------------

__device__ __forceinline__ void load_v(float (&d)[4], const float* p) {
  const float4 v = __ldcs(reinterpret_cast<const float4*>(p));
  d[0] = v.x; d[1] = v.y; d[2] = v.z; d[3] = v.w;
}
__device__ __forceinline__ void load_v(float (&d)[2], const float* p) {
  const float2 v = __ldcs(reinterpret_cast<const float2*>(p));
  d[0] = v.x; d[1] = v.y;
}
__device__ __forceinline__ void load_v(float (&d)[1], const float* p) { d[0] = __ldcs(p); }
__device__ __forceinline__ void load_v(double (&d)[2], const double* p) {
  const double2 v = __ldcs(reinterpret_cast<const double2*>(p));
  d[0] = v.x; d[1] = v.y;
}
__device__ __forceinline__ void load_v(double (&d)[1], const double* p) { d[0] = __ldcs(p); }

__device__ __forceinline__ void store_v(float* p, const float (&s)[4]) {
  __stcs(reinterpret_cast<float4*>(p), make_float4(s[0], s[1], s[2], s[3]));
}
__device__ __forceinline__ void store_v(float* p, const float (&s)[2]) {
  __stcs(reinterpret_cast<float2*>(p), make_float2(s[0], s[1]));
}
__device__ __forceinline__ void store_v(float* p, const float (&s)[1]) { __stcs(p, s[0]); }
__device__ __forceinline__ void store_v(double* p, const double (&s)[2]) {
  __stcs(reinterpret_cast<double2*>(p), make_double2(s[0], s[1]));
}
__device__ __forceinline__ void store_v(double* p, const double (&s)[1]) { __stcs(p, s[0]); }

// V rows starting at p, of which only the first `valid` exist (0 <= valid <= V); the rest read 0.
template <typename T, int V>
__device__ __forceinline__ void load_rows(T (&d)[V], const T* p, bool vec, int valid) {
  if (vec && valid == V) {
    load_v(d, p);
  } else {
#pragma unroll
    for (int r = 0; r < V; ++r) d[r] = r < valid ? __ldcs(p + r) : T(0);
  }
}

template <typename T, int V>
__device__ __forceinline__ void store_rows(T* p, const T (&s)[V], bool vec, int valid) {
  if (vec && valid == V) {
    store_v(p, s);
  } else {
#pragma unroll
    for (int r = 0; r < V; ++r)
      if (r < valid) __stcs(p + r, s[r]);
  }
}

// ---- B in shared memory ------------------------------------------------------------------------

// Stage rows [k0, k0 + rows) of B into Bs[kk * N + j] (row kk of the chunk is N contiguous values,
// so the compute loop reads it with broadcast vector loads); rows past `rows` and columns past n
// are zero. Each thread fills one 16-byte chunk of a row with one shared store (N scalar stores at
// a stride of N elements would conflict on the same banks); consecutive threads take consecutive
// kk, so the global reads of a column-major B are coalesced.
template <typename T, int N, int BK, int TPB>
__device__ __forceinline__ void stage_b(T* Bs, const T* __restrict__ B, long long ldb_k, long long ldb_n,
                                        int k0, int rows, int n) {
  constexpr int W = N % (16 / (int)sizeof(T)) == 0 ? 16 / (int)sizeof(T) : 1;  // elements per store
  for (int e = threadIdx.x; e < BK * (N / W); e += TPB) {
    const int kk = e % BK, j0 = (e / BK) * W;
    T v[W];
#pragma unroll
    for (int w = 0; w < W; ++w)
      v[w] = (kk < rows && j0 + w < n) ? __ldg(B + (long long)(k0 + kk) * ldb_k + (long long)(j0 + w) * ldb_n) : T(0);
    T* dst = Bs + kk * N + j0;
    if constexpr (W == 4) {
      *reinterpret_cast<float4*>(dst) = make_float4(v[0], v[1], v[2], v[3]);
    } else if constexpr (W == 2 && sizeof(T) == 8) {
      *reinterpret_cast<double2*>(dst) = make_double2(v[0], v[1]);
    } else {
#pragma unroll
      for (int w = 0; w < W; ++w) dst[w] = v[w];
    }
  }
}

// b[0..N) = Bs[0..N): all threads of a warp read the same address (a broadcast), 16 bytes at a time.
template <typename T, int N>
__device__ __forceinline__ void read_b_row(T (&b)[N], const T* Bs) {
  constexpr int W = 16 / sizeof(T);  // elements per 16-byte load
  if constexpr (N % W == 0) {
#pragma unroll
    for (int j = 0; j < N; j += W) {
      if constexpr (sizeof(T) == 4) {
        const float4 v = *reinterpret_cast<const float4*>(Bs + j);
        b[j] = v.x; b[j + 1] = v.y; b[j + 2] = v.z; b[j + 3] = v.w;
      } else {
        const double2 v = *reinterpret_cast<const double2*>(Bs + j);
        b[j] = v.x; b[j + 1] = v.y;
      }
    }
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j) b[j] = Bs[j];
  }
}

// acc[r][j] += sum_c a[c][r] * Bs[c][j] for KC rows of A's tile (Bs row stride N).
template <typename T, int KC, int V, int N>
__device__ __forceinline__ void fma_tile(T (&acc)[V][N], const T (&a)[KC][V], const T* Bs) {
#pragma unroll
  for (int c = 0; c < KC; ++c) {
    T b[N];
    read_b_row<T, N>(b, Bs + c * N);
#pragma unroll
    for (int r = 0; r < V; ++r)
#pragma unroll
      for (int j = 0; j < N; ++j) acc[r][j] = fma(a[c][r], b[j], acc[r][j]);
  }
}

// Column j of the thread's V x N accumulator block, as a V-vector for store_rows.
template <typename T, int V, int N>
__device__ __forceinline__ void column(T (&out)[V], const T (&acc)[V][N], int j) {
#pragma unroll
  for (int r = 0; r < V; ++r) out[r] = acc[r][j];
}

// Store the thread's V x N block at rows [i0, i0 + rows) of C (column-major, columns past n skipped).
template <typename T, int V, int N, typename Index>
__device__ __forceinline__ void store_block(T* C, Index i0, long long ldc, const T (&acc)[V][N], int n, bool vec,
                                            int rows) {
#pragma unroll
  for (int j = 0; j < N; ++j) {  // constant j: acc stays in registers
    if (j >= n) break;
    T col[V];
    column<T, V, N>(col, acc, j);
    store_rows<T, V>(C + i0 + (long long)j * ldc, col, vec, rows);
  }
}

}  // namespace tsm2
