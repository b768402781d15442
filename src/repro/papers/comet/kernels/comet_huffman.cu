// COMET codec v4: v3's quantiser, then canonical Huffman with zero runs over the quantisation codes.
// The GPU side of the format in src/repro/papers/comet/codec_v4.py (read its docstring first; the
// streams must match its NumPy twin bit for bit).
//
// One thread per block of 1024 values in every kernel (a block is the format's unit of independent
// coding); CTAs of V4_THREADS threads. A thread reads its block twice: once to find whether it is raw
// (an unpredictable value) or all zero, then to walk its codes in order (block_walk), which every
// kernel shares, so the histogram, the sizes and the packed bits see the same symbols.
//
// comet_v4_histogram  both prediction modes' symbol histograms (2 x V4_NSYM uint32, shared-memory
//     partial histograms added to global ones) and the count of blocks holding NaN/Inf (flags[0]).
//     The host reads them (one sync), picks the mode and builds the length-limited code book.
// comet_v4_sizes      each block's payload words (0 zero block, 1024 raw: unpredictable or a coded
//     block of >= 1024 words, else ceil(bits / 32)). The exclusive prefix sum (offsets) is a
//     device scan (torch.cumsum) between this and the pack.
// comet_v4_pack       each block's words at offsets[b]: MSB-first bit writer (64-bit accumulator,
//     one 32-bit store per full word), or the raw float32 words.
// comet_v4_decode     each block from offsets[b] alone: canonical decode by the per-length limits
//     (the code book's tables in shared memory), zero runs expanded as they arrive, values
//     dequantised and written at once.
#include <stdint.h>

#include "comet_quant.cuh"

#define V4_BLOCK 1024
#define V4_ESC 4096
#define V4_ESC_SYM (V4_ESC + 1)
#define V4_NSYM (V4_ESC + 2)
#define V4_LMAX 16
#define V4_RUNA 0
#define V4_RUNB 1
#define V4_RAW_WORDS 1024
#define V4_THREADS 128
#define V4_DELTA 0
#define V4_DIRECT 1

struct QuantArgs {
    const float* x;
    long long n;
    float step, inv, eb;
};

__device__ __forceinline__ float value_at(const QuantArgs& a, long long i) { return i < a.n ? __ldg(a.x + i) : 0.0f; }

// Values i..i+3 (i a multiple of 4; zeros past n): one float4 load inside the tensor.
__device__ __forceinline__ void load4(const QuantArgs& a, long long i, float v[4]) {
    if (i + 3 < a.n) {
        const float4 f = __ldg(reinterpret_cast<const float4*>(a.x + i));
        v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
    } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) v[e] = value_at(a, i + e);
    }
}

// (raw, any nonzero code, holds NaN/Inf) of block b.
struct BlockKind {
    bool raw, nonzero, nonfinite;
};

__device__ __forceinline__ BlockKind block_kind(const QuantArgs& a, long long b) {
    BlockKind k = {false, false, false};
    const long long i0 = b * V4_BLOCK;
    for (int i = 0; i < V4_BLOCK; i += 4) {
        float v[4];
        load4(a, i0 + i, v);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const Quant q = quantize(v[e], a.step, a.inv, a.eb);
            k.raw |= !q.ok;
            k.nonzero |= q.q != 0;
            k.nonfinite |= !isfinite(v[e]);
        }
    }
    return k;
}

// The bijective base-2 digits of a zero run of length L (L + 1 = 2^K + sum b_k 2^k; digit k is RUNB
// when b_k = 1), least significant first.
template <class Emit>
__device__ __forceinline__ void emit_run(unsigned run, Emit& emit) {
    const unsigned v = run + 1u;
    const int digits = 31 - __clz(v);
    for (int k = 0; k < digits; ++k) emit(((v >> k) & 1u) ? V4_RUNB : V4_RUNA, 0u);
}

template <class Emit>
__device__ __forceinline__ void emit_code(unsigned z, unsigned& run, Emit& emit) {
    if (z == 0) {
        ++run;
        return;
    }
    if (run) emit_run(run, emit);
    run = 0;
    if (z >= V4_ESC)
        emit(V4_ESC_SYM, z);
    else
        emit((int)z + 1, 0u);
}

// Walk block b's codes in value order in both modes at once (emit0: DELTA, emit1: DIRECT; either
// may be NoEmit: that mode is not walked), emitting symbols (and an escape's 32 raw bits).
template <class E0, class E1>
__device__ __forceinline__ void block_walk(const QuantArgs& a, long long b, E0& emit0, E1& emit1) {
    const long long i0 = b * V4_BLOCK;
    unsigned run0 = 0, run1 = 0;
    int prev = 0;
    for (int i = 0; i < V4_BLOCK; i += 4) {
        float v[4];
        load4(a, i0 + i, v);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int q = quantize(v[e], a.step, a.inv, a.eb).q;
            if (E0::active) emit_code(zigzag(q - prev), run0, emit0);
            if (E1::active) emit_code(zigzag(q), run1, emit1);
            prev = q;
        }
    }
    if (E0::active && run0) emit_run(run0, emit0);
    if (E1::active && run1) emit_run(run1, emit1);
}

struct HistEmit {
    static constexpr bool active = true;
    unsigned* hist;
    __device__ __forceinline__ void operator()(int sym, unsigned) { atomicAdd(hist + sym, 1u); }
};

struct NoEmit {
    static constexpr bool active = false;
    __device__ __forceinline__ void operator()(int, unsigned) {}
};

extern "C" __global__ void __launch_bounds__(V4_THREADS)
comet_v4_histogram(const float* __restrict__ x, long long n, float step, float inv, float eb, long long nb,
                   unsigned* __restrict__ hist, unsigned* __restrict__ flags) {
    __shared__ unsigned local[2 * V4_NSYM];
    for (int i = threadIdx.x; i < 2 * V4_NSYM; i += blockDim.x) local[i] = 0;
    __syncthreads();
    const QuantArgs a = {x, n, step, inv, eb};
    const long long b = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (b < nb) {
        const BlockKind k = block_kind(a, b);
        if (k.nonfinite) atomicAdd(flags, 1u);
        if (!k.raw && k.nonzero) {
            HistEmit e0 = {local}, e1 = {local + V4_NSYM};
            block_walk(a, b, e0, e1);
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < 2 * V4_NSYM; i += blockDim.x)
        if (local[i]) atomicAdd(hist + i, local[i]);
}

struct BitsEmit {
    static constexpr bool active = true;
    const unsigned char* lens;
    unsigned bits;  // at most 1024 * (16 + 32)
    __device__ __forceinline__ void operator()(int sym, unsigned) { bits += lens[sym] + (sym == V4_ESC_SYM ? 32 : 0); }
};

// Block b's payload words under the chosen mode's code lengths.
__device__ __forceinline__ int block_words(const QuantArgs& a, long long b, int mode, const unsigned char* lens) {
    const BlockKind k = block_kind(a, b);
    if (k.raw) return V4_RAW_WORDS;
    if (!k.nonzero) return 0;
    BitsEmit bits = {lens, 0u};
    NoEmit none;
    if (mode == V4_DELTA)
        block_walk(a, b, bits, none);
    else
        block_walk(a, b, none, bits);
    const unsigned words = (bits.bits + 31) / 32;
    return words >= V4_RAW_WORDS ? V4_RAW_WORDS : (int)words;
}

extern "C" __global__ void __launch_bounds__(V4_THREADS)
comet_v4_sizes(const float* __restrict__ x, long long n, float step, float inv, float eb, long long nb, int mode,
               const unsigned char* __restrict__ lens, int* __restrict__ words) {
    const QuantArgs a = {x, n, step, inv, eb};
    const long long b = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (b < nb) words[b] = block_words(a, b, mode, lens);
}

struct PackEmit {
    static constexpr bool active = true;
    const unsigned* codes;
    const unsigned char* lens;
    unsigned* out;  // the block's next word
    unsigned long long acc;  // pending bits, left-aligned
    int nacc;

    __device__ __forceinline__ void put(unsigned value, int len) {
        acc |= (unsigned long long)value << (64 - len - nacc);
        nacc += len;
        if (nacc >= 32) {
            *out++ = (unsigned)(acc >> 32);
            acc <<= 32;
            nacc -= 32;
        }
    }
    __device__ __forceinline__ void operator()(int sym, unsigned extra) {
        put(codes[sym], lens[sym]);
        if (sym == V4_ESC_SYM) put(extra, 32);
    }
};

extern "C" __global__ void __launch_bounds__(V4_THREADS)
comet_v4_pack(const float* __restrict__ x, long long n, float step, float inv, float eb, long long nb, int mode,
              const unsigned* __restrict__ codes, const unsigned char* __restrict__ lens,
              const unsigned* __restrict__ offsets, unsigned* __restrict__ payload) {
    const QuantArgs a = {x, n, step, inv, eb};
    const long long b = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= nb) return;
    const unsigned start = offsets[b], size = offsets[b + 1] - start;
    if (size == 0) return;
    unsigned* out = payload + start;
    if (size == V4_RAW_WORDS) {
        for (int i = 0; i < V4_BLOCK; ++i) out[i] = __float_as_uint(value_at(a, b * V4_BLOCK + i));
        return;
    }
    PackEmit pack = {codes, lens, out, 0ull, 0};
    NoEmit none;
    if (mode == V4_DELTA)
        block_walk(a, b, pack, none);
    else
        block_walk(a, b, none, pack);
    if (pack.nacc > 0) *pack.out = (unsigned)(pack.acc >> 32);
}

// Canonical decode tables (codec_v4.DecodeTables): limit[l], first[l], base[l] for l = 1..LMAX
// (index 0 unused), then the used symbols by (length, symbol).
struct Tables {
    int limit[V4_LMAX + 1], first[V4_LMAX + 1], base[V4_LMAX + 1];
};

struct BitReader {
    const unsigned* word;
    const unsigned* end;
    unsigned long long buf;  // upcoming bits, left-aligned
    int nbuf;

    __device__ __forceinline__ void refill() {
        if (nbuf <= 32) {
            const unsigned w = word < end ? *word : 0u;
            ++word;
            buf |= (unsigned long long)w << (32 - nbuf);
            nbuf += 32;
        }
    }
    __device__ __forceinline__ unsigned take(int len) {
        const unsigned v = (unsigned)(buf >> (64 - len));
        buf <<= len;
        nbuf -= len;
        return v;
    }
};

__device__ __forceinline__ void put_value(float* __restrict__ y, long long n, long long i, float v) {
    if (i < n) y[i] = v;
}

extern "C" __global__ void __launch_bounds__(V4_THREADS)
comet_v4_decode(const unsigned* __restrict__ payload, const unsigned* __restrict__ offsets, long long nb, long long n,
                int mode, float step, const int* __restrict__ tables, const int* __restrict__ symbols, int nsymbols,
                float* __restrict__ y) {
    __shared__ Tables t;
    __shared__ short sym_of[V4_NSYM];
    if (threadIdx.x < 3 * (V4_LMAX + 1)) (&t.limit[0])[threadIdx.x] = tables[threadIdx.x];
    for (int i = threadIdx.x; i < nsymbols; i += blockDim.x) sym_of[i] = (short)symbols[i];
    __syncthreads();
    const long long b = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= nb) return;
    const long long i0 = b * V4_BLOCK;
    const unsigned start = offsets[b], size = offsets[b + 1] - start;
    if (size == V4_RAW_WORDS) {
        for (int i = 0; i < V4_BLOCK; ++i) put_value(y, n, i0 + i, __uint_as_float(payload[start + i]));
        return;
    }
    if (size == 0) {
        for (int i = 0; i < V4_BLOCK; ++i) put_value(y, n, i0 + i, 0.0f);
        return;
    }
    BitReader r = {payload + start, payload + start + size, 0ull, 0};
    int pos = 0, k = 0, q = 0;
    while (pos < V4_BLOCK) {
        r.refill();
        const int window = (int)(r.buf >> (64 - V4_LMAX));
        int len = 1;
        while (len < V4_LMAX && window >= t.limit[len]) ++len;
        const int idx = t.base[len] + (window >> (V4_LMAX - len)) - t.first[len];
        const int sym = (idx >= 0 && idx < nsymbols) ? sym_of[idx] : V4_RUNA;  // corrupt streams stay in bounds
        r.take(len);
        if (sym <= V4_RUNB) {  // a run digit: (sym + 1) 2^k more zero codes
            int add = (sym + 1) << k;
            ++k;
            if (add > V4_BLOCK - pos) add = V4_BLOCK - pos;
            const float v = mode == V4_DELTA ? dequantize(q, step) : 0.0f;
            if (mode == V4_DIRECT) q = 0;
            for (int j = 0; j < add; ++j) put_value(y, n, i0 + pos + j, v);
            pos += add;
            continue;
        }
        k = 0;
        unsigned z = (unsigned)(sym - 1);
        if (sym == V4_ESC_SYM) {
            r.refill();
            z = r.take(32);
        }
        const int d = unzigzag(z);
        q = mode == V4_DELTA ? q + d : d;
        put_value(y, n, i0 + pos, dequantize(q, step));
        ++pos;
    }
}
