"""SGD applied inside backward as soon as gradients are complete (PyTorch's "optimizer in backward"
pattern, ``Tensor.register_post_accumulate_grad_hook``), then the gradients are freed: gradient
liveness, as SuperNeurons frees every tensor after its last use. The gradients of a whole network
then never coexist, which matters at 10x depth (see experiment.py's arithmetic).

The update is torch.optim.SGD's (momentum, dampening 0, weight decay, no Nesterov):
``d = g + wd * p; buf = d (first step) or momentum * buf + d; p -= lr * buf``.

Groups. Parameters are updated a group at a time, with multi-tensor (``torch._foreach_*``) kernels,
as soon as every parameter of the group has its gradient: one group per unit of a Sequential
model (a layer or a residual block, as the runtime segments it), else one per parameter. Updating
each parameter alone launched four kernels from Python per parameter: on the H200 that was 18 ms
of a 68 ms step at 64 bottleneck blocks and 115 ms of 625 ms at 352. A group still incomplete when
a backward pass ends (a parameter that got no gradient) is updated then, with what it has.

Momentum buffers may live in pinned host memory (``momentum_on_host``): each update copies the
buffers in and out on the compute stream (ordered with the update, so no extra synchronisation).

``host_s`` sums the host seconds spent in the updates (a diagnostic).

Limitations: every parameter must be used once per forward (a tied weight would be updated before
its second use's backward reads it; PyTorch's version check then raises), and there is no
gradient clipping or accumulation over several backward passes.
"""

from __future__ import annotations

import time

import torch
import torch.nn as nn

from repro.papers.superneurons.liveness import UnsupportedModel, flatten_units


def unit_groups(model: nn.Module, params: list[torch.Tensor]) -> list[list[torch.Tensor]]:
    """``params`` grouped by the unit of ``model`` that owns them (one group per parameter when the
    model is not a Sequential the runtime can segment)."""
    try:
        units = flatten_units(model)
    except UnsupportedModel:
        return [[p] for p in params]
    wanted = {id(p) for p in params}
    groups, seen = [], set()
    for _, unit in units:
        group = [p for p in unit.parameters() if id(p) in wanted and id(p) not in seen]
        seen.update(id(p) for p in group)
        if group:
            groups.append(group)
    groups += [[p] for p in params if id(p) not in seen]
    return groups


class SGDInBackward:
    def __init__(self, model: nn.Module, lr: float, momentum: float = 0.9, weight_decay: float = 0.0,
                 momentum_on_host: bool = False, grouped: bool = True):
        if lr <= 0 or momentum < 0 or weight_decay < 0:
            raise ValueError(f"need lr > 0, momentum >= 0, weight_decay >= 0; got {lr}, {momentum}, {weight_decay}")
        self.lr, self.momentum, self.weight_decay = lr, momentum, weight_decay
        self.momentum_on_host = momentum_on_host
        self.params = [p for p in model.parameters() if p.requires_grad]
        if len({id(p) for p in self.params}) != len(self.params):
            raise ValueError("SGDInBackward needs every parameter once (tied weights are not supported)")
        self.groups = unit_groups(model, self.params) if grouped else [[p] for p in self.params]
        self._group_of = {id(p): k for k, group in enumerate(self.groups) for p in group}
        self._ready: dict[int, list[torch.Tensor]] = {}
        self._flush_queued = False
        self.buffers: dict[int, torch.Tensor] = {}
        self.updates = 0
        self.flushes = 0
        self.host_s = 0.0
        self._handles = [p.register_post_accumulate_grad_hook(self._grad_ready) for p in self.params]

    def _grad_ready(self, p: torch.Tensor) -> None:
        k = self._group_of[id(p)]
        ready = self._ready.setdefault(k, [])
        ready.append(p)
        if len(ready) == len(self.groups[k]):
            del self._ready[k]
            self._update(ready)
        elif not self._flush_queued:  # a group left incomplete is updated when this backward ends
            torch.autograd.Variable._execution_engine.queue_callback(self._flush_incomplete)
            self._flush_queued = True

    def _flush_incomplete(self) -> None:
        self._flush_queued = False
        ready, self._ready = self._ready, {}
        for group in ready.values():
            self._update(group)

    @torch.no_grad()
    def _update(self, params: list[torch.Tensor]) -> None:
        start = time.perf_counter()
        grads = [p.grad for p in params]  # updated in place and freed below: no parameter-sized temporary
        if self.weight_decay:
            torch._foreach_add_(grads, params, alpha=self.weight_decay)
        steps = grads
        if self.momentum:
            steps = [self._momentum_buffer(p) for p in params]
            old = [k for k, (p, b) in enumerate(zip(params, steps)) if b is not None]
            if old:
                bufs = [steps[k] for k in old]
                torch._foreach_mul_(bufs, self.momentum)
                torch._foreach_add_(bufs, [grads[k] for k in old])
            steps = [g.clone() if b is None else b for g, b in zip(grads, steps)]
            self._store_momentum(params, steps)
        torch._foreach_add_(params, steps, alpha=-self.lr)
        for p in params:
            p.grad = None
        self.updates += len(params)
        self.flushes += 1
        self.host_s += time.perf_counter() - start

    def _momentum_buffer(self, p: torch.Tensor) -> torch.Tensor | None:
        """The parameter's momentum buffer on its device (a copy when it is held on the host), or None
        at its first update (the buffer then starts as the step itself)."""
        held = self.buffers.get(id(p))
        if held is None:
            return None
        return held.to(p.device, non_blocking=True) if held.device != p.device else held

    def _store_momentum(self, params: list[torch.Tensor], bufs: list[torch.Tensor]) -> None:
        for p, buf in zip(params, bufs):
            held = self.buffers.get(id(p))
            if held is None:  # first update: keep the buffer, or a pinned host copy of it
                if not (self.momentum_on_host and p.is_cuda):
                    self.buffers[id(p)] = buf
                    continue
                held = self.buffers[id(p)] = torch.empty(buf.shape, dtype=buf.dtype, pin_memory=True)
            if held is not buf:  # held on the host: the updated device copy goes back
                held.copy_(buf, non_blocking=True)

    def momentum_bytes_on_device(self) -> int:
        return sum(b.numel() * b.element_size() for b in self.buffers.values() if b.device.type != "cpu")

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
