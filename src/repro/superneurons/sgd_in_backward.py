"""SGD applied to each parameter as soon as its gradient is complete, inside backward (PyTorch's
"optimizer in backward" pattern, ``Tensor.register_post_accumulate_grad_hook``), then the gradient
is freed: gradient liveness, as SuperNeurons frees every tensor after its last use. The gradients of
a whole network then never coexist, which matters at 10x depth (see experiment.py's arithmetic).

The update is torch.optim.SGD's (momentum, dampening 0, weight decay, no Nesterov):
``d = g + wd * p; buf = d (first step) or momentum * buf + d; p -= lr * buf``.
Momentum buffers may live in pinned host memory (``momentum_on_host``): each update copies the
buffer in and out on the compute stream (ordered with the update, so no extra synchronisation).

``host_s`` sums the host seconds spent in the updates (a diagnostic: one small update per parameter
launches four kernels from Python, which on a fast GPU can make backward host-bound).

Limitations: every parameter must be used once per forward (a tied weight would be updated before
its second use's backward reads it; PyTorch's version check then raises), and there is no
gradient clipping or accumulation over several backward passes.
"""

from __future__ import annotations

import time

import torch
import torch.nn as nn


class SGDInBackward:
    def __init__(self, model: nn.Module, lr: float, momentum: float = 0.9, weight_decay: float = 0.0,
                 momentum_on_host: bool = False):
        if lr <= 0 or momentum < 0 or weight_decay < 0:
            raise ValueError(f"need lr > 0, momentum >= 0, weight_decay >= 0; got {lr}, {momentum}, {weight_decay}")
        self.lr, self.momentum, self.weight_decay = lr, momentum, weight_decay
        self.momentum_on_host = momentum_on_host
        self.params = [p for p in model.parameters() if p.requires_grad]
        if len({id(p) for p in self.params}) != len(self.params):
            raise ValueError("SGDInBackward needs every parameter once (tied weights are not supported)")
        self.buffers: dict[int, torch.Tensor] = {}
        self.updates = 0
        self.host_s = 0.0
        self._handles = [p.register_post_accumulate_grad_hook(self._step) for p in self.params]

    @torch.no_grad()
    def _step(self, p: torch.Tensor) -> None:
        start = time.perf_counter()
        d = p.grad  # updated in place and freed below: no parameter-sized temporary
        if self.weight_decay:
            d.add_(p, alpha=self.weight_decay)
        if self.momentum:
            key = id(p)
            held = self.buffers.get(key)
            if held is None:
                buf = d.clone()
                if self.momentum_on_host and p.is_cuda:
                    held = torch.empty(buf.shape, dtype=buf.dtype, pin_memory=True)
                    held.copy_(buf, non_blocking=True)
                    self.buffers[key] = held
                else:
                    self.buffers[key] = buf
            else:
                buf = held.to(p.device, non_blocking=True) if held.device != p.device else held
                buf.mul_(self.momentum).add_(d)
                if buf is not held:
                    held.copy_(buf, non_blocking=True)
            d = buf
        p.add_(d, alpha=-self.lr)
        p.grad = None
        self.updates += 1
        self.host_s += time.perf_counter() - start

    def momentum_bytes_on_device(self) -> int:
        return sum(b.numel() * b.element_size() for b in self.buffers.values() if b.device.type != "cpu")

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
