"""Today's alternatives as arms (issue 26 item 4): selective activation checkpointing (sac) and
torch.compile under activation_memory_budget (amb_<v>) train like plain PyTorch (same loss and
gradients from the same init) on a CNN, a ViT and a GPT decoder; arm names are checked."""

from __future__ import annotations

import copy

import pytest
import torch

from any_models import any_model
from sn_helpers import max_rel_diff, tiny
from repro.papers.superneurons.arms import Arm, Optim, amb_budget, check_arm_names, loss_of, sac_policy
from repro.papers.superneurons.probe import ProbeSpec, run_probe


def _grads(arm_name, model, x, y):
    arm = Arm(arm_name, model, Optim())
    arm.prepare(x)
    torch.manual_seed(3)
    loss = loss_of(arm.forward(x), y)
    loss.backward()
    return loss.detach(), [p.grad for p in model.parameters()], arm


@pytest.mark.parametrize("arm", ["sac", "amb_0.5"])
@pytest.mark.parametrize("net", ["resnet", "vit", "gpt"])
def test_today_arms_train_like_plain(net, arm):
    model, x, y = tiny(net) if net == "resnet" else any_model(net)
    for m in model.modules():  # compiled dropout draws its masks differently from eager's: compare without
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    ref = copy.deepcopy(model)
    loss_ref, grads_ref, _ = _grads("plain", ref, x, y)
    loss, grads, a = _grads(arm, model, x, y)
    assert torch.allclose(loss, loss_ref, rtol=1e-5, atol=1e-6)
    assert all(g is not None for g in grads)
    # sac runs the same kernels (1e-6); compile's decompositions (batch norm's, layer norm's) round
    # differently: ~2e-4 on the ResNet; a wrong recomputation would be O(1) off
    assert max_rel_diff(grads_ref, grads) <= (1e-5 if arm == "sac" else 1e-3)
    if arm == "sac":
        assert a.units and len(a.units) > 1  # checkpointed unit by unit
    else:
        assert a._compiled is not None


def test_sac_policy_saves_matmuls_and_recomputes_the_rest():
    from torch.utils.checkpoint import CheckpointPolicy
    aten = torch.ops.aten
    assert sac_policy(None, aten.mm.default) == CheckpointPolicy.MUST_SAVE
    assert sac_policy(None, aten.convolution.default) == CheckpointPolicy.MUST_SAVE
    assert sac_policy(None, aten.relu.default) == CheckpointPolicy.PREFER_RECOMPUTE


def test_arm_names_are_checked():
    assert amb_budget("amb_0.5") == 0.5 and amb_budget("plain") is None
    for bad in ("amb_0", "amb_1.5", "amb_x"):
        with pytest.raises(ValueError, match="0 < v <= 1"):
            amb_budget(bad)
    check_arm_names(["plain", "sac", "amb_0.3", "ours"], ("plain", "ours"), "arms")
    with pytest.raises(ValueError, match=r"unknown arm\(s\) \['sack'\]"):
        check_arm_names(["sack"], ("plain",), "arms")


@pytest.mark.parametrize("arm", ["sac", "amb_0.5", "ours"])
def test_probe_runs_today_arms_and_token_models(arm):
    """The probe feeds a language model token ids (gpt2_small's registry entry says so) and trains it."""
    spec = ProbeSpec(arm=arm, model="gpt2_small", num_classes=50,
                     model_kw=dict(context=8, width=16, depth=2, heads=2), image_size=8, batch_size=2,
                     warmup=1, steps=1)
    r = run_probe(spec)
    assert r["fits"], r["reason"]
    assert r["images_per_s"] > 0
