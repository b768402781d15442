"""Saved-tensor hooks on the CPU (the NumPy codec): what is encoded, gradients within the error
analysis, lossless eb = 0, ActNN's quantiser, the adaptive controller and its state."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn

from repro.papers.comet.hooks import (ActNNHooks, CometHooks, EBController, SavedTensorAccounting, dense_flat, make_hooks,
                               restore)
from repro.models import build_model
from repro.train import TrainHooks
from repro.train.hooks import fast_mode_conflict


def _model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return build_model("resnet20", num_classes=10, width=4)


def _batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(8, 3, 32, 32, generator=g), torch.randint(0, 10, (8,), generator=g)


def _grads(model: nn.Module, hooks: SavedTensorAccounting | None, x, y) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    ctx = hooks.saved_tensors_hooks() if hooks else torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t)
    with ctx:
        loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    if hooks:
        hooks.after_backward(model)
    return {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("order", ["logical", "memory"])
def test_dense_flat_and_restore_round_trip_both_layouts(order):
    x = torch.randn(2, 3, 4, 5)
    for t in (x, x.contiguous(memory_format=torch.channels_last), x.transpose(2, 3)):
        flat, layout = dense_flat(t, order)
        back = restore(flat.clone(), t.shape, layout)
        assert torch.equal(back, t) and back.shape == t.shape
    cl = x.contiguous(memory_format=torch.channels_last)
    flat, layout = dense_flat(cl, order)
    if order == "memory":
        assert layout == "channels_last" and flat.data_ptr() == cl.data_ptr()  # a view, no copy
    else:  # NCHW order: neighbours along W are neighbours in the flat tensor
        assert layout == "channels_last_logical" and torch.equal(flat, x.reshape(-1))
    assert restore(flat, cl.shape, layout).is_contiguous(memory_format=torch.channels_last)
    with pytest.raises(ValueError, match="value order"):
        dense_flat(cl, "zigzag")


def test_logical_order_compresses_channels_last_activations_better():
    """Channels with different ranges, each smooth in space (as conv outputs are): in memory order a
    channels-last tensor's neighbours are different channels, so deltas and ActNN's groups straddle
    them; in logical order they do not."""
    torch.manual_seed(0)
    h = w = 32
    smooth = torch.nn.functional.avg_pool2d(torch.randn(4, 16, h + 6, w + 6), 7, stride=1)
    x = (smooth * torch.logspace(-1, 1, 16).view(1, 16, 1, 1) + torch.randn(1, 16, 1, 1)).relu()
    cl = x.contiguous(memory_format=torch.channels_last)
    stored = {}
    for order in ("logical", "memory"):
        hooks = CometHooks(EBController(0.05, adaptive=False), min_numel=256, value_order=order)
        packed, stored[order] = hooks.encode(cl, "conv")
        back = hooks.decode(packed)
        assert back.is_contiguous(memory_format=torch.channels_last)
        assert (back - x).abs().max() <= 0.05
    assert stored["logical"] < 0.8 * stored["memory"]
    err = {}
    for order in ("logical", "memory"):  # ActNN's groups: one channel's range, not the widest channel's
        hooks = ActNNHooks(group_size=256, min_numel=256, value_order=order)
        err[order] = (hooks.decode(hooks.encode(cl, "conv")[0]) - x).pow(2).mean().sqrt()
    assert err["logical"] < 0.8 * err["memory"]
    with pytest.raises(ValueError, match="value_order"):
        CometHooks(EBController(0.05, adaptive=False), value_order="zigzag")


def test_eb_zero_gives_bitwise_identical_gradients():
    x, y = _batch()
    ref = _grads(_model(), None, x, y)
    hooks = make_hooks("fixed", eb=0.0, min_numel=256)
    model = _model()
    hooks.wrap_model(model)
    got = _grads(model, hooks, x, y)
    for n in ref:
        assert torch.equal(ref[n], got[n]), n
    assert hooks.step_stored_bytes > 0 and hooks.step_raw_bytes > 0


def test_compressed_gradients_stay_close_and_memory_drops():
    x, y = _batch()
    model = _model()
    ref = _grads(model, None, x, y)
    hooks = make_hooks("fixed", eb=1e-3, min_numel=256)
    hooks.wrap_model(model)
    got = _grads(model, hooks, x, y)
    for n in ref:
        rel = (got[n] - ref[n]).norm() / ref[n].norm().clamp_min(1e-12)
        assert rel < 0.05, (n, float(rel))
    assert hooks.step_raw_bytes / hooks.step_stored_bytes > 2


def test_parameters_are_never_encoded_and_shared_tensors_once():
    seen = []

    class Spy(SavedTensorAccounting):
        def encode(self, t, layer):
            seen.append((layer, t.data_ptr()))
            return super().encode(t, layer)

    model = _model()
    spy = Spy(min_numel=1)
    spy.wrap_model(model)
    _grads(model, spy, *_batch())
    params = {p.data_ptr() for p in model.parameters()}
    assert not params & {ptr for _, ptr in seen}
    assert len(seen) == len(set(seen))  # the in-place ReLU output (also the next conv's input) once
    kinds = {spy.totals[layer].kind for layer, _ in seen}
    assert {"Conv2d", "BatchNorm2d", "ReLU"} <= kinds


def test_small_and_non_float_tensors_pass_through():
    hooks = make_hooks("fixed", eb=0.1, min_numel=10**9)
    model = _model()
    hooks.wrap_model(model)
    _grads(model, hooks, *_batch())
    assert hooks.step_raw_bytes == hooks.step_stored_bytes > 0


def test_hooks_force_eager_mode():
    hooks = make_hooks("adaptive")
    assert fast_mode_conflict(hooks, compile=False, cuda_graph=True)
    assert make_hooks("none") is None


def test_actnn_quantiser_is_unbiased_and_two_bits():
    torch.manual_seed(0)
    x = torch.randn(4, 8, 16, 16)
    hooks = ActNNHooks(group_size=256, min_numel=1, seed=1)
    decoded = []
    for _ in range(200):
        packed, nbytes = hooks.encode(x, "layer")
        decoded.append(hooks.decode(packed))
    groups = x.numel() // 256
    assert nbytes == x.numel() // 4 + 8 * groups
    stack = torch.stack(decoded)
    g = x.view(groups, 256)
    step = ((g.amax(1) - g.amin(1)) / 3).view(-1, 1)
    assert ((stack.view(200, groups, 256) - g).abs() <= step + 1e-5).all()  # one level at most
    assert (stack.mean(0) - x).abs().max() < 0.25 * step.max()  # unbiased: the mean converges
    levels = ((stack.view(200, groups, 256) - g.amin(1, keepdim=True)) / step).round()
    assert set(levels.unique().tolist()) <= {0.0, 1.0, 2.0, 3.0}


def test_actnn_handles_constant_groups_and_odd_sizes():
    hooks = ActNNHooks(group_size=8, min_numel=1)
    x = torch.cat([torch.full((8,), 2.5), torch.arange(5, dtype=torch.float32)])
    packed, _ = hooks.encode(x, "l")
    y = hooks.decode(packed)
    assert y.shape == x.shape and torch.equal(y[:8], x[:8])
    with pytest.raises(ValueError, match="group_size"):
        ActNNHooks(group_size=6)


def test_actnn_keeps_relus_mask_exact_and_first_layer_gradients_unbiased():
    """A ReLU's saved output keeps its exact x > 0 mask (n / 8 bytes), as ActNN's quantised ReLU does:
    the mean of many stochastic backward passes converges to the exact gradient, the first layer's
    included (without the mask its mean gradient kept about 0.1 of the exact norm, cosine about 0.2)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
                          nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
                          nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))
    x, y = torch.randn(16, 3, 16, 16), torch.randint(0, 10, (16,))

    def first_grad(hooks=None):
        model.zero_grad(set_to_none=True)
        with (hooks.saved_tensors_hooks() if hooks else torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t)):
            loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        if hooks:
            hooks.after_backward(model)
        return model[0].weight.grad.clone()

    exact = first_grad()
    hooks = ActNNHooks(group_size=256, min_numel=256, seed=1)
    hooks.wrap_model(model)
    mean = torch.stack([first_grad(hooks) for _ in range(32)]).mean(0)
    assert nn.functional.cosine_similarity(mean.flatten(), exact.flatten(), 0) > 0.95
    assert 0.8 < float(mean.norm() / exact.norm()) < 1.25
    relu = torch.relu(torch.randn(2, 16, 16, 16))  # a ReLU output: zeros and small positives
    relu[0, 0, 0, :4] = torch.tensor([1e-4, 2e-4, 0.0, 3e-4])
    packed, nbytes = hooks.encode(relu, "2")  # the first ReLU's name in the Sequential
    assert packed.positive is not None and nbytes == relu.numel() // 4 + 8 * (relu.numel() // 256) + relu.numel() // 8
    decoded = hooks.decode(packed)
    assert torch.equal(decoded > 0, relu > 0)  # the mask survives 2-bit rounding exactly
    assert hooks.encode(relu, "0")[0].positive is None  # a conv's input: values only


def test_controller_formula_and_clipping():
    """eb = fraction * ||dW|| * sqrt(3 / (p * fan_in)) / ||dy||, for a linear layer with known norms."""
    lin = nn.Linear(50, 4)
    lin.weight.grad = torch.full_like(lin.weight, 0.5)  # ||dW|| = 0.5 * sqrt(200)
    ctl = EBController(0.05, adaptive=True, fraction=0.1, eb_min=1e-6, eb_max=10.0, retune_every=3)
    model = nn.Sequential(lin)
    ctl.setup(model)
    ctl.retune(0, model, {"0": torch.tensor(2.0)}, {"0": torch.tensor(0.25)})
    want = 0.1 * 0.5 * math.sqrt(200) * math.sqrt(3 / (0.25 * 50)) / 2.0
    assert ctl.eb["0"] == pytest.approx(want, rel=1e-5)
    row = ctl.decisions[-1]
    assert row["rule"] == "weight-gradient" and row["fan_in"] == 50 and row["eb_old"] == 0.05
    ctl.eb_max = 1e-3
    ctl.retune(3, model, {"0": torch.tensor(2.0)}, {"0": torch.tensor(0.25)})
    assert ctl.eb["0"] == 1e-3 and ctl.decisions[-1]["eb_wanted"] == pytest.approx(want, rel=1e-5)
    assert [ctl.measuring(s) for s in range(4)] == [True, False, False, True]


def test_controller_batchnorm_rule_and_consumers():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 4, 3))
    model[1].running_var.copy_(torch.tensor([4.0, 1.0, 9.0, 0.25]))
    ctl = EBController(0.05, adaptive=True, bn_fraction=0.1, eb_max=10.0)
    ctl.setup(model)
    assert ctl.consumer == {"2": "3"}  # the ReLU output is conv 3's input
    ctl.retune(0, model, {}, {})
    assert ctl.eb["1"] == pytest.approx(0.1 * math.sqrt(3) * math.sqrt(0.25 + 1e-5), rel=1e-5)
    ctl.eb["3"] = 0.02
    assert ctl.eb_for("2") == 0.02 and ctl.eb_for("0") == 0.05


def test_controller_rejects_bad_settings():
    with pytest.raises(ValueError, match="eb_min <= eb_max"):
        EBController(0.05, adaptive=True, eb_min=1.0, eb_max=0.1)
    with pytest.raises(ValueError, match="error bound eb"):
        EBController(-1.0, adaptive=False)
    with pytest.raises(ValueError, match="method must be"):
        make_hooks("jpeg")
    with pytest.raises(ValueError, match="min_numel"):
        SavedTensorAccounting(0)


def test_adaptive_hooks_retune_in_training_steps_and_checkpoint_state():
    model = _model()
    hooks = make_hooks("adaptive", eb=0.05, retune_every=2, min_numel=256)
    hooks.wrap_model(model)
    x, y = _batch()
    for _ in range(3):
        _grads(model, hooks, x, y)
    steps = sorted({d["step"] for d in hooks.controller.decisions})
    assert steps == [0, 2]
    convs = [n for n, m in model.named_modules() if isinstance(m, nn.Conv2d)]
    assert set(convs) <= set(hooks.controller.eb)
    assert all(math.isfinite(v) and v > 0 for v in hooks.controller.eb.values())
    state = hooks.state_dict()
    fresh = make_hooks("adaptive", eb=0.05, retune_every=2, min_numel=256)
    fresh.load_state_dict(state)
    assert fresh.controller.eb == hooks.controller.eb and fresh.steps == 3
    assert fresh.layer_table() == hooks.layer_table()
    assert isinstance(hooks, TrainHooks) and isinstance(hooks, CometHooks)
