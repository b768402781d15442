"""Learning-rate schedules, as a pure function of the global step (so resuming needs no state).

cosine:   linear warm-up from lr/warmup_steps to lr, then cosine decay to 0 (Loshchilov & Hutter,
          SGDR, with warm-up as in Goyal et al. 2017). Reaches near-final CIFAR accuracy in a
          few tens of epochs, where the paper's step schedule needs 160+.
onecycle: linear warm-up, then linear decay to 0 (Smith's one-cycle, without momentum cycling).
triangle: linear from start * lr to lr over the warm-up, then linear to end * lr at the last step
          (airbench94: start 0.2, peak at 23% of the steps, end 0.07).
constant: lr throughout (debugging and throughput runs).
"""

from __future__ import annotations

import math

SCHEDULES = ("cosine", "onecycle", "triangle", "constant")


def lr_at(step: int, total_steps: int, peak: float, warmup_steps: int = 0, schedule: str = "cosine",
          start: float = 0.0, end: float = 0.0) -> float:
    """The lr of 0-based ``step``; ``start`` and ``end`` (fractions of ``peak``) are the triangle's."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    if schedule == "constant":
        return peak
    if schedule == "triangle":
        if step < warmup_steps:
            frac = step / warmup_steps
            return peak * (start * (1 - frac) + frac)
        frac = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return peak * ((1 - frac) + end * frac)
    if step < warmup_steps:
        return peak * (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    if schedule == "cosine":
        return peak * 0.5 * (1.0 + math.cos(math.pi * progress))
    return peak * (1.0 - progress)
