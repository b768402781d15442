// Sparse lower-triangular solve L x = b on one GPU, fp64 (the NumPy twins are in schedule.py).
//
// Level-set (our cuSPARSE-style baseline): CSR, one launch per level; every row of the level
// reads only x of earlier levels. The CSR rows are sorted, so a lower row's diagonal is its last
// entry. `levelset_thread` gives each row a thread, `levelset_warp` a warp (for long rows).
//
// Synchronisation-free (Liu et al., Euro-Par 2016): CSC push. Row i waits until count[i] reaches
// need[i] (its off-diagonal entries), then x[i] = (b[i] - left_sum[i]) / L[i][i] and, for each
// L[r][i] below the diagonal, adds L[r][i] * x[i] to left_sum[r] and then increments count[r]
// (a fence between the two, so that a row that sees its count complete sees its sum). CSC
// columns are sorted, so column i's diagonal is its first entry. No barrier between levels.
// `syncfree_warp` is Liu's mapping (a warp per row, its lanes share the pushes);
// `syncfree_thread` gives each row a thread, so 32x more rows are in flight at once.
// Blocks take their rows from `ticket` when they start, in natural order or, when `order` is not
// null, in that order (the level sets back to back): either way every row comes after the rows it
// depends on, so every row a resident block waits for belongs to a block that is resident or done:
// no deadlock, whatever order the hardware starts blocks in. In level order the rows in flight
// cover whole wavefronts instead of a window of consecutive rows. count, left_sum and ticket are
// zero before each solve.
//
// A row that waits longer than `spin_limit` clock cycles stops waiting, records itself in
// *stalled (which starts at -1) and goes on with what it has, so a stalled solve ends with an
// error the host reports instead of hanging the GPU.
//
// Sync-free v2, the published kernels' quality (`syncfree_push`, `syncfree_pull`): a persistent
// grid whose blocks take chunks of blockDim.x consecutive rows of the level order (perm; pos is
// its inverse) from `ticket`, one row a thread, a chunk at a time (every row of a chunk depends
// only on earlier positions: no deadlock for any grid size). A dependency between two rows of
// the same chunk goes through shared memory; one between chunks through global memory with one
// release-ordered update per row (not a fence per non-zero), and the waiter backs off with
// __nanosleep (at most `max_sleep_ns`) so that hundreds of thousands of pollers leave the L2 to
// the writers.
// - `syncfree_push` (CSC push, Liu's counters): row i adds L[r][i] x[i] to r's sum and counts
//   r's dependency done: in shared memory for r in the chunk, else to left_sum[r] and then, after
//   one __threadfence for all of them, count[r]. Row r waits until its shared count reaches
//   need_local[r] (its dependencies in its chunk, from the analysis), then until count[r] reaches
//   the rest of need[r]. count and left_sum are zero before each solve.
// - `syncfree_pull` (CSR pull, write first): row i reads each dependency c once it is ready:
//   from shared memory for c in the chunk, else x[c] after ready[c] == epoch (an acquire load);
//   then writes x[i] and releases ready[i] = epoch (st.release: x before the flag). A new epoch
//   per solve, so the flags need no reset between solves (ready starts at 0, epochs at 1).
//
// Sync-free v3 (`syncfree_pull_v3`): v2 pull with the in-warp dependencies resolved in rounds
// instead of by spinning (CapelliniSpTRSV's warp-level idea). v2's thread whose dependency is an
// earlier row of its own warp spun on a shared flag; under independent thread scheduling the
// spinners held the warp's issue slots until the scheduler switched to the writer, microseconds
// per in-warp dependency (session 19). Here a row's dependencies are of three kinds:
// - outside the chunk: v2's ld.acquire polling of ready[c] == epoch with __nanosleep backoff;
// - in the chunk, another warp (always an earlier one: the level order puts a dependency first):
//   its shared flag, waited for with __nanosleep backoff (never a tight spin), then shared x;
// - in the chunk, the same warp (an earlier lane): a bit of the lane's `wait` mask.
// Each lane first sums the first two kinds, then the warp runs rounds: a lane whose `wait` bits
// are all in the warp's `done` mask (a register, from __ballot_sync) adds its in-warp terms from
// shared x and computes x[i]; __syncwarp orders those shared writes before the next round's reads.
// A lane's in-warp dependencies are lower lanes, so every round computes at least the lowest
// lane left: at most 32 rounds, no waiting inside the warp at all. A pure in-warp chain takes 32
// rounds of a few dozen cycles each instead of 32 scheduler switches.
// Publishing: shared x and flag per row as soon as it is computed (other warps of the block may
// wait on it; a block-scope fence is cheap). Global x[i] is stored when computed but its flag is
// released once per warp, after the rounds, by one converged st.release (a single fence for the
// warp's 32 rows instead of up to 32 serialised ones in a chain): a dependent in a later chunk
// waits at most the rest of the warp's rounds (tens of ns) longer, against a fence (hundreds of
// ns) per row saved on every chain step. The NumPy twin is schedule.warp_round_solve.
//
// Level analysis on the GPU (`level_analysis`, for the v2 kernels): depth[i] = 1 + the largest
// depth of row i's dependencies (1 for a row without), i.e. its level + 1, so a non-zero depth
// is its own ready flag (st.release; readers ld.acquire). CSR pull in natural order, blocks
// taking 256-row chunks from `ticket` (a row's dependencies are earlier rows: no deadlock);
// dependencies inside the chunk read shared memory. depth and ticket are zero before the launch.
//
// Hop latency (`hop_latency`): the sync-free solve's unit of latency, one dependency passed
// between two thread blocks: write the value, release a flag, the other block acquire-polls the
// flag and reads the value. Blocks 0 and 1 play ping-pong for `rounds` round trips (2 hops each);
// block 0 times the loop with %globaltimer, so launch overhead is not in it. A solve whose
// levels each wait for one such hop takes at least levels x hop: the ceiling in bench.py.

#include <cstdint>

__device__ __forceinline__ int load_acquire(const int* p) {
    int v;
    asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void store_release(int* p, int v) {
    asm volatile("st.release.gpu.global.s32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ __forceinline__ int load_volatile(const int* p) { return *(const volatile int*)p; }
__device__ __forceinline__ double load_volatile(const double* p) { return *(const volatile double*)p; }

__device__ __forceinline__ void wait_for(const int* count, int want, long long spin_limit, int* stalled, int row) {
    const long long start = clock64();
    while (load_volatile(count) != want) {
        if (clock64() - start > spin_limit) {
            atomicCAS(stalled, -1, row);
            return;
        }
    }
}

extern "C" __global__ void levelset_thread(const int* __restrict__ rowptr, const int* __restrict__ colidx,
                                           const double* __restrict__ val, const double* __restrict__ b,
                                           double* __restrict__ x, const int* __restrict__ rows, int nrows) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= nrows) return;
    int r = rows[t];
    int lo = rowptr[r], diag = rowptr[r + 1] - 1;
    double s = b[r];
    for (int p = lo; p < diag; ++p) s -= val[p] * x[colidx[p]];
    x[r] = s / val[diag];
}

extern "C" __global__ void levelset_warp(const int* __restrict__ rowptr, const int* __restrict__ colidx,
                                         const double* __restrict__ val, const double* __restrict__ b,
                                         double* __restrict__ x, const int* __restrict__ rows, int nrows) {
    int t = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (t >= nrows) return;
    int r = rows[t];
    int lo = rowptr[r], diag = rowptr[r + 1] - 1;
    double s = 0.0;
    for (int p = lo + lane; p < diag; p += 32) s += val[p] * x[colidx[p]];
    for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xffffffffu, s, off);
    if (lane == 0) x[r] = (b[r] - s) / val[diag];
}

extern "C" __global__ void syncfree_warp(const int* __restrict__ colptr, const int* __restrict__ rowidx,
                                         const double* __restrict__ val, const double* __restrict__ b,
                                         double* __restrict__ x, double* left_sum, int* count,
                                         const int* __restrict__ need, int* ticket, int n,
                                         const int* __restrict__ order, long long spin_limit, int* stalled) {
    __shared__ int base;
    if (threadIdx.x == 0) base = atomicAdd(ticket, 1) * (blockDim.x >> 5);
    __syncthreads();
    int i = base + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (i >= n) return;
    if (order != nullptr) i = order[i];
    if (lane == 0) wait_for(count + i, need[i], spin_limit, stalled, i);
    __syncwarp();
    __threadfence();
    int start = colptr[i], end = colptr[i + 1];
    double xi = (b[i] - load_volatile(left_sum + i)) / val[start];
    if (lane == 0) x[i] = xi;
    for (int p = start + 1 + lane; p < end; p += 32) {
        int r = rowidx[p];
        atomicAdd(left_sum + r, val[p] * xi);
        __threadfence();
        atomicAdd(count + r, 1);
    }
}

extern "C" __global__ void syncfree_thread(const int* __restrict__ colptr, const int* __restrict__ rowidx,
                                           const double* __restrict__ val, const double* __restrict__ b,
                                           double* __restrict__ x, double* left_sum, int* count,
                                           const int* __restrict__ need, int* ticket, int n,
                                           const int* __restrict__ order, long long spin_limit, int* stalled) {
    __shared__ int base;
    if (threadIdx.x == 0) base = atomicAdd(ticket, 1) * blockDim.x;
    __syncthreads();
    int i = base + threadIdx.x;
    if (i >= n) return;
    if (order != nullptr) i = order[i];
    wait_for(count + i, need[i], spin_limit, stalled, i);
    __threadfence();
    int start = colptr[i], end = colptr[i + 1];
    double xi = (b[i] - load_volatile(left_sum + i)) / val[start];
    x[i] = xi;
    for (int p = start + 1; p < end; ++p) {
        int r = rowidx[p];
        atomicAdd(left_sum + r, val[p] * xi);
        __threadfence();
        atomicAdd(count + r, 1);
    }
}

__device__ __forceinline__ bool spun_out(long long start, long long spin_limit, int* stalled, int row) {
    if (clock64() - start <= spin_limit) return false;
    atomicCAS(stalled, -1, row);
    return true;
}

__device__ __forceinline__ void back_off(unsigned& ns, unsigned max_ns) {
    __nanosleep(ns);
    ns = min(2 * ns, max_ns);
}

// Poll an acquire-ordered flag until it holds `want`, or until the spin limit trips (recorded in
// *stalled): eight tight polls, then __nanosleep back-off doubling up to max_ns.
__device__ __forceinline__ void await_flag(const int* p, int want, long long start, long long spin_limit,
                                           int* stalled, int row, unsigned max_ns) {
    unsigned ns = 32;
    for (int spins = 0; load_acquire(p) != want; ++spins) {
        if (spun_out(start, spin_limit, stalled, row)) return;
        if (spins >= 8) back_off(ns, max_ns);
    }
}

constexpr int CHUNK = 256;  // rows per chunk: the launch's blockDim.x

// The next chunk of the level order for this block, in *chunk; false when every chunk is taken.
__device__ __forceinline__ bool next_chunk(int* ticket, int* chunk, int n) {
    __syncthreads();  // the previous chunk's rows are done with the shared arrays
    if (threadIdx.x == 0) *chunk = atomicAdd(ticket, 1) * CHUNK;
    __syncthreads();
    return *chunk < n;
}

extern "C" __global__ void __launch_bounds__(CHUNK) syncfree_push(
    const int* __restrict__ colptr, const int* __restrict__ rowidx, const double* __restrict__ val,
    const double* __restrict__ b, double* __restrict__ x, double* left_sum, int* count,
    const int* __restrict__ need, const int* __restrict__ need_local, const int* __restrict__ perm,
    const int* __restrict__ pos, int* ticket, int n, unsigned max_sleep_ns, long long spin_limit, int* stalled) {
    __shared__ double s_sum[CHUNK];
    __shared__ int s_count[CHUNK];
    __shared__ int base;
    const int t = threadIdx.x;
    while (next_chunk(ticket, &base, n)) {
        s_sum[t] = 0.0;
        s_count[t] = 0;
        __syncthreads();
        if (base + t < n) {
            const int i = perm[base + t], near = need_local[i], far_need = need[i] - near;
            const long long start = clock64();
            // the chunk's dependencies first (shared memory, no global traffic), then the rest
            while (*(volatile int*)&s_count[t] != near && !spun_out(start, spin_limit, stalled, i)) {}
            __threadfence_block();
            if (far_need > 0) await_flag(count + i, far_need, start, spin_limit, stalled, i, max_sleep_ns);
            const int first = colptr[i], end = colptr[i + 1];
            const double xi = (b[i] - load_volatile(left_sum + i) - *(volatile double*)&s_sum[t]) / val[first];
            x[i] = xi;
            bool far = false;
            for (int p = first + 1; p < end; ++p) {  // dependents in the chunk first: they are the closest
                const int l = pos[rowidx[p]] - base;
                if ((unsigned)l < CHUNK) {
                    atomicAdd(&s_sum[l], val[p] * xi);
                    __threadfence_block();
                    atomicAdd(&s_count[l], 1);
                } else {
                    far = true;
                }
            }
            if (far) {
                for (int p = first + 1; p < end; ++p) {
                    const int r = rowidx[p];
                    if ((unsigned)(pos[r] - base) >= CHUNK) atomicAdd(left_sum + r, val[p] * xi);
                }
                __threadfence();  // once per row: every sum above before any count below
                for (int p = first + 1; p < end; ++p) {
                    const int r = rowidx[p];
                    if ((unsigned)(pos[r] - base) >= CHUNK) atomicAdd(count + r, 1);
                }
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(CHUNK) syncfree_pull(
    const int* __restrict__ rowptr, const int* __restrict__ colidx, const double* __restrict__ val,
    const double* __restrict__ b, double* x, int* ready, int epoch, const int* __restrict__ perm,
    const int* __restrict__ pos, int* ticket, int n, unsigned max_sleep_ns, long long spin_limit, int* stalled) {
    __shared__ double s_x[CHUNK];
    __shared__ int s_ready[CHUNK];
    __shared__ int base;
    const int t = threadIdx.x;
    while (next_chunk(ticket, &base, n)) {
        s_ready[t] = 0;
        __syncthreads();
        if (base + t < n) {
            const int i = perm[base + t];
            const int lo = rowptr[i], diag = rowptr[i + 1] - 1;
            const long long start = clock64();
            double s = b[i];
            for (int p = lo; p < diag; ++p) {
                const int c = colidx[p], l = pos[c] - base;
                double xc;
                if ((unsigned)l < CHUNK) {  // in the chunk: an earlier thread of this block
                    while (*(volatile int*)&s_ready[l] == 0 && !spun_out(start, spin_limit, stalled, i)) {}
                    __threadfence_block();
                    xc = *(volatile double*)&s_x[l];
                } else {
                    await_flag(ready + c, epoch, start, spin_limit, stalled, i, max_sleep_ns);
                    xc = load_volatile(x + c);
                }
                s -= val[p] * xc;
            }
            const double xi = s / val[diag];
            s_x[t] = xi;
            __threadfence_block();
            *(volatile int*)&s_ready[t] = 1;
            x[i] = xi;
            store_release(ready + i, epoch);  // once per row: x[i] before its flag
        }
    }
}

constexpr unsigned FULL_MASK = 0xffffffffu;

// v3 (CACHE = 0) and v4 (CACHE > 0): v2 pull, with the dependencies inside a row's own warp resolved
// in rounds (one __syncwarp + ballot per round) instead of by polling. v4 changes three things, each
// aimed at a cost that v3's H100 run showed or that its code implies:
//  - v3's ready lane re-reads its row's column indices and their level positions from global memory in
//    every round (two dependent loads on a chain's path: banded_1e5 finishes ~3 rows a round). v4
//    keeps the first CACHE in-warp dependencies of each row (coefficient, place in the chunk) in shared
//    memory from the first pass, and the diagonal in a register: a round reads shared memory only. A
//    row with more in-warp dependencies than CACHE takes v3's path.
//  - v3 enters the rounds only when every lane of the warp has its inputs from other warps and chunks
//    (the ballot waits for all 32), and releases the warp's global flags once, after the rounds: a row
//    ready early waits for the warp's slowest (v3 was 1.3-2.9x slower than v2 on the matrices whose
//    dependencies cross chunks). In v4 a row with no input inside its warp computes and releases its
//    flag right after its first pass, and a row computed in a round releases its flag at once (v2's
//    one release per row).
// Both subtract in the same order, so x is the same bit for bit (a GPU test checks it).
template <int CACHE>
__device__ __forceinline__ void pull_rounds(
    const int* __restrict__ rowptr, const int* __restrict__ colidx, const double* __restrict__ val,
    const double* __restrict__ b, double* x, int* ready, int epoch, const int* __restrict__ perm,
    const int* __restrict__ pos, int* ticket, int n, unsigned max_sleep_ns, long long spin_limit, int* stalled) {
    constexpr int SLOTS = CACHE > 0 ? CACHE : 1;
    __shared__ double s_x[CHUNK];
    __shared__ int s_ready[CHUNK];
    __shared__ int base;
    __shared__ double s_coef[SLOTS][CHUNK];  // v4: row t's k-th in-warp dependency's coefficient
    __shared__ unsigned char s_lane[SLOTS][CHUNK];  // and its place in the chunk (< CHUNK = 256)
    const int t = threadIdx.x, warp = t >> 5, lane = t & 31;
    while (next_chunk(ticket, &base, n)) {
        s_ready[t] = 0;
        __syncthreads();
        const bool valid = base + t < n;
        const int i = valid ? perm[base + t] : 0;
        const int lo = valid ? rowptr[i] : 0, diag = valid ? rowptr[i + 1] - 1 : 0;
        const double d = (CACHE > 0 && valid) ? val[diag] : 1.0;  // v4: off the rounds' path
        const long long start = clock64();
        double s = valid ? b[i] : 0.0;
        unsigned wait = 0;  // lanes of this warp whose rows this row needs
        int cached = 0;  // v4: in-warp dependencies kept in shared memory
        bool spilled = false;  // v4: more than CACHE of them (v3's path)
        for (int p = lo; p < diag; ++p) {
            const int c = colidx[p], l = pos[c] - base;
            double xc;
            if ((unsigned)l < CHUNK) {
                if ((l >> 5) == warp) {  // the same warp: resolved in the rounds below
                    wait |= 1u << (l & 31);
                    if (CACHE > 0) {
                        if (cached < CACHE) {
                            s_coef[cached][t] = val[p];
                            s_lane[cached][t] = (unsigned char)l;
                            ++cached;
                        } else {
                            spilled = true;
                        }
                    }
                    continue;
                }
                unsigned ns = 16;  // an earlier warp of the block: sleep, so that it gets the issue slots
                while (*(volatile int*)&s_ready[l] == 0) {
                    if (spun_out(start, spin_limit, stalled, i)) break;
                    back_off(ns, max_sleep_ns);
                }
                __threadfence_block();
                xc = *(volatile double*)&s_x[l];
            } else {
                await_flag(ready + c, epoch, start, spin_limit, stalled, i, max_sleep_ns);
                xc = load_volatile(x + c);
            }
            s -= val[p] * xc;
        }
        bool todo = valid;
        if (CACHE > 0 && todo && wait == 0) {  // v4: no input inside the warp: compute and release now
            const double xi = s / d;
            s_x[t] = xi;
            x[i] = xi;
            __threadfence_block();
            *(volatile int*)&s_ready[t] = 1;
            store_release(ready + i, epoch);
            todo = false;
        }
        if (CACHE > 0) __syncwarp();  // those rows' shared x before the first round's reads
        unsigned done = ~__ballot_sync(FULL_MASK, todo);  // lanes past n count as done
        while (done != FULL_MASK) {
            if (todo && (wait & ~done) == 0) {
                if (wait != 0) {
                    if (CACHE > 0 && !spilled) {
                        for (int k = 0; k < cached; ++k) s -= s_coef[k][t] * *(volatile double*)&s_x[s_lane[k][t]];
                    } else {
                        for (int p = lo; p < diag; ++p) {
                            const int l = pos[colidx[p]] - base;
                            if ((unsigned)l < CHUNK && (l >> 5) == warp) s -= val[p] * *(volatile double*)&s_x[l];
                        }
                    }
                }
                const double xi = s / (CACHE > 0 ? d : val[diag]);
                s_x[t] = xi;
                x[i] = xi;
                __threadfence_block();
                *(volatile int*)&s_ready[t] = 1;  // for the block's later warps
                if (CACHE > 0) store_release(ready + i, epoch);  // v4: for later chunks, at once
                todo = false;
            }
            __syncwarp();  // this round's shared x before the next round's reads
            done = ~__ballot_sync(FULL_MASK, todo);
        }
        if (CACHE == 0 && valid) store_release(ready + i, epoch);  // v3: one converged release for the warp's rows
    }
}

constexpr int V4_CACHE = 8;  // in-warp dependencies kept per row (16 KB of shared memory per block)
// v4's blocks an SM (solve.py's V4_BLOCKS_PER_SM): 40 registers, no spills; at 8 blocks (32 registers)
// ptxas spilled 14-26 bytes
constexpr int V4_BLOCKS_PER_SM = 6;

extern "C" __global__ void __launch_bounds__(CHUNK) syncfree_pull_v3(
    const int* __restrict__ rowptr, const int* __restrict__ colidx, const double* __restrict__ val,
    const double* __restrict__ b, double* x, int* ready, int epoch, const int* __restrict__ perm,
    const int* __restrict__ pos, int* ticket, int n, unsigned max_sleep_ns, long long spin_limit, int* stalled) {
    pull_rounds<0>(rowptr, colidx, val, b, x, ready, epoch, perm, pos, ticket, n, max_sleep_ns, spin_limit, stalled);
}

extern "C" __global__ void __launch_bounds__(CHUNK, V4_BLOCKS_PER_SM) syncfree_pull_v4(
    const int* __restrict__ rowptr, const int* __restrict__ colidx, const double* __restrict__ val,
    const double* __restrict__ b, double* x, int* ready, int epoch, const int* __restrict__ perm,
    const int* __restrict__ pos, int* ticket, int n, unsigned max_sleep_ns, long long spin_limit, int* stalled) {
    pull_rounds<V4_CACHE>(rowptr, colidx, val, b, x, ready, epoch, perm, pos, ticket, n, max_sleep_ns, spin_limit,
                          stalled);
}

extern "C" __global__ void __launch_bounds__(CHUNK) level_analysis(
    const int* __restrict__ rowptr, const int* __restrict__ colidx, int* depth, int* ticket, int n,
    unsigned max_sleep_ns, long long spin_limit, int* stalled) {
    __shared__ int s_depth[CHUNK];
    __shared__ int base;
    const int t = threadIdx.x;
    while (next_chunk(ticket, &base, n)) {
        s_depth[t] = 0;
        __syncthreads();
        const int i = base + t;
        if (i < n) {
            const long long start = clock64();
            int deepest = 0;
            for (int p = rowptr[i], diag = rowptr[i + 1] - 1; p < diag; ++p) {
                const int c = colidx[p], l = c - base;
                int dc;
                if ((unsigned)l < CHUNK) {
                    while ((dc = *(volatile int*)&s_depth[l]) == 0 && !spun_out(start, spin_limit, stalled, i)) {}
                } else {
                    unsigned ns = 32;
                    for (int spins = 0; (dc = load_acquire(depth + c)) == 0; ++spins) {
                        if (spun_out(start, spin_limit, stalled, i)) break;
                        if (spins >= 8) back_off(ns, max_sleep_ns);
                    }
                }
                deepest = max(deepest, dc);
            }
            *(volatile int*)&s_depth[t] = deepest + 1;
            store_release(depth + i, deepest + 1);
        }
    }
}

// flags and payload: the two directions on separate 128-byte lines (flags[0], flags[32];
// payload[0], payload[16]); payload[32] gets the last value (2 x rounds when every hop carried
// its value), elapsed_ns[0] the loop's time. Flags start at 0.
extern "C" __global__ void hop_latency(double* payload, int* flags, int rounds, long long* elapsed_ns,
                                       long long spin_limit, int* stalled) {
    if (threadIdx.x != 0 || blockIdx.x > 1) return;
    const bool ping = blockIdx.x == 0;
    int* mine = flags + (ping ? 0 : 32);
    const int* theirs = flags + (ping ? 32 : 0);
    double* out = payload + (ping ? 0 : 16);
    const double* in = payload + (ping ? 16 : 0);
    const long long start = clock64();
    const unsigned long long t0 = global_ns();
    double v = 0.0;
    for (int k = 1; k <= rounds; ++k) {
        if (ping) {
            *out = v + 1.0;
            store_release(mine, k);
        }
        while (load_acquire(theirs) != k) {
            if (clock64() - start > spin_limit) {
                atomicCAS(stalled, -1, k);
                return;
            }
        }
        v = *(const volatile double*)in;
        if (!ping) {
            *out = v + 1.0;
            store_release(mine, k);
        }
    }
    if (ping) {
        elapsed_ns[0] = (long long)(global_ns() - t0);
        payload[32] = v;
    }
}
