"""Learning-rate schedules, as a pure function of the global step (so resuming needs no state).

cosine:   linear warm-up from lr/warmup_steps to lr, then cosine decay to 0 (Loshchilov & Hutter,
          SGDR, with warm-up as in Goyal et al. 2017). Reaches near-final CIFAR accuracy in a
          few tens of epochs, where the paper's step schedule needs 160+.
onecycle: linear warm-up, then linear decay to 0 (Smith's one-cycle, without momentum cycling).
constant: lr throughout (debugging and throughput runs).
"""

from __future__ import annotations

import math

SCHEDULES = ("cosine", "onecycle", "constant")


def lr_at(step: int, total_steps: int, peak: float, warmup_steps: int = 0, schedule: str = "cosine") -> float:
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    if schedule == "constant":
        return peak
    if step < warmup_steps:
        return peak * (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    if schedule == "cosine":
        return peak * 0.5 * (1.0 + math.cos(math.pi * progress))
    return peak * (1.0 - progress)
