"""A pruning arm's masked phase, killed and resumed from its checkpoint, ends where the uninterrupted run
ends, with its masks holding: on the CPU exactly, and on CUDA (GPU-marked), where the checkpoint's CPU
masks must first move next to the weights. Session 8's H200 resumes of PruneTrain and the 2:4 arm
failed there ("found at least two devices, cuda:0 and cpu" in the first step after the resume)."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from repro.papers.clicktrain.masks import nm_violations, sparse24_mask
from repro.data.synthetic import synthetic_split
from repro.models import build_model
from repro.train import TrainConfig, train
from repro.train.masks import ScheduledMaskHooks

CUDA = pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(),
                                                                       reason="needs a CUDA GPU")])


def _names(model):
    return [n for n, m in model.named_modules() if isinstance(m, nn.Conv2d) and m.in_channels % 4 == 0]


class Masked24(ScheduledMaskHooks):
    """The 2:4 arm's hooks (dense for one epoch, then masked), killed at optimiser step ``kill_at``."""

    def __init__(self, names, kill_at=None):
        modules = lambda m: dict(m.named_modules())  # noqa: E731
        super().__init__([1], lambda m, epoch: {n: sparse24_mask(modules(m)[n].weight) for n in names})
        self.kill_at, self.steps = kill_at, 0

    def after_optimizer_step(self, model):
        super().after_optimizer_step(model)
        self.steps += 1
        if self.steps == self.kill_at:
            raise KeyboardInterrupt("killed")


@pytest.mark.parametrize("device", ["cpu", CUDA])
def test_masked_phase_resumes(device, tmp_path, monkeypatch):
    # TF32 convolutions (cuDNN's default) round each product to 10 mantissa bits, and cudnn.benchmark
    # may pick other algorithms in another run: on the H200 (session 9) two CUDA runs then ended ~3e-3
    # apart in the stem's weights, larger than a lost optimiser or mask state would show here. In fp32
    # the runs agree to rounding, so the CUDA comparison can be tight.
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    data = synthetic_split(128, seed=0), synthetic_split(32, seed=1)
    cfg = TrainConfig(epochs=3, batch_size=16, warmup_epochs=0.5, eval_batch_size=32,
                      channels_last=device == "cuda")

    def run(kill_at=None, checkpoint=None):
        torch.manual_seed(0)
        model = build_model("cifar_resnet", depth=8, width=4)
        hooks = Masked24(_names(model), kill_at)
        return train(model, *data, cfg, hooks=hooks, seed=5, device=device, checkpoint=checkpoint), hooks

    (straight, _) = run()
    ckpt = tmp_path / "ckpt.pt"
    with pytest.raises(KeyboardInterrupt):
        run(kill_at=20, checkpoint=ckpt)  # 8 steps per epoch: in epoch 3, masked since epoch 1's end
    resumed, hooks = run(checkpoint=ckpt)
    assert resumed.resumed_epochs == 2 and hooks.active
    modules = dict(resumed.model.named_modules())
    for n, mask in hooks.masks.items():
        w = modules[n].weight
        assert mask.device == w.device and mask.stride() == w.stride(), n
        assert nm_violations(w) == 0 and not bool(w[mask == 0].any()), n
    a, b = straight.model.state_dict(), resumed.model.state_dict()
    for key in a:
        if device == "cpu":
            assert torch.equal(a[key], b[key]), key
        elif a[key].is_floating_point():  # cuDNN picks its algorithms anew: fp32 rounding may differ
            gap = (a[key] - b[key]).abs().max().item()
            assert torch.allclose(a[key], b[key], rtol=1e-3, atol=1e-4), f"{key}: max gap {gap:.3g}"
