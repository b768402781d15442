// COMET-style error-bounded compressor for float32 activations: the GPU side of the format in
// src/repro/comet/codec.py (read its docstring first; the streams must match it bit for bit).
//
// One warp per block of 1024 values; a warp reads its block as 8 chunks of 128 values, each lane
// one float4 (coalesced 512-byte loads). Three launches:
//   comet_widths  quantise + Lorenzo + zigzag, OR-reduce -> per-block bit width (RAW if any value
//                 breaks the bound) and anchor (the block's first code); also a scan key per block,
//                 width + (1 << 40 if the block holds NaN/Inf).
//   (host: inclusive prefix sum of the keys in place -> block ends in units of 32 words (low 40 bits)
//    and the count of non-finite blocks (high bits); one sync reads the last key, so that the payload
//    is allocated at its true size and a NaN/Inf input is refused, from one number)
//   comet_pack    recomputes the codes and writes bit planes: one __ballot_sync per plane of 32
//                 values, lanes < width store the plane words (coalesced). Block offset in words:
//                 32 * (end - width).
//   comet_unpack  rebuilds codes from planes (__shfl_sync broadcast), un-zigzags, warp prefix sum
//                 (Lorenzo inverse) from the anchor, scales by the step.
// Arithmetic uses __fdiv_rn / __fmul_rn / __fadd_rn / __fsub_rn / floorf so that nvcc cannot
// contract or approximate it: the results equal NumPy's float32 operations.
#include <stdint.h>

#define COMET_BLOCK 1024
#define COMET_CHUNKS 8
#define COMET_RAW 32
#define FULL_MASK 0xffffffffu
#define COMET_END_MASK ((1ll << 40) - 1)  // low bits of a scan key: block ends; high: non-finite blocks

struct Quant {
    int q;
    bool ok;
};

__device__ __forceinline__ Quant quantize(float x, float step, double eb) {
    Quant r;
    if (x == 0.0f) {
        r.q = 0;
        r.ok = true;
        return r;
    }
    // sign-preserving: |x| in [(m-1) s, m s) -> m, reconstructed at the midpoint (m - 1/2) s
    const float m = __fadd_rn(floorf(__fdiv_rn(fabsf(x), step)), 1.0f);
    bool ok = m < 4194304.0f;  // 2^22; false for Inf (eb = 0)
    const float mm = ok ? m : 1.0f;
    const float recon = copysignf(__fmul_rn(__fsub_rn(mm, 0.5f), step), x);
    ok = ok && (fabs((double)x - (double)recon) <= eb);
    const int qm = __float2int_rn(mm);
    r.q = ok ? (x < 0.0f ? -qm : qm) : 0;
    r.ok = ok;
    return r;
}

// x' of a code: sign(q) * (|q| - 1/2) * step, 0 for q = 0.
__device__ __forceinline__ float dequantize(int q, float step) {
    if (q == 0) return 0.0f;
    const float mag = __fmul_rn(__fsub_rn(__int2float_rn(q < 0 ? -q : q), 0.5f), step);
    return q < 0 ? -mag : mag;
}

__device__ __forceinline__ unsigned zigzag(int d) { return ((unsigned)d << 1) ^ (unsigned)(d >> 31); }

__device__ __forceinline__ int unzigzag(unsigned z) { return (int)((z >> 1) ^ (0u - (z & 1u))); }

__device__ __forceinline__ float4 load4(const float* __restrict__ x, long long n, long long i) {
    if (i + 3 < n) return __ldg(reinterpret_cast<const float4*>(x + i));
    float4 r = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (i < n) r.x = x[i];
    if (i + 1 < n) r.y = x[i + 1];
    if (i + 2 < n) r.z = x[i + 2];
    return r;
}

// The block's anchor: the code of its first value (lane 0's first element), on every lane.
__device__ __forceinline__ int anchor_of(const float4 first, float step, double eb) {
    return __shfl_sync(FULL_MASK, quantize(first.x, step, eb).q, 0);
}

__device__ __forceinline__ void store4(float* __restrict__ y, long long n, long long i, float4 v) {
    if (i + 3 < n) {
        *reinterpret_cast<float4*>(y + i) = v;
        return;
    }
    if (i < n) y[i] = v.x;
    if (i + 1 < n) y[i + 1] = v.y;
    if (i + 2 < n) y[i + 2] = v.z;
}

// The four Lorenzo residuals (zigzagged) of a lane's float4 in one chunk; `carry` is the last q of
// the previous chunk (the anchor before the first), updated to this chunk's last q.
__device__ __forceinline__ void codes(const float4 v, float step, double eb, int lane, int& carry,
                                      unsigned z[4], bool& ok, bool& finite) {
    const Quant a = quantize(v.x, step, eb), b = quantize(v.y, step, eb);
    const Quant c = quantize(v.z, step, eb), d = quantize(v.w, step, eb);
    ok = a.ok && b.ok && c.ok && d.ok;
    finite = isfinite(v.x) && isfinite(v.y) && isfinite(v.z) && isfinite(v.w);
    int left = __shfl_up_sync(FULL_MASK, d.q, 1);
    if (lane == 0) left = carry;
    carry = __shfl_sync(FULL_MASK, d.q, 31);
    z[0] = zigzag(a.q - left);
    z[1] = zigzag(b.q - a.q);
    z[2] = zigzag(c.q - b.q);
    z[3] = zigzag(d.q - c.q);
}

extern "C" __global__ void comet_widths(const float* __restrict__ x, long long n, float step, double eb,
                                        unsigned char* __restrict__ widths, int* __restrict__ anchors,
                                        long long* __restrict__ keys, long long nblocks) {
    const int lane = threadIdx.x & 31;
    const long long blk = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (blk >= nblocks) return;  // the whole warp leaves together
    const long long base = blk * COMET_BLOCK + 4 * lane;
    float4 v[COMET_CHUNKS];
#pragma unroll
    for (int c = 0; c < COMET_CHUNKS; ++c) v[c] = load4(x, n, base + c * 128);
    unsigned orz = 0;
    bool allok = true, allfinite = true;
    const int anchor = anchor_of(v[0], step, eb);
    int carry = anchor;
#pragma unroll
    for (int c = 0; c < COMET_CHUNKS; ++c) {
        unsigned z[4];
        bool ok, finite;
        codes(v[c], step, eb, lane, carry, z, ok, finite);
        orz |= z[0] | z[1] | z[2] | z[3];
        allok = allok && ok;
        allfinite = allfinite && finite;
    }
    orz = __reduce_or_sync(FULL_MASK, orz);
    allok = __all_sync(FULL_MASK, allok);
    allfinite = __all_sync(FULL_MASK, allfinite);
    if (lane == 0) {
        const int w = allok ? (orz ? 32 - __clz(orz) : 0) : COMET_RAW;
        widths[blk] = (unsigned char)w;
        anchors[blk] = allok ? anchor : 0;
        keys[blk] = (long long)w + (allfinite ? 0ll : (1ll << 40));
    }
}

extern "C" __global__ void comet_pack(const float* __restrict__ x, long long n, float step, double eb,
                                      const unsigned char* __restrict__ widths,
                                      const long long* __restrict__ ends, unsigned* __restrict__ payload,
                                      long long nblocks) {
    const int lane = threadIdx.x & 31;
    const long long blk = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (blk >= nblocks) return;
    const int w = widths[blk];
    if (w == 0) return;
    // 128-byte aligned: offsets are multiples of 32 words
    unsigned* __restrict__ out = payload + 32 * ((ends[blk] & COMET_END_MASK) - w);
    const long long base = blk * COMET_BLOCK + 4 * lane;
    float4 v[COMET_CHUNKS];
#pragma unroll
    for (int c = 0; c < COMET_CHUNKS; ++c) v[c] = load4(x, n, base + c * 128);
    if (w == COMET_RAW) {
#pragma unroll
        for (int c = 0; c < COMET_CHUNKS; ++c) reinterpret_cast<float4*>(out)[c * 32 + lane] = v[c];
        return;
    }
    int carry = anchor_of(v[0], step, eb);
#pragma unroll
    for (int c = 0; c < COMET_CHUNKS; ++c) {
        unsigned z[4];
        bool ok, finite;
        codes(v[c], step, eb, lane, carry, z, ok, finite);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            unsigned mine = 0;
            for (int b = 0; b < w; ++b) {
                const unsigned plane = __ballot_sync(FULL_MASK, (z[k] >> b) & 1u);
                mine = (lane == b) ? plane : mine;
            }
            if (lane < w) out[(c * 4 + k) * w + lane] = mine;
        }
    }
}

extern "C" __global__ void comet_unpack(const unsigned* __restrict__ payload,
                                        const unsigned char* __restrict__ widths,
                                        const int* __restrict__ anchors,
                                        const long long* __restrict__ ends, float step,
                                        float* __restrict__ y, long long n, long long nblocks) {
    const int lane = threadIdx.x & 31;
    const long long blk = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (blk >= nblocks) return;
    const int w = widths[blk];
    const long long base = blk * COMET_BLOCK + 4 * lane;
    int carry = anchors[blk];
    if (w == 0) {  // every code equals the anchor
        const float a = dequantize(carry, step);
#pragma unroll
        for (int c = 0; c < COMET_CHUNKS; ++c) store4(y, n, base + c * 128, make_float4(a, a, a, a));
        return;
    }
    const unsigned* __restrict__ in = payload + 32 * (ends[blk] - w);  // ends: inclusive scan of the widths
    if (w == COMET_RAW) {
#pragma unroll
        for (int c = 0; c < COMET_CHUNKS; ++c)
            store4(y, n, base + c * 128, __ldg(reinterpret_cast<const float4*>(in) + c * 32 + lane));
        return;
    }
#pragma unroll 2
    for (int c = 0; c < COMET_CHUNKS; ++c) {
        unsigned word[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) word[k] = lane < w ? __ldg(in + (c * 4 + k) * w + lane) : 0u;
        int d[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            unsigned z = 0;
            for (int b = 0; b < w; ++b) z |= ((__shfl_sync(FULL_MASK, word[k], b) >> lane) & 1u) << b;
            d[k] = unzigzag(z);
        }
        const int s0 = d[0], s1 = s0 + d[1], s2 = s1 + d[2], s3 = s2 + d[3];
        int incl = s3;
#pragma unroll
        for (int off = 1; off < 32; off <<= 1) {
            const int t = __shfl_up_sync(FULL_MASK, incl, off);
            if (lane >= off) incl += t;
        }
        const int before = carry + incl - s3;
        carry += __shfl_sync(FULL_MASK, incl, 31);
        const float4 out = make_float4(dequantize(before + s0, step), dequantize(before + s1, step),
                                       dequantize(before + s2, step), dequantize(before + s3, step));
        store4(y, n, base + c * 128, out);
    }
}
