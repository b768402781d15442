// Copies and loads over the interconnect, run by the SMs (the copy-engine path is cudaMemcpyPeerAsync).
//
// sm_copy: dst[0..bytes) = src[0..bytes), a grid-stride loop of 16-byte loads and stores with a
// byte loop for the tail; launched on one GPU with src or dst (or both) in a peer's memory
// (P2P on), so the SMs pull or push the data through NVLink. Pointers are cudaMalloc'd (256-byte
// aligned).
//
// chase: one thread follows next = ring[next] `steps` times through a ring of 8-byte slots (in a
// peer's memory for the remote latency), each load waiting for the previous one: the time per
// step is the load-to-use latency. The last index goes to *out so the loop is not optimised away.

#include <cstdint>

extern "C" __global__ void sm_copy(const uint8_t* __restrict__ src, uint8_t* __restrict__ dst, unsigned long long bytes) {
    const unsigned long long vec = bytes / 16;
    const int4* s = reinterpret_cast<const int4*>(src);
    int4* d = reinterpret_cast<int4*>(dst);
    const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
    unsigned long long i = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    for (unsigned long long k = i; k < vec; k += stride) d[k] = s[k];
    for (unsigned long long k = vec * 16 + i; k < bytes; k += stride) dst[k] = src[k];
}

extern "C" __global__ void chase(const unsigned long long* ring, long long steps, unsigned long long* out) {
    unsigned long long next = 0;
    for (long long s = 0; s < steps; ++s) next = *(const volatile unsigned long long*)(ring + next);
    *out = next;
}
