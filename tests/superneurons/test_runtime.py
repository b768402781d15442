"""The runtime on the CPU: gradients and updated weights equal plain PyTorch's (to fp tolerance)
under every plan, batch-norm statistics are updated once, bad models and configs are refused."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from sn_helpers import grads_after_one_backward, max_diff, tiny, train_both
from repro.models import build_model
from repro.papers.superneurons.liveness import (UnsupportedModel, flatten_units, largest_need, largest_working_set,
                                         profile_units)
from repro.papers.superneurons.plan import (BudgetWarning, RuntimeConfig, _seg_memory_ws, _seg_speed_ws, cut_segments,
                                            estimate)
from repro.papers.superneurons.runtime import SuperNeuronsHooks, SuperNeuronsModel

CONFIGS = {
    "recompute_speed": RuntimeConfig(recompute="all", strategy="speed", pool=True, pool_budget_bytes=0),
    "recompute_memory": RuntimeConfig(recompute="all", strategy="memory", pool=True, pool_budget_bytes=50_000),
    "recompute_auto": RuntimeConfig(recompute="all", pool=False),
    "pool_saved": RuntimeConfig(recompute="off", pool=True, pool_budget_bytes=0, min_offload_bytes=0),
    "auto_tight": RuntimeConfig(recompute="auto", pool=True, memory_budget_bytes=1, over_budget="warn"),
}


# AlexNet's fc layers make recompute_memory and pool_saved slow on 2 cores; resnet/vgg cover them
CASES = [(net, config) for net in ("resnet", "vgg", "alexnet") for config in CONFIGS
         if not (net == "alexnet" and config in ("recompute_memory", "pool_saved"))]


@pytest.mark.parametrize("net,config", CASES)
def test_gradients_equal_plain(net, config):
    ref_grads, grads, loss_ref, loss, wrapped = grads_after_one_backward(net, CONFIGS[config])
    assert torch.allclose(loss, loss_ref, rtol=1e-5, atol=1e-6)
    assert all(g is not None for g in grads)
    assert max_diff(ref_grads, grads) < 1e-5
    plan = wrapped.plan.summary()
    if config.startswith("recompute"):
        assert plan["recomputed"] == plan["segments"]
    if config == "auto_tight":  # every segment whose recomputation frees memory (not e.g. the classifier)
        assert 0 < plan["recomputed"] <= plan["segments"]
    if config == "recompute_memory":
        assert plan["memory_centric"] == plan["segments"]
    assert len(wrapped.pool) == 0, "every pool entry is released after backward"


@pytest.mark.parametrize("net", ["resnet", "alexnet"])
def test_weights_and_bn_stats_equal_plain_after_steps(net):
    cfg = RuntimeConfig(recompute="all", pool=True, pool_budget_bytes=0)
    ref, model, wrapped, sgd = train_both(net, cfg, steps=3)
    assert sgd.updates == 3 * len(sgd.params)
    assert all(p.grad is None for p in model.parameters()), "gradients are freed right after their update"
    assert max_diff(list(ref.parameters()), list(model.parameters())) < 1e-5
    buffers_ref, buffers = list(ref.buffers()), list(model.buffers())
    if buffers_ref:  # BN running stats and counters: updated once per step despite recomputation
        assert max_diff(buffers_ref, buffers) < 1e-6
    assert wrapped.pool.stats.offloads > 0 and wrapped.pool.stats.prefetches > 0


def test_auto_plan_keeps_everything_when_it_fits():
    model, x, y = tiny("resnet")
    wrapped = SuperNeuronsModel(model, RuntimeConfig(recompute="auto", memory_budget_bytes=math.inf))
    F.cross_entropy(wrapped(x), y).backward()
    assert wrapped.plan.summary()["recomputed"] == 0
    assert wrapped.pool.stats.puts == 0


def test_auto_plan_recomputes_only_what_the_budget_needs():
    model, x, _ = tiny("resnet")
    full = SuperNeuronsModel(model, RuntimeConfig(recompute="off", pool=False)).prepare(x)
    kept = full.estimate["peak_dynamic"]
    partial = SuperNeuronsModel(model, RuntimeConfig(recompute="auto", pool=False,
                                                     memory_budget_bytes=0.8 * kept)).prepare(x)
    summary = partial.summary()
    assert 0 < summary["recomputed"] < summary["segments"]
    assert partial.estimate["peak_dynamic"] <= 0.8 * kept


def test_pool_budget_follows_the_memory_budget():
    model, x, _ = tiny("vgg")
    plan = SuperNeuronsModel(model, RuntimeConfig(recompute="all", pool=True)).prepare(x)
    assert plan.pool_budget_bytes == math.inf  # no budget: nothing offloaded
    with pytest.warns(BudgetWarning, match="memory budget unreachable"):
        small = SuperNeuronsModel(model, RuntimeConfig(recompute="all", pool=True, memory_budget_bytes=1,
                                                       over_budget="warn")).prepare(x)
    assert small.pool_budget_bytes == 0.0


def test_eval_and_no_grad_run_the_model_unchanged():
    model, x, _ = tiny("vgg")
    wrapped = SuperNeuronsModel(model, RuntimeConfig(recompute="all"))
    with torch.no_grad():
        out = wrapped(x)
    assert wrapped.plan is None
    assert torch.equal(out, model(x))


def test_segments_start_at_expensive_layers():
    model, x, _ = tiny("vgg")
    plan = SuperNeuronsModel(model, RuntimeConfig()).prepare(x)
    kinds = [[plan.profiles[i].kind for i in s.units] for s in plan.segments]
    assert all(k[0] in ("Conv2d", "Linear") for k in kinds)
    assert sum(len(k) for k in kinds) == len(plan.profiles)


def test_inplace_first_layer_does_not_corrupt_the_checkpoint():
    torch.manual_seed(0)
    model = nn.Sequential(nn.ReLU(inplace=True), nn.Conv2d(3, 4, 3), nn.ReLU(inplace=True), nn.Flatten(),
                          nn.Linear(4 * 6 * 6, 2))
    x = torch.randn(2, 3, 8, 8)
    ref = nn.Sequential(*[m for m in model])  # same modules: run the reference first on its own copy of x
    F.cross_entropy(ref(x.clone()), torch.tensor([0, 1])).backward()
    ref_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    wrapped = SuperNeuronsModel(model, RuntimeConfig(recompute="all", strategy="memory", pool=True,
                                                     pool_budget_bytes=0))
    F.cross_entropy(wrapped(x.clone()), torch.tensor([0, 1])).backward()
    assert max_diff(ref_grads, [p.grad for p in model.parameters()]) < 1e-6


class _NotSequential(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 3)

    def forward(self, x):
        return self.conv(x)


def test_unsupported_models_are_refused_with_the_reason():
    # issue 26: a model that is not a Sequential is traced (units from its graph), no longer refused
    wrapped = SuperNeuronsModel(_NotSequential(), RuntimeConfig(recompute="all"))
    wrapped(torch.randn(2, 3, 5, 5)).sum().backward()
    assert wrapped.plan.summary()["recomputed"] == 1
    with pytest.raises(UnsupportedModel, match="ModuleList"):
        SuperNeuronsModel(nn.Sequential(nn.ModuleList([nn.ReLU()])))


@pytest.mark.parametrize("bad", [dict(recompute="sometimes"), dict(strategy="fast"), dict(prefetch_lookahead=-1),
                                 dict(memory_budget_bytes=-5)])
def test_bad_config_is_refused(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        RuntimeConfig(**bad)


def test_train_hooks_wrap_model_keeps_the_parameters():
    model, x, y = tiny("resnet")
    hooks = SuperNeuronsHooks(RuntimeConfig(recompute="all"))
    wrapped = hooks.wrap_model(model)
    assert [id(p) for p in wrapped.parameters()] == [id(p) for p in model.parameters()]
    assert hooks.per_step_overrides() == ["wrap_model"]


def test_measured_transients_enter_every_working_set_of_the_plan():
    """A unit's measured backward transient (cuDNN workspace on the GPU) counts in the speed- and
    memory-centric working sets, the largest need and the estimate; the claim's working set stays
    tensors only."""
    model = build_model("bottleneck_resnet", 10, blocks=4, width=8)
    units = flatten_units(model)
    profiles = profile_units(units, torch.randn(2, 3, 32, 32))
    assert all(p.transient_bytes == 0 for p in profiles)  # nothing is measured on the CPU
    segments = cut_segments(units, profiles)
    for s in segments:
        s.recompute = True
    before = estimate(segments, profiles, math.inf, False, 0, workspace=123)
    seg = max(segments, key=lambda s: _seg_speed_ws(s, profiles))
    speed, memory = _seg_speed_ws(seg, profiles), _seg_memory_ws(seg, profiles)
    extra = 10 * 2**20
    profiles[seg.units[0]].transient_bytes = extra
    assert _seg_speed_ws(seg, profiles) == speed + extra
    assert extra < _seg_memory_ws(seg, profiles) <= memory + extra
    assert largest_need(profiles) == profiles[seg.units[0]].working_set + extra  # extra dwarfs the rest
    assert largest_working_set(profiles).working_set < extra
    after = estimate(segments, profiles, math.inf, False, 0, workspace=123)
    assert before["workspace"] == 123 and after["workspace"] == 0  # measured: inside the transients
    assert after["working"] == max(speed + extra, largest_need(profiles))
