"""Lookahead by an exponential moving average of the weights, as airbench94 does it (Keller Jordan,
github.com/KellerJordan/cifar10-airbench): every ``every`` steps the average moves towards the
network, ``avg = decay * avg + (1 - decay) * net``, and the network is then set to the average;
``decay`` grows with training as ``base * (step / total_steps) ** 3`` (airbench: base 0.95 ** 5,
every 5 steps), so it does little early and smooths the weights late. After the last step the
network is set to the average once more (airbench's final ``decay=1.0`` update: the steps since
the last update are dropped). Every floating-point entry of the state dict takes part (weights and
BatchNorm running statistics), integer ones (``num_batches_tracked``) do not. A parameter frozen by
TrainConfig.freeze (lr 0) still moves once, at the next update, to the average, and then stays.

The update runs between training steps, in place on the model's own tensors, so a CUDA-graph-captured
step keeps working.
"""

from __future__ import annotations

import torch
import torch.nn as nn


class Lookahead:
    def __init__(self, model: nn.Module, every: int, base: float, total_steps: int):
        if every < 1:
            raise ValueError(f"lookahead: every must be >= 1 step, got {every}")
        if not 0.0 <= base <= 1.0:
            raise ValueError(f"lookahead: decay base must be in [0, 1], got {base}")
        self.every, self.base, self.total_steps = every, base, total_steps
        self.names = [k for k, v in model.state_dict().items() if v.is_floating_point()]
        state = model.state_dict()
        self.tensors = [state[k] for k in self.names]  # the model's own storage (detached views)
        self.average = [t.detach().clone() for t in self.tensors]

    def decay_at(self, step: int) -> float:
        return self.base * (step / self.total_steps) ** 3

    @torch.no_grad()
    def update(self, decay: float) -> None:
        torch._foreach_lerp_(self.average, self.tensors, 1.0 - decay)
        torch._foreach_copy_(self.tensors, self.average)

    def after_step(self, step: int) -> None:
        """Call after global step ``step`` (1-based) of ``total_steps``."""
        if step % self.every == 0:
            self.update(self.decay_at(step))
        if step == self.total_steps:
            self.update(1.0)

    def state_dict(self) -> dict:
        return {k: v.cpu() for k, v in zip(self.names, self.average)}

    def load_state_dict(self, state: dict) -> None:
        if sorted(state) != sorted(self.names):
            raise ValueError("lookahead state does not match the model's state dict")
        for name, avg in zip(self.names, self.average):
            avg.copy_(state[name])
