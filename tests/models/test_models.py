"""Model zoo: parameter counts against the published architectures, output shapes, registry."""

from __future__ import annotations

import pytest
import torch

from repro.models import MODELS, build_model, count_params, stage_blocks
from repro.models.resnet import ZeroPadShortcut

# Parameter counts of the reference architectures (10 classes for CIFAR, 1000 for ImageNet);
# the ImageNet ones equal torchvision's, the CIFAR ResNets He et al.'s (0.27M/0.46M/0.85M).
PARAMS = {
    "resnet20": 269_722, "resnet32": 464_154, "resnet56": 853_018, "vgg16": 14_724_042,
    "resnet18": 11_689_512, "resnet50": 25_557_032, "resnet101": 44_549_160, "resnet152": 60_192_808,
    "alexnet": 60_965_224, "vgg16_imagenet": 138_357_544, "vgg19_imagenet": 143_667_240,
}


@pytest.mark.parametrize("name", sorted(PARAMS))
def test_param_counts(name):
    with torch.device("meta"):  # no memory, no init cost
        assert count_params(build_model(name)) == PARAMS[name]


@pytest.mark.parametrize("name", ["resnet20", "resnet32", "vgg16"])
def test_cifar_forward(name):
    model = build_model(name, num_classes=7, **({"width": 4} if "resnet" in name else {"width": 0.125}))
    out = model(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 7)
    cl = model.to(memory_format=torch.channels_last)(torch.randn(2, 3, 32, 32).to(memory_format=torch.channels_last))
    assert cl.shape == (2, 7)


@pytest.mark.parametrize("name,size", [("resnet50", 224), ("alexnet", 227), ("alexnet", 224), ("vgg19_imagenet", 224),
                                       ("resnet18", 224)])
def test_imagenet_shapes(name, size):
    with torch.device("meta"):
        assert build_model(name)(torch.empty(2, 3, size, size)).shape == (2, 1000)


def test_resnet50_runs_for_real():
    model = build_model("resnet50", num_classes=10).eval()
    with torch.no_grad():
        assert model(torch.randn(1, 3, 64, 64)).shape == (1, 10)


def test_option_a_shortcut_has_no_parameters():
    a, b = build_model("resnet32"), build_model("resnet32", shortcut="B")
    assert sum(isinstance(m, ZeroPadShortcut) for m in a.modules()) == 2
    assert count_params(b) > count_params(a)
    x = torch.randn(1, 16, 8, 8)
    y = ZeroPadShortcut(16, 2)(x)
    assert y.shape == (1, 32, 4, 4) and torch.equal(y[:, :16], x[:, :, ::2, ::2]) and not y[:, 16:].any()


def test_bottleneck_resnet_any_depth():
    assert stage_blocks(16) == [3, 4, 6, 3]
    assert stage_blocks(5) == [1, 1, 2, 1]
    for total in (4, 7, 84, 833, 2500):
        counts = stage_blocks(total)
        assert sum(counts) == total and min(counts) >= 1
    with torch.device("meta"):
        deep = build_model("bottleneck_resnet", blocks=84)
        assert len(deep) == 4 + 84 + 3  # flat Sequential: stem, one entry per block, head
        assert deep(torch.empty(1, 3, 224, 224)).shape == (1, 1000)
        assert count_params(build_model("bottleneck_resnet", blocks=[3, 4, 23, 3])) == PARAMS["resnet101"]


def test_registry_errors_and_defaults():
    with pytest.raises(ValueError, match="unknown model 'resnet33'.*resnet32"):
        build_model("resnet33")
    with pytest.raises(ValueError, match="6n\\+2"):
        build_model("cifar_resnet", depth=33)
    with pytest.raises(TypeError):
        build_model("resnet32", no_such_option=1)
    assert {"resnet32", "vgg16", "alexnet", "resnet50", "bottleneck_resnet", "vgg16_imagenet"} <= set(MODELS)
