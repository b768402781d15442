"""On-device augmentation and the learning-rate schedule."""

from __future__ import annotations

import math

import pytest
import torch

from repro.train.augment import DeviceAugment, channel_stats, epoch_plan
from repro.train.schedule import lr_at


def _reference_crop_flip(image, dy, dx, flip, pad=4):
    h, w, c = image.shape
    padded = torch.zeros(h + 2 * pad, w + 2 * pad, c, dtype=image.dtype)
    padded[pad:pad + h, pad:pad + w] = image
    out = padded[dy:dy + h, dx:dx + w]
    return out.flip(1) if flip else out


def test_crop_flip_matches_per_image_reference():
    images = torch.randint(0, 256, (50, 32, 32, 3), dtype=torch.uint8)
    plan = epoch_plan(50, 16, seed=1, epoch=0)
    aug = DeviceAugment([0.5] * 3, [0.25] * 3, 32, 32, "cpu")
    out = aug.crop_flip(images, plan[1])
    assert out.shape == (16, 32, 32, 3) and out.dtype == torch.uint8
    for b, (i, dy, dx, flip) in enumerate(plan[1].tolist()):
        assert torch.equal(out[b], _reference_crop_flip(images[i], dy, dx, flip))
    x = aug(images, plan[1])
    assert x.shape == (16, 3, 32, 32) and x.dtype == torch.float32
    assert x.is_contiguous(memory_format=torch.channels_last)
    assert DeviceAugment([0.5] * 3, [0.25] * 3, 32, 32, "cpu", channels_last=False)(images, plan[1]).is_contiguous()


def test_plan_is_deterministic_per_seed_and_epoch():
    a, b = epoch_plan(1000, 128, seed=0, epoch=3), epoch_plan(1000, 128, seed=0, epoch=3)
    assert torch.equal(a, b) and a.shape == (7, 128, 4)  # 1000 // 128 steps: the last partial batch is dropped
    assert not torch.equal(a, epoch_plan(1000, 128, seed=0, epoch=4))
    assert not torch.equal(a, epoch_plan(1000, 128, seed=1, epoch=3))
    assert len(set(a[..., 0].flatten().tolist())) == 7 * 128  # a permutation: no image twice
    assert a[..., 1:3].min() >= 0 and a[..., 1:3].max() <= 8 and set(a[..., 3].unique().tolist()) == {0, 1}
    plain = epoch_plan(1000, 128, seed=0, epoch=3, augment=False)
    assert (plain[..., 1:3] == 4).all() and not plain[..., 3].any()  # centre crop = the image itself
    with pytest.raises(ValueError, match="larger than"):
        epoch_plan(10, 128, 0, 0)


def test_normalize_and_stats():
    images = torch.randint(0, 256, (8, 4, 4, 3), dtype=torch.uint8)
    mean, std = channel_stats(images.numpy())
    x = DeviceAugment(mean, std, 4, 4, "cpu").normalize(images)
    assert torch.allclose(x.mean((0, 2, 3)), torch.zeros(3), atol=1e-5)
    assert torch.allclose(x.std((0, 2, 3), unbiased=False), torch.ones(3), atol=1e-4)


def test_schedule_shapes():
    total, warm = 1000, 100
    assert lr_at(0, total, 0.1, warm) == pytest.approx(0.001)
    assert lr_at(warm - 1, total, 0.1, warm) == pytest.approx(0.1)
    assert lr_at(warm + 450, total, 0.1, warm) == pytest.approx(0.05)
    assert lr_at(total - 1, total, 0.1, warm) < 1e-5
    assert lr_at(550, total, 0.1, warm, "onecycle") == pytest.approx(0.05)
    assert lr_at(999, total, 0.1, warm, "constant") == 0.1
    assert all(not math.isnan(lr_at(s, 10, 0.1, 0)) for s in range(12))
    with pytest.raises(ValueError, match="schedule"):
        lr_at(0, 10, 0.1, 0, "step")
