// The batched 8x8 tile products on tensor cores with mma.sync.m16n8k16 (fp16 or bf16 in, fp32
// accumulate), keeping the paper's 8x8 tiles: one warp per output tile, two pairs per MMA.
// (src/repro/papers/tsparse/mma_twin.py holds the NumPy twin of the fragment mapping below.)
//
// The MMA's B operand is 16x8 (k x n): the two B tiles of pairs 2s and 2s + 1 stacked along k, n =
// the output tile's 8 columns. A is 16x16 (m x k): rows 0-7 hold the two A tiles side by side along
// k, rows 8-15 are zero (a tile has 8 rows), so C's rows 0-7 are A_2s B_2s + A_2s+1 B_2s+1 and half
// of the MMA's work is useful. A pair index past the group's end contributes zeros.
//
// Fragments (PTX ISA, mma.m16n8k16 with .f16/.bf16 operands), lane = 4 g + t:
//   A: a0 = A[g][2t, 2t+1], a1 = A[g+8][2t, 2t+1], a2 = A[g][2t+8, 2t+9], a3 = A[g+8][2t+8, 2t+9]
//   B: b0 = B[2t, 2t+1][g], b1 = B[2t+8, 2t+9][g]
//   C: c0, c1 = C[g][2t, 2t+1]; c2, c3 = C[g+8][2t, 2t+1]
// so lane (g, t) reads row g, columns 2t and 2t+1 of each A tile (one 32-bit load) and rows 2t and
// 2t+1 of column g of each B tile, and writes row g, columns 2t and 2t+1 of the output tile.

#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>

#define WARPS_PER_BLOCK 4

template <typename T> struct MmaType;
template <> struct MmaType<__half> {
    static __device__ __forceinline__ void mma(float c[4], uint32_t a0, uint32_t a2, uint32_t b0, uint32_t b1) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a0), "r"(0u), "r"(a2), "r"(0u), "r"(b0), "r"(b1));
    }
};
template <> struct MmaType<__nv_bfloat16> {
    static __device__ __forceinline__ void mma(float c[4], uint32_t a0, uint32_t a2, uint32_t b0, uint32_t b1) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a0), "r"(0u), "r"(a2), "r"(0u), "r"(b0), "r"(b1));
    }
};

template <typename T>
__device__ __forceinline__ uint32_t pack2(T lo, T hi) {
    const uint16_t l = *reinterpret_cast<const uint16_t*>(&lo), h = *reinterpret_cast<const uint16_t*>(&hi);
    return (uint32_t)l | ((uint32_t)h << 16);
}

// a_vals, b_vals: (tiles, 8, 8) row-major; pair_a, pair_b: (P,); group_ptr: (n_out + 1,); out: (n_out, 8, 8) fp32
template <typename T>
__device__ void tile_products(const T* __restrict__ a_vals, const T* __restrict__ b_vals,
                              const int* __restrict__ pair_a, const int* __restrict__ pair_b,
                              const int* __restrict__ group_ptr, float* __restrict__ out, int n_out) {
    const int o = blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32;
    if (o >= n_out) return;
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int start = group_ptr[o], end = group_ptr[o + 1];
    float c[4] = {0.f, 0.f, 0.f, 0.f};
    for (int s = start; s < end; s += 2) {
        uint32_t a[2] = {0u, 0u}, b[2] = {0u, 0u};
#pragma unroll
        for (int h = 0; h < 2; ++h) {  // pair s + h: k columns 8h .. 8h + 7 of A, k rows 8h .. 8h + 7 of B
            if (s + h < end) {
                const T* at = a_vals + (long long)pair_a[s + h] * 64;
                const T* bt = b_vals + (long long)pair_b[s + h] * 64;
                a[h] = *reinterpret_cast<const uint32_t*>(at + g * 8 + 2 * t);
                b[h] = pack2(bt[(2 * t) * 8 + g], bt[(2 * t + 1) * 8 + g]);
            }
        }
        MmaType<T>::mma(c, a[0], a[1], b[0], b[1]);
    }
    *reinterpret_cast<float2*>(out + (long long)o * 64 + g * 8 + 2 * t) = make_float2(c[0], c[1]);
}

extern "C" __global__ void __launch_bounds__(WARPS_PER_BLOCK * 32)
tsparse_mma_f16(const __half* a_vals, const __half* b_vals, const int* pair_a, const int* pair_b,
                const int* group_ptr, float* out, int n_out) {
    tile_products<__half>(a_vals, b_vals, pair_a, pair_b, group_ptr, out, n_out);
}

extern "C" __global__ void __launch_bounds__(WARPS_PER_BLOCK * 32)
tsparse_mma_bf16(const __nv_bfloat16* a_vals, const __nv_bfloat16* b_vals, const int* pair_a, const int* pair_b,
                 const int* group_ptr, float* out, int n_out) {
    tile_products<__nv_bfloat16>(a_vals, b_vals, pair_a, pair_b, group_ptr, out, n_out);
}
