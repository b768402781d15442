"""The airbench94 network (Keller Jordan, github.com/KellerJordan/cifar10-airbench, legacy/airbench94.py):
a small VGG-like CIFAR-10 net that reaches about 94% in under 10 epochs. Our own implementation of
its architecture, for the baseline's data-ceiling experiment (config/experiment/baseline/airbench.yaml).

    whiten   2x2 conv, 3 -> 24 channels, no padding, bias; weights fixed by :meth:`AirBench.init_whitening`
             (the 12 eigenvectors of the 2x2-patch covariance, scaled by 1/sqrt(eigenvalue + eps),
             and their negatives); the weight is never trained, its bias is (the trainer may freeze
             it after some epochs: TrainConfig.freeze)
    GELU
    3 groups (widths 64, 256, 256): conv3x3 -> maxpool 2 -> BN -> GELU -> conv3x3 -> BN -> GELU
    maxpool 3 -> flatten -> linear (no bias) -> x 1/9

BatchNorm: no trainable scale (weight fixed at 1, requires_grad False), trainable bias, eps 1e-12,
running-statistics momentum 0.4 in PyTorch's convention (airbench's "0.6" is the weight of the old
statistics). 3x3 convs: no bias, PyTorch's default init with the first ``in_channels`` filters
replaced by the identity (``nn.init.dirac_``), as airbench does.
"""

from __future__ import annotations

import torch
import torch.nn as nn


class _BatchNorm(nn.BatchNorm2d):
    def __init__(self, channels: int, momentum: float):
        super().__init__(channels, eps=1e-12, momentum=1 - momentum)
        self.weight.requires_grad = False


class _Conv(nn.Conv2d):
    def __init__(self, cin: int, cout: int):
        super().__init__(cin, cout, kernel_size=3, padding="same", bias=False)

    def reset_parameters(self) -> None:
        super().reset_parameters()
        nn.init.dirac_(self.weight.data[: self.weight.shape[1]])


class _ConvGroup(nn.Module):
    def __init__(self, cin: int, cout: int, bn_momentum: float):
        super().__init__()
        self.conv1 = _Conv(cin, cout)
        self.pool = nn.MaxPool2d(2)
        self.norm1 = _BatchNorm(cout, bn_momentum)
        self.conv2 = _Conv(cout, cout)
        self.norm2 = _BatchNorm(cout, bn_momentum)
        self.activ = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.activ(self.norm1(self.pool(self.conv1(x))))
        return self.activ(self.norm2(self.conv2(x)))


def patches(images: torch.Tensor, size: int) -> torch.Tensor:
    """All ``size`` x ``size`` patches (stride 1) of NCHW ``images``, as (n, C*size*size) float64 rows
    in the (C, kh, kw) order of a conv weight."""
    c = images.shape[1]
    p = images.double().unfold(2, size, 1).unfold(3, size, 1)  # N, C, H', W', kh, kw
    return p.permute(0, 2, 3, 1, 4, 5).reshape(-1, c * size * size)


class AirBench(nn.Module):
    def __init__(self, num_classes: int = 10, widths=(64, 256, 256), bn_momentum: float = 0.6,
                 scaling: float = 1 / 9, whiten_kernel: int = 2):
        super().__init__()
        if len(widths) != 3 or min(widths) < 1:
            raise ValueError(f"airbench: widths must be three positive channel counts, got {widths!r}")
        if not 0.0 <= bn_momentum < 1.0:
            raise ValueError(f"airbench: bn_momentum must be in [0, 1), got {bn_momentum}")
        self.whiten_kernel = whiten_kernel
        whiten_width = 2 * 3 * whiten_kernel ** 2
        self.whiten = nn.Conv2d(3, whiten_width, whiten_kernel, padding=0, bias=True)
        self.whiten.weight.requires_grad = False
        self.whitened = False  # set by init_whitening
        self.activ = nn.GELU()
        w1, w2, w3 = widths
        self.group1 = _ConvGroup(whiten_width, w1, bn_momentum)
        self.group2 = _ConvGroup(w1, w2, bn_momentum)
        self.group3 = _ConvGroup(w2, w3, bn_momentum)
        self.pool = nn.MaxPool2d(3)
        self.fc = nn.Linear(w3, num_classes, bias=False)
        self.scaling = scaling

    @torch.no_grad()
    def init_whitening(self, images: torch.Tensor, eps: float = 5e-4) -> None:
        """Set the whitening conv from normalised NCHW ``images`` (airbench: the first 5000 training
        images): filter k is eigenvector k of the patch covariance E[p p^T] over 1/sqrt(lambda_k + eps),
        filters 12..23 their negatives, so that the first 12 outputs have (nearly) identity covariance."""
        if images.dim() != 4 or images.shape[1] != 3:
            raise ValueError(f"init_whitening needs NCHW images with 3 channels, got shape {tuple(images.shape)}")
        k = self.whiten_kernel
        rows = patches(images.cpu(), k)
        cov = rows.T @ rows / len(rows)
        eigenvalues, eigenvectors = torch.linalg.eigh(cov)  # ascending
        eigenvalues, eigenvectors = eigenvalues.flip(0), eigenvectors.T.flip(0)  # largest first, one per row
        filters = (eigenvectors / torch.sqrt(eigenvalues + eps)[:, None]).reshape(-1, 3, k, k)
        weight = torch.cat([filters, -filters]).to(self.whiten.weight)
        self.whiten.weight.copy_(weight)
        self.whitened = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.activ(self.whiten(x))
        x = self.group3(self.group2(self.group1(x)))
        return self.fc(self.pool(x).flatten(1)) * self.scaling


def airbench(num_classes: int = 10, **kw) -> AirBench:
    return AirBench(num_classes=num_classes, **kw)
