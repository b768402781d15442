"""Model zoo: parameter counts against the published architectures, output shapes, registry."""

from __future__ import annotations

import numpy as np
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
    # the ClickTrain artifact's "resnet32" (hipdac-lab/ICS21-ClickTrain 97d35ff, resnet.py:107-108),
    # counted on the artifact's own resnet32()
    "clicktrain_resnet32": 20_101_450,
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


def test_clicktrain_resnet32_layers():
    """The artifact's layout: stem 3->64, [3, 4, 5, 3] basic blocks at 64-512 channels, three 1x1
    projection shortcuts; 19,906,560 weights in the 3x3 convs after the stem (the artifact's count)."""
    with torch.device("meta"):
        model = build_model("clicktrain_resnet32")
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    assert len(convs) == 1 + 2 * 15 + 3
    assert [tuple(c.weight.shape) for c in convs if c.kernel_size == (1, 1)] == [(128, 64, 1, 1), (256, 128, 1, 1),
                                                                                (512, 256, 1, 1)]
    assert sum(c.weight.numel() for c in convs[1:] if c.kernel_size == (3, 3)) == 19_906_560
    assert tuple(convs[-1].weight.shape) == (512, 512, 3, 3)


def test_clicktrain_resnet32_small_trains_bf16_channels_last():
    """A CPU-sized copy (width 4, one block per stage) through the trainer's bf16 + channels-last path."""
    from repro.data.arrays import Split
    from repro.train.trainer import TrainConfig, train

    rng = np.random.default_rng(0)
    split = Split(images=rng.integers(0, 256, (64, 32, 32, 3), dtype=np.uint8), labels=np.arange(64, dtype=np.int64) % 10,
                  classes=[str(i) for i in range(10)], source="synthetic")
    model = build_model("clicktrain_resnet32", width=4, blocks=[1, 1, 1, 1])
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    cfg = TrainConfig(epochs=1, batch_size=32, precision="bf16", channels_last=True, eval_batch_size=64)
    result = train(model, split, split, cfg)
    assert np.isfinite(result.history.train_loss.iloc[0])
    assert result.history.test_top1.notna().all()
    assert model[0].weight.is_contiguous(memory_format=torch.channels_last)  # the trainer moved it
    assert not model[0].weight.is_contiguous()


def test_clicktrain_resnet32_rejects_bad_blocks():
    with pytest.raises(ValueError, match="4 stage counts"):
        build_model("clicktrain_resnet32", blocks=[1, 1, 1])
