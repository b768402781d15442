"""The runtime on ordinary nn.Module models (their own forward; units from the torch.fx graph): a
ViT and a GPT-style decoder, a DenseNet (concats), a torchvision-style ResNet (residual adds, an
in-place add and ReLU), an LSTM model (a tuple output, dropout). Gradients, losses and batch-norm
statistics equal plain autograd's in fp32 and under bf16 autocast, under every kind of plan; what
the runtime cannot run is refused before the first step, with the module and the construct named."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from any_models import ANY, any_model, loss_fn
from sn_helpers import max_rel_diff
from repro.papers.superneurons.liveness import UnsupportedModel, profile_units
from repro.papers.superneurons.plan import RuntimeConfig
from repro.papers.superneurons.runtime import SuperNeuronsHooks, SuperNeuronsModel
from repro.papers.superneurons.units import find_units, trace

CONFIGS = {
    "speed": RuntimeConfig(recompute="all", strategy="speed", pool=True, pool_budget_bytes=0),
    "memory": RuntimeConfig(recompute="all", strategy="memory", pool=True, pool_budget_bytes=0),
    "pool_saved": RuntimeConfig(recompute="off", pool=True, pool_budget_bytes=0, min_offload_bytes=0),
    "auto_tight": RuntimeConfig(recompute="auto", pool=True, memory_budget_bytes=1, over_budget="warn"),
}
# bf16 autocast: the runtime runs the same bf16 ops as plain autograd (0 difference on the CPU); a
# recomputation in fp32 was ~1e-2 off, or crashed
TOLERANCE = {None: 1e-5, torch.bfloat16: 1e-3}


def one_step(name, cfg, dtype, device="cpu", steps=1, sizes=None, batch=3):
    """Plain and runtime models from the same init, ``steps`` forward+backward(+SGD) from the same RNG."""
    model, x, y = any_model(name, device, batch=batch, sizes=sizes)
    ref = copy.deepcopy(model)
    wrapped = SuperNeuronsModel(model, cfg)
    losses = []
    for net, params in ((ref, ref.parameters()), (wrapped, model.parameters())):
        opt = torch.optim.SGD(params, lr=0.1)
        for step in range(steps):
            opt.zero_grad()
            torch.manual_seed(7 + step)
            with torch.autocast(device, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
                loss = loss_fn(net(x), y)
            loss.backward()
            if step + 1 < steps:
                opt.step()
        losses.append(loss.detach())
    return ref, model, wrapped, losses


@pytest.mark.parametrize("dtype", [None, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("name", list(ANY))
def test_gradients_equal_plain(name, config, dtype, device="cpu"):
    ref, model, wrapped, (loss_ref, loss) = one_step(name, CONFIGS[config], dtype, device, steps=2)
    tol = TOLERANCE[dtype]
    assert torch.allclose(loss, loss_ref, rtol=tol, atol=1e-6)
    grads_ref, grads = [p.grad for p in ref.parameters()], [p.grad for p in model.parameters()]
    assert all(g is not None for g in grads)
    assert max_rel_diff(grads_ref, grads) <= tol
    for b_ref, b in zip(ref.buffers(), model.buffers()):  # BN running statistics: updated once per step
        assert torch.allclose(b_ref.float(), b.float(), rtol=1e-5, atol=1e-6)
    summary = wrapped.plan.summary()
    if config in ("speed", "memory"):
        assert summary["recomputed"] == summary["segments"] > 1
    assert len(wrapped.pool) == 0


@pytest.mark.parametrize("name", list(ANY))
def test_units_cover_the_model(name):
    """Every parameter belongs to a unit, and a block whose input is read twice (a residual add, a
    concat) is never cut inside."""
    model, x, _ = any_model(name)
    units = find_units(model, x)
    owned = {id(p) for _, u in units for p in u.parameters()}
    assert owned == {id(p) for p in model.parameters()}
    assert len(units) > 3
    names = [n for n, _ in units]
    assert len(set(names)) == len(names)
    if name == "tv_resnet":
        assert "layer2.0" in names  # the block with its downsample shortcut and the add: one unit
        assert not any(n.startswith("layer2.0.conv") or n.startswith("layer2.0.downsample") for n in names)
    if name == "densenet":
        assert "stages.0" in names and not any(n.startswith("stages.0.denselayer") for n in names)
    if name == "lstm":
        assert "lstm" in names  # the LSTM with the getitem that takes its tensor out of the tuple


def test_wrap_model_and_eval_run_any_model():
    model, x, y = any_model("vit")
    wrapped = SuperNeuronsHooks(RuntimeConfig(recompute="all")).wrap_model(model)
    loss_fn(wrapped(x), y).backward()
    assert wrapped.plan.summary()["recomputed"] > 0
    model.eval()
    with torch.no_grad():
        assert torch.equal(wrapped(x), model(x))


class DataDependent(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = Gate()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(self.gate(x))


class Gate(nn.Module):
    def forward(self, x):
        return x if x.sum() > 0 else -x


class TwoInputs(nn.Module):
    def forward(self, x, mask):
        return x * mask


class TupleOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x), x


class Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls.add_(1)
        return self.fc(x)


def test_untraceable_constructs_are_refused_before_the_first_step():
    with pytest.raises(UnsupportedModel, match=r"module gate \(Gate\) uses data-dependent control flow"):
        SuperNeuronsModel(DataDependent())
    with pytest.raises(UnsupportedModel, match=r"TwoInputs.forward takes 2 arguments without defaults \(x, mask\)"):
        SuperNeuronsModel(TwoInputs())
    wrapped = SuperNeuronsModel(TupleOut())
    with pytest.raises(UnsupportedModel, match="TupleOut returns tuple"):
        wrapped(torch.randn(2, 4))
    wrapped = SuperNeuronsModel(nn.Sequential(nn.Linear(4, 4), Counter()))
    with pytest.raises(UnsupportedModel, match=r"unit 1 \(Counter\) updates buffer\(s\) calls in place"):
        wrapped(torch.randn(2, 4))


def test_sequential_with_a_tuple_unit_is_refused_clearly():
    """nn.LSTM as a unit of a Sequential: a clear refusal (it was an AttributeError)."""
    wrapped = SuperNeuronsModel(nn.Sequential(nn.Linear(4, 4), nn.LSTM(4, 4, batch_first=True)))
    with pytest.raises(UnsupportedModel, match=r"unit 1 \(LSTM\) returns tuple, not one tensor"):
        wrapped(torch.randn(2, 3, 4))


class Branches(nn.ModuleDict):
    """A ModuleDict with its own forward (was refused as "not callable in sequence")."""

    def __init__(self):
        super().__init__({"a": nn.Linear(4, 4), "b": nn.Linear(4, 4)})

    def forward(self, x):
        return self["a"](x) + self["b"](x)


class ScaleInPlace(nn.Module):
    """Writes its input in place (plain PyTorch trains it: the linear before saves no output)."""

    def forward(self, x):
        x.mul_(2.0)
        return x.tanh()


@pytest.mark.parametrize("recompute", ["all", "off"])
def test_sequential_blocks_moduledict_and_in_place_on_input(recompute):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), ScaleInPlace(), Branches(), nn.ReLU(), nn.Linear(4, 3))
    ref = copy.deepcopy(model)
    x, y = torch.randn(5, 4), torch.randint(0, 3, (5,))
    F.cross_entropy(ref(x), y).backward()
    wrapped = SuperNeuronsModel(model, RuntimeConfig(recompute=recompute, pool=True, pool_budget_bytes=0))
    F.cross_entropy(wrapped(x), y).backward()
    assert max_rel_diff([p.grad for p in ref.parameters()], [p.grad for p in model.parameters()]) < 1e-6
    assert model[1].sn_mutates_input  # found by the profile's version check


def test_bare_module_list_is_still_refused():
    with pytest.raises(UnsupportedModel, match="0 is a ModuleList, which is not callable in sequence"):
        SuperNeuronsModel(nn.Sequential(nn.ModuleList([nn.Linear(2, 2)])))


def test_trace_keeps_the_models_parameters():
    model, x, _ = any_model("gpt")
    traced = trace(model)
    assert {id(p) for p in traced.parameters()} == {id(p) for p in model.parameters()}
    assert profile_units(find_units(model, x), x)  # token ids (integers) as the first unit's input
