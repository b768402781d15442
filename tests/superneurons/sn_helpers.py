"""Tiny models and a plain-PyTorch reference for the SuperNeurons runtime tests."""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from repro.models import build_model
from repro.superneurons.runtime import RuntimeConfig, SuperNeuronsModel
from repro.superneurons.sgd_in_backward import SGDInBackward

# name -> (model name, builder kwargs, image size); AlexNet keeps its dropout and LRN (10 classes)
TINY = {
    "resnet": ("bottleneck_resnet", dict(blocks=[1, 2, 1, 1], width=4, num_classes=10), 32),
    "vgg": ("vgg11", dict(width=0.125), 32),
    "alexnet": ("alexnet", dict(num_classes=10), 67),
}


def tiny(name: str, device="cpu", batch=3, seed=0):
    model_name, kw, size = TINY[name]
    torch.manual_seed(seed)
    model = build_model(model_name, **kw).to(device)
    gen = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(batch, 3, size, size, generator=gen).to(device)
    y = torch.randint(0, 10, (batch,), generator=gen).to(device)
    return model, x, y


def grads_after_one_backward(name: str, cfg: RuntimeConfig, device="cpu"):
    """(plain grads, runtime grads, plain loss, runtime loss, wrapped model) from the same init and RNG."""
    model, x, y = tiny(name, device)
    ref = copy.deepcopy(model)
    torch.manual_seed(5)
    loss_ref = F.cross_entropy(ref(x), y)
    loss_ref.backward()
    wrapped = SuperNeuronsModel(model, cfg)
    torch.manual_seed(5)
    loss = F.cross_entropy(wrapped(x), y)
    loss.backward()
    return [p.grad for p in ref.parameters()], [p.grad for p in model.parameters()], loss_ref, loss, wrapped


def train_both(name: str, cfg: RuntimeConfig, steps=3, device="cpu", momentum_on_host=False):
    """Plain torch.optim.SGD vs the runtime + SGDInBackward for ``steps`` steps; returns both models."""
    model, x, y = tiny(name, device)
    ref = copy.deepcopy(model)
    opt = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    wrapped = SuperNeuronsModel(model, cfg)
    sgd = SGDInBackward(model, lr=0.05, momentum=0.9, weight_decay=5e-4, momentum_on_host=momentum_on_host)
    for step in range(steps):
        torch.manual_seed(100 + step)
        opt.zero_grad()
        F.cross_entropy(ref(x), y).backward()
        opt.step()
        torch.manual_seed(100 + step)
        F.cross_entropy(wrapped(x), y).backward()
    return ref, model, wrapped, sgd


def max_diff(a, b) -> float:
    return max((u.float() - v.float()).abs().max().item() for u, v in zip(a, b))


def max_rel_diff(a, b) -> float:
    """Largest per-tensor max |a - b| / max |a|: the same computation in another order (cuBLAS may pick
    another algorithm for a recomputed product) differs by rounding, a wrong mask or stale tensor by O(1)."""
    return max(((u.float() - v.float()).abs().max() / u.float().abs().max().clamp_min(1e-30)).item()
               for u, v in zip(a, b))
