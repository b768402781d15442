"""The bounded search shared by the experiments that look for the largest size that still fits
(SuperNeurons' deepest network, COMET's largest batch)."""

from __future__ import annotations

import math
import time
from typing import Callable


def largest_fit(fits: Callable[[int], bool], start: int, lo: int, hi: int, *, abs_tol: int = 1,
                rel_tol: float = 0.0, budget_s: float = math.inf, growth: float = 2.0) -> tuple[int | None, str]:
    """Largest n in [lo, hi] with fits(n), for a monotone fits (a larger n never fits where a
    smaller one fails): doubling from ``start`` (while it fails, stepping down by the factor, then
    its square, its cube...), then bisection until the
    gap to the smallest failing n is at most max(1, abs_tol, rel_tol * best). ``growth`` replaces
    the factor 2 of the first phase: a start known to be near the answer (a time-bounded search at
    seconds per probe) brackets it closer with, say, 1.25 (each step at least one).

    Returns (best or None, bound): 'exact' (a failing n within the tolerance above best, or nothing
    fits), 'ceiling' (hi itself fits) or 'time' (the budget ran out first: best is a lower bound).
    No probe starts that would end past ``budget_s`` seconds, judged by the last probe's duration.
    """
    if not 1 <= lo <= hi:
        raise ValueError(f"need 1 <= lo <= hi, got lo={lo}, hi={hi}")
    if growth <= 1:
        raise ValueError(f"growth must be > 1, got {growth}")
    t0 = time.perf_counter()
    last = 0.0

    def probe(n: int) -> bool:
        nonlocal last
        start_s = time.perf_counter()
        ok = bool(fits(n))
        last = time.perf_counter() - start_s
        return ok

    def out_of_time() -> bool:
        return time.perf_counter() - t0 + last > budget_s

    fit = fail = None
    shrink = 1.0
    n = max(lo, min(start, hi))
    while True:  # exponential phase
        if probe(n):
            fit = n
            if n >= hi:
                return fit, "ceiling"
            if fail is not None:  # bracketed from above: bisect
                break
            n = min(hi, max(n + 1, int(growth * n)))
        else:
            fail = n
            if fit is not None or n <= lo:
                break
            shrink *= growth  # each further failure steps down further: a wrong start costs few probes
            n = max(lo, min(n - 1, int(n / shrink)))
        if out_of_time():
            return fit, "time"
    if fit is None:
        return None, "exact"
    while fail - fit > max(1, abs_tol, rel_tol * fit):
        if out_of_time():
            return fit, "time"
        mid = (fit + fail) // 2
        if probe(mid):
            fit = mid
        else:
            fail = mid
    return fit, "exact"
