"""The SuperNeurons runtime: a plan made from the liveness profile, and the wrapped model that
executes it.

Segments. The units (see :mod:`repro.superneurons.liveness`) are cut into segments, each starting
at an expensive unit (conv / linear / a block holding one) followed by the cheap units after it
(BN, activations, pooling, dropout); cheap units before the first expensive one form a segment of
their own. A segment's input is its *checkpoint*.

Plan. Each segment is either *kept* (runs under ordinary autograd, its saved tensors stay) or
*recomputed* (forward runs without saving anything but the checkpoint; backward recomputes it):
- ``recompute="off"``: all kept; ``"all"``: all recomputed; ``"auto"`` (cost-aware): starting from
  all kept, the segments with the least forward time per byte freed are recomputed until the
  liveness estimate fits ``memory_budget_bytes``, so a network that fits pays no recomputation.
- each recomputed segment is speed-centric (recompute it once and keep its intermediates for its
  whole backward) when that needs no more than the largest single-layer working set, else
  memory-centric (recompute up to each unit, one unit's backward at a time);
- checkpoints go to the tensor pool, which keeps ``pool_budget_bytes`` of them resident (default:
  what the memory budget leaves after the rest of the plan) and offloads the rest; when pool is on
  and recompute is off, the kept segments' saved activations go through the pool instead
  (saved-tensor hooks), parameters never.
Backward of a recomputed segment prefetches the checkpoints of the ``prefetch_lookahead`` segments
before it. Recomputation restores the forward's RNG state (dropout masks match) and leaves
batch-norm running statistics as a single forward left them, so gradients equal plain training's.

Not supported (raises or documented): models that are not nn.Sequential-structured; units with
several inputs/outputs; parameters used twice (with SGDInBackward). Evaluation (no grad or eval
mode) runs the model unchanged.
"""

from __future__ import annotations

import contextlib
import math
import weakref
from dataclasses import dataclass, field

import torch
import torch.nn as nn

from repro.superneurons.liveness import (UnitProfile, flatten_units, frozen_batchnorm_stats, is_stochastic,
                                         largest_working_set, mutates_input, profile_units)
from repro.superneurons.tensor_pool import TensorPool
from repro.train.hooks import TrainHooks

RECOMPUTE_MODES = ("off", "auto", "all")
STRATEGIES = ("auto", "speed", "memory")


@dataclass
class RuntimeConfig:
    recompute: str = "auto"  # off | auto | all
    strategy: str = "auto"  # auto | speed | memory: force every recomputed segment's strategy
    pool: bool = True  # unified tensor pool (offload what does not fit)
    pool_budget_bytes: float | None = None  # resident pool bytes; None = what the memory budget leaves
    memory_budget_bytes: float | None = None  # dynamic memory the plan may use; None = unlimited
    prefetch_lookahead: int = 2  # checkpoints prefetched ahead in backward
    min_offload_bytes: int = 1 << 20  # smaller saved tensors are not worth a copy (pool without recompute)
    max_inflight_bytes: float = 512 * 2**20  # GPU memory held by offloads still copying

    def __post_init__(self):
        if self.recompute not in RECOMPUTE_MODES:
            raise ValueError(f"recompute must be one of {RECOMPUTE_MODES}, got {self.recompute!r}")
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, got {self.strategy!r}")
        if self.prefetch_lookahead < 0:
            raise ValueError(f"prefetch_lookahead must be >= 0, got {self.prefetch_lookahead}")
        for name in ("pool_budget_bytes", "memory_budget_bytes"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must be >= 0 or None, got {value}")


@dataclass
class Segment:
    index: int
    units: list[int]  # unit indices
    modules: list[nn.Module]
    recompute: bool = False
    strategy: str = "speed"  # speed | memory (recomputed segments only)
    stochastic: bool = False

    def run(self, x: torch.Tensor, upto: int | None = None) -> torch.Tensor:
        for m in self.modules[:upto]:
            x = m(x)
        return x


@dataclass
class Plan:
    segments: list[Segment]
    profiles: list[UnitProfile]
    pool_budget_bytes: float
    estimate: dict = field(default_factory=dict)
    offload_saved: bool = False  # kept segments' saved activations go through the pool (they do not fit)

    @property
    def largest_working_set(self) -> int:
        return largest_working_set(self.profiles).working_set

    def summary(self) -> dict:
        rec = [s for s in self.segments if s.recompute]
        return dict(segments=len(self.segments), recomputed=len(rec),
                    memory_centric=sum(s.strategy == "memory" for s in rec),
                    largest_working_set=self.largest_working_set, pool_budget_bytes=self.pool_budget_bytes,
                    **{f"est_{k}": v for k, v in self.estimate.items()})


def cut_segments(units: list[tuple[str, nn.Module]], profiles: list[UnitProfile]) -> list[Segment]:
    groups: list[list[int]] = []
    for i, p in enumerate(profiles):
        if p.expensive or not groups:
            groups.append([i])
        else:
            groups[-1].append(i)
    return [Segment(k, g, [units[i][1] for i in g], stochastic=any(is_stochastic(units[i][1]) for i in g))
            for k, g in enumerate(groups)]


def _seg_saved(seg: Segment, profiles) -> int:
    return sum(profiles[i].saved_bytes for i in seg.units)


def _seg_speed_ws(seg: Segment, profiles) -> int:
    """Speed-centric recompute: all the segment's saved tensors + its output gradient + input gradient."""
    return _seg_saved(seg, profiles) + profiles[seg.units[-1]].out_bytes + profiles[seg.units[0]].in_bytes


def _seg_memory_ws(seg: Segment, profiles) -> int:
    """Memory-centric: the checkpoint plus one unit's working set at a time."""
    return profiles[seg.units[0]].in_bytes + max(profiles[i].working_set for i in seg.units)


def estimate(segments: list[Segment], profiles: list[UnitProfile], pool_budget: float, pool_saved: bool,
             lookahead: int, inflight: float = 0.0) -> dict:
    """Liveness estimate of the dynamic peak of a plan (bytes); ``inflight``: offload copies in flight."""
    kept = sum(_seg_saved(s, profiles) for s in segments if not s.recompute)
    checkpoints = [profiles[s.units[0]].in_bytes for s in segments if s.recompute]
    resident_ckpt = min(sum(checkpoints), pool_budget)
    prefetched = sum(sorted(checkpoints)[-lookahead:]) if lookahead and resident_ckpt < sum(checkpoints) else 0
    offloading = resident_ckpt < sum(checkpoints) or (pool_saved and pool_budget < kept)
    if pool_saved:
        kept = min(kept, pool_budget)
    inflight = inflight if offloading else 0.0
    rec_ws = max([(_seg_speed_ws(s, profiles) if s.strategy == "speed" else _seg_memory_ws(s, profiles))
                  for s in segments if s.recompute] or [0])
    work = max(rec_ws, largest_working_set(profiles).working_set)
    return dict(kept_saved=kept, checkpoints=sum(checkpoints), resident_checkpoints=resident_ckpt,
                prefetched=prefetched, inflight=inflight, working=work,
                peak_dynamic=kept + resident_ckpt + prefetched + inflight + work)


def make_plan(units, profiles: list[UnitProfile], cfg: RuntimeConfig, copies: bool = True) -> Plan:
    """``copies``: the pool really copies (CUDA); on the CPU it is a pass-through with nothing in flight."""
    segments = cut_segments(units, profiles)
    inflight = cfg.max_inflight_bytes if copies else 0.0
    largest = largest_working_set(profiles).working_set
    budget = math.inf if cfg.memory_budget_bytes is None else cfg.memory_budget_bytes
    inf_pool = math.inf

    def choose_strategy(seg):
        if cfg.strategy != "auto":
            return cfg.strategy
        return "speed" if _seg_speed_ws(seg, profiles) <= largest else "memory"

    if cfg.recompute == "all":
        for s in segments:
            s.recompute, s.strategy = True, choose_strategy(s)
    elif cfg.recompute == "auto":
        def freed(s):
            return _seg_saved(s, profiles) - profiles[s.units[0]].in_bytes

        def cost(s):
            return sum(profiles[i].forward_s for i in s.units)
        candidates = sorted((s for s in segments if freed(s) > 0), key=lambda s: cost(s) / freed(s))
        for s in candidates:
            if estimate(segments, profiles, inf_pool, False, 0)["peak_dynamic"] <= budget:
                break
            s.recompute, s.strategy = True, choose_strategy(s)
    any_recompute = any(s.recompute for s in segments)
    pool_saved = cfg.pool and not any_recompute
    if not cfg.pool:
        pool_budget = math.inf
    elif cfg.pool_budget_bytes is not None:
        pool_budget = float(cfg.pool_budget_bytes)
    elif budget == math.inf:
        pool_budget = math.inf
    else:
        rest = estimate(segments, profiles, 0.0, pool_saved, cfg.prefetch_lookahead, inflight)
        pool_budget = max(0.0, budget - rest["peak_dynamic"])
    est = estimate(segments, profiles, pool_budget, pool_saved, cfg.prefetch_lookahead if cfg.pool else 0,
                   inflight if cfg.pool else 0.0)
    kept = sum(_seg_saved(s, profiles) for s in segments if not s.recompute)
    return Plan(segments, profiles, pool_budget, est, offload_saved=pool_saved and pool_budget < kept)


@contextlib.contextmanager
def _rng_restored(state, device: torch.device):
    if state is None:
        yield
        return
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.set_rng_state(state[0])
        if state[1] is not None:
            torch.cuda.set_rng_state(state[1], device)
        yield


def _rng_state(device: torch.device):
    return torch.get_rng_state(), (torch.cuda.get_rng_state(device) if device.type == "cuda" else None)


class _RecomputedSegment(torch.autograd.Function):
    """Forward keeps only the checkpoint (in the pool); backward recomputes and backpropagates the
    segment, accumulating parameter gradients directly (as reentrant checkpointing does), and
    returns the gradient of the checkpoint. ``anchor`` is an empty tensor requiring grad, so that
    backward runs even when the checkpoint is the input batch."""

    @staticmethod
    def forward(ctx, runtime: "SuperNeuronsModel", index: int, x: torch.Tensor, anchor: torch.Tensor):
        seg = runtime.plan.segments[index]
        ctx.runtime, ctx.index = runtime, index
        ctx.rng = _rng_state(x.device) if seg.stochastic else None
        first_mutates = mutates_input(seg.modules[0])
        ctx.handle = runtime.pool.put(x.clone() if first_mutates else x)
        runtime._order.append(weakref.ref(ctx.handle))
        ctx.position = len(runtime._order) - 1
        y = seg.run(x)
        return y.clone() if y is x else y

    @staticmethod
    def backward(ctx, grad_y):
        runtime = ctx.runtime
        seg = runtime.plan.segments[ctx.index]
        runtime._prefetch_before(ctx.position)
        x = runtime.pool.get(ctx.handle)
        need_x = ctx.needs_input_grad[2]
        with torch.enable_grad(), frozen_batchnorm_stats(seg.modules):
            if seg.strategy == "speed":
                grad_x = _backward_speed(seg, x, grad_y, need_x, ctx.rng)
            else:
                grad_x = _backward_memory(seg, x, grad_y, need_x, ctx.rng)
        ctx.handle = None  # frees the pool entry
        return None, None, grad_x, None


def _leaf(a: torch.Tensor, need: bool, module: nn.Module):
    leaf = a.detach().requires_grad_(need)
    return leaf, (leaf.clone() if mutates_input(module) else leaf)


def _backprop(out: torch.Tensor, grad: torch.Tensor) -> None:
    if out.requires_grad:
        torch.autograd.backward(out, grad)


def _backward_speed(seg: Segment, x, grad_y, need_x: bool, rng):
    leaf, inp = _leaf(x, need_x, seg.modules[0])
    with _rng_restored(rng, x.device):
        y = seg.run(inp)
    _backprop(y, grad_y)
    return leaf.grad if need_x else None


def _backward_memory(seg: Segment, x, grad_y, need_x: bool, rng):
    grad = grad_y
    for j in reversed(range(len(seg.modules))):
        with _rng_restored(rng, x.device):
            with torch.no_grad():
                a = x.clone() if j > 0 and mutates_input(seg.modules[0]) else x
                a = seg.run(a, upto=j)
            need = need_x or j > 0
            leaf, inp = _leaf(a, need, seg.modules[j])
            out = seg.modules[j](inp)
        _backprop(out, grad)
        grad = leaf.grad if need else None
        del out, leaf, inp, a
    return grad


class SuperNeuronsModel(nn.Module):
    """``model`` run under the runtime; same parameters, same results, less memory."""

    def __init__(self, model: nn.Module, config: RuntimeConfig | None = None):
        super().__init__()
        self.model = model
        self.config = config or RuntimeConfig()
        self.units = flatten_units(model)
        self.plan: Plan | None = None
        self.pool: TensorPool | None = None
        self._plan_key = None
        self._order: list = []
        self._anchor: torch.Tensor | None = None

    def prepare(self, x: torch.Tensor) -> Plan:
        """Profile on ``x``'s shape and make the plan (done by the first training forward)."""
        profiles = profile_units(self.units, x)
        self.plan = make_plan(self.units, profiles, self.config, copies=x.is_cuda)
        self.pool = TensorPool(x.device, self.plan.pool_budget_bytes, self.config.max_inflight_bytes)
        self._anchor = torch.empty(0, device=x.device, requires_grad=True)
        self._plan_key = (tuple(x.shape), x.dtype, x.device)
        return self.plan

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training and torch.is_grad_enabled()):
            return self.model(x)
        if self._plan_key != (tuple(x.shape), x.dtype, x.device):
            self.prepare(x)
        self._order = []
        hooks = self._saved_tensor_hooks() if self.plan.offload_saved else contextlib.nullcontext()
        with hooks:
            for seg in self.plan.segments:
                if seg.recompute:
                    x = _RecomputedSegment.apply(self, seg.index, x, self._anchor)
                else:
                    x = seg.run(x)
        return x

    def _prefetch_before(self, position: int) -> None:
        for p in range(position - 1, max(-1, position - 1 - self.config.prefetch_lookahead), -1):
            handle = self._order[p]()  # weak: a released checkpoint is gone
            if handle is not None:
                self.pool.prefetch(handle)

    def _saved_tensor_hooks(self):
        """Kept segments' saved activations through the pool (parameters and small tensors stay)."""
        params = {p.untyped_storage().data_ptr() for p in self.model.parameters()}
        pool, order, min_bytes, lookahead = self.pool, self._order, self.config.min_offload_bytes, \
            self.config.prefetch_lookahead

        def pack(t: torch.Tensor):
            if t.untyped_storage().data_ptr() in params or t.numel() * t.element_size() < min_bytes:
                return t
            handle = pool.put(t)
            order.append(weakref.ref(handle))
            return (len(order) - 1, handle)

        def unpack(packed):
            if isinstance(packed, torch.Tensor):
                return packed
            position, handle = packed
            for p in range(position - 1, max(-1, position - 1 - lookahead), -1):
                earlier = order[p]()
                if earlier is not None:
                    pool.prefetch(earlier)
            return pool.get(handle)

        return torch.autograd.graph.saved_tensors_hooks(pack, unpack)


class SuperNeuronsHooks(TrainHooks):
    """The runtime as a memory policy of the shared trainer (wrap_model). The trainer's own optimiser
    still steps (SGDInBackward is for the memory benchmarks' step loop, see arms.py)."""

    def __init__(self, config: RuntimeConfig | None = None):
        self.config = config or RuntimeConfig()
        self.wrapped: SuperNeuronsModel | None = None

    def wrap_model(self, model: nn.Module) -> nn.Module:
        self.wrapped = SuperNeuronsModel(model, self.config)
        return self.wrapped
