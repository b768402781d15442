// The quantiser of the COMET codecs (src/repro/papers/comet/codec.py, step 1 of its format), shared by
// comet_codec.cu (v3) and comet_huffman.cu (v4): the results equal NumPy's float32 operations.
#pragma once
#include <stdint.h>

struct Quant {
    int q;
    bool ok;
};

// Sign-preserving: |x| in [(m-1) s, m s) -> m (m = floor(|x| * (1/s)) + 1), reconstructed at the
// midpoint (m - 1/2) s. Predictable iff m < 2^22 and float32 |(|x| - recon)| < eb (strict: then the
// exact error is <= eb), or x == 0. NaN / Inf and eb = 0 (inv = inf) fail the test.
__device__ __forceinline__ Quant quantize(float x, float step, float inv, float eb) {
    const float ax = fabsf(x);
    const float m = __fadd_rn(floorf(__fmul_rn(ax, inv)), 1.0f);
    const bool small = m < 4194304.0f;
    const float mm = small ? m : 1.0f;
    const float recon = __fmul_rn(__fsub_rn(mm, 0.5f), step);
    const bool ok = small && fabsf(__fsub_rn(ax, recon)) < eb;
    const bool zero = x == 0.0f;
    const int qm = __float2int_rn(mm);
    Quant r;
    r.q = (ok && !zero) ? (x < 0.0f ? -qm : qm) : 0;
    r.ok = ok || zero;
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
