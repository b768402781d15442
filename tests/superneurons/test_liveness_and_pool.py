"""Liveness profile (sizes, working-set definition, caching, no side effects) and the tensor pool's
bookkeeping (LRU budget, prefetch, release), which on the CPU is a pass-through."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn

from sn_helpers import tiny
from repro.models import build_model
from repro.papers.superneurons.liveness import (flatten_units, largest_working_set, plain_dynamic_estimate,
                                         profile_units)
from repro.papers.superneurons.tensor_pool import TensorPool


def test_profile_sizes_of_a_conv_layer():
    conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
    x = torch.randn(2, 3, 10, 10)
    (p,) = profile_units([("conv", conv)], x)
    assert p.in_bytes == x.numel() * 4
    assert p.out_bytes == 2 * 8 * 10 * 10 * 4
    assert p.saved_bytes == x.numel() * 4  # conv saves its input (the weight is a parameter, not counted)
    assert p.param_bytes == 8 * 3 * 9 * 4
    assert p.working_set == p.saved_bytes + p.out_bytes + p.in_bytes + p.param_bytes
    assert p.expensive


def test_profile_flattens_nested_sequentials_and_caches_identical_blocks():
    model, x, _ = tiny("resnet")
    units = flatten_units(model)
    assert all(not isinstance(m, nn.Sequential) for _, m in units)
    profiles = profile_units(units, x)
    assert [p.name for p in profiles] == [n for n, _ in units]
    blocks = [p for p in profiles if p.kind == "Bottleneck"]
    assert len(blocks) == 5 and all(p.saved_bytes > 0 for p in blocks)
    assert largest_working_set(profiles).working_set == max(p.working_set for p in profiles)
    assert plain_dynamic_estimate(profiles) >= sum(p.saved_bytes for p in profiles)


def test_profile_leaves_bn_stats_and_rng_untouched():
    model, x, _ = tiny("alexnet")
    model2, _, _ = tiny("resnet")
    before = [b.clone() for b in model2.buffers()]
    x2 = torch.randn(2, 3, 32, 32)
    torch.manual_seed(3)
    expected = torch.rand(3)
    torch.manual_seed(3)
    profile_units(flatten_units(model), x)
    profile_units(flatten_units(model2), x2)
    assert torch.equal(torch.rand(3), expected)
    assert all(torch.equal(a, b) for a, b in zip(before, model2.buffers()))


def test_pool_keeps_the_most_recent_within_budget():
    pool = TensorPool("cpu", budget_bytes=2 * 400)
    tensors = [torch.full((100,), float(i)) for i in range(4)]  # 400 bytes each
    handles = [pool.put(t) for t in tensors]
    assert [pool.is_resident(h) for h in handles] == [False, False, True, True]
    assert pool.stats.offloads == 2 and pool.stats.offloaded_bytes == 800
    assert pool.resident_bytes == 800 and pool.stats.peak_resident_bytes == 800
    pool.prefetch(handles[1])
    assert torch.equal(pool.get(handles[1]), tensors[1])
    assert pool.stats.prefetches == 1 and pool.stats.late_fetches == 0
    assert torch.equal(pool.get(handles[0]), tensors[0])  # not prefetched: a late fetch
    assert pool.stats.late_fetches == 1
    del handles
    assert len(pool) == 0 and pool.resident_bytes == 0


def test_pool_lru_touch_and_unlimited_budget():
    pool = TensorPool("cpu", budget_bytes=800)
    a, b = pool.put(torch.zeros(100)), pool.put(torch.zeros(100))
    pool.get(a)  # a becomes most recently used
    c = pool.put(torch.zeros(100))
    assert not pool.is_resident(b) and pool.is_resident(a) and pool.is_resident(c)
    unlimited = TensorPool("cpu")
    hs = [unlimited.put(torch.zeros(1000)) for _ in range(10)]
    assert unlimited.budget_bytes == math.inf and all(unlimited.is_resident(h) for h in hs)


def test_pool_refuses_negative_budget():
    with pytest.raises(ValueError, match="budget"):
        TensorPool("cpu", budget_bytes=-1)


def test_storable_keeps_a_saved_tensors_strides():
    """The pool stores a saved tensor in the layout it was saved in: on the H200, making a batch-first
    LSTM output or a transposed bf16 weight contiguous gave gradients 0.45 off plain autograd."""
    from repro.papers.superneurons.tensor_pool import storable
    dense = [torch.randn(64, 8, 256).transpose(0, 1), torch.randn(100, 128).t(),
             torch.randn(4, 3, 5, 5).to(memory_format=torch.channels_last), torch.randn(6, 7)]
    for t in dense:
        assert storable(t) is t
    qkv = torch.randn(8, 65, 576)[..., :192].view(8, 65, 3, 64).permute(0, 2, 1, 3)  # a slice: has gaps
    s = storable(qkv)
    assert s is not qkv and torch.equal(s, qkv)
    assert s.stride() == (12480, 64, 192, 1)  # dense, the dimensions in the slice's stride order


def test_module_buffers_and_parameters_stay_out_of_the_pool():
    """Batch-norm running statistics are saved by batch_norm and updated in place by it: the pool must not
    hold copies of them (nor of parameters); only activations go in."""
    from any_models import any_model
    from repro.papers.superneurons.plan import RuntimeConfig
    from repro.papers.superneurons.runtime import SuperNeuronsModel
    model, x, y = any_model("tv_resnet")
    wrapped = SuperNeuronsModel(model, RuntimeConfig(recompute="off", pool=True, pool_budget_bytes=0,
                                                     min_offload_bytes=0))
    state = {t.untyped_storage().data_ptr() for t in (*model.parameters(), *model.buffers())}
    wrapped.prepare(x)  # plans and makes the pool
    put, seen = wrapped.pool.put, []
    wrapped.pool.put = lambda t: (seen.append(t.untyped_storage().data_ptr()), put(t))[1]
    torch.nn.functional.cross_entropy(wrapped(x), y).backward()
    assert seen and not state.intersection(seen)


def test_alexnet_lrn_saves_only_its_input():
    """AlexNet's LRN (repro.models.lrn, issue 45) keeps only its input, the in-place ReLU's output that
    the ReLU keeps too: it adds no saved bytes, and its working set is its input and the two gradients
    (PyTorch's composite LRN kept about four times its input)."""
    from repro.models.lrn import FusedLocalResponseNorm

    model = build_model("alexnet", num_classes=10)
    units = flatten_units(model)
    profiles = profile_units(units, torch.randn(2, 3, 67, 67))
    lrns = [p for p, (_, m) in zip(profiles, units) if isinstance(m, FusedLocalResponseNorm)]
    assert len(lrns) == 2
    for p in lrns:
        assert p.saved_bytes == p.in_saved_bytes == p.shared_in_bytes == p.in_bytes
        assert p.working_set == p.saved_bytes + p.out_bytes + p.in_bytes == 3 * p.in_bytes
