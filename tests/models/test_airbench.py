"""The airbench94 net: shapes, its fixed parts, and the whitening init (white on the patches)."""

from __future__ import annotations

import pytest
import torch

from repro.models import build_model, count_params
from repro.models.airbench import AirBench, patches


def _correlated_images(n=64, seed=0):
    """Images whose pixels are strongly correlated across channels and neighbours (like photos),
    so that a non-whitening init would leave a far-from-identity covariance."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(n, 1, 34, 34, generator=g)
    smooth = torch.nn.functional.avg_pool2d(base, 3, stride=1)  # n, 1, 32, 32, neighbours correlated
    mix = torch.tensor([1.0, 0.8, 0.6]).view(1, 3, 1, 1)
    return smooth * mix + 0.05 * torch.randn(n, 3, 32, 32, generator=g)


def test_shapes_and_registry():
    model = build_model("airbench94", num_classes=7)
    assert isinstance(model, AirBench)
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 7)
    assert model.whiten.weight.shape == (24, 3, 2, 2) and model.whiten.bias is not None
    # 3 groups of two 3x3 convs (64, 256, 256), no conv biases, BN biases only, fc without bias
    expected = (24 * 3 * 4 + 24) + 9 * (24 * 64 + 64 * 64 + 64 * 256 + 256 * 256 + 2 * 256 * 256) \
        + 2 * 2 * (64 + 256 + 256) + 256 * 7
    assert count_params(model) == expected
    tiny = build_model("airbench94", widths=(8, 16, 16))
    assert tiny(torch.randn(3, 3, 32, 32)).shape == (3, 10)


def test_fixed_parts_and_bn_settings():
    model = AirBench()
    assert not model.whiten.weight.requires_grad and model.whiten.bias.requires_grad
    bns = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert len(bns) == 6
    for bn in bns:
        assert not bn.weight.requires_grad and bn.bias.requires_grad
        assert bn.momentum == pytest.approx(0.4) and bn.eps == 1e-12
    conv = model.group2.conv1  # 64 -> 256: its first 64 filters are the identity
    centre = conv.weight[:64, :, 1, 1]
    assert torch.equal(centre, torch.eye(64)) and conv.weight[:64].abs().sum() == 64
    with pytest.raises(ValueError, match="widths"):
        AirBench(widths=(64, 256))


def test_whitening_init_whitens_the_patches():
    images = _correlated_images()
    model = AirBench(widths=(8, 8, 8))
    rows = patches(images, 2)
    raw_cov = rows.T @ rows / len(rows)
    assert (raw_cov - torch.eye(12, dtype=raw_cov.dtype)).abs().max() > 0.3  # far from white before
    model.init_whitening(images, eps=0.0)
    w = model.whiten.weight.detach().double().reshape(24, 12)
    assert torch.allclose(w[12:], -w[:12])
    out = rows @ w[:12].T  # the first 12 outputs of the conv (before its bias) on every patch
    cov = out.T @ out / len(out)
    assert torch.allclose(cov, torch.eye(12, dtype=cov.dtype), atol=1e-6)
    # the conv applied to the images gives the same outputs as the patch product (layout check)
    conv_out = torch.nn.functional.conv2d(images.double(), model.whiten.weight.double())
    assert torch.allclose(conv_out[:, :12].permute(0, 2, 3, 1).reshape(-1, 12), out, atol=1e-8)
    with pytest.raises(ValueError, match="NCHW"):
        model.init_whitening(images[:, :1])
