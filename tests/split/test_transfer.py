"""repro.split.plain and repro.split.transfer: the single-exit CIFAR nets, the transfer layer and the
int8 codec (shapes, bytes, error bound), the net with a codec (device part frozen, base unchanged),
the split points chosen, and the codec timer."""

from __future__ import annotations

import pytest
import torch

from repro.data.synthetic import synthetic_split
from repro.split import plain, profile, transfer
from repro.split.train import ExitTraining, exit_accuracy, train_exits

TINY = {"resnet": {"depth": 8, "width": 4}, "vgg": {"depth": 11, "width": 0.125},
        "densenet": {"growth": 4, "blocks": [1, 1, 1]}}


@pytest.mark.parametrize("name", sorted(TINY))
def test_plain_nets_classify_and_split_anywhere(name):
    net = plain.build(name, **TINY[name]).eval()
    x = torch.randn(2, 3, 32, 32)
    (out,) = net(x)
    assert out.shape == (2, 10) and len(net.heads) == 1 and net.attach == [len(net.layers)]
    tensors = transfer.split_tensors(net, x[:1])
    assert profile.split_bytes(profile.profile(net, "cpu", 1, warmup=0, repeats=1)) == [t.numel() * 4 for t in tensors]


def test_densenet_defaults_are_densenet_bc_100():
    net = plain.densenet()
    convs = sum(isinstance(m, torch.nn.Conv2d) for m in net.modules())
    assert convs + 1 == 100  # 3 x 16 dense layers of two convs, 2 transitions, the stem, plus the classifier


def test_transfer_layer_sends_fewer_values_and_restores_the_shape():
    tl = transfer.TransferLayer(16, reduction=4, spatial=2)
    x = torch.randn(1, 16, 8, 8)
    z = tl.down(x)
    assert z.shape == (1, 4, 4, 4) and tl(x).shape == x.shape
    assert tl.sent_bytes(z) * 16 == x.numel() * 4


def test_int8_codec_error_is_half_a_step_and_bytes_are_one_per_value():
    codec = transfer.Int8Codec()
    x = torch.randn(3, 8, 5, 5) * torch.tensor([1.0, 10.0, 0.1]).view(3, 1, 1, 1)
    z = codec.down(x)
    assert z[0].dtype == torch.uint8 and codec.sent_bytes(z) == x.numel() + 3 * 2 * 4
    step = (x.flatten(1).amax(1) - x.flatten(1).amin(1)) / 255
    err = (codec.up(z) - x).abs().flatten(1).amax(1)
    assert (err <= step / 2 + 1e-6).all()
    assert torch.equal(codec(torch.zeros(1, 2, 2, 2)), torch.zeros(1, 2, 2, 2))  # a constant tensor survives


def test_net_with_codec_trains_only_the_codec_and_the_edge_part():
    net = plain.build("resnet", **TINY["resnet"])
    train = synthetic_split(64, seed=0)
    base = {k: v.clone() for k, v in net.state_dict().items()}
    s = 4
    coded = transfer.with_codec(net, s, transfer.TransferLayer(4))
    prefix = {k: v.clone() for k, v in coded.layers[0].state_dict().items()}
    codec_w = coded.layers[1].down.weight.clone()
    train_exits(coded, train, ExitTraining(epochs=1, batch_size=32, warmup_epochs=0.0), "cpu", seed=0)
    assert not coded.layers[0].training and all(not p.requires_grad for p in coded.layers[0].parameters())
    for k, v in coded.layers[0].state_dict().items():  # weights and BN statistics as trained
        assert torch.equal(v, prefix[k]), k
    assert not torch.equal(coded.layers[1].down.weight, codec_w)
    for k, v in net.state_dict().items():  # the base net is untouched
        assert torch.equal(v, base[k]), k
    assert exit_accuracy(coded, train, train, "cpu").shape == (1,)
    with pytest.raises(ValueError):
        transfer.with_codec(net, len(net.layers), transfer.Int8Codec())


def test_points_one_per_resolution_at_the_smallest_tensor():
    net = plain.build("vgg", **TINY["vgg"])
    tensors = transfer.split_tensors(net, torch.zeros(1, 3, 32, 32))
    got = transfer.points(net, spatial=2)
    sides = [tensors[s].shape[-1] for s in got]
    assert sides == sorted(set(sides), reverse=True) and 1 not in sides
    for s in got:
        same = [t.numel() for t in tensors[1:-1] if t.dim() == 4 and t.shape[-1] == tensors[s].shape[-1]]
        assert tensors[s].numel() == min(same)
    assert all(tensors[s].shape[-1] % 4 == 0 for s in transfer.points(net, spatial=4))


def test_codec_times_are_positive_and_bytes_match():
    x = torch.randn(1, 8, 16, 16)
    for codec, sent in ((transfer.TransferLayer(8), 2 * 8 * 8 * 4), (transfer.Int8Codec(), 8 * 16 * 16 + 8)):
        t = transfer.codec_times(codec, x, "cpu", 1, warmup=0, repeats=2)
        assert t["down_s"] > 0 and t["up_s"] > 0 and t["bytes"] == sent
