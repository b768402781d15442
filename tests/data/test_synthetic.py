import torch

from repro.data.synthetic import SyntheticImageNet, synthetic_batch


def test_synthetic_batch_is_deterministic_and_imagenet_shaped():
    x, y = synthetic_batch(4, seed=3)
    x2, y2 = synthetic_batch(4, seed=3)
    assert x.shape == (4, 3, 224, 224) and y.shape == (4,) and y.dtype == torch.int64
    assert torch.equal(x, x2) and torch.equal(y, y2)
    assert 0 <= y.min() and y.max() < 1000
    assert not torch.equal(x, synthetic_batch(4, seed=4)[0])


def test_synthetic_imagenet_cycles_pool():
    data = SyntheticImageNet(batch_size=2, steps=5, pool=2, image_size=64, channels_last=True)
    batches = list(data)
    assert len(batches) == len(data) == 5
    assert batches[0][0] is batches[2][0] and not torch.equal(batches[0][0], batches[1][0])
    assert batches[0][0].is_contiguous(memory_format=torch.channels_last)
