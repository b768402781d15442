"""SGD inside backward: grouped per unit, equal to torch.optim.SGD, incomplete groups updated when
backward ends."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from repro.models import build_model
from repro.papers.superneurons.sgd_in_backward import SGDInBackward, unit_groups


class HalfUsed(nn.Module):
    """A unit whose second weight gets no gradient (unused in forward)."""

    def __init__(self):
        super().__init__()
        self.used = nn.Linear(6, 6)
        self.unused = nn.Parameter(torch.ones(3))

    def forward(self, x):
        return self.used(x)


def _steps(model, opt_or_sgd, steps=3, torch_opt=False):
    torch.manual_seed(0)
    for _ in range(steps):
        x, y = torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,))
        if torch_opt:
            opt_or_sgd.zero_grad()
        F.cross_entropy(model(x), y).backward()
        if torch_opt:
            opt_or_sgd.step()


def test_groups_follow_the_units_of_a_sequential_model():
    model = build_model("bottleneck_resnet", 10, blocks=4, width=4)
    params = [p for p in model.parameters()]
    groups = unit_groups(model, params)
    assert sum(len(g) for g in groups) == len(params)
    assert len(groups) < len(params) and max(len(g) for g in groups) > 3  # a block's convs and BNs together
    linear = nn.Linear(2, 2)  # not a Sequential: one group per parameter
    assert [len(g) for g in unit_groups(linear, list(linear.parameters()))] == [1, 1]


@pytest.mark.parametrize("grouped", [True, False])
def test_equals_torch_sgd(grouped):
    torch.manual_seed(1)
    model = build_model("bottleneck_resnet", 10, blocks=4, width=4)
    ref = copy.deepcopy(model)
    opt = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    sgd = SGDInBackward(model, lr=0.05, momentum=0.9, weight_decay=5e-4, grouped=grouped)
    _steps(ref, opt, torch_opt=True)
    _steps(model, sgd)
    for p, q in zip(ref.parameters(), model.parameters()):
        assert torch.allclose(p, q, rtol=0, atol=1e-6)
        assert q.grad is None
    assert sgd.updates == 3 * len(sgd.params)
    assert sgd.flushes == 3 * len(sgd.groups)
    assert (sgd.flushes < sgd.updates) == grouped


def test_an_incomplete_group_is_updated_when_backward_ends():
    torch.manual_seed(2)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 6), HalfUsed(), nn.Linear(6, 10))
    ref = copy.deepcopy(model)
    trainable = [p for n, p in ref.named_parameters() if "unused" not in n]
    opt = torch.optim.SGD(trainable, lr=0.1, momentum=0.9, weight_decay=1e-3)
    sgd = SGDInBackward(model, lr=0.1, momentum=0.9, weight_decay=1e-3)
    _steps(ref, opt, torch_opt=True)
    _steps(model, sgd)
    for (name, p), q in zip(ref.named_parameters(), model.parameters()):
        assert torch.allclose(p, q, rtol=0, atol=1e-6), name
    assert torch.equal(model[2].unused, torch.ones(3))  # no gradient, no update
    assert sgd.updates == 3 * (len(sgd.params) - 1)


def _arm_and_batch(budget, momentum_on_host=False):
    from repro.papers.superneurons.arms import Arm, Optim

    torch.manual_seed(2)
    model = build_model("bottleneck_resnet", 10, blocks=4, width=4)
    ref = copy.deepcopy(model)
    arm = Arm("ours", model, Optim(lr=0.05, momentum=0.9, weight_decay=5e-4), memory_budget_bytes=budget,
              momentum_on_host=momentum_on_host)
    x, y = torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,))
    return arm, ref, x, y


def test_ours_steps_after_backward_where_the_budget_holds_every_gradient():
    """With room for all gradients at once, ours uses torch.optim's step after backward (plain's
    update, no per-unit hooks) and trains exactly as plain SGD does."""
    arm, ref, x, y = _arm_and_batch(budget=1e12)
    arm.prepare(x)
    assert arm.sgd_placement == "after backward" and arm.sgd is None
    assert isinstance(arm.optimizer, torch.optim.SGD)
    opt = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    for _ in range(3):
        arm.step(x, y)
        opt.zero_grad()
        F.cross_entropy(ref(x), y).backward()
        opt.step()
    for p, q in zip(ref.parameters(), arm.model.parameters()):
        assert torch.allclose(p, q, rtol=0, atol=1e-5)
    assert arm.estimated_static() == 3 * sum(p.numel() * p.element_size() for p in ref.parameters())
    arm.close()


@pytest.mark.parametrize("budget, on_host", [(None, False), (1.0, False), (1e12, True)])
def test_ours_keeps_sgd_in_backward_without_room_for_the_gradients(budget, on_host):
    """No budget (the peak-memory table), a budget the gradients would exceed, or momentum on the
    host: SGD stays inside backward."""
    arm, _, x, y = _arm_and_batch(budget, momentum_on_host=on_host)
    arm.prepare(x)
    assert arm.sgd_placement == "in backward" and arm.optimizer is None
    arm.step(x, y)
    assert all(p.grad is None for p in arm.model.parameters())  # applied and freed inside backward
    arm.close()
