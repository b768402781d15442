"""The forward's state that a recomputation in backward must run under, so that it computes what the
forward computed: the RNG state (dropout masks) and the autocast state (``torch.autocast``: its
enabled flag, dtype and cache flag, per device type).

Backward runs outside the user's ``with torch.autocast(...)`` block (or inside another one), so a
recomputation left to the ambient state ran bf16 forwards in fp32: a matmul of an fp32 activation
and a bf16 checkpoint failed ("mat1 and mat2 must have the same dtype"), or the gradients were
about 1e-2 off. Batch-norm statistics are the third piece of state, kept by
:func:`repro.papers.superneurons.liveness.frozen_batchnorm_stats` (recomputation leaves them as the forward
left them).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class AutocastState:
    device_type: str
    enabled: bool
    dtype: torch.dtype
    cache_enabled: bool


def autocast_state(device: torch.device) -> tuple[AutocastState, ...]:
    """The autocast state of ``device``'s type and of the CPU (autocast regions nest per type)."""
    types = [device.type] + (["cpu"] if device.type != "cpu" else [])
    return tuple(AutocastState(t, torch.is_autocast_enabled(t), torch.get_autocast_dtype(t),
                               torch.is_autocast_cache_enabled()) for t in types)


@contextlib.contextmanager
def autocast_restored(state: tuple[AutocastState, ...]):
    with contextlib.ExitStack() as stack:
        for s in state:
            stack.enter_context(torch.autocast(s.device_type, dtype=s.dtype, enabled=s.enabled,
                                               cache_enabled=s.cache_enabled))
        yield


def rng_state(device: torch.device):
    return torch.get_rng_state(), (torch.cuda.get_rng_state(device) if device.type == "cuda" else None)


@contextlib.contextmanager
def rng_restored(state, device: torch.device):
    """Run with the RNG as ``state`` (from :func:`rng_state`; None: as it is), and leave it as it was."""
    if state is None:
        yield
        return
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.set_rng_state(state[0])
        if state[1] is not None:
            torch.cuda.set_rng_state(state[1], device)
        yield


@dataclass
class ForwardState:
    """What a segment's forward ran under: restored around its recomputation."""

    autocast: tuple[AutocastState, ...]
    rng: object | None  # None: the segment draws no random numbers

    @classmethod
    def capture(cls, device: torch.device, stochastic: bool) -> "ForwardState":
        return cls(autocast_state(device), rng_state(device) if stochastic else None)

    @contextlib.contextmanager
    def restored(self, device: torch.device):
        with rng_restored(self.rng, device), autocast_restored(self.autocast):
            yield
