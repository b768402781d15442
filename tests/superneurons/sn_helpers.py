"""Tiny models, a plain-PyTorch reference and a CPU replay of the allocator for the SuperNeurons
runtime tests."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from repro.models import build_model
from repro.papers.superneurons.liveness import (_signature, frozen_batchnorm_stats, loss_need, loss_value,
                                                mutates_input, tensor_bytes)
from repro.papers.superneurons.plan import RuntimeConfig
from repro.papers.superneurons.runtime import SuperNeuronsModel
from repro.papers.superneurons.sgd_in_backward import SGDInBackward
from repro.papers.superneurons.tensor_pool import TensorPool

# name -> (model name, builder kwargs, image size); AlexNet keeps its dropout and LRN (10 classes)
TINY = {
    "resnet": ("bottleneck_resnet", dict(blocks=[1, 2, 1, 1], width=4, num_classes=10), 32),
    "vgg": ("vgg11", dict(width=0.125), 32),
    "alexnet": ("alexnet", dict(num_classes=10), 67),
}


# (name, seed) -> (the model as built on the CPU, the RNG state right after): built once per process
# (AlexNet's 58M parameters take 0.6 s to initialise, a copy 0.15 s); tiny() hands out copies and
# leaves the RNG as the build would, so a test sees exactly what a fresh build gives it
_BUILT: dict = {}


def tiny(name: str, device="cpu", batch=3, seed=0):
    model_name, kw, size = TINY[name]
    if device == "cpu":
        if (name, seed) not in _BUILT:
            torch.manual_seed(seed)
            _BUILT[name, seed] = build_model(model_name, **kw), torch.get_rng_state()
        built, rng = _BUILT[name, seed]
        model = copy.deepcopy(built)
        torch.set_rng_state(rng)
    else:
        torch.manual_seed(seed)
        model = build_model(model_name, **kw).to(device)
    gen = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(batch, 3, size, size, generator=gen).to(device)
    y = torch.randint(0, 10, (batch,), generator=gen).to(device)
    return model, x, y


def grads_after_one_backward(name: str, cfg: RuntimeConfig, device="cpu"):
    """(plain grads, runtime grads, plain loss, runtime loss, wrapped model) from the same init and RNG."""
    model, x, y = tiny(name, device)
    ref = copy.deepcopy(model)
    torch.manual_seed(5)
    loss_ref = F.cross_entropy(ref(x), y)
    loss_ref.backward()
    wrapped = SuperNeuronsModel(model, cfg)
    torch.manual_seed(5)
    loss = F.cross_entropy(wrapped(x), y)
    loss.backward()
    return [p.grad for p in ref.parameters()], [p.grad for p in model.parameters()], loss_ref, loss, wrapped


def train_both(name: str, cfg: RuntimeConfig, steps=3, device="cpu", momentum_on_host=False):
    """Plain torch.optim.SGD vs the runtime + SGDInBackward for ``steps`` steps; returns both models."""
    model, x, y = tiny(name, device)
    ref = copy.deepcopy(model)
    opt = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    wrapped = SuperNeuronsModel(model, cfg)
    sgd = SGDInBackward(model, lr=0.05, momentum=0.9, weight_decay=5e-4, momentum_on_host=momentum_on_host)
    for step in range(steps):
        torch.manual_seed(100 + step)
        opt.zero_grad()
        F.cross_entropy(ref(x), y).backward()
        opt.step()
        torch.manual_seed(100 + step)
        F.cross_entropy(wrapped(x), y).backward()
    return ref, model, wrapped, sgd


def max_diff(a, b) -> float:
    return max((u.float() - v.float()).abs().max().item() for u, v in zip(a, b))


def max_rel_diff(a, b) -> float:
    """Largest per-tensor max |a - b| / max |a|: the same computation in another order (cuBLAS may pick
    another algorithm for a recomputed product) differs by rounding, a wrong mask or stale tensor by O(1)."""
    return max(((u.float() - v.float()).abs().max() / u.float().abs().max().clamp_min(1e-30)).item()
               for u, v in zip(a, b))


# ---- CPU replay: the CUDA allocator's byte counters, stood in for by a storage tracker ----------------
class StorageTracker(TorchDispatchMode):
    """Bytes of the storages that ops allocate while it is on, alive now and at the peak (``peak``): a
    CPU stand-in for the CUDA allocator's counters. An op's output that aliases one of its inputs (a
    view, an in-place result) is no new storage; tensors made before it started are not counted."""

    def __init__(self):
        super().__init__()
        self.refs: dict[int, tuple] = {}  # data_ptr -> (weak storage ref, bytes)
        self.peak = 0
        self.paused = False

    def live(self) -> int:
        for key in [k for k, (ref, _) in self.refs.items() if ref.expired()]:
            del self.refs[key]
        return sum(n for _, n in self.refs.values())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.paused:
            return out
        inputs = {t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs))[0]
                  if isinstance(t, torch.Tensor)}
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                storage = t.untyped_storage()
                key = storage.data_ptr()
                if key not in inputs and storage.nbytes() and (key not in self.refs or self.refs[key][0].expired()):
                    self.refs[key] = (StorageWeakRef(storage), storage.nbytes())
        self.peak = max(self.peak, self.live())
        return out


def measure_loss(out: torch.Tensor, loss: str) -> int:
    """The loss's need on output ``out`` as liveness.profile_loss measures it on the GPU, with the
    tracker for the allocator."""
    leaf = out.detach().requires_grad_(out.is_floating_point())
    tracker = StorageTracker()
    with tracker:
        with torch.enable_grad():
            value = loss_value(leaf, loss)
        forward = tracker.peak
        grad, = torch.autograd.grad(value, leaf)
        del grad, value
    return loss_need(tensor_bytes(out), forward, tracker.peak)


def measure_transients(units, x: torch.Tensor, profiles, loss: str = "none") -> None:
    """Fill the profiles' ``transient_bytes`` and ``forward_bytes`` (and the last one's ``loss_bytes``)
    as liveness.profile_units measures them on the GPU, with the tracker for the allocator (so that a
    CPU plan counts what a CPU replay allocates)."""
    cache = {}
    a = x.detach()
    with torch.random.fork_rng(), frozen_batchnorm_stats([m for _, m in units]):
        for (_, m), p in zip(units, profiles):
            key = _signature(m, a)
            if key not in cache:
                leaf = a.detach().requires_grad_(a.is_floating_point())  # token ids take no gradient
                inp = leaf.clone() if leaf.requires_grad or mutates_input(m) else leaf
                forward = StorageTracker()
                with torch.enable_grad(), forward:
                    out = m(inp)
                wrt = ([leaf] if leaf.requires_grad else []) + [q for q in m.parameters() if q.requires_grad]
                backward = StorageTracker()
                with backward:
                    grads = torch.autograd.grad(out, wrt, torch.ones_like(out), allow_unused=True)
                    del grads
                modelled = p.out_bytes + p.in_bytes + p.param_bytes
                cache[key] = (max(0, backward.peak - modelled), forward.peak)
                out = out.detach()
            else:
                with torch.no_grad():
                    out = m(a.clone() if mutates_input(m) else a)
            p.transient_bytes, p.forward_bytes = cache[key]
            a = out
    if loss != "none":
        profiles[-1].loss_bytes = measure_loss(a, loss)


class ReplayPool(TensorPool):
    """The CPU pool with offloads that leave: an offloaded tensor's storage is dropped (its host copy
    made while the tracker is paused), a prefetch allocates a copy."""

    tracker: StorageTracker | None = None

    def _offload(self, e) -> None:
        super()._offload(e)
        if self.tracker is not None:
            self.tracker.paused = True
        e.host, e.tensor = e.tensor.clone(), None
        if self.tracker is not None:
            self.tracker.paused = False

    def _prefetch(self, e) -> None:
        super()._prefetch(e)
        e.tensor = e.host.clone()


def replay_step(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, cfg: RuntimeConfig, loss_fn=None):
    """One training step of the runtime + SGDInBackward after a warmup step, on the CPU, with the plan
    made from tracker-measured transients and the pool's offloads real: (dynamic peak bytes the
    tracker saw, the plan, the pool's stats). ``loss_fn(out, y)``: cross-entropy unless given."""
    loss_fn = loss_fn or F.cross_entropy
    wrapped = SuperNeuronsModel(model, cfg)
    plan = wrapped.prepare(x)
    measure_transients(wrapped.units, x, plan.profiles, cfg.loss)
    wrapped.replan(plan.profiles, copies=True)
    wrapped.pool = ReplayPool(x.device, wrapped.plan.pool_budget_bytes, cfg.max_inflight_bytes)
    sgd = SGDInBackward(model, lr=0.01, momentum=0.9, weight_decay=1e-4)
    try:
        loss_fn(wrapped(x), y).backward()  # warmup: momentum buffers
        wrapped.pool.reset_stats()
        tracker = wrapped.pool.tracker = StorageTracker()
        with tracker:
            loss_fn(wrapped(x), y).backward()
    finally:
        sgd.remove()
    return tracker.peak, wrapped.plan, wrapped.pool.stats


@pytest.fixture(autouse=True)
def deterministic():
    """cuDNN deterministic and not autotuning for the test (the GPU gradient comparisons), then as before."""
    prev = torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    yield
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = prev


SLACK = 1024  # bytes the estimate leaves out: the scalar roots of backward calls, the loss's scalars


def check_budget_replay(model, x, y, cfg: RuntimeConfig, loss_fn=None):
    """replay_step under ``cfg`` (a budget with over_budget="warn"): the replayed peak stays within the
    plan's estimate, and a BudgetWarning comes exactly when the estimate is over the budget. The plan."""
    import warnings

    from repro.papers.superneurons.plan import BudgetWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        peak, plan, _ = replay_step(model, x, y, cfg, loss_fn)
    assert peak <= plan.estimate["peak_dynamic"] + SLACK
    over = [w for w in caught if issubclass(w.category, BudgetWarning)]
    assert bool(over) == (plan.estimate["peak_dynamic"] > cfg.memory_budget_bytes)
    return plan
