"""Pick the fastest way to run one TSM2 shape (one of our kernel variants, or cuBLAS), and run it.

For a (kind, dtype, m, k, n) shape the tuner times every candidate variant (tsm2.candidates) and
cuBLAS twice (through torch and through CuPy) in two regimes, and caches the times in a JSON file
keyed by GPU name and shape:

- warm: the same operands back to back, so an operand that fits stays in L2 between calls (what a
  caller looping over one matrix meets);
- cold: calls rotated over copies of the operands holding more bytes than L2, so each reads HBM
  (what a caller streaming over many matrices meets, and what the paper's benchmark times).

The choice rule (`deciding_regimes`, `decide`): the caller's hint `expect="warm"|"cold"` names the
regime that decides; without one, the operand bytes (A + B + C) against the card's L2 size do: up
to half of L2, warm; above twice L2, cold; in between (where residency depends on the L2's
partitions and on what else runs) both, and ours must beat cuBLAS in each. A candidate's score is
its worst ratio, over the deciding regimes, to the faster cuBLAS route of that regime; our
best-scoring variant runs if it scores below (1 - margin) times the best cuBLAS route's, else
cuBLAS does (margin 0 in the paper benchmarks, DISPATCH_MARGIN = 5% in dispatch).

`dispatch` (and `matmul`, which picks TSM2R or TSM2L and takes any operands) runs that choice on
the caller's arrays. Its cuBLAS path is the caller's own library: `torch.mm` for torch tensors,
CuPy's `@` routine for CuPy arrays, with no conversion, copy or layout change; the route and the
variant are looked up once per operand signature (library, shapes, strides, dtype, device), so a
repeated call costs one dictionary lookup before the library call or the kernel launch. A third
candidate is cuBLAS bound like our kernels (blas.BOUND: the GEMM on a handle of ours with its
arguments fixed, pointers read per call): where a call's host cost exceeds its device time, it
skips the library's per-call work; it is timed, checked and chosen exactly like our variants.

dispatch tunes a shape per call path (call_path: the caller's library, B's layout, out given or
allocated per call) and times exactly the call it will make (call_timers): the caller's own library
call against our bound launch (tsm2.bind) on the caller's operands, out as given. Our most promising
variants are then re-timed against that call with interleaved batches (Tuner.choose's `confirm`),
and ours runs only where a re-timed variant beats it by DISPATCH_MARGIN in every deciding regime and,
unless the caller named the regime (`expect`), is no slower than it in the other (the guard): under
the tuner's own measurement a choice is never slower than the fallback, warm or cold. Timing another
call than the caller's (C preallocated, cuBLAS into a column-major C, another B layout) can pick our
kernel where the caller's call is faster.

Timers are the caller's. `dispatch` uses back_to_back_time: calls issued back to back, host clock
until the device is idle, so a call whose host cost exceeds its device time is charged for it (a
small shape's cuBLAS call can win that way). The paper benchmarks (experiment.py) use time_queued:
CUDA events around each call, calls queued behind a short GPU spin (torch.cuda._sleep) so the
CPU's launch overhead overlaps GPU work and the events measure device time; warm-up first, then
the median of repeats chosen to fill a target time.

Before a variant of ours is timed, its output is checked once against cuBLAS on the same operands
(output_checker): a variant whose relative max error exceeds the tolerance (twice bench's fp64
tolerance, since the cuBLAS reference carries its own rounding error) is recorded in Choice.errors
with its error, logged, and never chosen, exactly like a variant that fails to launch.

The choice logic (Tuner.choose, decide) takes the timers and the checker as arguments: tests drive
it with fakes.
"""

from __future__ import annotations

import functools
import logging
import math
import operator
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from repro.tuning import ChoiceCache
from repro import kernels
from repro.papers.tsm2x import blas, tsm2

CUBLAS = ("cublas_torch", "cublas_cupy")
NATIVE = {"torch": "cublas_torch", "cupy": "cublas_cupy"}  # the caller's library -> its cuBLAS route
REGIMES = ("warm", "cold")
# dispatch runs ours only where it beats the caller's own cuBLAS call by this fraction in every deciding
# regime (re-timed against it, interleaved); the paper benchmarks compare at margin 0
DISPATCH_MARGIN = 0.05
CONFIRM_ROUNDS = 5  # interleaved batches per confirmed candidate and regime (median)
# 5: dispatch's entries time the bound cuBLAS call (blas.BOUND) too; 4: dispatch's entries keyed by call path (library, B layout, out given) with confirmed times;
# 3: times per regime (warm and cold), the choice made from them at lookup; 2: verified choices,
# cold times only (older caches may hold wrong kernels)
CACHE_VERSION = 5
log = logging.getLogger("repro")


def shape_key(kind: str, dtype: str, m: int, k: int, n: int, path: str = "") -> str:
    """The cache key of a shape; `path` (call_path) names the call dispatch timed, "" the paper
    benchmarks' (device times of the kernels and both cuBLAS routes into a column-major C)."""
    key = f"tsm2{kind}/{dtype}/m{m}/k{k}/n{n}"
    return f"{key}/{path}" if path else key


def deciding_regimes(nbytes: int, l2_bytes: int, expect: str | None = None) -> tuple[str, ...]:
    """The regimes whose times decide for a call on `nbytes` of operands (A + B + C) on a card with
    `l2_bytes` of L2: the caller's `expect` if given, else warm up to half of L2 (the operands stay
    resident between back-to-back calls), cold above twice L2 (they cannot), both in between."""
    if expect is not None:
        if expect not in REGIMES:
            raise ValueError(f"expect must be one of {REGIMES} or None, got {expect!r}")
        return (expect,)
    if nbytes <= l2_bytes // 2:
        return ("warm",)
    if nbytes > 2 * l2_bytes:
        return ("cold",)
    return REGIMES


def cublas_base(times_us: Mapping[str, Mapping[str, float]], regimes: Sequence[str]) -> dict[str, float]:
    """Per regime, the faster cuBLAS route's time (1 us where none ran): what scores divide by."""
    return {r: min((times_us[r][c] for c in CUBLAS if c in times_us[r]), default=1.0) for r in regimes}


def decide(times_us: Mapping[str, Mapping[str, float]], regimes: Sequence[str], margin: float = 0.0,
           only: Sequence[str] | None = None, guard: Sequence[str] = ()) -> tuple[str, str | None, str]:
    """(choice, best_variant, best_cublas) from per-regime times (us) under the deciding regimes.

    A candidate's score is its largest ratio, over `regimes`, to the faster cuBLAS route of that
    regime (to 1 us where no cuBLAS route ran); only candidates timed in every regime count, and of
    ours only those in `only` where given (dispatch: the re-timed ones). Ours runs where its best
    score is below (1 - margin) times the best cuBLAS route's (a tie is not a win): at margin 0.05,
    ours must be at least 5% faster than cuBLAS in every deciding regime. In the `guard` regimes
    (dispatch: the timed regimes that do not decide) ours must also be no slower than that route.
    """
    names = set.intersection(*(set(times_us.get(r, {})) for r in regimes))
    base = cublas_base(times_us, regimes)

    def score(name: str) -> float:
        return max(times_us[r][name] / base[r] for r in regimes)

    ours = sorted(x for x in names if x not in CUBLAS and (only is None or x in only))
    routes = [c for c in CUBLAS if c in names]
    best_variant = min(ours, key=score) if ours else None
    best_cublas = min(routes, key=score) if routes else CUBLAS[0]
    if best_variant is not None and (not routes or score(best_variant) < (1 - margin) * score(best_cublas)):
        guarded = [r for r in guard if best_variant in times_us.get(r, {}) and best_cublas in times_us[r]]
        if all(times_us[r][best_variant] <= times_us[r][best_cublas] for r in guarded):
            return best_variant, best_variant, best_cublas
    return best_cublas, best_variant, best_cublas


@dataclass
class Choice:
    """The tuner's verdict for one shape under the deciding regimes: what to run, and the times (us,
    per regime and candidate) it was based on."""

    key: str
    times_us: dict[str, dict[str, float]]  # regime -> candidate -> median us
    errors: dict[str, str] = field(default_factory=dict)  # candidates that failed to run or gave wrong results
    # regime -> the candidates re-timed there, interleaved (their times_us are those); where set, only
    # our confirmed variants may be chosen
    confirmed: dict[str, list[str]] = field(default_factory=dict)
    regimes: tuple[str, ...] = ("cold",)
    margin: float = 0.0  # ours must beat cuBLAS by this fraction (decide)
    guard: bool = False  # and be no slower than it in the timed regimes that do not decide
    choice: str = field(init=False)  # a variant name, or one of CUBLAS
    best_variant: str | None = field(init=False)  # our best-scoring variant (None if all failed)
    best_cublas: str = field(init=False)

    def __post_init__(self) -> None:
        self.regimes = tuple(self.regimes)
        only = None
        if self.confirmed:  # a variant confirmed in every deciding regime
            only = set.intersection(*(set(self.confirmed.get(r, ())) for r in self.regimes))
        guard = [r for r in self.times_us if r not in self.regimes] if self.guard else ()
        self.choice, self.best_variant, self.best_cublas = decide(self.times_us, self.regimes, self.margin, only, guard)

    @property
    def fallback(self) -> bool:
        return self.choice in CUBLAS

    def measured(self) -> dict:
        """What the cache keeps: the measurements, not the verdict (it depends on the regimes asked)."""
        kept = {"key": self.key, "times_us": self.times_us, "errors": self.errors}
        return kept | {"confirmed": self.confirmed} if self.confirmed else kept


class Tuner:
    """Times candidates per shape and remembers their times in `cache_path` (JSON, or None); keeps the
    routes `dispatch` resolved, per operand signature, in memory."""

    def __init__(self, cache_path: Path | None, gpu_name: str):
        self.gpu_name = gpu_name
        self.cache = ChoiceCache(cache_path, gpu_name, CACHE_VERSION)
        self.routes: dict[tuple, tuple[str, Choice | None]] = {}

    def lookup(self, kind: str, dtype: str, m: int, k: int, n: int,
               regimes: Sequence[str] = ("cold",), path: str = "", margin: float = 0.0,
               guard: bool = False) -> Choice | None:
        """The cached verdict under `regimes` for the call `path` (shape_key), or None where any of
        them was not timed."""
        entry = self.cache.get(shape_key(kind, dtype, m, k, n, path))
        if entry is None or not all(r in entry["times_us"] for r in regimes):
            return None
        return Choice(**entry, regimes=tuple(regimes), margin=margin, guard=guard)

    def choose(self, kind: str, dtype: str, m: int, k: int, n: int, timers: Mapping[str, Callable[[str], float]],
               check: Callable[[str], float] | None = None, tol: float | None = None,
               regimes: Sequence[str] = ("cold",), routes: Sequence[str] = CUBLAS, margin: float = 0.0,
               confirm: Callable[[Sequence[str], str], Mapping[str, float]] | None = None,
               path: str = "", guard: bool = False, extra: Sequence[str] = ()) -> Choice:
        """The cached verdict under `regimes`, or time every candidate with each timers[regime](name)
        -> seconds (every regime in `timers`, which must include `regimes`), cache the times and decide.

        check(name) -> relative max error of our variant `name` against cuBLAS on the same
        operands (see output_checker); a variant above `tol` (default check_tolerance(dtype, k))
        or with a non-finite error is recorded in errors and never timed nor chosen. `routes`: the
        cuBLAS routes timed (dispatch: the caller's own). `margin`, `guard`: see decide and Choice.
        `extra`: candidates timed and chosen like our variants (dispatch: blas.BOUND, the bound cuBLAS
        call), checked, re-timed and held to the margin as they are.

        confirm(names, regime) -> {name: seconds}: where given, the sweep's most promising variants
        (the best two by score under `regimes`, and the best of each regime alone) are re-timed with
        the routes, interleaved, in every timed regime; those times replace the sweep's (whose
        minimum over many candidates is biased low by noise) and only those variants may be chosen.
        """
        cached = self.lookup(kind, dtype, m, k, n, regimes, path, margin, guard)
        if cached is not None:
            return cached
        missing = [r for r in regimes if r not in timers]
        if missing:
            raise ValueError(f"no timer for the deciding regime(s) {missing}; timers: {sorted(timers)}")
        key = shape_key(kind, dtype, m, k, n, path)
        if tol is None:
            tol = check_tolerance(dtype, k)
        ours = [v.name for v in tsm2.candidates(kind, dtype, k, n)] + list(extra)
        times: dict[str, dict[str, float]] = {r: {} for r in timers}
        errors: dict[str, str] = {}
        for name in ours + list(routes):
            try:
                if check is not None and name not in CUBLAS:
                    err = float(check(name))
                    if not err <= tol:  # NaN (unwritten or garbage elements) counts as wrong
                        errors[name] = f"WrongResult: relative max error {err:.3g} vs cuBLAS > tolerance {tol:.3g}"
                        log.warning("tuner: %s is wrong on %s: %s", name, key, errors[name])
                        continue
                measured = {r: timer(name) * 1e6 for r, timer in timers.items()}
            except Exception as exc:  # a variant that cannot launch here must not stop the others
                errors[name] = f"{type(exc).__name__}: {exc}"
                log.warning("tuner: %s failed on %s: %s", name, key, errors[name])
                continue
            for r, t in measured.items():
                times[r][name] = t
        if not times[next(iter(timers))]:
            raise RuntimeError(f"no candidate ran for {key}: {errors}")
        confirmed: dict[str, list[str]] = {}
        if confirm is not None:
            promising = promising_variants(times, regimes)
            if promising:
                names = promising + [c for c in routes if all(c in times[r] for r in timers)]
                for r in timers:
                    for name, t in confirm(names, r).items():
                        times[r][name] = t * 1e6
                    confirmed[r] = names
        choice = Choice(key, times, errors, confirmed, tuple(regimes), margin, guard)
        self.cache.put(key, choice.measured())
        return choice


def promising_variants(times_us: Mapping[str, Mapping[str, float]], regimes: Sequence[str], top: int = 2) -> list[str]:
    """Our variants worth re-timing: the best `top` by score under `regimes` (decide's score), and the
    best of each timed regime alone, in that order, without repeats."""
    timed = list(times_us)
    names = set.intersection(*(set(times_us[r]) for r in timed)) - set(CUBLAS)
    base = cublas_base(times_us, timed)

    def score(name: str, among: Sequence[str]) -> tuple[float, str]:
        return max(times_us[r][name] / base[r] for r in among), name

    picked = sorted(names, key=lambda x: score(x, regimes))[:top]
    for r in timed:
        best = min(names, key=lambda x: score(x, (r,)), default=None)
        if best is not None and best not in picked:
            picked.append(best)
    return picked


def check_tolerance(dtype: str, k: int) -> float:
    """Accepted relative max error of a candidate against the cuBLAS result: twice the fp64-reference
    tolerance of bench.py (tsm2.tolerance), since both results carry rounding error."""
    return 2 * tsm2.tolerance(dtype, k)


# ---- GPU side -----------------------------------------------------------------------------------


def time_queued(calls: Sequence[Callable[[], Any]], warmup: int = 2, min_repeats: int = 5, max_repeats: int = 100,
                target_s: float = 0.01) -> list[float]:
    """Per-call device times in seconds: rep i runs calls[i % len(calls)] between two CUDA events.

    The repeat count fills about target_s of GPU time, within [min_repeats, max_repeats]. All reps
    are queued behind a GPU spin long enough to cover their launch overhead, so the GPU never idles
    waiting for Python and the events measure the calls themselves.
    """
    import torch

    for i in range(max(warmup, 1)):
        calls[i % len(calls)]()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    calls[0]()
    end.record()
    end.synchronize()
    estimate = max(start.elapsed_time(end) / 1e3, 1e-6)
    reps = max(min_repeats, min(max_repeats, math.ceil(target_s / estimate)))
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    enqueue_s = 100e-6  # generous CPU time to enqueue one timed call (Python, two events, launch)
    if estimate < enqueue_s:
        torch.cuda._sleep(int(min(reps * enqueue_s, 0.05) * 2e9))  # cycles at ~2 GHz
    for i, (s, e) in enumerate(events):
        s.record()
        calls[i % len(calls)]()
        e.record()
    events[-1][1].synchronize()
    return [s.elapsed_time(e) / 1e3 for s, e in events]


def median_time(calls: Sequence[Callable[[], Any]], **kw) -> float:
    return statistics.median(time_queued(calls, **kw))


def cublas_call(name: str, A: Any, B: Any, C: Any) -> Callable[[], None]:
    """A call that computes C = A @ B with cuBLAS into the column-major C (torch or CuPy operands).

    Both routes compute C^T = B^T A^T into C^T (contiguous), which cuBLAS runs as the column-major
    C = A B GEMM with no transposes and no copies: the paper's cublas<t>gemm baseline.
    """
    import torch

    torch_operands = isinstance(A, torch.Tensor)
    device = A.device.index if torch_operands else A.device.id
    if name == "cublas_torch":
        tA, tB, tC = (x if isinstance(x, torch.Tensor) else torch.from_dlpack(x) for x in (A, B, C))

        def run() -> None:
            if torch_operands:
                torch.mm(tB.T, tA.T, out=tC.T)
            else:  # follow CuPy's current stream, like our kernels do for CuPy operands
                import cupy

                ptr = cupy.cuda.get_current_stream().ptr
                stream = torch.cuda.default_stream(device) if ptr == 0 else torch.cuda.ExternalStream(ptr, device)
                with torch.cuda.stream(stream):
                    torch.mm(tB.T, tA.T, out=tC.T)

        return run
    if name == "cublas_cupy":
        import cupy

        cA, cB, cC = (cupy.from_dlpack(x) if isinstance(x, torch.Tensor) else x for x in (A, B, C))

        def run() -> None:
            with cupy.cuda.Device(device), kernels.launch_stream(torch_operands, device):
                cupy.matmul(cB.T, cA.T, out=cC.T)

        return run
    raise ValueError(f"unknown cuBLAS route {name!r}; expected one of {CUBLAS}")


def make_call(kind: str, name: str, A: Any, B: Any, C: Any, kernels_dir: Path | None = None) -> Callable[[], None]:
    """The call for candidate `name` (a variant or a cuBLAS route) writing C = A @ B."""
    if name in CUBLAS:
        return cublas_call(name, A, B, C)
    if name == blas.BOUND:
        run = blas.bind(kind, A, B, C)
        return lambda: run(A, B, C)
    launch, _, _ = tsm2.prepare(kind, A, B, C, name, kernels_dir)
    return launch


def output_checker(kind: str, A: Any, B: Any, C: Any, kernels_dir: Path | None = None) -> Callable[[str], float]:
    """check(name) -> relative max error, max |C - ref| / max |ref|, of candidate `name` run once into
    C (poisoned with NaN first, so an unwritten element gives NaN), where ref = A @ B by cuBLAS on
    the same operands, computed once here. C is left holding the candidate's output."""
    import torch

    tA, tB, tC = (x if isinstance(x, torch.Tensor) else torch.from_dlpack(x) for x in (A, B, C))
    device = tA.device
    torch.cuda.synchronize(device)  # operands may come from another stream (CuPy's)
    ref = torch.mm(tA, tB).double()
    scale = max(ref.abs().max().item(), 1e-30) if ref.numel() else 1.0

    def check(name: str) -> float:
        tC.fill_(math.nan)
        torch.cuda.synchronize(device)
        make_call(kind, name, A, B, C, kernels_dir)()
        torch.cuda.synchronize(device)  # every stream: CuPy operands run on CuPy's stream
        if tC.numel() == 0:
            return 0.0
        err = (tC.double() - ref).abs().max().item() / scale
        return err if math.isfinite(err) else math.inf

    return check


def gpu_name() -> str:
    import torch

    return torch.cuda.get_device_name()


@functools.lru_cache(maxsize=None)
def l2_bytes(device: int) -> int:
    """The L2 cache size of a CUDA device in bytes."""
    import torch

    size = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)
    if not size:
        import cupy

        size = cupy.cuda.Device(device).attributes["L2CacheSize"]
    return int(size)


def operand_bytes(prob: tsm2.Problem) -> int:
    """Bytes of A, B and C that a call touches (compulsory traffic)."""
    return (prob.m * prob.k + prob.k * prob.n + prob.m * prob.n) * tsm2.ITEMSIZE[prob.dtype]


def _per_call(calls: Sequence[Callable[[], Any]], reps: int) -> float:
    """Host seconds per call of one batch of `reps` calls issued back to back, to the device's idle."""
    import time

    import torch

    torch.cuda.synchronize()
    start = time.perf_counter()
    for i in range(reps):
        calls[i % len(calls)]()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / reps


def _batch_reps(calls: Sequence[Callable[[], Any]], warmup: int, target_s: float, max_calls: int) -> int:
    """Warm the calls up and size a batch to about target_s from one synchronised call."""
    for i in range(max(warmup, 1)):
        calls[i % len(calls)]()
    estimate = max(_per_call(calls, 1), 1e-6)
    return max(len(calls), min(max_calls, math.ceil(target_s / estimate)))


def back_to_back_time(calls: Sequence[Callable[[], Any]], warmup: int = 2, batches: int = 3,
                      target_s: float = 0.002, max_calls: int = 2000) -> float:
    """Seconds per call of calls[i % len(calls)] issued back to back, as a caller's loop meets them:
    host time to the device's idle, divided by the calls (the median of `batches` batches of about
    target_s each). Unlike time_queued it counts the host's cost per call where that exceeds the
    device's, which is what decides a small call."""
    reps = _batch_reps(calls, warmup, target_s, max_calls)
    return statistics.median(_per_call(calls, reps) for _ in range(batches))


def interleaved_times(paths: Mapping[str, Sequence[Callable[[], Any]]], rounds: int = CONFIRM_ROUNDS,
                      warmup: int = 2, target_s: float = 0.002, max_calls: int = 2000) -> dict[str, float]:
    """back_to_back_time of several call paths with their batches interleaved (round r times one
    batch of each path in turn), so a slow spell of the host or the card (clocks, another process)
    lands on every path alike instead of on whichever was being timed: {label: median seconds}."""
    reps = {label: _batch_reps(calls, warmup, target_s, max_calls) for label, calls in paths.items()}
    per_call: dict[str, list[float]] = {label: [] for label in paths}
    for _ in range(max(rounds, 1)):
        for label, calls in paths.items():
            per_call[label].append(_per_call(calls, reps[label]))
    return {label: statistics.median(v) for label, v in per_call.items()}


def copy_like(x: Any) -> Any:
    """A copy of a torch tensor or CuPy array with the same strides (padding included)."""
    import torch

    if isinstance(x, torch.Tensor):
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device).copy_(x)
    import cupy

    # through torch, whose empty_strided keeps any strides (cupy.empty_like(order="K") would make a
    # strided B[:, ::2] contiguous, and the cold timing would meet another B layout than the caller's)
    return cupy.from_dlpack(copy_like(torch.from_dlpack(x)))


def cold_copies(nbytes: int, l2: int, max_copies: int = 64) -> int:
    """How many operand sets to rotate over so that together they hold 4x L2 (one when one does)."""
    return max(1, min(max_copies, math.ceil(4 * l2 / max(nbytes, 1))))


def library(A: Any) -> str:
    """'torch' for a torch tensor, else 'cupy' (CuPy arrays and other __cuda_array_interface__ objects)."""
    torch = sys.modules.get("torch")
    return "torch" if torch is not None and isinstance(A, torch.Tensor) else "cupy"


def native_route(A: Any, out_given: bool = True) -> Callable[..., Any]:
    """route(A, B, out) -> A @ B by the library of A: the fastest cuBLAS path for the caller's arrays,
    with no conversion; C is `out` if given, else what the library returns. torch: torch.mm. CuPy:
    the `@` operator's own routine (cupy._core.matmul), not the cupy.matmul gufunc, whose Python
    wrapper (signature parsing, axes, casting) cost 12-45 us a call on the H100 host.
    out_given=False: route(A, B), the library's own function (torch.mm, operator.matmul), no
    wrapper of ours between the caller and cuBLAS."""
    if library(A) == "torch":
        mm = sys.modules["torch"].mm
        if not out_given:
            return mm
        return lambda A, B, out: mm(A, B) if out is None else mm(A, B, out=out)
    if not out_given:
        return operator.matmul
    import cupy

    core_mm = getattr(getattr(cupy, "_core", None), "matmul", None)
    if core_mm is None:  # a CuPy without the routine: the public function
        return lambda A, B, out: A @ B if out is None else cupy.matmul(A, B, out=out)
    return lambda A, B, out: A @ B if out is None else core_mm(A, B, out)


def _meta(x: Any) -> tuple:
    """What a route depends on: library, dtype, device, shape, strides (not the pointer)."""
    if x is None:
        return ()
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return (x.dtype, x.get_device(), x.shape, x.stride())
    return (type(x), str(x.dtype), getattr(getattr(x, "device", None), "id", None), x.shape, getattr(x, "strides", None))


def route_key(tag: Any, expect: str | None, kernels_dir: Path | None, A: Any, B: Any, out: Any) -> tuple:
    """The key of a call's route: `tag` and the hint, then _meta of A, B, out. Two plain torch tensors
    or two CuPy arrays and no out, a caller's hot case, are read inline into one flat tuple (the
    same fields; about half the host time of the general form, which the H100 host paid 1-2 us for)."""
    if out is None:
        kind = type(A)
        if kind is _TENSOR and type(B) is _TENSOR:
            return (tag, expect, kernels_dir, A.dtype, A.get_device(), A.shape, A.stride(),
                    B.dtype, B.get_device(), B.shape, B.stride())
        if kind is _NDARRAY and type(B) is _NDARRAY:
            return (tag, expect, kernels_dir, A.dtype, A.data.device_id, A.shape, A.strides,
                    B.dtype, B.data.device_id, B.shape, B.strides)
    return (tag, expect, kernels_dir, _meta(A), _meta(B), _meta(out))


class _Unbound:  # stands for torch.Tensor / cupy.ndarray until that library is imported (no object has this type)
    pass


_TENSOR: type = _Unbound
_NDARRAY: type = _Unbound


def _bind_array_types() -> bool:
    """Let route_key recognise torch tensors and CuPy arrays once their library is imported (no
    import here); True where that changed route_key's keys (a route stored under the key made before
    would not be found by the next call's: dispatch and matmul make the key again)."""
    global _TENSOR, _NDARRAY
    before = (_TENSOR, _NDARRAY)
    torch, cupy = sys.modules.get("torch"), sys.modules.get("cupy")
    if torch is not None:
        _TENSOR = torch.Tensor
    if cupy is not None and isinstance(getattr(cupy, "ndarray", None), type):
        _NDARRAY = cupy.ndarray
    return (_TENSOR, _NDARRAY) != before


def call_path(prob: tsm2.Problem, lib: str, out_given: bool) -> str:
    """What dispatch's timing of a shape depends on beyond the shape: the caller's library (its
    cuBLAS call and our launch's host cost), B's layout (cuBLAS copies a strided B; our kernel reads
    it in place) and whether C is allocated per call: e.g. 'torch/bcol/new'."""
    b = prob.b
    if b.row_stride == 1 or b.rows <= 1:
        layout = "col"
    elif b.col_stride == 1 or b.cols <= 1:
        layout = "row"
    else:
        layout = "strided"
    return f"{lib}/b{layout}/{'out' if out_given else 'new'}"


def call_timers(kind: str, A: Any, B: Any, out: Any, copies: int, kernels_dir: Path | None, timing: dict
                ) -> tuple[dict[str, Callable[[str], float]], Callable[[Sequence[str], str], dict[str, float]]]:
    """(timers, confirm) for Tuner.choose, timing exactly the call dispatch will make: the caller's
    own library call (native_route) for its cuBLAS route, our bound launch for a variant, on the
    caller's (A, B, out) with `out` as given (None: C allocated per call, as the caller's call does).

    timers[regime](name) -> seconds per back-to-back call of candidate `name`: warm on the operands
    themselves, cold rotated over `copies` operand sets (them and copies of them).
    confirm(names, regime) -> {name: seconds}: those candidates re-timed with interleaved batches
    (interleaved_times, CONFIRM_ROUNDS rounds)."""
    sets = [(A, B, out)] + [tuple(None if x is None else copy_like(x) for x in (A, B, out))
                            for _ in range(copies - 1)]

    given = out is not None
    args = (lambda ops: ops) if given else (lambda ops: ops[:2])  # called as dispatch will call them

    def runs(name: str, operands) -> list[Callable[[], Any]]:
        if name in CUBLAS:
            route = native_route(A, given)
            return [functools.partial(route, *args(ops)) for ops in operands]
        if name == blas.BOUND:
            return [functools.partial(blas.bind(kind, *ops), *args(ops)) for ops in operands]
        return [functools.partial(tsm2.bind(kind, *ops, name, kernels_dir), *args(ops)) for ops in operands]

    regime_sets = {"warm": sets[:1], "cold": sets}

    def confirm(names: Sequence[str], regime: str) -> dict[str, float]:
        keep = {k: v for k, v in timing.items() if k in ("warmup", "target_s", "max_calls")}
        return interleaved_times({name: runs(name, regime_sets[regime]) for name in names}, **keep)

    timers = {r: functools.partial(lambda ops, name: back_to_back_time(runs(name, ops), **timing), ops)
              for r, ops in regime_sets.items()}
    return timers, confirm


def _resolve(kind: str, A: Any, B: Any, out: Any, expect: str | None, tuner: Tuner, kernels_dir: Path | None,
             timing: dict) -> tuple[Callable[..., Any], Choice]:
    """The runner for this operand signature (called run(A, B) where out is None, else run(A, B, out)) and the choice behind it, tuning the shape if new: for
    this call path (call_path), against the caller's own cuBLAS call, ours only where it beats that
    call by DISPATCH_MARGIN in every deciding regime after re-timing, and, without the caller's
    `expect` hint, is no slower than it in the other regime (the guard)."""
    prob = tsm2.plan(kind, A, B, out)
    device = prob.a.device if prob.a.device is not None else sys.modules["torch"].cuda.current_device()
    nbytes = operand_bytes(prob)
    regimes = deciding_regimes(nbytes, l2_bytes(device), expect)
    lib = library(A)
    path = call_path(prob, lib, out is not None)
    guard = expect is None  # a caller's hint names the regime its calls meet: the other one does not matter
    choice = tuner.lookup(kind, prob.dtype, prob.m, prob.k, prob.n, regimes, path, DISPATCH_MARGIN, guard)
    if choice is None:
        C = out if out is not None else tsm2.empty_like_colmajor(A, prob.m, prob.n)
        timers, confirm = call_timers(kind, A, B, out, cold_copies(nbytes, l2_bytes(device)), kernels_dir, timing)
        check = output_checker(kind, A, B, C, kernels_dir)
        choice = tuner.choose(kind, prob.dtype, prob.m, prob.k, prob.n, timers, check=check, regimes=regimes,
                              routes=(NATIVE[lib],), margin=DISPATCH_MARGIN, confirm=confirm, path=path,
                              guard=guard, extra=(blas.BOUND,))
    if choice.fallback:
        return native_route(A, out is not None), choice
    if choice.choice == blas.BOUND:
        return blas.bind(kind, A, B, out), choice
    return tsm2.bind(kind, A, B, out, choice.choice, kernels_dir), choice


def dispatch(kind: str, A: Any, B: Any, out: Any = None, *, tuner: Tuner, expect: str | None = None,
             kernels_dir: Path | None = None, **timing) -> tuple[Any, Choice]:
    """C = A @ B for TSM2R ('r') or TSM2L ('l') by the tuner's choice for this shape under the
    deciding regimes (module doc), tuning it on these operands if new; ValueError for operands our
    kernels do not take (see tsm2.plan). Returns (C, choice); choice.fallback says whether cuBLAS
    ran, through the operands' own library (torch.mm, CuPy's @: then C is the library's result,
    row-major, where out is None). `timing` goes to back_to_back_time."""
    sig = route_key(kind, expect, kernels_dir, A, B, out)
    route = tuner.routes.get(sig)
    if route is None and _bind_array_types():  # the hot path's flat key, now that it can be made
        sig = route_key(kind, expect, kernels_dir, A, B, out)
        route = tuner.routes.get(sig)
    if route is None:
        route = tuner.routes[sig] = _resolve(kind, A, B, out, expect, tuner, kernels_dir, timing)
    run, choice = route
    return (run(A, B) if out is None else run(A, B, out)), choice


_DEFAULT_TUNERS: dict[int, Tuner] = {}
_DEFAULT_ROUTES: dict[tuple, tuple] = {}  # matmul's routes where no tuner is given (route_key -> route)


def default_tuner() -> Tuner:
    """The process's tuner for matmul on the current device: its times are kept in
    $REPRO_TSM2X_TUNING (a JSON file, keyed by card) where set, else in memory for the process."""
    import os

    torch = sys.modules["torch"]
    device = torch.cuda.current_device()
    tuner = _DEFAULT_TUNERS.get(device)
    if tuner is None:
        path = os.environ.get("REPRO_TSM2X_TUNING")
        tuner = _DEFAULT_TUNERS[device] = Tuner(Path(path) if path else None, torch.cuda.get_device_name(device))
    return tuner


def matmul(A: Any, B: Any, out: Any = None, *, expect: str | None = None, tuner: Tuner | None = None,
           kernels_dir: Path | None = None) -> Any:
    """C = A @ B for torch CUDA tensors or CuPy arrays, never (as tuned) slower than cuBLAS.

    TSM2L where k <= 16, else TSM2R, where the tuner found ours faster than cuBLAS for this shape
    and card under the deciding regime (`expect="warm"` for operands reused back to back,
    `expect="cold"` for a stream of different operands; default: by operand bytes against L2);
    otherwise, and for any operands our kernels do not take (n > 16, a row-major A, other dtypes),
    the operands' own library (torch.mm, CuPy's @). C is `out` where given; else column-major
    from our kernels, the library's layout from cuBLAS. The first call of a shape tunes it.
    """
    # the default tuners' routes are one table (the key holds the operands' device): a repeated call
    # asks torch for no current device (0.3-1 us), only the route table
    routes = _DEFAULT_ROUTES if tuner is None else tuner.routes
    sig = route_key("matmul", expect, kernels_dir, A, B, out)
    route = routes.get(sig)
    if route is None and _bind_array_types():
        sig = route_key("matmul", expect, kernels_dir, A, B, out)
        route = routes.get(sig)
    if route is None:
        if expect not in (None, *REGIMES):  # a caller's mistake, not operands for the library's matmul
            raise ValueError(f"expect must be one of {REGIMES} or None, got {expect!r}")
        if tuner is None:
            tuner = default_tuner()
        kind = "l" if A.shape[-1] <= tsm2.MAX_K_L else "r"
        try:
            route = _resolve(kind, A, B, out, expect, tuner, kernels_dir, {})
        except ValueError as exc:  # operands our kernels do not take: the library's own matmul
            log.info("tsm2x.matmul: cuBLAS for %s: %s", (_meta(A), _meta(B), _meta(out)), exc)
            route = (native_route(A, out is not None), None)
        routes[sig] = route
    run = route[0]
    return run(A, B) if out is None else run(A, B, out)
