"""Pick the fastest way to run one TSM2 shape: one of our kernel variants, or cuBLAS.

For a (kind, dtype, m, k, n) shape the tuner times every candidate variant (tsm2.candidates) and
cuBLAS twice (through torch and through CuPy), keeps the fastest, and caches the choice in a JSON
file keyed by GPU name and shape. `dispatch` runs the cached (or freshly tuned) choice, so a user
call is never slower than cuBLAS where cuBLAS wins; it returns which path ran.

Timing (time_queued): CUDA events around each call, calls queued behind a short GPU spin
(torch.cuda._sleep) so the CPU's launch overhead overlaps GPU work and the events measure device
time; warm-up first, then the median of repeats chosen to fill a target time. Calls can rotate
over several input copies so each one reads from HBM rather than from the 60 MB L2.

Before a variant of ours is timed, its output is checked once against cuBLAS on the same operands
(output_checker): a variant whose relative max error exceeds the tolerance (twice bench's fp64
tolerance, since the cuBLAS reference carries its own rounding error) is recorded in Choice.errors
with its error, logged, and never chosen, exactly like a variant that fails to launch.

The choice logic (Tuner.choose) takes the timer and the checker as arguments: tests drive it with
fakes.
"""

from __future__ import annotations

import logging
import math
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from repro.tuning import ChoiceCache
from repro import kernels
from repro.papers.tsm2x import tsm2

CUBLAS = ("cublas_torch", "cublas_cupy")
CACHE_VERSION = 2  # 2: choices are verified against cuBLAS (older caches may hold wrong kernels)
log = logging.getLogger("repro")


def shape_key(kind: str, dtype: str, m: int, k: int, n: int) -> str:
    return f"tsm2{kind}/{dtype}/m{m}/k{k}/n{n}"


@dataclass
class Choice:
    """The tuner's verdict for one shape: what to run, and the times (us) it was based on."""

    key: str
    choice: str  # a variant name, or one of CUBLAS
    best_variant: str | None  # our fastest variant (None if all failed)
    best_cublas: str
    times_us: dict[str, float]
    errors: dict[str, str] = field(default_factory=dict)  # candidates that failed to run or gave wrong results

    @property
    def fallback(self) -> bool:
        return self.choice in CUBLAS


class Tuner:
    """Times candidates per shape and remembers the winners in `cache_path` (JSON, or None)."""

    def __init__(self, cache_path: Path | None, gpu_name: str):
        self.gpu_name = gpu_name
        self.cache = ChoiceCache(cache_path, gpu_name, CACHE_VERSION)

    def lookup(self, kind: str, dtype: str, m: int, k: int, n: int) -> Choice | None:
        entry = self.cache.get(shape_key(kind, dtype, m, k, n))
        return Choice(**entry) if entry is not None else None

    def choose(self, kind: str, dtype: str, m: int, k: int, n: int, timer: Callable[[str], float],
               check: Callable[[str], float] | None = None, tol: float | None = None) -> Choice:
        """The cached choice, or time every candidate with timer(name) -> seconds and cache it.

        check(name) -> relative max error of our variant `name` against cuBLAS on the same
        operands (see output_checker); a variant above `tol` (default check_tolerance(dtype, k))
        or with a non-finite error is recorded in errors and never timed nor chosen.
        """
        cached = self.lookup(kind, dtype, m, k, n)
        if cached is not None:
            return cached
        key = shape_key(kind, dtype, m, k, n)
        if tol is None:
            tol = check_tolerance(dtype, k)
        ours = [v.name for v in tsm2.candidates(kind, dtype, k, n)]
        times, errors = {}, {}
        for name in ours + list(CUBLAS):
            try:
                if check is not None and name not in CUBLAS:
                    err = float(check(name))
                    if not err <= tol:  # NaN (unwritten or garbage elements) counts as wrong
                        errors[name] = f"WrongResult: relative max error {err:.3g} vs cuBLAS > tolerance {tol:.3g}"
                        log.warning("tuner: %s is wrong on %s: %s", name, key, errors[name])
                        continue
                times[name] = timer(name) * 1e6
            except Exception as exc:  # a variant that cannot launch here must not stop the others
                errors[name] = f"{type(exc).__name__}: {exc}"
                log.warning("tuner: %s failed on %s: %s", name, key, errors[name])
        ran_ours = [x for x in ours if x in times]
        ran_cublas = [x for x in CUBLAS if x in times]
        if not ran_cublas and not ran_ours:
            raise RuntimeError(f"no candidate ran for {shape_key(kind, dtype, m, k, n)}: {errors}")
        best_variant = min(ran_ours, key=times.__getitem__) if ran_ours else None
        best_cublas = min(ran_cublas, key=times.__getitem__) if ran_cublas else CUBLAS[0]
        if best_variant is not None and (not ran_cublas or times[best_variant] < times[best_cublas]):
            winner = best_variant
        else:
            winner = best_cublas
        choice = Choice(shape_key(kind, dtype, m, k, n), winner, best_variant, best_cublas, times, errors)
        self.cache.put(choice.key, asdict(choice))
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


def dispatch(kind: str, A: Any, B: Any, out: Any = None, *, tuner: Tuner, kernels_dir: Path | None = None,
             **timing) -> tuple[Any, Choice]:
    """C = A @ B by the tuner's choice for this shape (tuning it on these operands if new).

    Returns (C, choice); choice.fallback says whether cuBLAS ran. `timing` goes to time_queued.
    """
    prob = tsm2.plan(kind, A, B, out)
    if out is None:
        out = tsm2.empty_like_colmajor(A, prob.m, prob.n)
    check = None if tuner.lookup(kind, prob.dtype, prob.m, prob.k, prob.n) else output_checker(kind, A, B, out, kernels_dir)
    choice = tuner.choose(kind, prob.dtype, prob.m, prob.k, prob.n,
                          lambda name: median_time([make_call(kind, name, A, B, out, kernels_dir)], **timing),
                          check=check)
    make_call(kind, choice.choice, A, B, out, kernels_dir)()
    return out, choice
