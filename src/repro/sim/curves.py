"""Where a swept curve crosses a level: the parameter value at which a model's advantage appears or
goes (OO-VR's link bandwidth, Q-VR's network bandwidth and latency), log-interpolated between the
swept points."""

from __future__ import annotations

import math
from typing import Sequence


def crossing(x: Sequence[float], y: Sequence[float], level: float, rising: bool = False) -> float:
    """The first x (log-interpolated) where y falls to ``level`` (``rising``: rises to it); the
    first x where y already starts past the level is 0, and inf if y never reaches it."""
    sign = -1.0 if rising else 1.0
    ys = [sign * v for v in y]
    level = sign * level
    if ys and ys[0] <= level:
        return 0.0
    for i in range(1, len(x)):
        if ys[i - 1] > level >= ys[i]:
            f = (ys[i - 1] - level) / (ys[i - 1] - ys[i])
            return float(math.exp(math.log(x[i - 1]) + f * (math.log(x[i]) - math.log(x[i - 1]))))
    return math.inf
