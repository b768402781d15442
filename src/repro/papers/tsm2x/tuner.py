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
best-scoring variant runs if it scores below the best cuBLAS route, else cuBLAS does.

`dispatch` (and `matmul`, which picks TSM2R or TSM2L and takes any operands) runs that choice on
the caller's arrays. Its cuBLAS path is the caller's own library: `torch.mm` for torch tensors,
`cupy.matmul` for CuPy arrays, with no conversion, copy or layout change; the route and the
variant are looked up once per operand signature (library, shapes, strides, dtype, device), so a
repeated call costs one dictionary lookup before the library call or the kernel launch.

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
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from repro.tuning import ChoiceCache
from repro import kernels
from repro.papers.tsm2x import tsm2

CUBLAS = ("cublas_torch", "cublas_cupy")
REGIMES = ("warm", "cold")
# 3: times per regime (warm and cold), the choice made from them at lookup; 2: verified choices,
# cold times only (older caches may hold wrong kernels)
CACHE_VERSION = 3
log = logging.getLogger("repro")


def shape_key(kind: str, dtype: str, m: int, k: int, n: int) -> str:
    return f"tsm2{kind}/{dtype}/m{m}/k{k}/n{n}"


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


def decide(times_us: Mapping[str, Mapping[str, float]], regimes: Sequence[str]) -> tuple[str, str | None, str]:
    """(choice, best_variant, best_cublas) from per-regime times (us) under the deciding regimes.

    A candidate's score is its largest ratio, over `regimes`, to the faster cuBLAS route of that
    regime (to 1 us where no cuBLAS route ran); only candidates timed in every regime count. Ours
    runs where its best score is below the best cuBLAS route's (a tie is not a win).
    """
    names = set.intersection(*(set(times_us.get(r, {})) for r in regimes))
    base = {r: min((times_us[r][c] for c in CUBLAS if c in times_us[r]), default=1.0) for r in regimes}

    def score(name: str) -> float:
        return max(times_us[r][name] / base[r] for r in regimes)

    ours = sorted(x for x in names if x not in CUBLAS)
    routes = [c for c in CUBLAS if c in names]
    best_variant = min(ours, key=score) if ours else None
    best_cublas = min(routes, key=score) if routes else CUBLAS[0]
    if best_variant is not None and (not routes or score(best_variant) < score(best_cublas)):
        return best_variant, best_variant, best_cublas
    return best_cublas, best_variant, best_cublas


@dataclass
class Choice:
    """The tuner's verdict for one shape under the deciding regimes: what to run, and the times (us,
    per regime and candidate) it was based on."""

    key: str
    times_us: dict[str, dict[str, float]]  # regime -> candidate -> median us
    errors: dict[str, str] = field(default_factory=dict)  # candidates that failed to run or gave wrong results
    regimes: tuple[str, ...] = ("cold",)
    choice: str = field(init=False)  # a variant name, or one of CUBLAS
    best_variant: str | None = field(init=False)  # our best-scoring variant (None if all failed)
    best_cublas: str = field(init=False)

    def __post_init__(self) -> None:
        self.regimes = tuple(self.regimes)
        self.choice, self.best_variant, self.best_cublas = decide(self.times_us, self.regimes)

    @property
    def fallback(self) -> bool:
        return self.choice in CUBLAS

    def measured(self) -> dict:
        """What the cache keeps: the measurements, not the verdict (it depends on the regimes asked)."""
        return {"key": self.key, "times_us": self.times_us, "errors": self.errors}


class Tuner:
    """Times candidates per shape and remembers their times in `cache_path` (JSON, or None); keeps the
    routes `dispatch` resolved, per operand signature, in memory."""

    def __init__(self, cache_path: Path | None, gpu_name: str):
        self.gpu_name = gpu_name
        self.cache = ChoiceCache(cache_path, gpu_name, CACHE_VERSION)
        self.routes: dict[tuple, tuple[str, Choice | None]] = {}

    def lookup(self, kind: str, dtype: str, m: int, k: int, n: int,
               regimes: Sequence[str] = ("cold",)) -> Choice | None:
        """The cached verdict under `regimes`, or None where any of them was not timed."""
        entry = self.cache.get(shape_key(kind, dtype, m, k, n))
        if entry is None or not all(r in entry["times_us"] for r in regimes):
            return None
        return Choice(**entry, regimes=tuple(regimes))

    def choose(self, kind: str, dtype: str, m: int, k: int, n: int, timers: Mapping[str, Callable[[str], float]],
               check: Callable[[str], float] | None = None, tol: float | None = None,
               regimes: Sequence[str] = ("cold",)) -> Choice:
        """The cached verdict under `regimes`, or time every candidate with each timers[regime](name)
        -> seconds (every regime in `timers`, which must include `regimes`), cache the times and decide.

        check(name) -> relative max error of our variant `name` against cuBLAS on the same
        operands (see output_checker); a variant above `tol` (default check_tolerance(dtype, k))
        or with a non-finite error is recorded in errors and never timed nor chosen.
        """
        cached = self.lookup(kind, dtype, m, k, n, regimes)
        if cached is not None:
            return cached
        missing = [r for r in regimes if r not in timers]
        if missing:
            raise ValueError(f"no timer for the deciding regime(s) {missing}; timers: {sorted(timers)}")
        key = shape_key(kind, dtype, m, k, n)
        if tol is None:
            tol = check_tolerance(dtype, k)
        ours = [v.name for v in tsm2.candidates(kind, dtype, k, n)]
        times: dict[str, dict[str, float]] = {r: {} for r in timers}
        errors: dict[str, str] = {}
        for name in ours + list(CUBLAS):
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
        choice = Choice(key, times, errors, tuple(regimes))
        self.cache.put(key, choice.measured())
        return choice


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


def back_to_back_time(calls: Sequence[Callable[[], Any]], warmup: int = 2, batches: int = 3,
                      target_s: float = 0.002, max_calls: int = 2000) -> float:
    """Seconds per call of calls[i % len(calls)] issued back to back, as a caller's loop meets them:
    host time to the device's idle, divided by the calls (the median of `batches` batches of about
    target_s each). Unlike time_queued it counts the host's cost per call where that exceeds the
    device's, which is what decides a small call."""
    import time

    import torch

    for i in range(max(warmup, 1)):
        calls[i % len(calls)]()
    torch.cuda.synchronize()
    start = time.perf_counter()
    calls[0]()
    torch.cuda.synchronize()
    estimate = max(time.perf_counter() - start, 1e-6)
    reps = max(len(calls), min(max_calls, math.ceil(target_s / estimate)))
    per_call = []
    for _ in range(batches):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for i in range(reps):
            calls[i % len(calls)]()
        torch.cuda.synchronize()
        per_call.append((time.perf_counter() - start) / reps)
    return statistics.median(per_call)


def copy_like(x: Any) -> Any:
    """A copy of a torch tensor or CuPy array with the same strides (padding included for torch)."""
    import torch

    if isinstance(x, torch.Tensor):
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device).copy_(x)
    import cupy

    y = cupy.empty_like(x)  # order K: a column-major x gives a column-major copy
    y[...] = x
    return y


def cold_copies(nbytes: int, l2: int, max_copies: int = 64) -> int:
    """How many operand sets to rotate over so that together they hold 4x L2 (one when one does)."""
    return max(1, min(max_copies, math.ceil(4 * l2 / max(nbytes, 1))))


def native_route(A: Any) -> Callable[[Any, Any, Any], Any]:
    """route(A, B, out) -> A @ B by the library of A (torch.mm, cupy.matmul): the fastest cuBLAS path
    for the caller's arrays, with no conversion; C is `out` if given, else what the library returns."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(A, torch.Tensor):
        mm = torch.mm
        return lambda A, B, out: mm(A, B) if out is None else mm(A, B, out=out)
    import cupy

    return lambda A, B, out: cupy.matmul(A, B, out=out)


def _meta(x: Any) -> tuple:
    """What a route depends on: library, dtype, device, shape, strides (not the pointer)."""
    if x is None:
        return ()
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return (x.dtype, x.get_device(), x.shape, x.stride())
    return (type(x), str(x.dtype), getattr(getattr(x, "device", None), "id", None), x.shape, getattr(x, "strides", None))


def call_timers(kind: str, A: Any, B: Any, C: Any, copies: int, kernels_dir: Path | None,
                timing: dict) -> dict[str, Callable[[str], float]]:
    """timers[regime](name) -> seconds per back-to-back call of candidate `name`: warm on (A, B, C)
    itself, cold rotated over `copies` operand sets (A, B, C and copies of them)."""
    sets = [(A, B, C)] + [tuple(copy_like(x) for x in (A, B, C)) for _ in range(copies - 1)]

    def runs(name: str, operands) -> list[Callable[[], Any]]:
        if name in CUBLAS:
            return [cublas_call(name, *ops) for ops in operands]
        return [functools.partial(tsm2.bind(kind, *ops, name, kernels_dir), *ops) for ops in operands]

    return {"warm": lambda name: back_to_back_time(runs(name, sets[:1]), **timing),
            "cold": lambda name: back_to_back_time(runs(name, sets), **timing)}


def _resolve(kind: str, A: Any, B: Any, out: Any, expect: str | None, tuner: Tuner, kernels_dir: Path | None,
             timing: dict) -> tuple[Callable[[Any, Any, Any], Any], Choice]:
    """The runner for this operand signature and the choice behind it, tuning the shape if new."""
    prob = tsm2.plan(kind, A, B, out)
    device = prob.a.device if prob.a.device is not None else sys.modules["torch"].cuda.current_device()
    nbytes = operand_bytes(prob)
    regimes = deciding_regimes(nbytes, l2_bytes(device), expect)
    choice = tuner.lookup(kind, prob.dtype, prob.m, prob.k, prob.n, regimes)
    if choice is None:
        C = out if out is not None else tsm2.empty_like_colmajor(A, prob.m, prob.n)
        timers = call_timers(kind, A, B, C, cold_copies(nbytes, l2_bytes(device)), kernels_dir, timing)
        check = output_checker(kind, A, B, C, kernels_dir)
        choice = tuner.choose(kind, prob.dtype, prob.m, prob.k, prob.n, timers, check=check, regimes=regimes)
    if choice.fallback:
        return native_route(A), choice
    return tsm2.bind(kind, A, B, out, choice.choice, kernels_dir), choice


def dispatch(kind: str, A: Any, B: Any, out: Any = None, *, tuner: Tuner, expect: str | None = None,
             kernels_dir: Path | None = None, **timing) -> tuple[Any, Choice]:
    """C = A @ B for TSM2R ('r') or TSM2L ('l') by the tuner's choice for this shape under the
    deciding regimes (module doc), tuning it on these operands if new; ValueError for operands our
    kernels do not take (see tsm2.plan). Returns (C, choice); choice.fallback says whether cuBLAS
    ran, through the operands' own library (torch.mm, cupy.matmul: then C is the library's result,
    row-major, where out is None). `timing` goes to back_to_back_time."""
    sig = (kind, expect, kernels_dir, _meta(A), _meta(B), _meta(out))
    route = tuner.routes.get(sig)
    if route is None:
        route = tuner.routes[sig] = _resolve(kind, A, B, out, expect, tuner, kernels_dir, timing)
    run, choice = route
    return run(A, B, out), choice


_DEFAULT_TUNERS: dict[int, Tuner] = {}


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
    the operands' own library (torch.mm, cupy.matmul). C is `out` where given; else column-major
    from our kernels, the library's layout from cuBLAS. The first call of a shape tunes it.
    """
    if tuner is None:
        tuner = default_tuner()
    sig = ("matmul", expect, kernels_dir, _meta(A), _meta(B), _meta(out))
    route = tuner.routes.get(sig)
    if route is None:
        if expect not in (None, *REGIMES):  # a caller's mistake, not operands for the library's matmul
            raise ValueError(f"expect must be one of {REGIMES} or None, got {expect!r}")
        kind = "l" if A.shape[-1] <= tsm2.MAX_K_L else "r"
        try:
            route = _resolve(kind, A, B, out, expect, tuner, kernels_dir, {})
        except ValueError as exc:  # operands our kernels do not take: the library's own matmul
            log.info("tsm2x.matmul: cuBLAS for %s: %s", sig[3:], exc)
            route = (native_route(A), None)
        tuner.routes[sig] = route
    return route[0](A, B, out)
