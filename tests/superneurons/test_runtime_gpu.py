"""The runtime on a CUDA GPU (skipped without one): real offload / prefetch on the side stream,
momentum on the host, gradients still equal plain PyTorch's, probes under a memory cap, the auto
plan's merged segments and offload fallback, and the convolution-workspace cap of a probe."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from sn_helpers import grads_after_one_backward, max_diff, max_rel_diff, train_both
from repro.models import build_model
from repro.papers.superneurons.liveness import flatten_units, profile_units
from repro.papers.superneurons.probe import ProbeSpec, run_isolated, run_probe
from repro.papers.superneurons.plan import BudgetWarning, RuntimeConfig, make_plan
from repro.papers.superneurons.runtime import SuperNeuronsModel
from repro.papers.superneurons.tensor_pool import TensorPool
from sn_helpers import deterministic  # noqa: F401  (an autouse fixture: cuDNN deterministic)

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]




def _equal_to_plain_on_the_gpu(net: str, cfg: RuntimeConfig, label: str):
    """One backward of ``net`` under ``cfg`` on the GPU against plain autograd: the losses agree and the
    gradients are within ten times the noise floor (plain PyTorch against itself: AlexNet's overlapping
    max-pool backward adds with atomics on the GPU, so two plain runs differ by rounding; ResNet and
    VGG are bit-exact). Returns the wrapped model."""
    ref_grads, grads, loss_ref, loss, wrapped = grads_after_one_backward(net, cfg, device="cuda")
    torch.cuda.synchronize()
    assert torch.allclose(loss, loss_ref, rtol=1e-5, atol=1e-6)
    again, _, _, _, _ = grads_after_one_backward(net, cfg, device="cuda")
    floor = max_rel_diff(ref_grads, again)
    print(net, label, "max rel diff", max_rel_diff(ref_grads, grads), "plain vs plain", floor)
    assert max_rel_diff(ref_grads, grads) <= max(10 * floor, 1e-6)
    return wrapped


@pytest.mark.parametrize("net", ["resnet", "vgg", "alexnet"])
@pytest.mark.parametrize("strategy", ["speed", "memory"])
def test_gradients_equal_plain_with_real_offload(net, strategy):
    cfg = RuntimeConfig(recompute="all", strategy=strategy, pool=True, pool_budget_bytes=0, prefetch_lookahead=2)
    wrapped = _equal_to_plain_on_the_gpu(net, cfg, strategy)
    stats = wrapped.pool.stats
    assert stats.offloads > 0 and stats.pinned_bytes > 0 and stats.prefetches == stats.offloads
    assert len(wrapped.pool) == 0


@pytest.mark.parametrize("net", ["resnet", "vgg", "alexnet"])
@pytest.mark.parametrize("actions", ["recompute", "offload", "both"])
def test_layer_plan_gradients_equal_plain_with_real_offload(net, actions):
    """The layer plan inside units on the paper's networks: BN / ReLU / pooling / LRN outputs recomputed,
    convolution outputs offloaded to pinned host memory and prefetched on the side stream."""
    cfg = RuntimeConfig(granularity="layer", layer_actions=actions, pool_budget_bytes=0, max_inflight_bytes=0,
                        min_offload_bytes=0)
    wrapped = _equal_to_plain_on_the_gpu(net, cfg, actions)
    if actions != "offload":
        assert wrapped.executor.recomputations > 0
    if actions != "recompute":
        assert wrapped.pool.stats.offloads > 0 and wrapped.pool.stats.prefetches == wrapped.pool.stats.offloads
    assert len(wrapped.pool) == 0


def test_saved_tensor_pool_gradients_equal_plain():
    cfg = RuntimeConfig(recompute="off", pool=True, pool_budget_bytes=0, min_offload_bytes=0)
    ref_grads, grads, _, _, wrapped = grads_after_one_backward("resnet", cfg, device="cuda")
    assert max_diff(ref_grads, grads) < 1e-4 and wrapped.pool.stats.offloads > 0


@pytest.mark.parametrize("host", [False, True])
def test_weights_equal_plain_after_steps(host):
    cfg = RuntimeConfig(recompute="all", pool=True, pool_budget_bytes=0)
    ref, model, wrapped, sgd = train_both("resnet", cfg, steps=4, device="cuda", momentum_on_host=host)
    torch.cuda.synchronize()
    assert max_diff(list(ref.parameters()), list(model.parameters())) < 1e-4
    assert max_diff(list(ref.buffers()), list(model.buffers())) < 1e-4
    assert (sgd.momentum_bytes_on_device() == 0) == host


def test_pool_roundtrip_keeps_values_and_overlaps():
    pool = TensorPool("cuda", budget_bytes=0)
    tensors = [torch.randn(256, 1024, device="cuda") * i for i in range(8)]
    expected = [t.clone() for t in tensors]
    handles = [pool.put(t) for t in tensors]
    del tensors  # the pool's record_stream keeps the memory until the copies have read it
    torch.cuda.empty_cache()
    for h in reversed(handles):
        pool.prefetch(h)
    got = [pool.get(h).clone() for h in handles]
    torch.cuda.synchronize()
    assert all(torch.equal(a, b) for a, b in zip(got, expected))
    assert pool.stats.late_fetches == 0 and pool.stats.offloads == 8


def test_all_config_cuts_dynamic_memory():
    kw = dict(model="resnet50", batch_size=8, device="cuda", steps=1, momentum_on_host="no")
    plain = run_probe(ProbeSpec(arm="plain", **kw))
    ours = run_probe(ProbeSpec(arm="all", pool_budget_bytes=0, lookahead=1, max_inflight_bytes=0, **kw))
    assert plain["fits"] and ours["fits"], (plain["reason"], ours["reason"])
    assert ours["dynamic_bytes"] < 0.5 * plain["dynamic_bytes"]
    assert ours["dynamic_bytes"] < 3 * ours["largest_working_set"]


def test_isolated_probes_under_a_cap():
    kw = dict(model="bottleneck_resnet", batch_size=32, device="cuda", steps=1)
    small = run_isolated(ProbeSpec(arm="ours", model_kw={"blocks": 16}, cap_bytes=4 * 2**30, **kw), 180)
    assert small["fits"], small["reason"]
    assert small["peak_bytes"] <= 4 * 2**30
    big = run_isolated(ProbeSpec(arm="plain", model_kw={"blocks": 64}, cap_bytes=2 * 2**30, **kw), 180)
    assert not big["fits"] and big["reason"].startswith("oom")


@pytest.mark.parametrize("share", [0.6, 0.2])
def test_auto_plan_merges_or_offloads_and_trains_like_plain(share):
    """A deep narrow ResNet under a budget that needs merged segments (0.6) or the pool (0.2)."""
    torch.manual_seed(0)
    model = build_model("bottleneck_resnet", 10, blocks=16, width=8).cuda()
    ref = copy.deepcopy(model)
    x, y = torch.randn(4, 3, 64, 64, device="cuda"), torch.randint(0, 10, (4,), device="cuda")
    units = flatten_units(model)
    profiles = profile_units(units, x)
    everything = make_plan(units, profiles, RuntimeConfig(recompute="all", pool=False))
    # the lowest the planner reaches (its best plan at an unreachable budget): tensors under
    # min_offload_bytes stay resident, so the largest working set alone is not reachable (H200, session 13)
    with pytest.warns(BudgetWarning):
        lowest = make_plan(units, profiles, RuntimeConfig(recompute="auto", memory_budget_bytes=1, over_budget="warn",
                                                          max_inflight_bytes=0)).estimate["peak_dynamic"]
    budget = lowest + share * (everything.estimate["peak_dynamic"] - lowest)
    wrapped = SuperNeuronsModel(model, RuntimeConfig(recompute="auto", memory_budget_bytes=budget,
                                                     max_inflight_bytes=0))
    F.cross_entropy(ref(x), y).backward()
    F.cross_entropy(wrapped(x), y).backward()
    torch.cuda.synchronize()
    assert max_rel_diff([p.grad for p in ref.parameters()], [p.grad for p in model.parameters()]) < 1e-4
    print(share, wrapped.plan.summary(), wrapped.pool.stats)
    # one checkpoint per segment does not fit: the plan merged segments or offloaded checkpoints (which
    # one depends on the measured transients; the CPU tests pin down each path)
    assert len(wrapped.plan.segments) < len(everything.segments) or wrapped.pool.stats.offloads > 0
    assert len(wrapped.pool) == 0


def test_workspace_cap_reaches_a_gpu_probe():
    kw = dict(model="resnet50", batch_size=8, device="cuda", steps=1, momentum_on_host="no", pool_budget_bytes=0,
              lookahead=1, max_inflight_bytes=0)
    capped = run_isolated(ProbeSpec(arm="all+wscap", workspace_cap_mib=16, **kw), timeout_s=300)
    uncapped = run_isolated(ProbeSpec(arm="all", **kw), timeout_s=300)
    assert capped["fits"] and uncapped["fits"], (capped["reason"], uncapped["reason"])
    assert capped["cudnn"]["wscap_env"] == "16" and uncapped["cudnn"]["wscap_env"] is None
    # on the GPU the profile measures the workspace inside each unit's transient (none is added on
    # top), and a cap can only shrink it
    assert capped["plan"]["est_workspace"] == 0 == uncapped["plan"]["est_workspace"]
    assert capped["plan"]["est_working"] <= uncapped["plan"]["est_working"]
    print("dynamic bytes with a 16 MiB workspace cap", capped["dynamic_bytes"], "without", uncapped["dynamic_bytes"])


def test_profile_measures_backward_transients_and_the_plan_bounds_the_peak():
    """cuDNN workspace and a block's inner gradients are measured per unit; with them the auto plan's
    estimate bounds the allocator's real dynamic peak under a cap (without them it missed ~2 GB at
    420-630 blocks on the H200 and the runtime ran out of memory)."""
    torch.manual_seed(0)
    model = build_model("bottleneck_resnet", 10, blocks=4, width=16).cuda()
    units = flatten_units(model)
    profiles = profile_units(units, torch.randn(16, 3, 96, 96, device="cuda"))
    assert any(p.transient_bytes > 0 for p in profiles if p.expensive)
    r = run_isolated(ProbeSpec(arm="ours", model="bottleneck_resnet", model_kw={"blocks": 48}, batch_size=32,
                               device="cuda", steps=1, cap_bytes=6 * 2**30), 180)
    assert r["fits"], r["reason"]
    print("dynamic", r["dynamic_bytes"], "estimate", r["est_dynamic_bytes"], r["plan"])
    assert r["plan"]["recomputed"] > 0  # the cap forces a plan (48 blocks need ~7 GB plainly)
    assert r["dynamic_bytes"] <= 1.05 * r["est_dynamic_bytes"]
    marks = r["memory_marks"]  # where the peak was: forward's end or a segment's backward
    assert 0 < marks["forward_end"] <= marks["peak_at_forward_end"] <= r["dynamic_bytes"]
    assert marks["backward_entry_max"] <= r["dynamic_bytes"] and marks["backward_entry_max_segment"] >= 0


@pytest.mark.parametrize("model", ["resnet50", "vgg16_imagenet", "alexnet"])
def test_all_config_peaks_in_a_segment_backward_within_the_estimate(model):
    """Under "all" (everything offloaded, peak-memory settings), with the peak counter reset every
    step: the peak is in a segment's backward, not in forward; the plan's estimate bounds it (a conv
    layer's whole workspace in its transient, recomputed outputs and used gradients freed); and a
    prefetch adds nothing to the plan's peak."""
    r = run_probe(ProbeSpec(arm="all", model=model, batch_size=8, device="cuda", steps=2, momentum_on_host="no",
                            pool_budget_bytes=0, lookahead=1, max_inflight_bytes=0))
    assert r["fits"], r["reason"]
    marks = r["memory_marks"]
    print(model, "dynamic", r["dynamic_bytes"], "estimate", r["est_dynamic_bytes"], "largest working set",
          r["largest_working_set"], marks, r["per_step"])
    assert marks["peak_at_forward_end"] < r["dynamic_bytes"] and marks["peak_segment"] >= 0
    assert r["plan"]["est_prefetched"] == 0
    assert r["dynamic_bytes"] <= 1.05 * r["est_dynamic_bytes"]


def test_max_batch_ours_trains_a_batch_plain_cannot(tmp_path):
    """The largest-batch search end to end on the GPU (a process per probe) on ResNet-50 under a
    2.5 GiB cap: plain trains batch 16 and runs out of memory at 32 (~78 MiB a sample, 2.5 GiB
    dynamic at 32 on the H200), ours trains 32 and more (recomputation and the pool: ~22 MiB)."""
    from repro.experiment import Context
    from repro.papers.superneurons.experiment import MaxBatchParams, max_batch

    p = MaxBatchParams(networks=[{"name": "resnet50", "model": "resnet50"}], cap_gib=2.5, steps=1, max_batch=64,
                       resolution=1.0, start_batch={"plain": 16, "ours": 32}, budget_s={"plain": 300, "ours": 300},
                       probe_timeout_s=180)
    result = max_batch(p, Context(out_dir=tmp_path, device="cuda"))
    m, probes = result.metrics, result.tables["max_batch_probes"].set_index(["arm", "batch_size"])
    print(result.tables["max_batch"].to_string(), m)
    assert m["max_batch_resnet50_plain"] == 16 and not probes.loc[("plain", 32), "fits"]
    assert probes.loc[("plain", 32), "reason"].startswith("oom")
    assert m["max_batch_resnet50_ours"] >= 32 and probes.loc[("ours", 32), "peak_bytes"] <= 2.5 * 2**30
    assert m["batch_ratio_resnet50"] == m["max_batch_resnet50_ours"] / 16
