"""Pattern library, selection, projection, the mask check, and the hooks' tensor work, on synthetic weights."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn as nn

from repro.papers.clicktrain.masks import ADMMHooks, ClickTrainHooks, conv_costs, nm_violations, sparse24_mask
from repro.papers.clicktrain.patterns import (codes_to_patterns, dropped_count, kernel_codes, kernel_masks, layer_ratios,
                                       pattern_convs, pattern_violations, project, select_library)
from repro.models import build_model

P0 = torch.tensor([1, 1, 0, 1, 1, 0, 0, 0, 0], dtype=torch.bool)  # top-left 2x2
P1 = torch.tensor([0, 1, 0, 1, 1, 1, 0, 0, 0], dtype=torch.bool)  # centre + up, left, right
P2 = torch.tensor([0, 0, 0, 0, 1, 1, 0, 1, 1], dtype=torch.bool)  # bottom-right 2x2


def _planted(patterns_counts, seed=0) -> torch.Tensor:
    """(K, 1, 3, 3) scores whose top-4 positions are the given patterns, repeated by count."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for pattern, count in patterns_counts:
        for _ in range(count):
            rows.append(torch.rand(9, generator=g) * 0.5 + pattern.float())  # pattern positions score > 1
    return torch.stack(rows).reshape(-1, 1, 3, 3)


def test_library_is_the_most_frequent_top4_patterns():
    scores = _planted([(P0, 3), (P1, 7), (P2, 5)])
    lib = select_library([scores[:8], scores[8:]], n_patterns=2)  # counted over all layers together
    assert lib.shape == (2, 9) and lib.dtype == torch.bool
    assert torch.equal(lib[0], P1) and torch.equal(lib[1], P2)
    assert len(select_library([scores], n_patterns=12)) == 3  # only 3 distinct patterns occur
    assert torch.equal(codes_to_patterns(kernel_codes(scores[:1])), P0[None])


def test_kernel_masks_pick_best_pattern_and_drop_least_important():
    lib = torch.stack([P0, P1, P2])
    scores = _planted([(P0, 2), (P1, 2), (P2, 2)])
    scores[1] *= 0.01  # weakest kernel
    scores[4] *= 0.1  # second weakest
    mask = kernel_masks(scores, lib, ratio=0.34)
    flat = mask.reshape(-1, 9).bool()
    assert dropped_count(0.34, 6) == 2
    assert not flat[1].any() and not flat[4].any()
    for k, pattern in ((0, P0), (2, P1), (3, P1), (5, P2)):
        assert torch.equal(flat[k], pattern)


def test_projection_is_the_nearest_feasible_point():
    lib = torch.stack([P0, P2])
    w = torch.randn(2, 2, 3, 3, generator=torch.Generator().manual_seed(1))
    projected, mask = project(w, lib, ratio=0.5)
    flat = w.reshape(4, 9)
    best = min(
        (flat - flat * torch.stack([lib[c].float() if k not in drop else torch.zeros(9)
                                    for k, c in enumerate(choice)])).square().sum()
        for drop in itertools.combinations(range(4), 2) for choice in itertools.product(range(2), repeat=4))
    assert float((w - projected).square().sum()) == pytest.approx(float(best), rel=1e-6)
    assert pattern_violations({"l": projected}, {"l": mask}, lib, {"l": 0.5})["total"] == 0


def test_violations_catch_planted_errors():
    lib = torch.stack([P0, P1])
    w = torch.randn(4, 4, 3, 3)
    projected, mask = project(w, lib, ratio=0.5)
    ok = pattern_violations({"l": projected}, {"l": mask}, lib, {"l": 0.5})
    assert ok["total"] == 0
    bad = projected.clone().reshape(-1, 9)
    kept = mask.reshape(-1, 9).any(1).nonzero()[0, 0]
    outside = (~mask.reshape(-1, 9)[kept].bool()).nonzero()[0, 0]
    bad[kept, outside] = 1.0  # a weight outside its kernel's pattern
    v = pattern_violations({"l": bad.reshape(w.shape)}, {"l": mask}, lib, {"l": 0.5})
    assert v["outside_mask"] == 1 and v["total"] >= 1
    assert pattern_violations({"l": projected}, {"l": mask}, lib, {"l": 0.25})["ratio"] == 4  # 8 dropped, 4 expected
    broken = mask.clone().reshape(-1, 9)
    broken[kept] = 1  # a mask row that is no library pattern
    assert pattern_violations({"l": projected}, {"l": broken.reshape(w.shape)}, lib, {"l": 0.5})["mask_pattern"] == 1


def test_pattern_convs_and_ratios():
    model = build_model("resnet20", width=4)
    convs = pattern_convs(model, exclude_first=True)
    assert "0" not in convs and len(convs) == 18 and "0" in pattern_convs(model, exclude_first=False)
    ratios = layer_ratios(convs, 0.6, {"3.body.0": 0.5})
    assert ratios["3.body.0"] == 0.5 and ratios["3.body.3"] == 0.6
    with pytest.raises(ValueError, match="unknown"):
        layer_ratios(convs, 0.6, {"0": 0.5})


def _tiny():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 8, 3, padding=1), nn.Flatten(),
                         nn.Linear(8 * 8 * 8, 10))


def test_importance_is_sum_of_squared_weight_times_gradient():
    model = _tiny()
    hooks = ClickTrainHooks({"2": 0.5}, n_patterns=2, warmup=1, lasso_epochs=1, lasso=1e-3)
    expected = torch.zeros_like(model[2].weight)
    for seed in range(2):
        model.zero_grad()
        model(torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(seed))).sum().backward()
        expected += (model[2].weight * model[2].weight.grad).square()
        hooks.after_backward(model)
    assert torch.allclose(hooks.importance["2"], expected)
    hooks.on_epoch_end(model, 1, {})  # end of warm-up: library and masks chosen, weights untouched
    assert hooks.library is not None and hooks.masks and not hooks.active
    assert hooks.phase(2) == "lasso" and hooks.phase(3) == "masked"


def test_group_lasso_pulls_only_weights_outside_the_mask_towards_zero():
    model = _tiny()
    hooks = ClickTrainHooks({"2": 0.5}, n_patterns=2, warmup=1, lasso_epochs=1, lasso=1e-2)
    lib = torch.stack([P0, P1])
    hooks.library = lib
    hooks.masks = {"2": kernel_masks(model[2].weight.detach().square(), lib, 0.5)}
    hooks.completed = 1  # in the lasso epoch
    model.zero_grad()
    hooks.loss_regularizer(model).backward()
    w, g, m = model[2].weight.detach(), model[2].weight.grad, hooks.masks["2"]
    assert torch.all(g[m == 1] == 0)
    outside = (m == 0) & (w != 0)
    assert torch.all(torch.sign(g[outside]) == torch.sign(w[outside]))  # a descent step shrinks them
    after = w - 0.1 * g
    assert (after[outside].abs() < w[outside].abs()).all()
    hooks.completed = 2  # masked phase: no regulariser
    assert hooks.loss_regularizer(model) is None


def test_admm_z_stays_feasible_and_u_accumulates_the_gap():
    model = _tiny()
    lib = torch.stack([P0, P1, P2])
    hooks = ADMMHooks(model, {"2": 0.5}, lib, rho=0.1, rho_growth=2.0)
    reg = hooks.loss_regularizer(model)
    assert float(reg.detach()) == pytest.approx(0.05 * float((model[2].weight.detach() - hooks.z["2"]).square().sum()))
    with torch.no_grad():
        model[2].weight.add_(0.1)
    w = model[2].weight.detach().clone()
    u_before = hooks.u["2"].clone()
    row = hooks.on_epoch_end(model, 1, {})
    z = hooks.z["2"]
    _, mask = project(w + u_before, lib, 0.5)
    assert pattern_violations({"2": z}, {"2": mask}, lib, {"2": 0.5})["total"] == 0
    assert torch.allclose(hooks.u["2"], u_before + w - z)
    assert float(hooks.rho) == pytest.approx(0.2) and row["phase"] == "admm" and row["admm_gap"] > 0


def test_sparse24_mask_keeps_the_two_largest_of_every_four_input_channels():
    w = torch.randn(6, 8, 3, 3, generator=torch.Generator().manual_seed(2))
    mask = sparse24_mask(w)
    groups = w.abs().permute(0, 2, 3, 1).reshape(-1, 2, 4)
    expected = torch.zeros_like(groups).scatter_(2, groups.topk(2, dim=2).indices, 1.0)
    assert torch.equal(mask.permute(0, 2, 3, 1).reshape(-1, 2, 4), expected)
    assert nm_violations(w * mask) == 0 and nm_violations(w) == 6 * 9 * 2
    with pytest.raises(ValueError, match="multiple of 4"):
        sparse24_mask(torch.randn(4, 3, 3, 3))


def test_conv_costs_count_nonzero_weights_times_output_pixels():
    model = _tiny()
    with torch.no_grad():
        model[2].weight[:4] = 0
    costs = conv_costs(model, input_size=8).set_index("layer")
    assert costs.loc["0", "macs_dense"] == 4 * 3 * 9 * 64 == costs.loc["0", "macs"]
    assert costs.loc["2", "nonzero"] == 4 * 4 * 9 and costs.loc["2", "macs"] == 4 * 4 * 9 * 64


def test_step_keys_change_with_the_phase_and_only_then():
    """The trainer re-captures a CUDA-graph step when the key changes, so the key must change at
    every phase boundary and stay put within a phase (ADMM updates its state in place)."""
    model = _tiny()
    hooks = ClickTrainHooks({"2": 0.5}, n_patterns=2, warmup=2, lasso_epochs=1, lasso=1e-3)
    keys = []
    for epoch in range(1, 5):
        keys.append(hooks.step_key())
        model.zero_grad()
        model(torch.randn(2, 3, 8, 8)).sum().backward()
        hooks.after_backward(model)
        hooks.on_epoch_end(model, epoch, {})
    # dense, dense + importance, lasso, masked: four different steps
    assert len(set(keys)) == 4 and hooks.step_key() == keys[-1]
    admm_hooks = ADMMHooks(model, {"2": 0.5}, torch.stack([P0, P1]), rho=0.1, rho_growth=2.0)
    key = admm_hooks.step_key()
    admm_hooks.on_epoch_end(model, 1, {})
    admm_hooks.load_state_dict(admm_hooks.state_dict())
    assert admm_hooks.step_key() == key and float(admm_hooks.rho) == pytest.approx(0.2)


def test_artifact_lasso_is_pattern_groups_plus_dropped_kernel_groups():
    """The artifact's regulariser (cifar.py:496-504, 537-545, 567): per kernel sqrt(||w outside its
    pattern||^2 + 1e-8), plus per kernel sqrt(||w * dropped||^2 + 1e-8); value and gradient."""
    model = _tiny()
    lam = 1e-2
    hooks = ClickTrainHooks({"2": 0.5}, n_patterns=2, warmup=1, lasso_epochs=1, lasso=lam, lasso_groups="artifact")
    hooks.importance = {"2": model[2].weight.detach().square()}
    hooks.on_epoch_end(model, 1, {})  # end of warm-up: masks and patterns chosen, weights untouched
    assert not hooks.active and hooks.phase(2) == "lasso"
    w = model[2].weight.detach().clone().requires_grad_(True)
    pattern, mask = hooks.patterns["2"], hooks.masks["2"]
    dropped = (mask.sum((2, 3), keepdim=True) == 0).float()
    assert 0 < int(dropped.sum()) < dropped.numel() and torch.all(pattern.sum((2, 3)) == 4)
    expected = lam * (((w * (1 - pattern)).square().sum((2, 3)) + 1e-8).sqrt().sum()
                      + ((w * dropped).square().sum((2, 3)) + 1e-8).sqrt().sum())
    expected.backward()
    model.zero_grad()
    reg = hooks.loss_regularizer(model)
    reg.backward()
    assert float(reg.detach()) == pytest.approx(float(expected.detach()), rel=1e-6)
    assert torch.allclose(model[2].weight.grad, w.grad, atol=1e-9)
    g = model[2].weight.grad
    # inside the pattern of a kept kernel: no pull; a dropped kernel's pattern weights: the kernel group
    assert torch.all(g[(mask == 1)] == 0)
    in_dropped_pattern = (pattern == 1) & (dropped.expand_as(pattern) == 1)
    assert torch.all(torch.sign(g[in_dropped_pattern]) == torch.sign(model[2].weight.detach()[in_dropped_pattern]))
    # the old form ("mask") is a different function of the same weights
    old = ClickTrainHooks({"2": 0.5}, n_patterns=2, warmup=1, lasso_epochs=1, lasso=lam, lasso_groups="mask")
    old.masks, old.completed = hooks.masks, 1
    assert float(old.loss_regularizer(model).detach()) != pytest.approx(float(reg.detach()), rel=1e-3)
    # the patterns go with a checkpoint of the lasso phase, and a lasso checkpoint without them is refused
    state = hooks.state_dict()
    again = ClickTrainHooks({"2": 0.5}, n_patterns=2, warmup=1, lasso_epochs=1, lasso=lam, lasso_groups="artifact")
    again.load_state_dict(state)
    assert torch.equal(again.patterns["2"], pattern)
    with pytest.raises(ValueError, match="without the kernels' patterns"):
        again.load_state_dict({**state, "patterns": {}})
    hooks.on_epoch_end(model, 2, {})  # hard masks: no regulariser, patterns released
    assert hooks.active and hooks.loss_regularizer(model) is None and not hooks.patterns


def test_mixup_only_in_the_masked_phase():
    model = _tiny()
    hooks = ClickTrainHooks({"2": 0.5}, n_patterns=2, warmup=1, lasso_epochs=1, lasso=1e-3, mixup_alpha=0.3)
    x, y = torch.randn(4, 3, 8, 8), torch.arange(4)
    assert hooks.mix_batch(x, y) is None  # dense
    hooks.importance = {"2": model[2].weight.detach().square()}
    hooks.on_epoch_end(model, 1, {})
    assert hooks.mix_batch(x, y) is None  # lasso
    hooks.on_epoch_end(model, 2, {})
    mixed, y_other, lam = hooks.mix_batch(x, y)  # masked
    assert mixed.shape == x.shape and sorted(y_other.tolist()) == [0, 1, 2, 3] and 0 <= float(lam) <= 1
    off = ClickTrainHooks({"2": 0.5}, n_patterns=2, warmup=1, lasso_epochs=1, lasso=1e-3)
    off.completed = 2
    assert off.mix_batch(x, y) is None


def test_clicktrain_hooks_refuse_bad_options():
    with pytest.raises(ValueError, match="lasso_groups must be one of"):
        ClickTrainHooks({"2": 0.5}, 2, 1, 1, 1e-3, lasso_groups="kernels")
    with pytest.raises(ValueError, match="mixup_alpha must be >= 0"):
        ClickTrainHooks({"2": 0.5}, 2, 1, 1, 1e-3, mixup_alpha=-0.1)
