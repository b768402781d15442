// COMET-style error-bounded compressor for float32 activations: the GPU side of the format in
// src/repro/papers/comet/codec.py (read its docstring first; the streams must match it bit for bit).
//
// One CTA of 8 warps per tile of 8 blocks (8192 values); warp k owns block 8 t + k, each lane one
// float4 of each of the block's 8 chunks of 128 values.
//
// comet_compress[_nhwc]  one pass: a warp reads its block once, quantises it, Lorenzo + zigzag, keeps
//     the 32 residuals per lane in registers and OR-reduces the block's bit width. The tile's payload
//     offset comes from a decoupled look-back: tile ids are handed out in launch order by an atomic
//     counter (so every predecessor is running or done), a tile publishes its size at once, then sums
//     its predecessors' published sizes back to the first published inclusive prefix. Each warp then
//     writes its bit planes (a 32x32 bit transpose in 5 shuffle rounds per 32 values gives lane b
//     plane b) or its raw values, unless the tile would end past the payload's capacity: then it
//     writes no payload and sets the overflow flag (the buffer was too small; nothing is written out
//     of bounds). Widths, anchors and the word where each tile's payload starts are always written.
//     The last tile writes the end of the payload to bases[1] (the next tensor of an arena starts
//     there) and raises *max_words to the payload's size.
// comet_decompress[_nhwc]  one pass, no scan: a tile's blocks start at tile_start[t] plus the sizes
//     of the blocks before them in the tile. A tile that did not fit decodes as zeros (its zero-width
//     blocks as their anchor).
// The _nhwc variants read (write) a channels-last (N, C, H, W) tensor in its logical NCHW order, the
// order the format sees: the tile is staged in shared memory, loaded (stored) along channels so that
// the global accesses are coalesced; rows of H*W values are padded by one word so that the transposed
// shared-memory accesses spread over the banks. They need H*W >= 32 and fewer than 2^31 values.
//
// Scratch the caller zeroes before a launch: bases[0] (where this tensor's payload starts; 0 for
// the first), flags (overflow, count of blocks holding NaN/Inf), the tile counter and one status
// word per tile. The quantiser uses __fmul_rn / __fadd_rn / __fsub_rn / floorf so that nvcc cannot
// contract or approximate it: the results equal NumPy's float32 operations.
#include <stdint.h>

#include "comet_quant.cuh"

#define COMET_BLOCK 1024
#define COMET_CHUNKS 8
#define COMET_RAW 32
#define TILE_BLOCKS 8
#define TILE_VALUES (TILE_BLOCKS * COMET_BLOCK)
#define THREADS (32 * TILE_BLOCKS)
#define MIN_HW 32
#define SMEM_VALUES (TILE_VALUES + TILE_VALUES / MIN_HW + 2)
#define FULL_MASK 0xffffffffu
#define FLAG_SHIFT 62
#define FLAG_AGGREGATE (1ull << FLAG_SHIFT)
#define FLAG_PREFIX (2ull << FLAG_SHIFT)
#define VALUE_MASK ((1ull << FLAG_SHIFT) - 1)

// 32x32 bit-matrix transpose across a warp: lane i holds row i (bit j = element (i, j)); on return
// lane j holds column j (bit i = element (i, j)). Its own inverse.
__device__ __forceinline__ unsigned transpose32(unsigned x, int lane) {
    const unsigned masks[5] = {0x0000ffffu, 0x00ff00ffu, 0x0f0f0f0fu, 0x33333333u, 0x55555555u};
#pragma unroll
    for (int i = 0; i < 5; ++i) {
        const int j = 16 >> i;
        const unsigned m = masks[i];
        const unsigned y = __shfl_xor_sync(FULL_MASK, x, j);
        x = (lane & j) ? ((x & ~m) | ((y & ~m) >> j)) : ((x & m) | ((y & m) << j));
    }
    return x;
}

__device__ __forceinline__ long long warp_sum(long long v) {
#pragma unroll
    for (int off = 16; off; off >>= 1) v += __shfl_xor_sync(FULL_MASK, v, off);
    return v;
}

__device__ __forceinline__ float4 load4(const float* __restrict__ x, long long n, long long i) {
    if (i + 3 < n) return __ldg(reinterpret_cast<const float4*>(x + i));
    float4 r = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (i < n) r.x = x[i];
    if (i + 1 < n) r.y = x[i + 1];
    if (i + 2 < n) r.z = x[i + 2];
    return r;
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

// Where the tile's channels-last values sit: a tile is TILE_VALUES consecutive logical (NCHW) values
// from L0; its rows (one channel of one sample, hw values) each get one pad word in shared memory.
struct Tile {
    long long L0, n;
    int channels, hw, r0;  // r0 = L0 % hw: the first row's offset
};

__device__ __forceinline__ Tile tile_of(long long L0, long long n, int channels, int hw) {
    Tile t;
    t.L0 = L0;
    t.n = n;
    t.channels = channels;
    t.hw = hw;
    t.r0 = hw > 0 ? (int)(L0 % hw) : 0;
    return t;
}

// Shared-memory index of tile position p + e (e < 4) given rho = (r0 + p) / hw, s = (r0 + p) % hw.
__device__ __forceinline__ int smem_index(int p, int e, int rho, int s, int hw) {
    return p + e + rho + (s + e >= hw ? 1 : 0);
}

// Visit every (global memory offset, shared-memory index) of the tile's values, in memory order of
// each sample (along channels first): fn(mem, idx).
template <typename Fn>
__device__ __forceinline__ void for_tile_nhwc(const Tile& t, Fn fn) {
    const long long per_sample = (long long)t.channels * t.hw;
    const long long L1 = min(t.L0 + TILE_VALUES, t.n);
    const long long row0 = t.L0 / t.hw;
    for (long long sample = t.L0 / per_sample; sample * per_sample < L1; ++sample) {
        const long long first = sample * per_sample;
        const int la = (int)(max(t.L0, first) - first), lb = (int)(min(L1, first + per_sample) - first);
        const int ca = la / t.hw, cw = (lb - 1) / t.hw - ca + 1;
        const int total = cw * t.hw;
        const int p0 = (int)(first - t.L0);                  // tile position of the sample's logical 0
        const int rho0 = (int)(sample * t.channels + ca - row0);  // tile row of channel ca
        const int step_s = THREADS / cw, step_c = THREADS % cw;
        int s = threadIdx.x / cw, c = threadIdx.x % cw;
        for (int f = threadIdx.x; f < total; f += THREADS) {
            const int l = (ca + c) * t.hw + s;
            if (l >= la && l < lb) fn(first + ca + (long long)s * t.channels + c, p0 + l + rho0 + c);
            c += step_c;
            s += step_s;
            if (c >= cw) {
                c -= cw;
                ++s;
            }
        }
    }
}

// The four values of a lane at tile position p (a multiple of 4): from global memory (flat) or from
// the staged tile (NHWC); zeros past n.
template <bool NHWC>
__device__ __forceinline__ float4 tile_values(const float* __restrict__ x, const float* smem, const Tile& t, int p) {
    if (!NHWC) return load4(x, t.n, t.L0 + p);
    const int rho = (t.r0 + p) / t.hw, s = t.r0 + p - rho * t.hw;
    float v[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) v[e] = t.L0 + p + e < t.n ? smem[smem_index(p, e, rho, s, t.hw)] : 0.0f;
    return make_float4(v[0], v[1], v[2], v[3]);
}

template <bool NHWC>
__device__ __forceinline__ void put_values(float* __restrict__ y, float* smem, const Tile& t, int p, float4 v) {
    if (!NHWC) {
        store4(y, t.n, t.L0 + p, v);
        return;
    }
    const int rho = (t.r0 + p) / t.hw, s = t.r0 + p - rho * t.hw;
    smem[smem_index(p, 0, rho, s, t.hw)] = v.x;
    smem[smem_index(p, 1, rho, s, t.hw)] = v.y;
    smem[smem_index(p, 2, rho, s, t.hw)] = v.z;
    smem[smem_index(p, 3, rho, s, t.hw)] = v.w;
}

// The four Lorenzo residuals (zigzagged) of a lane's float4 in one chunk; `carry` is the last q of
// the previous chunk (the anchor before the first), updated to this chunk's last q.
__device__ __forceinline__ bool codes(const float4 v, float step, float inv, float eb, int lane, int& carry,
                                      unsigned z[4]) {
    const Quant a = quantize(v.x, step, inv, eb), b = quantize(v.y, step, inv, eb);
    const Quant c = quantize(v.z, step, inv, eb), d = quantize(v.w, step, inv, eb);
    int left = __shfl_up_sync(FULL_MASK, d.q, 1);
    if (lane == 0) left = carry;
    carry = __shfl_sync(FULL_MASK, d.q, 31);
    z[0] = zigzag(a.q - left);
    z[1] = zigzag(b.q - a.q);
    z[2] = zigzag(c.q - b.q);
    z[3] = zigzag(d.q - c.q);
    return a.ok && b.ok && c.ok && d.ok;
}

// Warp 0 of a tile: publish the tile's size, find its exclusive prefix (words before it), publish
// its inclusive prefix.
__device__ __forceinline__ long long lookback(unsigned long long* status, int tile, long long aggregate, int lane) {
    volatile unsigned long long* st = status;
    if (tile == 0) {
        if (lane == 0) st[0] = FLAG_PREFIX | (unsigned long long)aggregate;
        return 0;
    }
    if (lane == 0) st[tile] = FLAG_AGGREGATE | (unsigned long long)aggregate;
    long long exclusive = 0;
    for (int last = tile - 1;; last -= 32) {
        const int i = last - lane;  // lane 0: the nearest predecessor
        unsigned long long s = FLAG_PREFIX;  // before the first tile: a prefix of 0
        if (i >= 0) {
            do {
                s = st[i];
            } while ((s >> FLAG_SHIFT) == 0);
        }
        const unsigned prefixes = __ballot_sync(FULL_MASK, (s >> FLAG_SHIFT) == 2);
        long long v = (long long)(s & VALUE_MASK);
        if (prefixes) {
            if (lane > __ffs(prefixes) - 1) v = 0;
            exclusive += warp_sum(v);
            break;
        }
        exclusive += warp_sum(v);
    }
    if (lane == 0) st[tile] = FLAG_PREFIX | (unsigned long long)(exclusive + aggregate);
    return exclusive;
}

template <bool NHWC>
__device__ __forceinline__ void compress_tile(const float* __restrict__ x, long long n, int channels, int hw,
                                              float step, float inv, float eb, unsigned char* __restrict__ widths,
                                              int* __restrict__ anchors, long long* __restrict__ tile_start,
                                              unsigned* __restrict__ payload, long long capacity,
                                              long long* bases, int* flags, int* counter,
                                              unsigned long long* status, unsigned long long* max_words,
                                              long long nblocks) {
    __shared__ float smem[NHWC ? SMEM_VALUES : 1];
    __shared__ int s_tile;
    __shared__ int s_words[TILE_BLOCKS];
    __shared__ long long s_start, s_end;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (threadIdx.x == 0) s_tile = atomicAdd(counter, 1);
    __syncthreads();
    const int tile = s_tile;
    const Tile t = tile_of((long long)tile * TILE_VALUES, n, channels, hw);
    if (NHWC) {
        for_tile_nhwc(t, [&](long long mem, int idx) { smem[idx] = __ldg(x + mem); });
        __syncthreads();
    }
    const long long blk = (long long)tile * TILE_BLOCKS + warp;
    const bool active = blk < nblocks;  // warp-uniform
    const int p_block = warp * COMET_BLOCK + 4 * lane;
    unsigned z[COMET_CHUNKS][4];
    int w = 0, anchor = 0;
    if (active) {
        float4 v[COMET_CHUNKS];
#pragma unroll
        for (int c = 0; c < COMET_CHUNKS; ++c) v[c] = tile_values<NHWC>(x, smem, t, p_block + c * 128);
        anchor = __shfl_sync(FULL_MASK, quantize(v[0].x, step, inv, eb).q, 0);
        int carry = anchor;
        unsigned orz = 0;
        bool ok = true;
#pragma unroll
        for (int c = 0; c < COMET_CHUNKS; ++c) {
            ok = codes(v[c], step, inv, eb, lane, carry, z[c]) && ok;
            orz |= z[c][0] | z[c][1] | z[c][2] | z[c][3];
        }
        orz = __reduce_or_sync(FULL_MASK, orz);
        ok = __all_sync(FULL_MASK, ok);
        w = ok ? (orz ? 32 - __clz(orz) : 0) : COMET_RAW;
    }
    if (lane == 0) s_words[warp] = 32 * w;
    __syncthreads();
    if (warp == 0) {
        const long long aggregate = warp_sum(lane < TILE_BLOCKS ? s_words[lane] : 0);
        const long long exclusive = lookback(status, tile, aggregate, lane);
        if (lane == 0) {
            const long long start = bases[0] + exclusive;
            s_start = start;
            s_end = start + aggregate;
            tile_start[tile] = start;
            if (start + aggregate > capacity) atomicOr(flags, 1);
            if (tile == (int)gridDim.x - 1) {
                bases[1] = start + aggregate;
                if (max_words) atomicMax(max_words, (unsigned long long)(start + aggregate - bases[0]));
            }
        }
    }
    __syncthreads();
    if (!active) return;
    long long off = s_start;
    for (int k = 0; k < warp; ++k) off += s_words[k];
    const bool fits = s_end <= capacity;
    if (lane == 0) {
        widths[blk] = (unsigned char)w;
        anchors[blk] = w == COMET_RAW ? 0 : anchor;
    }
    if (w == COMET_RAW) {  // rare: read the values again, store them verbatim, count NaN/Inf blocks
        float4 v[COMET_CHUNKS];
        bool finite = true;
#pragma unroll
        for (int c = 0; c < COMET_CHUNKS; ++c) {
            v[c] = tile_values<NHWC>(x, smem, t, p_block + c * 128);
            finite = finite && isfinite(v[c].x) && isfinite(v[c].y) && isfinite(v[c].z) && isfinite(v[c].w);
        }
        if (!__all_sync(FULL_MASK, finite) && lane == 0) atomicAdd(flags + 1, 1);
        if (fits) {
#pragma unroll
            for (int c = 0; c < COMET_CHUNKS; ++c) reinterpret_cast<float4*>(payload + off)[c * 32 + lane] = v[c];
        }
        return;
    }
    if (!fits || w == 0) return;
    unsigned* __restrict__ out = payload + off;  // 128-byte aligned: offsets are multiples of 32 words
#pragma unroll
    for (int c = 0; c < COMET_CHUNKS; ++c) {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const unsigned plane = transpose32(z[c][k], lane);
            if (lane < w) out[(c * 4 + k) * w + lane] = plane;
        }
    }
}

template <bool NHWC>
__device__ __forceinline__ void decompress_tile(const unsigned* __restrict__ payload, long long capacity,
                                                const unsigned char* __restrict__ widths,
                                                const int* __restrict__ anchors,
                                                const long long* __restrict__ tile_start, float step,
                                                float* __restrict__ y, long long n, int channels, int hw,
                                                long long nblocks) {
    __shared__ float smem[NHWC ? SMEM_VALUES : 1];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int tile = blockIdx.x;
    const Tile t = tile_of((long long)tile * TILE_VALUES, n, channels, hw);
    const long long blk0 = (long long)tile * TILE_BLOCKS;
    const int wl = (lane < TILE_BLOCKS && blk0 + lane < nblocks) ? widths[blk0 + lane] : 0;
    int incl = 32 * wl;  // inclusive scan of the tile's block sizes (lanes 0..7)
#pragma unroll
    for (int off = 1; off < TILE_BLOCKS; off <<= 1) {
        const int v = __shfl_up_sync(FULL_MASK, incl, off);
        if (lane >= off) incl += v;
    }
    const int w = __shfl_sync(FULL_MASK, wl, warp);
    const long long start = tile_start[tile];
    const long long off = start + __shfl_sync(FULL_MASK, incl, warp) - 32 * w;
    const bool fits = start + __shfl_sync(FULL_MASK, incl, TILE_BLOCKS - 1) <= capacity;
    const long long blk = blk0 + warp;
    const int p_block = warp * COMET_BLOCK + 4 * lane;
    if (blk < nblocks) {
        const unsigned* __restrict__ in = payload + off;
        int carry = anchors[blk];
        if (w == 0 || !fits) {  // every code equals the anchor; a tile that did not fit: zeros
            const float a = w == 0 ? dequantize(carry, step) : 0.0f;
#pragma unroll
            for (int c = 0; c < COMET_CHUNKS; ++c) put_values<NHWC>(y, smem, t, p_block + c * 128, make_float4(a, a, a, a));
        } else if (w == COMET_RAW) {
#pragma unroll
            for (int c = 0; c < COMET_CHUNKS; ++c)
                put_values<NHWC>(y, smem, t, p_block + c * 128, __ldg(reinterpret_cast<const float4*>(in) + c * 32 + lane));
        } else {
#pragma unroll 2
            for (int c = 0; c < COMET_CHUNKS; ++c) {
                int d[4];
#pragma unroll
                for (int k = 0; k < 4; ++k) {
                    const unsigned word = lane < w ? __ldg(in + (c * 4 + k) * w + lane) : 0u;
                    d[k] = unzigzag(transpose32(word, lane));
                }
                const int s0 = d[0], s1 = s0 + d[1], s2 = s1 + d[2], s3 = s2 + d[3];
                int scan = s3;
#pragma unroll
                for (int o = 1; o < 32; o <<= 1) {
                    const int v = __shfl_up_sync(FULL_MASK, scan, o);
                    if (lane >= o) scan += v;
                }
                const int before = carry + scan - s3;
                carry += __shfl_sync(FULL_MASK, scan, 31);
                put_values<NHWC>(y, smem, t, p_block + c * 128,
                                 make_float4(dequantize(before + s0, step), dequantize(before + s1, step),
                                             dequantize(before + s2, step), dequantize(before + s3, step)));
            }
        }
    }
    if (NHWC) {
        __syncthreads();
        for_tile_nhwc(t, [&](long long mem, int idx) { y[mem] = smem[idx]; });
    }
}

#define COMPRESS_ARGS                                                                                          \
    const float* __restrict__ x, long long n, int channels, int hw, float step, float inv, float eb,          \
        unsigned char* __restrict__ widths, int* __restrict__ anchors, long long* __restrict__ tile_start,    \
        unsigned* __restrict__ payload, long long capacity, long long* bases, int* flags, int* counter,       \
        unsigned long long* status, unsigned long long* max_words, long long nblocks
#define COMPRESS_PASS                                                                                          \
    x, n, channels, hw, step, inv, eb, widths, anchors, tile_start, payload, capacity, bases, flags, counter, \
        status, max_words, nblocks
#define DECOMPRESS_ARGS                                                                                        \
    const unsigned* __restrict__ payload, long long capacity, const unsigned char* __restrict__ widths,      \
        const int* __restrict__ anchors, const long long* __restrict__ tile_start, float step,                \
        float* __restrict__ y, long long n, int channels, int hw, long long nblocks
#define DECOMPRESS_PASS payload, capacity, widths, anchors, tile_start, step, y, n, channels, hw, nblocks

extern "C" __global__ void __launch_bounds__(THREADS) comet_compress(COMPRESS_ARGS) {
    compress_tile<false>(COMPRESS_PASS);
}

extern "C" __global__ void __launch_bounds__(THREADS) comet_compress_nhwc(COMPRESS_ARGS) {
    compress_tile<true>(COMPRESS_PASS);
}

extern "C" __global__ void __launch_bounds__(THREADS) comet_decompress(DECOMPRESS_ARGS) {
    decompress_tile<false>(DECOMPRESS_PASS);
}

extern "C" __global__ void __launch_bounds__(THREADS) comet_decompress_nhwc(DECOMPRESS_ARGS) {
    decompress_tile<true>(DECOMPRESS_PASS);
}
