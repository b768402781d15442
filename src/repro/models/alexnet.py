"""AlexNet (Krizhevsky, Sutskever & Hinton, NIPS 2012) as in Caffe's bvlc_alexnet, the network the
SuperNeurons paper measured: 227x227 input, conv 96-256-384-384-256 with two groups on conv2/4/5
(the paper's two-GPU split), local response normalisation after conv1 and conv2, three fully
connected layers with dropout (61.0M parameters). Adaptive 6x6 pooling before the classifier so
224x224 inputs work too. A flat ``nn.Sequential`` (see :mod:`repro.models.resnet`). The LRN is
:class:`repro.models.lrn.FusedLocalResponseNorm` (nn.LocalResponseNorm's formula, as cuDNN's
cross-channel LRN, in one autograd Function that saves only its input; PyTorch's composite keeps
several input-sized intermediates for backward).
"""

from __future__ import annotations

import torch.nn as nn

from repro.models.lrn import FusedLocalResponseNorm


def alexnet(num_classes: int = 1000, dropout: float = 0.5, groups: int = 2) -> nn.Sequential:
    def lrn():
        return FusedLocalResponseNorm(5, alpha=1e-4, beta=0.75, k=1.0)

    def relu():
        return nn.ReLU(inplace=True)
    model = nn.Sequential(
        nn.Conv2d(3, 96, 11, stride=4), relu(), lrn(), nn.MaxPool2d(3, 2),
        nn.Conv2d(96, 256, 5, padding=2, groups=groups), relu(), lrn(), nn.MaxPool2d(3, 2),
        nn.Conv2d(256, 384, 3, padding=1), relu(),
        nn.Conv2d(384, 384, 3, padding=1, groups=groups), relu(),
        nn.Conv2d(384, 256, 3, padding=1, groups=groups), relu(), nn.MaxPool2d(3, 2),
        nn.AdaptiveAvgPool2d(6), nn.Flatten(),
        nn.Dropout(dropout), nn.Linear(256 * 36, 4096), relu(),
        nn.Dropout(dropout), nn.Linear(4096, 4096), relu(),
        nn.Linear(4096, num_classes),
    )
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            nn.init.zeros_(m.bias)
    return model
