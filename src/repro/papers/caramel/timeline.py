"""Gradient timelines: when each parameter's gradient is ready in backward, and how big it is.

One training step of a network is timed with hooks: a forward pre-hook on every module records when
each parameter is first needed in forward, and ``register_post_accumulate_grad_hook`` records when
its gradient has been accumulated (the moment DDP's reducer may send it). On a GPU every stamp is a
CUDA event on the current stream (the host only enqueues, so host clocks would measure launches); on
the CPU, where autograd runs the kernels synchronously, ``time.perf_counter``. Times are seconds from
the start of forward (``need_s``) and of backward (``ready_s``); each is the median over ``repeats``
steps after ``warmup``."""

from __future__ import annotations

import statistics
import time
from typing import Callable

import pandas as pd
import torch
import torch.nn as nn

COLUMNS = ["model", "index", "name", "numel", "bytes", "need_s", "ready_s", "ready_rank", "forward_s", "backward_s"]


class _Clock:
    """Stamps: CUDA events on a GPU, perf_counter on the CPU; ``seconds(a, b)`` after ``sync``."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def stamp(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def seconds(self, a, b) -> float:
        return a.elapsed_time(b) / 1e3 if self.cuda else b - a


def record(model: nn.Module, inputs, loss_fn: Callable, device: torch.device, warmup: int = 1, repeats: int = 3,
           label: str = "model") -> pd.DataFrame:
    """One row per parameter (registration ``index``, name, size, median ``need_s`` and ``ready_s``,
    the rank of its ready time, and the step's median forward and backward seconds)."""
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    owner = {}
    for mod in model.modules():  # the module whose forward first touches a parameter: its own
        for n, p in mod.named_parameters(recurse=False):
            owner.setdefault(id(p), mod)
    clock = _Clock(device)
    stamps: dict[str, dict] = {"need": {}, "ready": {}}
    handles = []
    by_module: dict[int, list[str]] = {}

    def mark(kind: str, names: list[str]) -> None:  # hooks must return None
        for n in names:
            stamps[kind].setdefault(n, clock.stamp())

    for name, p in params:
        by_module.setdefault(id(owner.get(id(p), model)), []).append(name)
        handles.append(p.register_post_accumulate_grad_hook(lambda _p, names=[name]: mark("ready", names)))
    for mod in model.modules():
        if id(mod) in by_module:
            handles.append(mod.register_forward_pre_hook(
                lambda _m, _a, names=by_module[id(mod)]: mark("need", names)))
    runs = []
    try:
        for step in range(warmup + repeats):
            stamps["need"].clear()
            stamps["ready"].clear()
            model.zero_grad(set_to_none=True)
            clock.sync()
            t0 = clock.stamp()
            loss = loss_fn(model(inputs))
            t1 = clock.stamp()
            loss.backward()
            t2 = clock.stamp()
            clock.sync()
            if step >= warmup:
                runs.append({"forward_s": clock.seconds(t0, t1), "backward_s": clock.seconds(t1, t2),
                             "need": {n: clock.seconds(t0, s) for n, s in stamps["need"].items()},
                             "ready": {n: clock.seconds(t1, s) for n, s in stamps["ready"].items()}})
    finally:
        for h in handles:
            h.remove()
    rows = []
    for index, (name, p) in enumerate(params):
        ready = [r["ready"][name] for r in runs if name in r["ready"]]
        if not ready:  # a parameter the loss does not reach has no gradient to reduce
            continue
        need = [r["need"].get(name, 0.0) for r in runs]
        rows.append({"model": label, "index": index, "name": name, "numel": p.numel(),
                     "bytes": p.numel() * p.element_size(), "need_s": statistics.median(need),
                     "ready_s": statistics.median(ready)})
    df = pd.DataFrame(rows, columns=COLUMNS[:7])
    df["ready_rank"] = df["ready_s"].rank(method="first").astype(int) - 1
    df["forward_s"] = statistics.median(r["forward_s"] for r in runs)
    df["backward_s"] = statistics.median(r["backward_s"] for r in runs)
    return df[COLUMNS]
