"""Ordinary nn.Module models (their own forward, not Sequentials) at tiny sizes, for the runtime's
"any model" tests: a transformer (ViT) and a decoder stack (GPT), a concat net (DenseNet), a
torchvision-style residual net, a recurrent model; with an input and a loss for each."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from repro.models.densenet import DenseNet
from repro.models.transformer import GPTDecoder, VisionTransformer


class BasicBlock(nn.Module):
    """torchvision's BasicBlock: conv-bn-relu-conv-bn, a downsample shortcut, relu after the add
    (in place, as torchvision's)."""

    def __init__(self, cin: int, cout: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class TorchvisionResNet(nn.Module):
    def __init__(self, layers=(1, 1, 1), width=4, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        stages, c = [], width
        for k, n in enumerate(layers):
            cout = width * 2 ** k
            stages.append(nn.Sequential(*[BasicBlock(c if i == 0 else cout, cout, 2 if (i == 0 and k) else 1)
                                          for i in range(n)]))
            c = cout
        self.layer1, self.layer2, self.layer3 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(c, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class LSTMClassifier(nn.Module):
    """A recurrent model: a projection, a two-layer LSTM (its output a tuple), dropout, the last step's
    features through a linear head."""

    def __init__(self, features=6, hidden=8, num_classes=10, dropout=0.25):
        super().__init__()
        self.proj = nn.Linear(features, hidden)
        self.lstm = nn.LSTM(hidden, hidden, num_layers=2, batch_first=True)
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, x):
        out, _ = self.lstm(torch.tanh(self.proj(x)))
        return self.head(self.drop(out[:, -1]))


def _images(batch, size, gen):
    return torch.randn(batch, 3, size, size, generator=gen)


# name -> (builder, input maker (batch, generator) -> x, classes); tokens for GPT (loss per token)
ANY = {
    "vit": (lambda: VisionTransformer(10, image_size=16, patch=4, width=16, depth=2, heads=2, mlp=32, dropout=0.1),
            lambda b, g: _images(b, 16, g), 10),
    "gpt": (lambda: GPTDecoder(vocab=11, context=8, width=16, depth=2, heads=2, dropout=0.1),
            lambda b, g: torch.randint(0, 11, (b, 8), generator=g), 11),
    "densenet": (lambda: DenseNet(10, growth=4, blocks=(2, 2), init_features=8, bn_size=2),
                 lambda b, g: _images(b, 16, g), 10),
    "tv_resnet": (lambda: TorchvisionResNet(), lambda b, g: _images(b, 16, g), 10),
    "lstm": (lambda: LSTMClassifier(), lambda b, g: torch.randn(b, 5, 6, generator=g), 10),
}


# the same families at a realistic small size for the GPU twins (test_any_model_gpu.py): a ViT-S-like
# 6-block transformer on 64x64 images (65 tokens), a 4-block GPT (context 128, width 256), a
# DenseNet with DenseNet-121's growth and bottleneck (3 blocks, 64x64), a torchvision ResNet-18-like
# net (width 32, 64x64) and a 256-wide LSTM over 64 steps: each a few MB of activations a sample,
# seconds per test on an H200, large enough that cuDNN / cuBLAS pick their real kernels
GPU = {
    "vit": (lambda: VisionTransformer(100, image_size=64, patch=8, width=192, depth=6, heads=3, mlp=768, dropout=0.1),
            lambda b, g: _images(b, 64, g), 100),
    "gpt": (lambda: GPTDecoder(vocab=1000, context=128, width=256, depth=4, heads=4, dropout=0.1),
            lambda b, g: torch.randint(0, 1000, (b, 128), generator=g), 1000),
    "densenet": (lambda: DenseNet(100, growth=32, blocks=(3, 6, 6), init_features=64, bn_size=4),
                 lambda b, g: _images(b, 64, g), 100),
    "tv_resnet": (lambda: TorchvisionResNet(layers=(2, 2, 2), width=32, num_classes=100),
                  lambda b, g: _images(b, 64, g), 100),
    "lstm": (lambda: LSTMClassifier(features=64, hidden=256, num_classes=100),
             lambda b, g: torch.randn(b, 64, 64, generator=g), 100),
}


def any_model(name: str, device="cpu", batch=3, seed=0, sizes=None):
    """``sizes``: ANY (tiny, the default) or GPU."""
    build, make_x, classes = (sizes or ANY)[name]
    torch.manual_seed(seed)
    model = build().to(device)
    gen = torch.Generator().manual_seed(seed + 1)
    x = make_x(batch, gen).to(device)
    shape = (batch, x.shape[1]) if name == "gpt" else (batch,)
    y = torch.randint(0, classes, shape, generator=gen).to(device)
    return model, x, y


def loss_fn(out, y):
    return F.cross_entropy(out.flatten(0, -2).float(), y.flatten())
