"""The shared masking hooks: masks hold after every optimiser step, a schedule replaces them at its
epochs (gradual pruning), and the epoch rows name the phase."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from repro.data.synthetic import synthetic_split
from repro.models import build_model
from repro.train import TrainConfig, train
from repro.train.masks import FixedMaskHooks, ScheduledMaskHooks


def _convs(model):
    return [n for n, m in model.named_modules() if isinstance(m, nn.Conv2d)][1:]


def _magnitude_masks(model, names, density):
    modules = dict(model.named_modules())
    out = {}
    for n in names:
        w = modules[n].weight.detach().abs()
        k = max(1, int(density * w.numel()))
        out[n] = w >= w.flatten().topk(k).values.min()
    return out


def test_schedule_prunes_in_steps_and_masks_hold():
    data = synthetic_split(64, seed=0), synthetic_split(32, seed=1)
    cfg = TrainConfig(epochs=4, batch_size=16, warmup_epochs=0, eval_batch_size=32, channels_last=False)
    torch.manual_seed(0)
    model = build_model("cifar_resnet", depth=8, width=4)
    names = _convs(model)
    densities = {1: 0.5, 2: 0.25}
    made = []

    def make(m, epoch):
        made.append(epoch)
        return _magnitude_masks(m, names, densities[epoch])

    hooks = ScheduledMaskHooks([2, 1], make)
    result = train(model, *data, cfg, hooks=hooks, seed=0, device="cpu")
    assert made == [1, 2]
    assert list(result.history.phase) == ["dense", "pruning", "masked", "masked"]
    modules = dict(result.model.named_modules())
    for n in names:
        w, mask = modules[n].weight, hooks.masks[n]
        assert not bool(w[mask == 0].any()), n  # pruned weights stayed zero through two more epochs
        assert abs(float(mask.mean()) - 0.25) < 0.05, n


def test_schedule_needs_an_epoch():
    with pytest.raises(ValueError, match="prune_epochs"):
        ScheduledMaskHooks([], lambda m, e: {})
    with pytest.raises(ValueError, match="prune_epochs"):
        ScheduledMaskHooks([0], lambda m, e: {})


def test_fixed_masks_zero_weights_at_once():
    torch.manual_seed(0)
    model = build_model("cifar_resnet", depth=8, width=4)
    names = _convs(model)
    hooks = FixedMaskHooks(model, _magnitude_masks(model, names, 0.5), "retrain")
    modules = dict(model.named_modules())
    assert all(not bool(modules[n].weight[hooks.masks[n] == 0].any()) for n in names)
    assert hooks.on_epoch_end(model, 1, {}) == {"phase": "retrain", "hook_s": 0.0}
