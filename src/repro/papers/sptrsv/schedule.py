"""NumPy twins of the GPU kernels' schedules, and the dependency analysis they share.

- :func:`analyse`: each row's level (0 for rows with no dependency, else 1 + the deepest
  dependency), the level sets, and the critical path (the heaviest dependency chain, weighting a
  row by its non-zeros).
- :func:`row_levels` / :func:`level_order`: the GPU level analysis's twin (``level_analysis`` in
  sptrsv.cu: each row's level from its dependencies', row after row in natural order) and the
  level order, perm, level pointers and positions, computed alike by NumPy and CuPy (``xp``).
- :func:`levelset_solve`: the level-set kernel's schedule: one step per level, every row of the
  level at once, reading only earlier levels' x (CSR pull).
- :func:`syncfree_solve`: the synchronisation-free kernel's protocol (Liu et al. 2016, CSC push):
  a counter per row that the rows it depends on increment after adding their contribution to
  its left sum; a row runs only when its counter reaches its dependency count. The order is
  adversarial: each round runs a random subset of the ready rows and applies their pushes in a
  random order (``sequential=True`` runs one random ready row at a time).
- :func:`chunked_solve`: the v2 sync-free kernels' schedule (``syncfree_push``, ``syncfree_pull``):
  ``blocks`` persistent blocks take chunks of ``threads`` consecutive rows of the level order from a
  ticket, a chunk at a time; a dependency inside a chunk goes through the block's shared arrays,
  one between chunks through the global ones (push: sums and counters, CSC; pull: x and ready
  flags, CSR). Each tick every block runs a random subset of its chunk's ready rows (their
  pushes applied in a random order); a tick without progress is a deadlock and raises.
  :func:`v2_variant` is the rule that picks one of the two per matrix.
- :func:`warp_rounds` / :func:`warp_round_solve`: the v3 kernel's schedule (``syncfree_pull_v3``):
  v2 pull's chunks, each of ``threads // warp`` warps; a warp's lanes first gather their
  dependencies outside the warp (earlier warps of the chunk: shared flags set as each row is
  computed; other chunks: global flags, released once per warp after its rounds), then the warp
  runs rounds: every lane whose in-warp dependencies are all done computes. A row's round is
  1 + the latest round of its in-warp dependencies (:func:`warp_rounds`), whatever the timing;
  the trace records, per warp, the rows each round computed. Each tick every block advances a
  random subset of its chunk's warps that can move (one round, or the gathering); a tick without
  progress is a deadlock and raises.
- :func:`partition` / :func:`multigpu_solve`: the multi-GPU schedule: rows cut into k contiguous
  blocks of about equal non-zeros, one per GPU; each GPU's task pool hands its rows out in
  ascending order or by level (:func:`pool_orders`), ``grain`` rows per task, to ``workers``
  persistent warps; a push to a row
  another GPU owns is a remote atomic (counted). A tick lets every worker holding a ready task run
  it; a tick without progress while tasks remain is a deadlock and raises.

Every solver returns x in float64; the tests check them against SciPy's spsolve_triangular.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from repro.data.matrices import check_lower


@dataclass(frozen=True)
class Analysis:
    """The dependency structure of a lower-triangular L (rows in natural order)."""

    level: np.ndarray  # int32 per row
    perm: np.ndarray  # rows sorted by level (stable): the level sets back to back
    level_ptr: np.ndarray  # level k is perm[level_ptr[k]:level_ptr[k + 1]]
    critical_path: int  # non-zeros on the heaviest dependency chain
    need: np.ndarray  # int32 per row: its number of dependencies (off-diagonal non-zeros)

    @property
    def levels(self) -> int:
        return len(self.level_ptr) - 1


def _gather(indptr: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(owner, entry) for every stored entry of the given compressed columns (or rows), vectorised:
    owner is the column, entry the position in indices/data."""
    starts, ends = indptr[cols], indptr[cols + 1]
    counts = ends - starts
    owner = np.repeat(cols, counts)
    entry = np.repeat(starts - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
    return owner, entry


def analyse(L: sp.csr_matrix) -> Analysis:
    """Levels, level sets, critical path and dependency counts, by frontier sweeps (Kahn's
    algorithm, one vectorised step per level)."""
    L = check_lower(L)
    n = L.shape[0]
    weight = np.diff(L.indptr).astype(np.int64)
    need = (weight - 1).astype(np.int32)
    below = sp.tril(L, k=-1).tocsc()  # column j lists the rows that depend on j
    below.sort_indices()
    remaining = need.astype(np.int64).copy()
    level = np.zeros(n, dtype=np.int32)
    path = weight.copy()  # heaviest chain ending at each row, known once its dependencies are done
    frontier = np.flatnonzero(remaining == 0)
    k = 0
    while frontier.size:
        level[frontier] = k
        src, entry = _gather(below.indptr, frontier)
        dst = below.indices[entry]
        if dst.size:
            order = np.argsort(dst, kind="stable")
            touched, starts, counts = np.unique(dst[order], return_index=True, return_counts=True)
            deepest = np.maximum.reduceat(path[src[order]], starts)
            path[touched] = np.maximum(path[touched], deepest + weight[touched])
            remaining[touched] -= counts
            frontier = touched[remaining[touched] == 0]
        else:
            frontier = frontier[:0]
        k += 1
    perm = np.argsort(level, kind="stable").astype(np.int32)
    level_ptr = np.searchsorted(level[perm], np.arange(k + 1)).astype(np.int64)
    return Analysis(level=level, perm=perm, level_ptr=level_ptr, critical_path=int(path.max()), need=need)


def row_levels(L: sp.csr_matrix) -> np.ndarray:
    """Each row's level, as ``level_analysis`` computes it: 1 + the deepest of its dependencies'
    levels (0 without), row after row in natural order (a row's dependencies are earlier rows)."""
    L = check_lower(L)
    level = np.zeros(L.shape[0], dtype=np.int32)
    for i in range(L.shape[0]):
        deps = L.indices[L.indptr[i]:L.indptr[i + 1] - 1]
        level[i] = level[deps].max() + 1 if deps.size else 0
    return level


def level_order(level, xp=np):
    """(perm, level_ptr, pos) of per-row levels with the array module ``xp`` (NumPy or CuPy): the
    rows sorted by level, ascending row within a level (as :func:`analyse`'s stable sort), the
    level sets' bounds, and each row's place in that order."""
    n = level.shape[0]
    rows = xp.arange(n, dtype=xp.int64)
    perm = xp.argsort(level.astype(xp.int64) * n + rows).astype(xp.int32)  # unique keys: stable by row
    levels = int(level.max()) + 1 if n else 0
    level_ptr = xp.searchsorted(level[perm], xp.arange(levels + 1)).astype(xp.int64)
    pos = xp.empty(n, dtype=xp.int32)
    pos[perm] = xp.arange(n, dtype=xp.int32)
    return perm, level_ptr, pos


def stats(L: sp.csr_matrix, analysis: Analysis | None = None) -> dict:
    """rows, nnz, levels, critical path, mean and max non-zeros per row."""
    a = analysis or analyse(L)
    per_row = np.diff(L.indptr)
    return {"rows": L.shape[0], "nnz": int(L.nnz), "levels": a.levels, "critical_path": a.critical_path,
            "nnz_per_row": float(per_row.mean()), "max_nnz_row": int(per_row.max()),
            "mean_level_width": L.shape[0] / a.levels}


def check_rhs(L: sp.csr_matrix, b: np.ndarray) -> np.ndarray:
    b = np.asarray(b, dtype=np.float64)
    if b.shape != (L.shape[0],):
        raise ValueError(f"b: expected shape ({L.shape[0]},), got {b.shape}")
    if not np.isfinite(b).all():
        raise ValueError(f"b: non-finite value at row {int(np.argmax(~np.isfinite(b)))}")
    return b


def levelset_solve(L: sp.csr_matrix, b: np.ndarray, analysis: Analysis | None = None) -> np.ndarray:
    """x with L x = b, one level at a time (the level-set kernel's order)."""
    L = check_lower(L)
    b = check_rhs(L, b)
    a = analysis or analyse(L)
    d = L.diagonal()
    strict = sp.tril(L, k=-1).tocsr()[a.perm]  # rows in level order
    x = np.zeros(L.shape[0])
    for k in range(a.levels):
        lo, hi = a.level_ptr[k], a.level_ptr[k + 1]
        rows = a.perm[lo:hi]
        x[rows] = (b[rows] - strict[lo:hi] @ x) / d[rows]
    return x


def syncfree_solve(L: sp.csr_matrix, b: np.ndarray, seed: int = 0, run_fraction: float = 0.5,
                   sequential: bool = False) -> np.ndarray:
    """x with L x = b by the counter protocol, in an adversarial order (see the module doc)."""
    L = check_lower(L)
    b = check_rhs(L, b)
    if not 0 < run_fraction <= 1:
        raise ValueError(f"run_fraction must be in (0, 1], got {run_fraction}")
    rng = np.random.default_rng(seed)
    n = L.shape[0]
    d = L.diagonal()
    csc = sp.tril(L, k=-1).tocsc()
    need = (np.diff(L.indptr) - 1).astype(np.int64)
    count = np.zeros(n, dtype=np.int64)
    left_sum = np.zeros(n)
    x = np.full(n, np.nan)
    done = np.zeros(n, dtype=bool)
    ready = np.flatnonzero(need == 0)
    while ready.size:
        if sequential:
            run = ready[[rng.integers(ready.size)]]
        else:
            pick = rng.random(ready.size) < run_fraction
            pick[rng.integers(ready.size)] = True  # at least one runs
            run = ready[pick]
        x[run] = (b[run] - left_sum[run]) / d[run]
        done[run] = True
        src, entry = _gather(csc.indptr, run)
        dst = csc.indices[entry]
        contrib = csc.data[entry] * x[src]
        shuffle = rng.permutation(dst.size)  # atomics land in any order
        np.add.at(left_sum, dst[shuffle], contrib[shuffle])
        np.add.at(count, dst, 1)
        waiting = ready[~np.isin(ready, run)]
        newly = np.unique(dst)
        newly = newly[count[newly] == need[newly]]
        ready = np.union1d(waiting, newly)
    if not done.all():
        raise RuntimeError(f"sync-free schedule stalled with {int((~done).sum())} rows unsolved")
    return x


PULL_MAX_ROW_NNZ = 8.0  # assumed: the record's per-matrix times of both arms judge it


def v2_variant(nnz_per_row: float) -> str:
    """The v2 sync-free kernel for a matrix: ``pull`` for short rows (a thread reads its few
    dependencies, no atomics), ``push`` for long ones (a long row's dependencies are added by their
    own threads instead of read one after another by one thread)."""
    return "pull" if nnz_per_row <= PULL_MAX_ROW_NNZ else "push"


@dataclass
class ChunkTrace:
    """What the chunked schedule did: dependencies through shared and global memory, ticks."""

    shared_deps: int = 0
    global_deps: int = 0
    ticks: int = 0
    chunks: int = 0

    @property
    def shared_fraction(self) -> float:
        total = self.shared_deps + self.global_deps
        return self.shared_deps / total if total else 0.0


def local_need(indptr, indices, pos, threads: int, xp=np):
    """Per row, how many of its dependencies sit in its own chunk of ``threads`` rows of the level
    order (CSR of a lower L with the diagonal last, NumPy or CuPy arrays): the push kernel waits for
    these in shared memory and for the rest in global memory."""
    rows = xp.searchsorted(indptr, xp.arange(indices.shape[0]), side="right") - 1
    same = (pos[rows] // threads == pos[indices] // threads) & (indices != rows)
    ends = xp.concatenate([xp.zeros(1, dtype=xp.int64), xp.cumsum(same, dtype=xp.int64)])  # no empty-bincount case
    return (ends[indptr[1:]] - ends[indptr[:-1]]).astype(xp.int32)


def shared_fraction(L: sp.csr_matrix, pos: np.ndarray, threads: int) -> float:
    """The share of dependencies between two rows of the same chunk (resolved in shared memory)."""
    L = check_lower(L)
    deps = L.nnz - L.shape[0]
    return float(local_need(L.indptr, L.indices, pos, threads).sum() / deps) if deps else 0.0


def chunked_solve(L: sp.csr_matrix, b: np.ndarray, variant: str = "push", blocks: int = 4, threads: int = 32,
                  seed: int = 0, run_fraction: float = 0.5,
                  analysis: Analysis | None = None) -> tuple[np.ndarray, ChunkTrace]:
    """x with L x = b by the v2 kernels' chunked schedule (see the module doc)."""
    L = check_lower(L)
    b = check_rhs(L, b)
    if variant not in ("push", "pull"):
        raise ValueError(f"v2 variant must be 'push' or 'pull', got {variant!r}")
    if blocks < 1 or threads < 1 or not 0 < run_fraction <= 1:
        raise ValueError(f"blocks and threads must be >= 1 and run_fraction in (0, 1], got {blocks}, {threads}, "
                         f"{run_fraction}")
    a = analysis or analyse(L)
    perm, pos = a.perm, level_order(a.level)[2]
    rng = np.random.default_rng(seed)
    n = L.shape[0]
    d = L.diagonal()
    strict = sp.tril(L, k=-1)
    csc, csr = strict.tocsc(), strict.tocsr()
    need = a.need.astype(np.int64)
    near = local_need(L.indptr, L.indices, pos, threads)
    x = np.full(n, np.nan)  # global x (pull reads it; push only writes it)
    g_sum, g_count = np.zeros(n), np.zeros(n, dtype=np.int64)  # push
    g_ready = np.zeros(n, dtype=bool)  # pull
    held: list[dict | None] = [None] * blocks
    ticket, solved = 0, 0
    trace = ChunkTrace()
    while solved < n:
        progress = False
        for blk in rng.permutation(blocks):
            c = held[blk]
            if c is None or c["done"].all():
                if ticket * threads >= n:
                    held[blk] = None
                    continue
                base = ticket * threads
                rows = perm[base:base + threads]
                c = held[blk] = {"base": base, "rows": rows, "done": np.zeros(rows.size, dtype=bool),
                                 "sum": np.zeros(rows.size), "count": np.zeros(rows.size, dtype=np.int64),
                                 "x": np.full(rows.size, np.nan), "ready": np.zeros(rows.size, dtype=bool)}
                ticket += 1
                trace.chunks += 1
                progress = True
            base, rows = c["base"], c["rows"]
            todo = np.flatnonzero(~c["done"])
            if variant == "push":  # its chunk's dependencies in shared memory, the rest in global
                r = rows[todo]
                ok = (c["count"][todo] == near[r]) & (g_count[r] == need[r] - near[r])
            else:
                src, entry = _gather(csr.indptr, rows[todo])
                local = pos[csr.indices[entry]] - base
                inside = (local >= 0) & (local < threads)
                dep_ok = np.where(inside, c["ready"][np.clip(local, 0, threads - 1)], g_ready[csr.indices[entry]])
                blocked = np.zeros(n, dtype=bool)
                blocked[src[~dep_ok]] = True
                ok = ~blocked[rows[todo]]
            ready = todo[ok]
            if not ready.size:
                continue
            pick = rng.random(ready.size) < run_fraction
            pick[rng.integers(ready.size)] = True
            run = ready[pick]
            r = rows[run]
            if variant == "push":
                xr = (b[r] - g_sum[r] - c["sum"][run]) / d[r]
                x[r] = xr
                src, entry = _gather(csc.indptr, r)
                dst, contrib = csc.indices[entry], csc.data[entry] * x[src]
                inside = (pos[dst] >= base) & (pos[dst] - base < threads)
                shuffle = rng.permutation(dst.size)  # atomics land in any order
                dst, contrib, inside = dst[shuffle], contrib[shuffle], inside[shuffle]
                np.add.at(c["sum"], pos[dst[inside]] - base, contrib[inside])
                np.add.at(c["count"], pos[dst[inside]] - base, 1)
                np.add.at(g_sum, dst[~inside], contrib[~inside])
                np.add.at(g_count, dst[~inside], 1)
            else:
                src, entry = _gather(csr.indptr, r)
                dep = csr.indices[entry]
                local = pos[dep] - base
                inside = (local >= 0) & (local < threads)
                xdep = np.where(inside, c["x"][np.clip(local, 0, threads - 1)], x[dep])  # shared copy or global x
                sums = np.bincount(src, weights=csr.data[entry] * xdep, minlength=n)[r]
                xr = (b[r] - sums) / d[r]
                x[r] = xr
                g_ready[r] = True
                c["x"][run] = xr
                c["ready"][run] = True
            trace.shared_deps += int(inside.sum())
            trace.global_deps += int((~inside).sum())
            c["done"][run] = True
            solved += run.size
            progress = True
        trace.ticks += 1
        if not progress:
            raise RuntimeError(f"chunked {variant} schedule deadlocked after {trace.ticks} ticks with {n - solved} "
                               "rows unsolved")
    return x, trace


def warp_rounds(L: sp.csr_matrix, pos: np.ndarray, warp: int = 32) -> np.ndarray:
    """Per row, the round of its warp in which ``syncfree_pull_v3`` computes it: 1 + the latest
    round of its dependencies in the same warp (``warp`` consecutive positions of the level order
    ``pos``), 1 without any."""
    L = check_lower(L)
    if warp < 1:
        raise ValueError(f"warp must be >= 1, got {warp}")
    strict = sp.tril(L, k=-1).tocsr()
    n = L.shape[0]
    perm = np.empty(n, dtype=np.int64)
    perm[pos] = np.arange(n)
    rnd = np.zeros(n, dtype=np.int64)
    for p in range(n):
        r = perm[p]
        deps = strict.indices[strict.indptr[r]:strict.indptr[r + 1]]
        same = deps[pos[deps] // warp == p // warp]
        if (pos[deps] >= p).any():
            raise ValueError(f"row {r} depends on a row at or after its own position {p}: not a level order")
        rnd[r] = 1 + (rnd[same].max() if same.size else 0)
    return rnd


@dataclass
class WarpRoundTrace:
    """What the v3 schedule did: per warp (chunk index, warp of the chunk) the rows each round
    computed; dependencies resolved in the warp's rounds, through shared and global memory."""

    rounds: dict[tuple[int, int], list[np.ndarray]] = field(default_factory=dict)
    warp_deps: int = 0
    shared_deps: int = 0
    global_deps: int = 0
    ticks: int = 0
    chunks: int = 0

    @property
    def rounds_per_warp(self) -> dict[tuple[int, int], int]:
        return {k: len(v) for k, v in self.rounds.items()}

    @property
    def warp_fraction(self) -> float:
        total = self.warp_deps + self.shared_deps + self.global_deps
        return self.warp_deps / total if total else 0.0


def warp_round_solve(L: sp.csr_matrix, b: np.ndarray, blocks: int = 4, threads: int = 256, warp: int = 32,
                     seed: int = 0, run_fraction: float = 0.5,
                     analysis: Analysis | None = None) -> tuple[np.ndarray, WarpRoundTrace]:
    """x with L x = b by the v3 kernel's warp-round schedule (see the module doc)."""
    L = check_lower(L)
    b = check_rhs(L, b)
    if blocks < 1 or warp < 1 or threads < 1 or threads % warp or not 0 < run_fraction <= 1:
        raise ValueError(f"blocks, warp and threads must be >= 1 with threads a multiple of warp, run_fraction in "
                         f"(0, 1]; got {blocks}, {warp}, {threads}, {run_fraction}")
    a = analysis or analyse(L)
    perm, pos = a.perm, level_order(a.level)[2]
    rng = np.random.default_rng(seed)
    n = L.shape[0]
    d = L.diagonal()
    strict = sp.tril(L, k=-1).tocsr()
    x = np.full(n, np.nan)  # global x
    g_ready = np.zeros(n, dtype=bool)  # global flags: a warp releases its rows after its last round
    held: list[dict | None] = [None] * blocks
    ticket, solved = 0, 0
    trace = WarpRoundTrace()

    def new_warp(chunk: dict, w: int) -> dict:
        base, lanes = chunk["base"], []
        for q in range(w * warp, min((w + 1) * warp, chunk["rows"].size)):
            r = chunk["rows"][q]
            deps = strict.indices[strict.indptr[r]:strict.indptr[r + 1]]
            vals = strict.data[strict.indptr[r]:strict.indptr[r + 1]]
            local = pos[deps] - base
            kind = np.where((local >= 0) & (local < threads), np.where(local // warp == w, 0, 1), 2)
            lanes.append({"q": q, "row": r, "deps": deps, "vals": vals, "local": local, "kind": kind,
                          "wait": local[kind == 0] - w * warp})
        return {"w": w, "state": "gather", "lanes": lanes, "done": np.zeros(len(lanes), dtype=bool),
                "s": np.zeros(len(lanes)), "key": (chunk["index"], w)}

    def gathered(chunk: dict, wp: dict) -> bool:
        for ln in wp["lanes"]:
            k = ln["kind"]
            if not chunk["ready"][ln["local"][k == 1]].all() or not g_ready[ln["deps"][k == 2]].all():
                return False
        return True

    def step(chunk: dict, wp: dict) -> int:
        """One move of a warp: its gathering, or one round. Returns the rows computed."""
        nonlocal solved
        if wp["state"] == "gather":
            for j, ln in enumerate(wp["lanes"]):
                k = ln["kind"]
                xdep = np.where(k == 1, chunk["x"][np.clip(ln["local"], 0, threads - 1)], x[ln["deps"]])
                far = k != 0
                wp["s"][j] = b[ln["row"]] - float(np.dot(ln["vals"][far], xdep[far]))
                trace.shared_deps += int((k == 1).sum())
                trace.global_deps += int((k == 2).sum())
            wp["state"] = "rounds"
            trace.rounds[wp["key"]] = []
            return 0
        done = wp["done"]
        go = [j for j, ln in enumerate(wp["lanes"]) if not done[j] and done[ln["wait"]].all()]
        xs = []
        for j in go:  # every lane of the round reads shared x as it was before the round
            ln = wp["lanes"][j]
            near = ln["kind"] == 0
            xs.append((wp["s"][j] - float(np.dot(ln["vals"][near], chunk["x"][ln["local"][near]]))) / d[ln["row"]])
            trace.warp_deps += int(near.sum())
        for j, xi in zip(go, xs):
            ln = wp["lanes"][j]
            chunk["x"][ln["q"]] = xi
            chunk["ready"][ln["q"]] = True  # the shared flag, per row
            x[ln["row"]] = xi
        done[go] = True
        trace.rounds[wp["key"]].append(np.array([wp["lanes"][j]["row"] for j in go], dtype=np.int64))
        solved += len(go)
        if done.all():
            g_ready[[ln["row"] for ln in wp["lanes"]]] = True  # one release for the warp's rows
            wp["state"] = "done"
        return len(go)

    while solved < n:
        progress = False
        for blk in rng.permutation(blocks):
            c = held[blk]
            if c is None or all(wp["state"] == "done" for wp in c["warps"]):
                if ticket * threads >= n:
                    held[blk] = None
                    continue
                base = ticket * threads
                rows = perm[base:base + threads]
                c = held[blk] = {"index": ticket, "base": base, "rows": rows, "x": np.full(threads, np.nan),
                                 "ready": np.zeros(threads, dtype=bool)}
                c["warps"] = [new_warp(c, w) for w in range(-(-rows.size // warp))]  # warps past n do nothing
                ticket += 1
                trace.chunks += 1
                progress = True
            can = [wp for wp in c["warps"] if wp["state"] == "rounds" or (wp["state"] == "gather" and gathered(c, wp))]
            if not can:
                continue
            pick = rng.random(len(can)) < run_fraction
            pick[rng.integers(len(can))] = True
            for wp, go in zip(can, pick):
                if go:
                    step(c, wp)
                    progress = True
        trace.ticks += 1
        if not progress:
            raise RuntimeError(f"warp-round schedule deadlocked after {trace.ticks} ticks with {n - solved} rows "
                               "unsolved")
    return x, trace


def partition(L: sp.csr_matrix, k: int) -> np.ndarray:
    """Row boundaries (k + 1 of them) of k contiguous blocks of about equal non-zeros."""
    n = L.shape[0]
    if not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"the GPU count must be a positive integer, got {k!r}")
    if k > n:
        raise ValueError(f"{k} GPUs for a matrix of {n} rows: each GPU needs at least one row")
    targets = L.nnz * np.arange(1, k) / k
    cuts = np.searchsorted(L.indptr[1:], targets, side="left") + 1
    bounds = np.concatenate([[0], cuts, [n]]).astype(np.int64)
    bounds[1:-1] = np.clip(bounds[1:-1], np.arange(1, k), n - np.arange(k - 1, 0, -1))
    return np.maximum.accumulate(bounds)


@dataclass
class MultiGPUTrace:
    """What the multi-GPU schedule did: per GPU its rows, local and remote pushes; ticks taken."""

    bounds: np.ndarray
    local_pushes: np.ndarray
    remote_pushes: np.ndarray
    ticks: int = 0
    tasks: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @property
    def remote_fraction(self) -> float:
        total = int(self.local_pushes.sum() + self.remote_pushes.sum())
        return float(self.remote_pushes.sum() / total) if total else 0.0


def pool_orders(L: sp.csr_matrix, bounds: np.ndarray, order: str, analysis: Analysis | None = None) -> list[np.ndarray]:
    """Each GPU's rows in the order its pool hands them out: "natural" (ascending) or "levels"
    (by level, ascending within a level)."""
    if order not in ("natural", "levels"):
        raise ValueError(f"pool order must be 'natural' or 'levels', got {order!r}")
    blocks = [np.arange(bounds[g], bounds[g + 1]) for g in range(len(bounds) - 1)]
    if order == "natural":
        return blocks
    level = (analysis or analyse(L)).level
    return [rows[np.argsort(level[rows], kind="stable")] for rows in blocks]


def multigpu_solve(L: sp.csr_matrix, b: np.ndarray, k: int, workers: int = 4, grain: int = 1,
                   seed: int = 0, order: str = "natural",
                   analysis: Analysis | None = None) -> tuple[np.ndarray, MultiGPUTrace]:
    """x with L x = b on k virtual GPUs with per-GPU task pools (see the module doc)."""
    L = check_lower(L)
    b = check_rhs(L, b)
    if workers < 1 or grain < 1:
        raise ValueError(f"workers and grain must be >= 1, got workers={workers}, grain={grain}")
    bounds = partition(L, k)
    queues = pool_orders(L, bounds, order, analysis)
    rng = np.random.default_rng(seed)
    n = L.shape[0]
    owner = np.repeat(np.arange(k), np.diff(bounds))
    d = L.diagonal()
    csc = sp.tril(L, k=-1).tocsc()
    csc.sort_indices()
    need = (np.diff(L.indptr) - 1).astype(np.int64)
    count = np.zeros(n, dtype=np.int64)
    left_sum = np.zeros(n)
    x = np.full(n, np.nan)
    next_pos = np.zeros(k, dtype=np.int64)  # each GPU's pool: the next position of its order it hands out
    held: list[list[list[int]]] = [[[] for _ in range(workers)] for _ in range(k)]  # rows left of each task
    local, remote = np.zeros(k, dtype=np.int64), np.zeros(k, dtype=np.int64)
    tasks = np.zeros(k, dtype=np.int64)
    solved, ticks = 0, 0
    while solved < n:
        progress = False
        for g in rng.permutation(k):  # GPUs and their warps in a random order each tick
            for w in rng.permutation(workers):
                task = held[g][w]
                if not task and next_pos[g] < queues[g].size:
                    hi = min(next_pos[g] + grain, queues[g].size)
                    task.extend(queues[g][next_pos[g]:hi].tolist())
                    next_pos[g] = hi
                    tasks[g] += 1
                while task and count[task[0]] == need[task[0]]:  # a warp runs its task's rows in order
                    i = task.pop(0)
                    x[i] = (b[i] - left_sum[i]) / d[i]
                    lo, hi = csc.indptr[i], csc.indptr[i + 1]
                    dst = csc.indices[lo:hi]
                    left_sum[dst] += csc.data[lo:hi] * x[i]
                    count[dst] += 1
                    far = owner[dst] != g
                    remote[g] += int(far.sum())
                    local[g] += int((~far).sum())
                    solved += 1
                    progress = True
        ticks += 1
        if not progress:
            raise RuntimeError(f"multi-GPU schedule deadlocked after {ticks} ticks with {n - solved} rows unsolved")
    return x, MultiGPUTrace(bounds=bounds, local_pushes=local, remote_pushes=remote, ticks=ticks, tasks=tasks)
