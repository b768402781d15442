"""Mixup (Zhang et al., ICLR 2018) as tensor operations only, so that a CUDA-graph step can replay it:
lambda ~ Beta(alpha, alpha) and the partner permutation are drawn on the batch's device from the
device generator (no host sync, no Python random state), fresh at every replay."""

from __future__ import annotations

import torch
from torch.distributions import Beta


class Mixup:
    """``mixup(x, y)`` -> (lam * x + (1 - lam) * x[perm], y[perm], lam), lam a 0-d tensor of x's dtype.
    The loss is then lam * CE(out, y) + (1 - lam) * CE(out, y[perm])."""

    def __init__(self, alpha: float):
        if not alpha > 0:
            raise ValueError(f"mixup alpha must be > 0 (0 means no mixup: do not build one), got {alpha}")
        self.alpha = float(alpha)
        self._beta: dict[torch.device, Beta] = {}

    def _dist(self, device: torch.device) -> Beta:
        if device not in self._beta:  # built once per device, outside any captured step's replay
            a = torch.tensor(self.alpha, device=device)
            self._beta[device] = Beta(a, a, validate_args=False)
        return self._beta[device]

    def __call__(self, x: torch.Tensor, y: torch.Tensor):
        lam = self._dist(x.device).sample().to(x.dtype)
        perm = torch.rand(x.shape[0], device=x.device).argsort()  # a uniform random permutation
        return lam * x + (1 - lam) * x[perm], y[perm], lam
