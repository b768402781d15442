"""Mixup (repro.train.mixup) and the trainer step's mixed loss (TrainHooks.mix_batch)."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from repro.train import TrainHooks
from repro.train.mixup import Mixup
from repro.train.step import TrainStep


def test_mixup_is_a_convex_combination_with_a_permuted_partner():
    torch.manual_seed(0)
    x = torch.randn(16, 3, 4, 4)
    y = torch.arange(16)  # distinct labels name each image's partner
    lams = []
    for _ in range(50):
        mixed, y_other, lam = Mixup(0.3)(x, y)
        assert lam.dim() == 0 and 0.0 <= float(lam) <= 1.0
        assert sorted(y_other.tolist()) == list(range(16))  # a permutation
        assert torch.allclose(mixed, lam * x + (1 - lam) * x[y_other], atol=1e-6)
        lams.append(float(lam))
    # Beta(0.3, 0.3) is U-shaped: most draws near 0 or 1, mean 0.5
    near_edges = sum(lam < 0.1 or lam > 0.9 for lam in lams)
    assert near_edges > 20 and 0.3 < sum(lams) / len(lams) < 0.7


def test_mixup_refuses_a_nonpositive_alpha():
    with pytest.raises(ValueError, match="alpha must be > 0"):
        Mixup(0.0)


class FixedMix(TrainHooks):
    def __init__(self, x2, y2, lam):
        self.x2, self.y2, self.lam = x2, y2, lam

    def mix_batch(self, x, y):
        return self.x2, self.y2, self.lam


def test_step_trains_on_the_mixed_batch_against_both_label_sets():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 5))
    x, x2 = torch.randn(8, 3, 2, 2), torch.randn(8, 3, 2, 2)
    y, y2 = torch.randint(0, 5, (8,)), torch.randint(0, 5, (8,))
    lam = torch.tensor(0.3)
    out = model(x2)
    expected = 0.3 * F.cross_entropy(out, y) + 0.7 * F.cross_entropy(out, y2)
    expected.backward()
    grad = model[1].weight.grad.clone()
    model.zero_grad()
    step = TrainStep(model, torch.optim.SGD(model.parameters(), lr=0.0), FixedMix(x2, y2, lam), device="cpu")
    step(x, y)
    assert float(step.loss_sum) / 8 == pytest.approx(float(expected.detach()), rel=1e-5)
    assert torch.allclose(model[1].weight.grad, grad, atol=1e-6)
    assert FixedMix(x2, y2, lam).per_step_overrides() == ["mix_batch"]
