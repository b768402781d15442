// Synchronisation-free SpTRSV over k GPUs (Xie et al., ICPP 2021), fp64; NumPy twin:
// schedule.multigpu_solve.
//
// Rows are cut into k contiguous blocks (bounds[0..k]); GPU `me` solves rows bounds[me] ..
// bounds[me + 1] - 1 from the CSC of its own columns (colptr rebased to 0, global row indices,
// diagonal first). The left sum and counter of row r live in part o = owner(r), at r - bounds[o]:
// sums[o] and counts[o] are k pointers that this GPU can dereference. The same kernel serves both
// designs; only where the parts live differs:
//   unified memory: the parts are slices of one cudaMallocManaged array (pages migrate on demand);
//   zero-copy: each part is its owner's symmetric-memory buffer, reached over NVLink through the
//   peer pointers of the rendezvous (remote pushes are system-scope atomics on the owner's memory).
// A push to any part is atomicAdd_system on the sum, __threadfence_system, atomicAdd_system on the
// counter, so a GPU that sees a counter complete sees the sum.
//
// Task pool: the kernel is persistent (a grid that fits on the GPU); each warp takes the next
// `grain` positions of its GPU's row order from `pool`, solves those rows in turn, and comes back
// until the GPU's rows run out. The order is ascending rows (order == null) or the GPU's rows by
// level; in both a row's dependencies come before it, so the lowest unsolved row (by level) always
// has a warp or gets the next one: no deadlock for any grid size or grain. A row that waits longer
// than `spin_limit` clock cycles records its global index in *stalled (-1 before) and goes on, so
// a stalled solve ends with an error on the host instead of hanging.

#include <cstdint>

__device__ __forceinline__ int load_volatile(const int* p) { return *(const volatile int*)p; }
__device__ __forceinline__ double load_volatile(const double* p) { return *(const volatile double*)p; }

__device__ __forceinline__ void wait_for(const int* count, int want, long long spin_limit, int* stalled, long long row) {
    const long long start = clock64();
    while (load_volatile(count) != want) {
        if (clock64() - start > spin_limit) {
            atomicCAS(stalled, -1, static_cast<int>(row));
            return;
        }
    }
}

__device__ __forceinline__ int owner_of(long long r, const long long* bounds, int k) {
    int o = 0;
    while (o + 1 < k && r >= bounds[o + 1]) ++o;
    return o;
}

extern "C" __global__ void syncfree_pool(const long long* __restrict__ colptr, const int* __restrict__ rowidx,
                                         const double* __restrict__ val, const double* __restrict__ b,
                                         double* __restrict__ x, const unsigned long long* __restrict__ sums,
                                         const unsigned long long* __restrict__ counts,
                                         const long long* __restrict__ bounds, int k, int me,
                                         const int* __restrict__ need, int* pool, long long n_local, int grain,
                                         const int* __restrict__ order, long long spin_limit, int* stalled) {
    __shared__ long long bnd[9];
    if (threadIdx.x <= k && threadIdx.x < 9) bnd[threadIdx.x] = bounds[threadIdx.x];
    __syncthreads();
    const int lane = threadIdx.x & 31;
    double* my_sum = reinterpret_cast<double*>(sums[me]);
    int* my_count = reinterpret_cast<int*>(counts[me]);
    while (true) {
        long long first = 0;
        if (lane == 0) first = static_cast<long long>(atomicAdd(pool, 1)) * grain;
        first = __shfl_sync(0xffffffffu, first, 0);
        if (first >= n_local) return;
        long long last = first + grain < n_local ? first + grain : n_local;
        for (long long t = first; t < last; ++t) {
            const long long i = order != nullptr ? order[t] : t;
            if (lane == 0) wait_for(my_count + i, need[i], spin_limit, stalled, bnd[me] + i);
            __syncwarp();
            __threadfence_system();
            long long start = colptr[i], end = colptr[i + 1];
            double xi = (b[i] - load_volatile(my_sum + i)) / val[start];
            if (lane == 0) x[i] = xi;
            for (long long p = start + 1 + lane; p < end; p += 32) {
                long long r = rowidx[p];
                int o = owner_of(r, bnd, k);
                long long local = r - bnd[o];
                atomicAdd_system(reinterpret_cast<double*>(sums[o]) + local, val[p] * xi);
                __threadfence_system();
                atomicAdd_system(reinterpret_cast<int*>(counts[o]) + local, 1);
            }
            __syncwarp();
        }
    }
}
