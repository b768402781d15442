"""The layer-granular plan (issue 45): the pure planner on hand-made profiles, and on every family the
runtime executing it: gradients equal plain autograd's, and the plan's estimate bounds the CPU replay's
dynamic peak (sn_helpers.replay_step: a storage tracker for the allocator, offloads that leave)."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F

from any_models import ANY, any_model, loss_fn
from sn_helpers import SLACK, ReplayPool, check_budget_replay, max_diff, replay_step, tiny
from repro.papers.superneurons.layer_plan import (LayerInfo, LayerProfile, StorageInfo, UnitCost, forced_plan,
                                                  free_offloads, layer_estimate, plan_layers)
from repro.papers.superneurons.plan import RuntimeConfig
from repro.papers.superneurons.runtime import SuperNeuronsModel



# ---- the pure planner --------------------------------------------------------------------------------
def _chain(n_units=3, conv_bytes=100, relu_bytes=100, unit_backward_s=1.0):
    """Units of [functional, conv, bn, relu(in place)]: the conv's output (saved by the BN) and the BN's
    output (relu'd in place, saved by the ReLU and the next unit's conv)."""
    layers, storages, units = [], [], []
    group_source, group_output, calls, functional = {}, {}, [], []

    def layer(u, kind, cheap, group=None):
        i = len(layers)
        layers.append(LayerInfo(i, u, kind, kind, cheap, 0.001, i if group is None else group))
        return i

    def storage(nbytes, producer, packers):
        s = StorageInfo(len(storages), nbytes, producer, list(packers))
        storages.append(s)
        return s.index

    prev_out = None
    for u in range(n_units):
        f = layer(u, "functional", False)
        conv = layer(u, "Conv2d", False)
        bn = layer(u, "BatchNorm2d", True)
        relu = layer(u, "ReLU", True, group=bn)
        functional.append(f)
        calls.append([conv, bn, relu])
        if prev_out is None:
            prev_out = storage(relu_bytes, f, [conv])
        else:
            storages[prev_out].packers.append(conv)
        c = storage(conv_bytes, conv, [bn])
        group_output[conv], group_source[conv] = c, prev_out
        r = storage(relu_bytes, bn, [relu])
        group_output[bn], group_source[bn] = r, c
        storages[c].source_of.append(bn)
        storages[prev_out].source_of.append(conv)
        prev_out = r
        units.append(UnitCost(relu_bytes, conv_bytes + relu_bytes, 50, unit_backward_s))
    return LayerProfile(layers, storages, units, group_source, group_output, 0, calls, functional)


def test_keep_all_when_it_fits():
    p = _chain()
    plan = plan_layers(p, budget=math.inf, bandwidth=1e9)
    assert plan.decisions == {} and plan.seconds == 0
    assert plan.estimate["kept"] == 100 + 3 * 200  # the input, every conv and relu output


def test_only_cheap_groups_are_recomputed():
    p = _chain()
    forced = forced_plan(p, "recompute")
    assert set(forced.decisions) == {2, 6, 10} and set(forced.decisions.values()) == {"recompute"}
    assert forced.estimate["kept"] == 100 + 3 * 100  # the input and the conv outputs; BN+ReLU recomputed from them


def test_free_offloads_fit_the_overlap_window():
    """Window of a storage: bandwidth x the backward seconds of the units after its last use. With 100
    bytes/s and 1 s per unit: unit 2's outputs (used in unit 2 only) have no window, unit 1's 100 bytes
    (its ReLU output is used by unit 2's conv, so only the conv output), unit 0's 200."""
    p = _chain()
    free = free_offloads(p, bandwidth=100.0)
    # last to first: unit 2 (window 0) none; unit 1: conv output (window 100) fits; its relu output is
    # used in unit 2 (window 0); unit 0: conv output (window 200: 100 + 100 fits), relu output (used by
    # unit 1's conv: window 100) does not
    assert free == {5, 1}
    assert free_offloads(p, bandwidth=1e12) == {1, 2, 5}  # unit 2's backward comes first: no window


def test_cost_aware_order_and_budget():
    """Free offloads first; then the cheaper of recomputation and stalled offloads per byte; the
    estimate within the budget and each step priced."""
    p = _chain()
    everything = layer_estimate(p, {})["peak_dynamic"]
    fast_link = plan_layers(p, budget=everything - 150, bandwidth=100.0)
    assert fast_link.estimate["peak_dynamic"] <= everything - 150
    assert set(fast_link.decisions.values()) <= {"offload"} and fast_link.seconds == 0  # free ones sufficed
    slow_link = plan_layers(p, budget=everything - 150, bandwidth=1e-3)  # stalls cost far more than recompute
    assert set(slow_link.decisions.values()) == {"recompute"}
    assert 0 < slow_link.seconds <= 0.002 * 3
    assert slow_link.estimate["peak_dynamic"] <= everything - 150


def test_the_estimate_counts_a_held_source_no_layer_saves():
    """A recomputed group whose input no layer saves: the recomputation holds it (counted)."""
    p = _chain(n_units=1, conv_bytes=300)
    p.storages[p.group_source[2]].packers.clear()  # the conv output is saved by nobody
    assert layer_estimate(p, {})["kept"] == 100 + 100  # the input, the relu output
    assert layer_estimate(p, {2: "recompute"})["kept"] == 100 + 300  # the input and the held source


# ---- the runtime on every family -----------------------------------------------------------------------
FAMILIES = ["resnet", "vgg", "alexnet", *ANY]
FORCED = ["recompute", "offload", "both"]
LAYER = dict(granularity="layer", pool_budget_bytes=0, max_inflight_bytes=0, min_offload_bytes=0)


def _family(name, batch=4):
    if name in ANY:
        return (*any_model(name, batch=batch), loss_fn)
    return (*tiny(name, batch=batch), F.cross_entropy)


@pytest.mark.parametrize("actions", FORCED)
@pytest.mark.parametrize("name", FAMILIES)
def test_gradients_equal_plain_autograd(name, actions):
    model, x, y, loss = _family(name, batch=3)
    ref = copy.deepcopy(model)
    torch.manual_seed(5)
    loss(ref(x), y).backward()
    wrapped = SuperNeuronsModel(model, RuntimeConfig(**LAYER, layer_actions=actions))
    torch.manual_seed(5)
    loss(wrapped(x), y).backward()
    assert max_diff([p.grad for p in ref.parameters()], [p.grad for p in model.parameters()]) == 0
    if actions != "offload" and name in ("resnet", "vgg", "alexnet", "tv_resnet"):
        assert wrapped.executor.recomputations > 0  # BN / ReLU / pooling / LRN outputs recomputed


@pytest.mark.parametrize("actions", FORCED)
@pytest.mark.parametrize("name", FAMILIES)
def test_estimate_bounds_the_replayed_peak(name, actions):
    model, x, y, loss = _family(name)
    peak, plan, stats = replay_step(model, x, y, RuntimeConfig(**LAYER, layer_actions=actions), loss)
    assert peak <= plan.estimate["peak_dynamic"] + SLACK
    if actions == "offload":
        assert stats.offloads > 0


@pytest.mark.parametrize("name", FAMILIES)
def test_auto_layer_plan_bounds_the_replayed_peak(name):
    """recompute / offload chosen by cost under budgets between the largest need and everything kept."""
    model, x, y, loss = _family(name)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    everything, plan, _ = replay_step(model, x, y, RuntimeConfig(**LAYER, layer_actions="auto"), loss)
    assert plan.layers.decisions == {}  # no budget: everything kept
    model.load_state_dict(state)
    low = replay_step(model, x, y, RuntimeConfig(**LAYER, layer_actions="both"), loss)[1].estimate["peak_dynamic"]
    for share in (0.7, 0.4):
        model.load_state_dict(state)
        budget = low + share * (plan.estimate["peak_dynamic"] - low)
        check_budget_replay(model, x, y, RuntimeConfig(**LAYER, layer_actions="auto", memory_budget_bytes=budget,
                                                       over_budget="warn"), loss)


def test_unit_plan_stays_the_default():
    assert RuntimeConfig().granularity == "unit"
    with pytest.raises(ValueError, match="granularity"):
        RuntimeConfig(granularity="op")


@pytest.mark.parametrize("name", ["vit", "gpt", "alexnet"])
def test_gradients_equal_plain_autograd_when_offloads_free_the_tensor(name):
    """Offloads that drop the device copy (ReplayPool, as a GPU offload does): the allocator hands a freed
    address to the next tensor at once, and a new tensor of the same shape there is not the offloaded
    one; each step's gradients still equal plain autograd's (a handle reused for such a tensor would
    restore the old one's values in backward)."""
    model, x, y, loss = _family(name, batch=4)
    ref = copy.deepcopy(model)
    torch.manual_seed(5)
    loss(ref(x), y).backward()
    cfg = RuntimeConfig(**LAYER, layer_actions="offload")
    wrapped = SuperNeuronsModel(model, cfg)
    wrapped.prepare(x)
    wrapped.pool = ReplayPool(x.device, wrapped.plan.pool_budget_bytes, cfg.max_inflight_bytes)
    for _ in range(4):
        model.zero_grad(set_to_none=True)
        torch.manual_seed(5)
        loss(wrapped(x), y).backward()
        assert max_diff([p.grad for p in ref.parameters()], [p.grad for p in model.parameters()]) == 0
