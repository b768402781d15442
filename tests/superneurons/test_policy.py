"""The runtime's memory policy on the CPU: activations shared by neighbouring layers counted once,
resident first (recompute, then merge segments, offload only the excess), prefetch as early as the
pool's budget allows, and the convolution-workspace cap reaching the probe's process."""

from __future__ import annotations

import math
import re
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from sn_helpers import max_diff, tiny
from repro.models import build_model
from repro.papers.superneurons.arms import runtime_config
from repro.papers.superneurons.liveness import (flatten_units, plain_dynamic_estimate, profile_units,
                                         saved_bytes_between)
from repro.papers.superneurons.probe import WSCAP_ENV, ProbeSpec, probe_env, run_isolated, run_probe
from repro.papers.superneurons.plan import (BudgetUnreachable, BudgetWarning, RuntimeConfig, estimate, make_plan,
                                            memory_steps, merge_recomputed)
from repro.papers.superneurons.runtime import SuperNeuronsModel
from repro.papers.superneurons.tensor_pool import TensorPool


def _whole_model_saved(model: nn.Module, x: torch.Tensor) -> int:
    """Bytes of the unique non-parameter storages autograd saves over one forward of the whole model."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    storages = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params:
            storages[ptr] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(x)
    del out
    return sum(storages.values())


@pytest.mark.parametrize("net", ["resnet", "vgg", "alexnet"])
def test_saved_bytes_count_shared_activations_once(net):
    model, x, _ = tiny(net)
    profiles = profile_units(flatten_units(model), x)
    whole = _whole_model_saved(model, x)
    assert saved_bytes_between(profiles) == whole
    assert sum(p.saved_bytes for p in profiles) > whole  # per layer, the in-place ReLU outputs count twice


def test_shared_bytes_follow_inplace_and_view_layers():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(inplace=True), nn.Flatten(), nn.Linear(4 * 6 * 6, 2))
    x = torch.randn(2, 3, 8, 8)
    conv, relu, flat, linear = profile_units(flatten_units(model), x)
    act = 2 * 4 * 6 * 6 * 4
    assert relu.saved_bytes == act and relu.shared_in_bytes == 0  # the conv does not save its output
    assert flat.saved_bytes == 0 and linear.shared_in_bytes == act  # through Flatten's view
    assert plain_dynamic_estimate([conv, relu, flat, linear]) == \
        conv.saved_bytes + relu.saved_bytes + linear.saved_bytes - act + max(
            p.working_set for p in (conv, relu, flat, linear))


def test_memory_steps_join_inplace_units_to_the_unit_before():
    model = nn.Sequential(nn.ReLU(inplace=True), nn.Conv2d(3, 4, 3), nn.ReLU(inplace=True),
                          nn.Conv2d(4, 4, 3), nn.BatchNorm2d(4), nn.ReLU(inplace=True), nn.MaxPool2d(2))
    units = flatten_units(model)
    plan = make_plan(units, profile_units(units, torch.randn(2, 3, 12, 12)),
                     RuntimeConfig(recompute="all", strategy="memory", pool=False))
    steps = [memory_steps(s) for s in plan.segments]
    # the leading ReLU has nothing before it; conv + ReLU in one step; BN + its ReLU in one step
    assert steps == [[(0, 1)], [(0, 2)], [(0, 1), (1, 3), (3, 4)]]


def _deep(blocks=24):
    torch.manual_seed(0)
    model = build_model("bottleneck_resnet", 10, blocks=blocks, width=4)
    x = torch.randn(2, 3, 32, 32)
    y = torch.randint(0, 10, (2,))
    return model, x, y


def _resident(plan):
    return estimate(plan.segments, plan.profiles, math.inf, False, 0)["peak_dynamic"]


def _budgets(units, profiles):
    """Budgets under which the auto plan recomputes, merges, offloads (the CPU pool copies nothing)."""
    everything = make_plan(units, profiles, RuntimeConfig(recompute="all", pool=False), copies=False)
    ckpt_fit, largest = _resident(everything), everything.largest_working_set  # all checkpoints resident
    return dict(fits=plain_dynamic_estimate(profiles), recompute=ckpt_fit,
                merge=largest + 0.5 * (ckpt_fit - largest), offload=largest + 0.05 * (ckpt_fit - largest))


def test_auto_plan_keeps_resident_what_fits_and_offloads_only_the_excess():
    model, x, _ = _deep()
    units = flatten_units(model)
    profiles = profile_units(units, x)
    plans = {k: make_plan(units, profiles, RuntimeConfig(recompute="auto", memory_budget_bytes=b), copies=False)
             for k, b in _budgets(units, profiles).items()}
    fits, recompute, merge, offload = (plans[k] for k in ("fits", "recompute", "merge", "offload"))
    assert fits.summary()["recomputed"] == 0  # a network that fits pays nothing
    for plan in (fits, recompute, merge):  # every checkpoint resident: the pool offloads nothing
        assert plan.estimate["resident_checkpoints"] == plan.estimate["checkpoints"]
        assert plan.pool_budget_bytes >= plan.estimate["checkpoints"]
    assert recompute.summary()["recomputed"] > 0 and len(recompute.segments) == len(fits.segments)
    assert len(merge.segments) < len(recompute.segments)  # fewer, longer segments instead of copies
    assert merge.speed_working_set >= merge.largest_working_set
    assert all(s.strategy == "speed" for s in merge.segments if s.recompute)
    assert offload.pool_budget_bytes < offload.estimate["checkpoints"]  # the excess goes to the host
    for plan in plans.values():
        assert [i for s in plan.segments for i in s.units] == list(range(len(profiles)))


def test_merged_segments_stay_within_their_allowance():
    model, x, _ = _deep()
    units = flatten_units(model)
    profiles = profile_units(units, x)
    plan = make_plan(units, profiles, RuntimeConfig(recompute="all", pool=False), copies=False)
    for factor in (1, 2, 4):
        allowance = factor * plan.largest_working_set
        merged = merge_recomputed(plan.segments, profiles, allowance)
        ws = estimate(merged, profiles, math.inf, False, 0)["working"]
        assert ws <= max(allowance, plan.largest_working_set)
        assert [s.index for s in merged] == list(range(len(merged)))


@pytest.mark.parametrize("case", ["recompute", "merge", "offload"])
def test_auto_plans_train_like_plain(case):
    model, x, y = _deep()  # at 12 blocks no budget needs a merge: recomputing fits or offloading is needed
    ref = build_model("bottleneck_resnet", 10, blocks=24, width=4)
    ref.load_state_dict(model.state_dict())
    units = flatten_units(model)
    budget = _budgets(units, profile_units(units, x))[case]
    wrapped = SuperNeuronsModel(model, RuntimeConfig(recompute="auto", memory_budget_bytes=budget,
                                                     prefetch_lookahead=1))
    F.cross_entropy(ref(x), y).backward()
    F.cross_entropy(wrapped(x), y).backward()
    assert max_diff([p.grad for p in ref.parameters()], [p.grad for p in model.parameters()]) < 1e-5
    assert max_diff(list(ref.buffers()), list(model.buffers())) < 1e-6
    stats = wrapped.pool.stats
    assert (stats.offloads > 0) == (case == "offload")
    assert len(wrapped.pool) == 0


def test_backward_prefetches_as_early_as_the_pool_budget_allows():
    model, x, y = _deep(12)
    units = flatten_units(model)
    plan = make_plan(units, profile_units(units, x), RuntimeConfig(recompute="all", pool=False), copies=False)
    ckpts = [plan.profiles[s.units[0]].in_bytes for s in plan.segments]
    budget = max(0.5 * sum(ckpts), max(ckpts))  # half of them resident; room for any one of them
    for lookahead in (0, 1):
        wrapped = SuperNeuronsModel(model, RuntimeConfig(recompute="all", pool=True, pool_budget_bytes=budget,
                                                         prefetch_lookahead=lookahead))
        F.cross_entropy(wrapped(x), y).backward()
        stats = wrapped.pool.stats
        assert stats.offloads > 0 and stats.prefetches == stats.offloads
        # checkpoints released by backward make room: the offloaded ones come back before they are needed
        assert stats.late_fetches == 0
    tight = SuperNeuronsModel(model, RuntimeConfig(recompute="all", pool=True, pool_budget_bytes=0,
                                                   prefetch_lookahead=0))
    F.cross_entropy(tight(x), y).backward()
    assert tight.pool.stats.late_fetches == tight.pool.stats.offloads > 0  # no room, no lookahead: all late


def test_pool_prefetch_within_budget_and_stats_reset():
    pool = TensorPool("cpu", budget_bytes=800)
    handles = [pool.put(torch.zeros(100)) for _ in range(4)]  # 400 bytes each: two offloaded
    assert pool.prefetch(handles[1], within_budget=True) is False  # the two resident fill the budget
    assert pool.prefetching_bytes == 0
    del handles[3]
    assert pool.prefetch(handles[1], within_budget=True) and pool.prefetching_bytes == 400
    assert pool.prefetch(handles[0]) and pool.prefetching_bytes == 800  # lookahead: past the budget
    pool.get(handles[1])
    assert pool.prefetching_bytes == 400 and pool.resident_bytes == 800
    pool.reset_stats()
    assert pool.stats.offloads == 0 and pool.stats.peak_resident_bytes == pool.resident_bytes
    del handles
    assert pool.prefetching_bytes == 0 and pool.resident_bytes == 0


def test_probe_budget_keeps_a_network_that_fits_resident():
    kw = dict(model_kw={"blocks": 8, "width": 4}, num_classes=10, batch_size=2, image_size=16, steps=1,
              momentum_on_host="no")
    fits = run_probe(ProbeSpec(arm="ours", cap_bytes=1e9, **kw))
    assert fits["plan"]["recomputed"] == 0 and fits["per_step"]["offloaded_bytes"] == 0
    assert fits["sgd"] == "after backward"  # room for every gradient: torch.optim's step, as plain
    # static with SGD in backward: parameters + momentum (the gradients never coexist)
    cap = (0.45 * fits["est_dynamic_bytes"] + 2 * fits["params_bytes"]) / (1 - 0.125)  # plan_margin 0.125
    tight = run_probe(ProbeSpec(arm="ours", cap_bytes=cap, **kw))
    assert tight["fits"] and tight["plan"]["recomputed"] > 0 and tight["sgd"] == "in backward"
    assert set(tight["per_step"]) == {"offloaded_bytes", "prefetched_bytes", "late_fetches", "inflight_wait_s",
                                      "sgd_host_s"}


def test_workspace_cap_reaches_the_isolated_probe_process(monkeypatch):
    monkeypatch.setenv(WSCAP_ENV, "7")  # one set outside reaches no probe: each spec says its own
    spec = ProbeSpec(arm="all+wscap", model="bottleneck_resnet", model_kw={"blocks": 4, "width": 2},
                     num_classes=10, batch_size=2, image_size=16, steps=1, workspace_cap_mib=64)
    assert probe_env(spec)[WSCAP_ENV] == "64"
    assert WSCAP_ENV not in probe_env(ProbeSpec(arm="all"))
    monkeypatch.delenv(WSCAP_ENV)
    isolated = run_isolated(spec, timeout_s=120)
    assert isolated["fits"], isolated["reason"]
    assert isolated["cudnn"]["wscap_env"] == "64" and isolated["workspace_cap_mib"] == 64
    assert isolated["cudnn"]["benchmark"] is False
    local = run_probe(spec)  # in-process: the variable was not set before this process started
    assert local["cudnn"]["wscap_env"] is None
    with pytest.raises(ValueError, match="workspace_cap_mib"):
        ProbeSpec(arm="all+wscap", workspace_cap_mib=0)


def test_the_plan_counts_the_workspace_next_to_the_working_set():
    model, x, _ = tiny("vgg")
    units = flatten_units(model)
    profiles = profile_units(units, x)
    plain, capped = (make_plan(units, profiles, runtime_config(name, None, 0.0, 1, 0.0, ws), copies=False)
                     for name, ws in (("all", 0.0), ("all+wscap", 3 * 2**20)))
    assert capped.estimate["peak_dynamic"] == plain.estimate["peak_dynamic"] + 3 * 2**20


# ---- a budget the plan cannot meet ------------------------------------------------------------------
@pytest.mark.parametrize("recompute", ["auto", "all", "off"])
def test_unreachable_budget_raises_with_the_estimate_and_the_budget(recompute):
    model, x, _ = tiny("resnet")
    budget = 1000  # below any unit's backward need
    with pytest.raises(BudgetUnreachable, match=r"memory budget unreachable") as err:
        SuperNeuronsModel(model, RuntimeConfig(recompute=recompute, memory_budget_bytes=budget)).prepare(x)
    message = str(err.value)
    assert "memory_budget_bytes=1000" in message and "over_budget='warn'" in message
    assert re.search(r"estimated at [\d.]+ KiB of dynamic memory \(.*working [\d.]+ KiB", message)
    assert ("use recompute='auto'" in message) == (recompute == "off")


def test_unreachable_budget_warns_under_the_switch_and_the_plan_runs():
    model, x, y = tiny("resnet")
    ref = build_model("bottleneck_resnet", 10, blocks=[1, 2, 1, 1], width=4)
    ref.load_state_dict(model.state_dict())
    wrapped = SuperNeuronsModel(model, RuntimeConfig(recompute="auto", memory_budget_bytes=1000, over_budget="warn"))
    with pytest.warns(BudgetWarning, match=r"over the budget of 1000 B \(memory_budget_bytes=1000\)"):
        plan = wrapped.prepare(x)
    assert plan.estimate["peak_dynamic"] > 1000 and plan.summary()["recomputed"] > 0
    F.cross_entropy(ref(x), y).backward()
    F.cross_entropy(wrapped(x), y).backward()
    assert max_diff([p.grad for p in ref.parameters()], [p.grad for p in model.parameters()]) < 1e-5


def test_reachable_budget_neither_raises_nor_warns():
    model, x, _ = tiny("resnet")
    units = flatten_units(model)
    profiles = profile_units(units, x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plan = make_plan(units, profiles, RuntimeConfig(recompute="auto", memory_budget_bytes=math.inf), copies=False)
        budget = plan.estimate["peak_dynamic"]
        again = make_plan(units, profiles, RuntimeConfig(recompute="auto", memory_budget_bytes=budget), copies=False)
    assert again.estimate["peak_dynamic"] <= budget


def test_over_budget_switch_is_checked():
    with pytest.raises(ValueError, match="over_budget must be one of"):
        RuntimeConfig(over_budget="ignore")


def test_ours_arm_warns_not_raises():
    """The experiments' "ours" arm runs a plan over its budget (the probe's cap decides the fit), as
    before the check existed: paper-scale probes behave as they did."""
    assert runtime_config("ours", 1000, None, 1, 0).over_budget == "warn"
