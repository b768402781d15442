"""The arms of comet_step_bench: a model, its hooks and an optimiser, stepped by the shared
trainer's step (repro.train.step.TrainStep) eagerly or as a captured CUDA graph (warm-up steps on a
side stream, one capture, then one replay per step).

An arm's name says what it runs: ``<method>`` (eager; COMET methods store each saved tensor at its
exact size, one host sync per tensor), ``<method>@arena`` (eager, the step's payload arena: no
sync), ``<method>@cudagraph`` (CUDA graph; COMET methods with the arena payload). Only graph-safe
hooks run as a graph: none and fixed (an adaptive eb and ActNN's generator are eager-only).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
import torch.nn as nn

from repro.papers.comet.hooks import make_hooks
from repro.train.hooks import TrainHooks, fast_mode_conflict
from repro.train.step import TrainStep

GRAPH_METHODS = ("none", "fixed")
COMET = ("fixed", "adaptive")


class HostClock:
    """Wraps hooks.encode/decode to add up the host seconds spent inside them."""

    def __init__(self, hooks):
        self.seconds = 0.0
        for name in ("encode", "decode"):
            setattr(hooks, name, self._timed(getattr(hooks, name)))

    def _timed(self, fn):
        def timed(*args):
            t0 = time.perf_counter()
            try:
                return fn(*args)
            finally:
                self.seconds += time.perf_counter() - t0
        return timed


@dataclass
class Arm:
    name: str
    method: str
    payload: str  # exact | arena ("" without COMET hooks)
    mode: str  # eager | cudagraph
    model: nn.Module
    hooks: TrainHooks | None
    step: TrainStep
    clock: HostClock | None = None
    notes: list = field(default_factory=list)

    def run(self, x: torch.Tensor, y: torch.Tensor, steps: int) -> tuple[float, float]:
        """(seconds per step, host seconds in encode/decode per step) over ``steps`` steps."""
        cuda = x.device.type == "cuda"
        host0 = self.clock.seconds if self.clock else 0.0
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            self.step(x, y)
        if cuda:
            torch.cuda.synchronize()
        return (time.perf_counter() - t0) / steps, ((self.clock.seconds if self.clock else 0.0) - host0) / steps

    def warm_up(self, x: torch.Tensor, y: torch.Tensor, steps: int) -> None:
        """``steps`` steps, at least enough to capture a graph arm; a graph arm that fell back to eager
        is an error (its times would be labelled wrongly)."""
        self.run(x, y, max(steps, self.step.warmup_steps + 2) if self.mode == "cudagraph" else steps)
        if self.mode == "cudagraph" and (self.step.mode != "cudagraph" or self.step.captures != 1):
            raise RuntimeError(f"arm {self.name} did not run as one captured CUDA graph (mode {self.step.mode}, "
                               f"{self.step.captures} captures): {'; '.join(self.step.notes) or 'no notes'}")

    def codec_metrics(self) -> dict:
        return self.hooks.codec_metrics() if hasattr(self.hooks, "codec_metrics") else {}


def arm_names(methods, payloads, graph_methods) -> list[str]:
    names = []
    for method in methods:
        for payload in (payloads if method in COMET else ["exact"]):
            names.append(method if payload == "exact" else f"{method}@{payload}")
    return names + [f"{m}@cudagraph" for m in graph_methods]


def build(name: str, build_model, device: str, seed: int, channels_last: bool, hook_kw: dict, log=None) -> Arm:
    """The arm ``name`` (see the module doc); ``build_model()`` makes a fresh model, ``hook_kw`` goes
    to make_hooks."""
    method, _, variant = name.partition("@")
    mode = "cudagraph" if variant == "cudagraph" else "eager"
    payload = ("arena" if variant in ("arena", "cudagraph") else "exact") if method in COMET else ""
    if mode == "cudagraph" and method not in GRAPH_METHODS:
        raise ValueError(f"graph_methods: {method!r} cannot run as a CUDA graph; graph-safe: "
                         f"{', '.join(GRAPH_METHODS)}")
    cuda = device == "cuda"
    if mode == "cudagraph" and not cuda:
        raise ValueError(f"graph_methods ({name}) need a CUDA device, got {device!r}")
    torch.manual_seed(seed)
    model = build_model().to(device)
    if channels_last and cuda:
        model = model.to(memory_format=torch.channels_last)
    hooks = make_hooks(method, seed=seed, payload=payload or "exact", **hook_kw)
    clock = None
    if hooks is not None:
        hooks.wrap_model(model)
        clock = HostClock(hooks)
        conflict = fast_mode_conflict(hooks, compile=False, cuda_graph=mode == "cudagraph")
        if conflict:
            raise ValueError(f"arm {name}: {conflict}")
    lr = torch.tensor(0.01, device=device) if mode == "cudagraph" else 0.01  # a captured step reads lr on the device
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, fused=cuda)
    step = TrainStep(model, opt, hooks or TrainHooks(), device=device, cuda_graph=mode == "cudagraph", log=log)
    return Arm(name, method, payload, mode, model, hooks, step, clock)
