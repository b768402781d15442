"""The ADS pipeline's DNNs, our own stand-ins with random weights (timing needs shapes, not training):
``detection`` (a strided conv backbone and a box/class head over ``batch`` camera images),
``segmentation`` (an encoder-decoder to per-pixel classes), ``tracking`` (an MLP over object tracks
and a track-detection affinity matrix) and ``planning`` (a transformer encoder over scene tokens).
``width`` and ``image`` scale them: paper scale is camera-sized, smoke scale tiny."""

from __future__ import annotations

import torch
import torch.nn as nn

DNNS = ("detection", "segmentation", "tracking", "planning")


def _conv(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class Detection(nn.Module):
    def __init__(self, width: int, classes: int = 10, anchors: int = 3):
        super().__init__()
        w = width
        self.body = nn.Sequential(_conv(3, w, 2), _conv(w, w), _conv(w, 2 * w, 2), _conv(2 * w, 2 * w),
                                  _conv(2 * w, 4 * w, 2), _conv(4 * w, 4 * w), _conv(4 * w, 8 * w, 2), _conv(8 * w, 8 * w))
        self.head = nn.Conv2d(8 * w, anchors * (classes + 5), 1)

    def forward(self, x):
        return self.head(self.body(x))


class Segmentation(nn.Module):
    def __init__(self, width: int, classes: int = 20):
        super().__init__()
        w = width
        self.down = nn.Sequential(_conv(3, w, 2), _conv(w, 2 * w, 2), _conv(2 * w, 4 * w, 2), _conv(4 * w, 4 * w))
        self.up = nn.Sequential(nn.Upsample(scale_factor=2), _conv(4 * w, 2 * w), nn.Upsample(scale_factor=2),
                                _conv(2 * w, w), nn.Upsample(scale_factor=2), nn.Conv2d(w, classes, 1))

    def forward(self, x):
        return self.up(self.down(x))


class Tracking(nn.Module):
    def __init__(self, width: int, features: int = 64):
        super().__init__()
        self.embed = nn.Sequential(nn.Linear(features, 4 * width), nn.ReLU(), nn.Linear(4 * width, 4 * width))

    def forward(self, x):  # x: (batch, tracks + detections, features)
        e = self.embed(x)
        return torch.softmax(e @ e.transpose(1, 2), dim=-1)


class Planning(nn.Module):
    def __init__(self, width: int, layers: int = 4):
        super().__init__()
        d = 8 * width
        layer = nn.TransformerEncoderLayer(d, nhead=8, dim_feedforward=4 * d, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, 3)  # (x, y, heading) per waypoint token

    def forward(self, x):  # x: (batch, tokens, 8 * width)
        return self.head(self.encoder(x))


def build(name: str, width: int, image: int, batch: int, tokens: int, device: str) -> tuple[nn.Module, torch.Tensor]:
    """The DNN in eval mode on ``device`` and one input batch for it."""
    if name == "detection":
        model, x = Detection(width), torch.randn(batch, 3, image, image)
    elif name == "segmentation":
        model, x = Segmentation(width), torch.randn(batch, 3, image, image)
    elif name == "tracking":
        model, x = Tracking(width), torch.randn(batch, tokens, 64)
    elif name == "planning":
        model, x = Planning(width), torch.randn(batch, tokens, 8 * width)
    else:
        raise ValueError(f"dnns: unknown DNN {name!r}; known: {', '.join(DNNS)}")
    return model.to(device).eval(), x.to(device)


def sizes(model: nn.Module, x: torch.Tensor) -> tuple[float, float]:
    """(weight bytes, largest single activation's bytes) of one forward of ``model`` on ``x``: what a
    reallocation moves (the weights; during a run also the live features)."""
    weights = float(sum(p.numel() * p.element_size() for p in model.parameters()))
    largest = [float(x.numel() * x.element_size())]

    def hook(_m, _i, out):
        if isinstance(out, torch.Tensor):
            largest[0] = max(largest[0], float(out.numel() * out.element_size()))

    handles = [m.register_forward_hook(hook) for m in model.modules() if not list(m.children())]
    with torch.no_grad():
        model(x)
    for h in handles:
        h.remove()
    return weights, largest[0]
