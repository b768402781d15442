"""Cross-channel local response normalisation (Krizhevsky et al. 2012; cuDNN's LRN across channels)
as one autograd Function that saves only its input.

The formula is ``torch.nn.LocalResponseNorm``'s (and cuDNN's cross-channel mode)::

    s_c = k + alpha / n * sum_{c' = c - n//2}^{c + (n-1)//2} x_{c'}^2      (zeros outside the channels)
    y_c = x_c * s_c^(-beta)

PyTorch's ``nn.LocalResponseNorm`` is a composite of pad, avg_pool, mul, add, pow and div, and
autograd keeps the intermediates those ops save: on AlexNet about four times the input (the SuperNeurons
tests measured the LRN as the largest single-layer working set). This Function keeps ``x`` only and
recomputes the scale in backward::

    dL/dx_j = g_j s_j^(-beta) - 2 beta alpha / n * x_j * sum_{c: j in window(c)} g_c x_c s_c^(-beta-1)

where ``j in window(c)`` for ``j - (n-1)//2 <= c <= j + n//2`` (the window transposed). Any input
with channels in dimension 1 and at least one more dimension (N, C, ...), as the module it replaces.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


def _window_sum(t: torch.Tensor, front: int, back: int, size: int) -> torch.Tensor:
    """For every channel c, the sum of ``t`` over channels c - front .. c + back (zeros outside);
    ``front + back + 1 == size``."""
    n, c = t.shape[:2]
    v = F.pad(t.reshape(n, 1, c, -1), (0, 0, front, back))
    return F.avg_pool2d(v, (size, 1), stride=1).mul_(size).reshape(t.shape)


def _scale(x: torch.Tensor, size: int, alpha: float, k: float) -> torch.Tensor:
    """s = k + alpha / size * (window sum of x^2), as nn.LocalResponseNorm's window."""
    return _window_sum(x * x, size // 2, (size - 1) // 2, size).mul_(alpha / size).add_(k)


class LRNFunction(torch.autograd.Function):
    """y = x * (k + alpha / size * window sum of x^2)^(-beta); saves x only."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, size: int, alpha: float, beta: float, k: float) -> torch.Tensor:
        if x.dim() < 3:
            raise ValueError(f"LRN needs an input of at least 3 dimensions (N, C, ...), got {tuple(x.shape)}")
        ctx.save_for_backward(x)
        ctx.params = size, alpha, beta, k
        return x * _scale(x, size, alpha, k).pow_(-beta)

    @staticmethod
    def backward(ctx, grad_y: torch.Tensor):
        (x,) = ctx.saved_tensors
        size, alpha, beta, k = ctx.params
        s = _scale(x, size, alpha, k)
        s_beta = s.pow(-beta)
        t = torch.mul(grad_y, x).mul_(s_beta).div_(s)  # g * x * s^(-beta-1)
        del s
        back = _window_sum(t, (size - 1) // 2, size // 2, size)  # summed over the transposed window
        del t
        grad_x = back.mul_(x).mul_(-2.0 * beta * alpha / size).add_(grad_y * s_beta)
        return grad_x, None, None, None, None


def local_response_norm(x: torch.Tensor, size: int, alpha: float = 1e-4, beta: float = 0.75,
                        k: float = 1.0) -> torch.Tensor:
    return LRNFunction.apply(x, size, alpha, beta, k)


class FusedLocalResponseNorm(nn.Module):
    """Drop-in for ``nn.LocalResponseNorm`` (same arguments and results) that saves only its input."""

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0):
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return local_response_norm(x, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self) -> str:
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"
