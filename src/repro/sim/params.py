"""Checks for simulator parameters: a bad value fails at start with its key named."""

from __future__ import annotations

import math
from typing import Iterable


class ParamError(ValueError):
    """A simulator parameter is out of range; the message starts with its key."""


def positive(key: str, value: float, allow_inf: bool = False) -> float:
    """``value`` > 0 (and finite unless ``allow_inf``)."""
    ok = isinstance(value, (int, float)) and value > 0 and not math.isnan(value)
    if ok and math.isinf(value) and not allow_inf:
        ok = False
    if not ok:
        raise ParamError(f"{key}: must be a positive {'number or inf' if allow_inf else 'finite number'}, got {value!r}")
    return value


def non_negative(key: str, value: float) -> float:
    if not (isinstance(value, (int, float)) and value >= 0 and math.isfinite(value)):
        raise ParamError(f"{key}: must be a finite number >= 0, got {value!r}")
    return value


def fraction(key: str, value: float, upper_open: bool = False) -> float:
    """0 <= value <= 1 (< 1 with ``upper_open``)."""
    if not (isinstance(value, (int, float)) and 0 <= value and (value < 1 if upper_open else value <= 1)):
        raise ParamError(f"{key}: must be in [0, {'1)' if upper_open else '1]'}, got {value!r}")
    return value


def count(key: str, value: int, minimum: int = 1) -> int:
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= minimum):
        raise ParamError(f"{key}: must be an integer >= {minimum}, got {value!r}")
    return value


def choice(key: str, value: str, allowed: Iterable[str]) -> str:
    allowed = list(allowed)
    if value not in allowed:
        raise ParamError(f"{key}: unknown value {value!r}; allowed: {', '.join(allowed)}")
    return value


def choices(key: str, values: Iterable[str], allowed: Iterable[str]) -> list[str]:
    values, allowed = list(values), list(allowed)
    if not values:
        raise ParamError(f"{key}: must name at least one of {', '.join(allowed)}")
    for i, v in enumerate(values):
        choice(f"{key}[{i}]", v, allowed)
    return values
