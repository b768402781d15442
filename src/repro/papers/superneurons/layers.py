"""The layer-granular plan's profile and execution (issue 45; the plan itself, pure, is
:mod:`repro.papers.superneurons.layer_plan`).

Both follow the same bookkeeping over a training forward, unit after unit: forward hooks on every leaf
module of a unit (its *layers*, in call order, plus the unit's *functional* pseudo-layer for the ops
between them) record which layer produced each storage, and saved-tensor hooks see every tensor
autograd saves.

The profile (:func:`profile_layers`) runs each unit once on the real input shape (one unit alive at a
time, as liveness.profile_units) and records the layers (kind, measured forward seconds, group), the
storages saved (bytes, producer, the layers that save them), each group's input (the source its
recomputation would start from) and output, and each unit's measured backward seconds.

The executor (:class:`LayerExecutor`) runs the model's units under the same hooks with a
:class:`~repro.papers.superneurons.layer_plan.LayerPlan`. A saved tensor is decided when the layer that
saved it returns (its producer may be that very layer, e.g. a ReLU saving its output): kept as it is,
offloaded (put into the tensor pool, whose budget is 0: it goes to the host at once, and comes back
on its first use in backward, prefetching the one put before it), or dropped and recomputed in
backward from its group's source (a *recipe*: the group's modules, run without autograd under the
forward's autocast state and with batch-norm statistics frozen, so they compute what forward
computed). A recipe is used only while the storage it describes is the one saved (same storage
alive, same version, shape, strides and offset); else the tensor is kept, so that an in-place op the
hooks do not see (a functional ``out += identity``) can never make a recomputation wrong. Parameters,
buffers, host tensors and tensors under ``min_offload_bytes`` are kept.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from repro.papers.superneurons.layer_plan import (CHEAP_KINDS, LayerInfo, LayerPlan, LayerProfile, StorageInfo,
                                                  UnitCost)
from repro.papers.superneurons.liveness import UnitProfile, frozen_batchnorm_stats, is_stochastic, mutates_input
from repro.papers.superneurons.recompute import ForwardState


def leaf_modules(unit: nn.Module) -> list[nn.Module]:
    leaves = [m for m in unit.modules() if not any(True for _ in m.children())]
    return leaves or [unit]


def _ptr(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _meta(t: torch.Tensor) -> tuple:
    return tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.dtype


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class _Hooks:
    """Forward pre/post hooks on every leaf module of the units (each module once, even where units
    share it), calling ``pre(module, args)`` and ``post(module, args, out)`` while ``active``."""

    def __init__(self, units, pre, post):
        self.active = False
        self.handles = []
        seen = set()
        for _, unit in units:
            for m in leaf_modules(unit):
                if id(m) in seen:
                    continue
                seen.add(id(m))
                self.handles.append(m.register_forward_pre_hook(
                    lambda mod, args: pre(mod, args) if self.active else None))
                self.handles.append(m.register_forward_hook(
                    lambda mod, args, out: post(mod, args, out) if self.active else None))

    def remove(self):
        for h in self.handles:
            h.remove()
        self.handles = []


class _Allocations(TorchDispatchMode):
    """Bytes of the storages ops allocate while it is on, at their peak (the CPU's stand-in for the CUDA
    allocator's peak counter): a layer's forward allocations."""

    def __init__(self):
        super().__init__()
        self.refs: dict[int, tuple] = {}
        self.peak = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs))[0]
                  if isinstance(t, torch.Tensor)}
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.untyped_storage().nbytes():
                key = t.untyped_storage().data_ptr()
                if key not in inputs and (key not in self.refs or self.refs[key][0].expired()):
                    self.refs[key] = (StorageWeakRef(t.untyped_storage()), t.untyped_storage().nbytes())
        self.refs = {k: v for k, v in self.refs.items() if not v[0].expired()}
        self.peak = max(self.peak, sum(n for _, n in self.refs.values()))
        return out


class _ForwardBytes:
    """A layer forward's allocation peak: the CUDA allocator's, or _Allocations on the CPU."""

    def __init__(self, device: torch.device):
        self.device = device
        self.mode = None

    def start(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.base = torch.cuda.memory_allocated(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            self.mode = _Allocations()
            self.mode.__enter__()

    def stop(self) -> int:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            return max(0, torch.cuda.max_memory_allocated(self.device) - self.base)
        self.mode.__exit__(None, None, None)
        return self.mode.peak


def _single_tensor_input(args) -> torch.Tensor | None:
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    return tensors[0] if len(tensors) == 1 and len(args) == 1 else None


def profile_layers(units: list[tuple[str, nn.Module]], x: torch.Tensor, profiles: list[UnitProfile],
                   loss_bytes: int = 0) -> LayerProfile:
    """The layer profile of ``units`` on input ``x`` (module docstring); ``profiles``: their unit
    profile (liveness.profile_units), for the units' gradient working sets and forward needs."""
    device = x.device
    layers: list[LayerInfo] = []
    storages: list[StorageInfo] = []
    live: dict[int, tuple] = {}  # data_ptr -> (storage index, weak ref)
    group_source, group_output = {}, {}
    functional, stack, starts, meters = [], [], {}, {}
    params = {_ptr(p) for _, m in units for p in [*m.parameters(), *m.buffers()]}

    def storage(t: torch.Tensor, producer: int) -> int:
        ptr = _ptr(t)
        known = live.get(ptr)
        if known is not None and not known[1].expired():
            return known[0]
        s = StorageInfo(len(storages), t.untyped_storage().nbytes(), producer)
        storages.append(s)
        live[ptr] = (s.index, StorageWeakRef(t.untyped_storage()))
        return s.index

    def pre(m, args):
        u = len(functional) - 1  # the unit running
        layer = LayerInfo(len(layers), u, type(m).__name__, type(m).__name__,
                          type(m).__name__ in CHEAP_KINDS and not is_stochastic(m), 0.0, len(layers))
        layers.append(layer)
        inp = _single_tensor_input(args)
        if inp is not None:
            storage(inp, functional[u])
        else:
            layer.cheap = False
        stack.append(layer.index)
        meters[layer.index] = _ForwardBytes(device)
        meters[layer.index].start()
        _sync(device)
        starts[layer.index] = time.perf_counter()

    def post(m, args, out):
        u = len(functional) - 1
        _sync(device)
        index = stack.pop()
        layer = layers[index]
        layer.forward_s = time.perf_counter() - starts.pop(index)
        layer.forward_bytes = meters.pop(index).stop()
        inp = _single_tensor_input(args)
        if not isinstance(out, torch.Tensor):
            layer.cheap = False
            return
        if inp is not None and _ptr(out) == _ptr(inp):  # in place, or a view: joins its input's group
            producer = storages[storage(inp, functional[u])].producer
            layer.group = layers[producer].group
            return
        s = storage(out, index)
        if storages[s].producer == index and inp is not None:
            group_output[index] = s
            src = storage(inp, functional[u])
            group_source[index] = src
            storages[src].source_of.append(index)

    def pack(t: torch.Tensor):
        if _ptr(t) in params or not t.untyped_storage().nbytes():
            return t
        current = stack[-1] if stack else functional[-1]
        s = storages[storage(t, current)]
        if current not in s.packers:
            s.packers.append(current)
        return t

    hooks = _Hooks(units, pre, post)
    costs = []
    fork = [device] if device.type == "cuda" else []
    try:
        with torch.random.fork_rng(devices=fork), frozen_batchnorm_stats([m for _, m in units]):
            a = x.detach()
            for u, ((_, m), p) in enumerate(zip(units, profiles)):
                functional.append(len(layers))
                layers.append(LayerInfo(len(layers), u, "functional", "functional", False, 0.0, len(layers)))
                leaf = a.detach().requires_grad_(a.is_floating_point())
                storage(leaf, functional[u])
                inp = leaf.clone() if leaf.requires_grad or mutates_input(m) else leaf
                if inp is not leaf:  # the clone stands for the unit's input (the previous unit's output)
                    live[_ptr(inp)] = (live[_ptr(leaf)][0], StorageWeakRef(inp.untyped_storage()))
                hooks.active = True
                with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                    out = m(inp)
                hooks.active = False
                storage(out, functional[u])
                wrt = ([leaf] if leaf.requires_grad else []) + [q for q in m.parameters() if q.requires_grad]
                backward_s = 0.0
                if out.requires_grad and wrt:
                    _sync(device)
                    start = time.perf_counter()
                    grads = torch.autograd.grad(out, wrt, torch.ones_like(out), allow_unused=True)
                    _sync(device)
                    backward_s = time.perf_counter() - start
                    del grads
                costs.append(UnitCost(p.in_bytes, p.forward_need, max(0, p.need - p.saved_bytes), backward_s))
                a = out.detach()  # the next unit's input: the same storage, so the same entry
                del out, inp, leaf
    finally:
        hooks.remove()
    return LayerProfile(layers, storages, costs, group_source, group_output, loss_bytes,
                        calls=_calls(layers, len(units)), functional=functional)


def _calls(layers: list[LayerInfo], n_units: int) -> list[list[int]]:
    calls = [[] for _ in range(n_units)]
    for layer in layers:
        if layer.kind != "functional":
            calls[layer.unit].append(layer.index)
    return calls


# ---- execution ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Recipe:
    modules: tuple  # run in order from the source
    source: object  # _Held
    ref: StorageWeakRef  # the storage it recomputes (alive: the recipe still describes it)
    ptr: int
    meta: tuple
    version: int
    state: ForwardState
    group: int

    def describes(self, t: torch.Tensor, group: int, version: int | None = None) -> bool:
        """``t`` (at ``version``, default its own) is what the recipe recomputes, or a view of it (the
        same storage, alive since, at the same version)."""
        return (group == self.group and not self.ref.expired() and _ptr(t) == self.ptr and t.dtype == self.meta[3]
                and (t._version if version is None else version) == self.version)


class _Held:
    """A tensor a recomputation starts from: a reference, or a pool handle."""

    def __init__(self, tensor=None, handle=None, pool=None):
        self.tensor, self.handle, self.pool = tensor, handle, pool

    def get(self) -> torch.Tensor:
        return self.tensor if self.handle is None else self.pool.get(self.handle)


class _Saved:
    __slots__ = ("tensor", "handle", "recipe", "unit", "layer", "position", "view")

    def __init__(self, tensor, unit, layer):
        self.tensor, self.handle, self.recipe = tensor, None, None
        self.unit, self.layer, self.position = unit, layer, -1
        self.view = None  # (shape, stride, offset) where the saved tensor is a view of what the recipe gives


class _Materialised:
    """Per recipe, the recomputed tensor while saved tensors that use it have not been unpacked."""

    def __init__(self):
        self.users: dict[int, int] = {}
        self.cache: dict[int, torch.Tensor] = {}


class LayerExecutor:
    """Runs ``units`` under a layer plan (module docstring). ``pool()`` returns the tensor pool to offload
    into (the runtime's, so that a test may swap it)."""

    def __init__(self, units, profile: LayerProfile, plan: LayerPlan, pool, min_offload_bytes: int = 0,
                 lookahead: int = 1):
        self.units, self.profile, self.plan, self._pool = units, profile, plan, pool
        self.min_offload, self.lookahead = min_offload_bytes, lookahead
        self.params = {_ptr(p) for _, m in units for p in [*m.parameters(), *m.buffers()]}
        self.hooks = _Hooks(units, self._pre, self._post)
        self.recomputations = 0

    def remove(self):
        self.hooks.remove()

    def _action(self, layer: int) -> str:
        return self.plan.decisions.get(self.profile.layers[layer].group, "keep")

    # ---- forward bookkeeping ----
    def _producer(self, t: torch.Tensor, default: int) -> int:
        """The layer that produced ``t``'s storage; ``default`` for one first seen now (as the profile
        attributes it: the unit's functional layer for inputs and outputs, the layer saving it else)."""
        known = self.producers.get(_ptr(t))
        if known is not None and not known[1].expired():
            return known[0]
        self.producers[_ptr(t)] = (default, StorageWeakRef(t.untyped_storage()))
        return default

    def _pre(self, m, args):
        u = self.unit
        self._finalize()
        calls = self.profile.calls[u]
        k = self.position[u]
        self.position[u] = k + 1
        index = calls[k] if k < len(calls) else self.profile.functional[u]  # a call the profile did not see
        inp = _single_tensor_input(args)
        self.stack.append(index)
        self.versions.append(inp._version if inp is not None else None)
        if inp is not None:
            self._producer(inp, self.profile.functional[u])

    def _post(self, m, args, out):
        u = self.unit
        index, version = self.stack.pop(), self.versions.pop()
        inp = _single_tensor_input(args)
        if isinstance(out, torch.Tensor) and inp is not None:
            group = self.profile.layers[index].group
            if _ptr(out) == _ptr(inp):  # in place or a view: extends the recipe of its group, or ends it
                recipe = self.recipes.pop(_ptr(inp), None)
                if recipe is not None and self._action(index) == "recompute" and recipe.describes(inp, group, version) \
                        and _meta(inp) == recipe.meta:
                    self.recipes[_ptr(out)] = _Recipe(recipe.modules + (m,), recipe.source, recipe.ref, recipe.ptr,
                                                      _meta(out), out._version, recipe.state, group)
            else:
                self.producers[_ptr(out)] = (index, StorageWeakRef(out.untyped_storage()))
                self.recipes.pop(_ptr(out), None)
                if self._action(index) == "recompute" and group == index:
                    self.recipes[_ptr(out)] = self._recipe(m, inp, out, u, group)
        self._finalize()

    def _recipe(self, m, inp, out, u, group) -> _Recipe:
        source = self.recipes.get(_ptr(inp))
        src_group = self.profile.layers[self._producer(inp, self.profile.functional[u])].group
        if source is not None and source.describes(inp, src_group):  # flatten: start from its source
            modules, held = source.modules + (m,), source.source
        else:
            modules, held = (m,), self._hold(inp, u)
        return _Recipe(modules, held, StorageWeakRef(out.untyped_storage()), _ptr(out), _meta(out), out._version,
                       ForwardState.capture(out.device, False), group)

    def _hold(self, t: torch.Tensor, u: int) -> _Held:
        if self._action(self._producer(t, self.profile.functional[u])) == "offload" and self._poolable(t):
            return _Held(handle=self._put(t), pool=self._pool())
        return _Held(tensor=t)

    def _poolable(self, t: torch.Tensor) -> bool:
        return (t.device.type == self._pool().device.type and _ptr(t) not in self.params
                and t.numel() * t.element_size() >= self.min_offload)

    def _put(self, t: torch.Tensor):
        """The pool handle of ``t``: one handle for a tensor saved by several layers. A handle is reused
        only while the storage it was made from is alive: once an offload has dropped the pool's
        reference and the tensor has died, a new tensor may be allocated at the same address with the
        same shape (the caching allocator reuses addresses at once), and is a different tensor."""
        key = (_ptr(t), _meta(t))
        known = self.handles.get(key)
        handle = known[0]() if known is not None and not known[1].expired() else None
        if handle is None:
            handle = self._pool().put(t)
            self.handles[key] = (weakref.ref(handle), StorageWeakRef(t.untyped_storage()))
            self.order.append(weakref.ref(handle))
            self.positions[id(handle)] = len(self.order) - 1
        return handle

    def _pack(self, t: torch.Tensor):
        if _ptr(t) in self.params or not t.untyped_storage().nbytes():
            return t
        unit = self.unit
        saved = _Saved(t, unit, self.stack[-1] if self.stack else self.profile.functional[unit])
        self.pending.append(saved)
        return saved

    def _finalize(self) -> None:
        for saved in self.pending:
            t = saved.tensor
            producer = self._producer(t, saved.layer)
            action = self._action(producer)
            group = self.profile.layers[producer].group
            if action == "recompute":
                recipe = self.recipes.get(_ptr(t))
                if recipe is not None and recipe.describes(t, group):
                    if _meta(t) != recipe.meta:
                        saved.view = (t.shape, t.stride(), t.storage_offset())
                    saved.recipe, saved.tensor = recipe, None
                    self.materialised.users[id(recipe)] = self.materialised.users.get(id(recipe), 0) + 1
            elif action == "offload" and self._poolable(t):
                saved.handle, saved.tensor = self._put(t), None
                saved.position = self.positions[id(saved.handle)]
        self.pending = []

    # ---- backward ----
    def _unpack(self, saved):
        if isinstance(saved, torch.Tensor):
            return saved
        if saved.tensor is not None:
            return saved.tensor
        if saved.handle is not None:
            for p in range(saved.position - 1, max(-1, saved.position - 1 - self.lookahead), -1):
                earlier = self.order[p]()
                if earlier is not None:
                    self._pool().prefetch(earlier)
            return self._pool().get(saved.handle)
        out = self._materialise(saved.recipe)
        return out if saved.view is None else out.as_strided(*saved.view)

    def _materialise(self, recipe: _Recipe) -> torch.Tensor:
        key, m = id(recipe), self.materialised
        out = m.cache.get(key)
        if out is None:
            src = recipe.source.get()
            self.recomputations += 1
            with torch.no_grad(), frozen_batchnorm_stats(recipe.modules), recipe.state.restored(src.device):
                out = src
                for module in recipe.modules:
                    out = module(out)
            if _meta(out) != recipe.meta:
                raise RuntimeError(f"recomputed {[type(x).__name__ for x in recipe.modules]} gave {_meta(out)}, "
                                   f"forward saved {recipe.meta}")
        m.users[key] -= 1
        if m.users[key] > 0:
            m.cache[key] = out
        else:
            m.cache.pop(key, None)
            del m.users[key]
        return out

    # ---- a step ----
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.producers, self.recipes, self.pending, self.stack, self.versions = {}, {}, [], [], []
        self.handles, self.order, self.positions = {}, [], {}
        self.position = [0] * len(self.units)
        self.materialised = _Materialised()
        self.hooks.active = True
        try:
            with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
                for u, (_, m) in enumerate(self.units):
                    self.unit = u
                    self._producer(x, self.profile.functional[u])
                    x = m(x)
                    self._finalize()
                    if isinstance(x, torch.Tensor):
                        self._producer(x, self.profile.functional[u])
        finally:
            self.hooks.active = False
            # the saved tensors hold what backward needs (their recipes, handles); nothing else may keep
            # a source or a recomputed tensor alive past the backward of the last layer using it
            self.recipes, self.producers, self.pending = {}, {}, []
        return x

