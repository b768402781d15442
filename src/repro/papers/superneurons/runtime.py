"""The SuperNeurons runtime: the wrapped model that executes a plan (:mod:`repro.papers.superneurons.plan`)
in forward and backward, and the trainer hooks that use it.

Backward of a recomputed segment prefetches the checkpoints of the ``prefetch_lookahead`` segments
before it, each only where it fits the room the plan leaves every segment it will be alive in
(under the memory budget; without one, under the plan's peak without prefetches), so that a
prefetch never raises the peak: next to the segment with the largest working set the checkpoint
before it comes back when its own backward starts (on the ResNets a prefetched 98 MiB checkpoint
next to the largest block was 0.17x of the 1.39x). Further ones are prefetched as long as the pool's
budget has room for them (a checkpoint released by backward makes room for an offloaded one), so
host copies start as early as memory allows. Backward hands autograd each gradient through a scalar
root (_GradRoot), so that recomputed outputs and incoming gradients are freed as soon as autograd
is done with them, as in plain training; the working sets (_BackwardNeed) count what is alive
unit by unit, the recomputation's forward included.
Recomputation restores the forward's RNG state (dropout masks match) and leaves batch-norm running
statistics as a single forward left them, so gradients equal plain training's.

Not supported (refused before the first step, see units.py): models torch.fx cannot trace, with
several inputs, or a unit with a tuple output or stateful buffers; parameters used twice (with
SGDInBackward). Evaluation (no grad or eval
mode) runs the model unchanged.
"""

from __future__ import annotations

import contextlib
import math
import weakref

import torch
import torch.nn as nn

from repro.papers.superneurons.liveness import flatten_units, frozen_batchnorm_stats, mutates_input, profile_units
from repro.papers.superneurons.layer_plan import UnitCost
from repro.papers.superneurons.layers import LayerExecutor, profile_layers
from repro.papers.superneurons.plan import Plan, RuntimeConfig, Segment, make_layer_plan, make_plan, memory_steps
from repro.papers.superneurons.recompute import ForwardState, autocast_state
from repro.papers.superneurons.tensor_pool import TensorPool
from repro.papers.superneurons.units import find_units, trace
from repro.train.hooks import TrainHooks


class _RecomputedSegment(torch.autograd.Function):
    """Forward keeps only the checkpoint (in the pool); backward recomputes and backpropagates the
    segment, accumulating parameter gradients directly (as reentrant checkpointing does), and
    returns the gradient of the checkpoint. ``anchor`` is an empty tensor requiring grad, so that
    backward runs even when the checkpoint is the input batch."""

    @staticmethod
    def forward(ctx, runtime: "SuperNeuronsModel", index: int, x: torch.Tensor, anchor: torch.Tensor):
        seg = runtime.plan.segments[index]
        ctx.runtime, ctx.index = runtime, index
        ctx.state = ForwardState.capture(x.device, seg.stochastic)
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
        # its own checkpoint first: a late copy then goes before the prefetches on the side stream, and
        # the prefetches are measured against the room this segment's backward leaves
        x = runtime.pool.get(ctx.handle)
        runtime._prefetch_before(ctx.position)
        if x.is_cuda:
            runtime._mark_backward_entry(ctx.index, x.device)
        need_x = ctx.needs_input_grad[2]
        with torch.enable_grad(), frozen_batchnorm_stats(seg.modules):
            if seg.strategy == "speed":
                grad_x = _backward_speed(seg, x, grad_y, need_x, ctx.state)
            else:
                grad_x = _backward_memory(seg, x, grad_y, need_x, ctx.state)
        ctx.handle = None  # frees the pool entry
        if x.is_cuda:
            runtime._mark_backward_exit(ctx.index, x.device)
        return None, None, grad_x, None


class _GradRoot(torch.autograd.Function):
    """A scalar root for backpropagating ``y`` with a gradient taken from ``box`` when backward reaches
    it. ``torch.autograd.backward(y, grad)`` would keep ``y`` and ``grad`` referenced until the whole
    call returns; through this root nothing outside autograd does, so autograd frees the gradient
    once the node that produced ``y`` has used it, and ``y`` unless a node saved it, as in plain
    training (on VGG-16 a recomputed 392 MiB activation and its 392 MiB gradient stayed alive through
    the rest of the segment's backward)."""

    @staticmethod
    def forward(ctx, y: torch.Tensor, box: list):
        ctx.box = box
        return y.new_zeros(())

    @staticmethod
    def backward(ctx, _):
        return ctx.box.pop(), None


def _grad_root(y: torch.Tensor, box: list) -> torch.Tensor | None:
    """The root to call backward() on (None when ``y`` needs no gradient); the caller keeps no other
    reference to ``y`` or the gradient in ``box``."""
    if not y.requires_grad:
        box.clear()
        return None
    return _GradRoot.apply(y, box)


def _leaf(a: torch.Tensor, need: bool, module: nn.Module):
    leaf = a.detach().requires_grad_(need)
    return leaf, (leaf.clone() if mutates_input(module) else leaf)


def _backward_speed(seg: Segment, x, grad_y, need_x: bool, state: ForwardState):
    leaf, inp = _leaf(x, need_x, seg.modules[0])
    with state.restored(x.device):
        root = _grad_root(seg.run(inp), [grad_y])
    del inp
    if root is not None:
        root.backward()
    return leaf.grad if need_x else None


def _backward_memory(seg: Segment, x, grad_y, need_x: bool, state: ForwardState):
    box = [grad_y]  # the gradient flowing down, handed from step to step with no other reference
    for start, stop in reversed(memory_steps(seg)):
        with state.restored(x.device):
            with torch.no_grad():
                a = x.clone() if start > 0 and mutates_input(seg.modules[0]) else x
                a = seg.run(a, stop=start)
            need = need_x or start > 0
            leaf, inp = _leaf(a, need, seg.modules[start])
            del a
            root = _grad_root(seg.run(inp, start, stop), box)
        del inp
        if root is not None:
            root.backward()
        del root
        box[:] = [leaf.grad] if need else []
        del leaf
    return box.pop() if need_x and box else None


class SuperNeuronsModel(nn.Module):
    """``model`` run under the runtime; same parameters, same results, less memory."""

    def __init__(self, model: nn.Module, config: RuntimeConfig | None = None):
        super().__init__()
        self.model = model
        self.config = config or RuntimeConfig()
        # a Sequential's units now; any other model is traced now (what fx cannot capture is refused
        # here) and cut into units on the first training input (cuts only where a tensor flows)
        self.units = flatten_units(model) if isinstance(model, nn.Sequential) else None
        if self.units is None:
            trace(model)
        self.plan: Plan | None = None
        self.layer_profile = None  # granularity="layer": layers.profile_layers
        self.executor: LayerExecutor | None = None
        self.pool: TensorPool | None = None
        self._plan_key = None
        self._order: list = []
        self._prefetch_next = -1  # position where the last prefetch walk stopped (see _prefetch_before)
        self._anchor: torch.Tensor | None = None
        # CUDA allocator readings of the last training step (where its peak happens): allocated bytes
        # and the running peak when forward ends, the most allocated at a recomputed segment's
        # backward entry (after its checkpoint is back) with that segment's index, and the segment
        # whose backward last raised the running peak (meaningful when the peak counter was reset at
        # the step's start, as the probe does)
        self.memory_marks: dict = {}

    def prepare(self, x: torch.Tensor) -> Plan:
        """Profile on ``x``'s shape and make the plan (done by the first training forward)."""
        if not isinstance(self.model, nn.Sequential):  # traced at this input's device and training mode
            self.units = find_units(self.model, x)
        profiles = profile_units(self.units, x, self.config.loss)
        if self.config.granularity == "layer":
            self.layer_profile = profile_layers(self.units, x, profiles, profiles[-1].loss_bytes)
        self.replan(profiles, copies=x.is_cuda)
        self.pool = TensorPool(x.device, self.plan.pool_budget_bytes, self.config.max_inflight_bytes)
        self._anchor = torch.empty(0, device=x.device, requires_grad=True)
        self._plan_key = self._key(x)
        return self.plan

    def replan(self, profiles, copies: bool) -> Plan:
        """The plan from unit ``profiles`` (a test may re-measure them first); a layer plan takes the
        units' costs from them too."""
        if self.config.granularity == "layer":
            lp = self.layer_profile
            lp.units = [UnitCost(p.in_bytes, p.forward_need, max(0, p.need - p.saved_bytes), c.backward_s)
                        for p, c in zip(profiles, lp.units)]
            lp.loss_bytes = profiles[-1].loss_bytes
            self.plan = make_layer_plan(profiles, lp, self.config)
            if self.executor is not None:
                self.executor.remove()
            self.executor = LayerExecutor(self.units, lp, self.plan.layers, lambda: self.pool,
                                          self.config.min_offload_bytes, self.config.prefetch_lookahead)
        else:
            self.plan = make_plan(self.units, profiles, self.config, copies=copies)
        return self.plan

    @staticmethod
    def _key(x: torch.Tensor) -> tuple:
        """What the plan depends on: the input's shape, dtype, device, and the autocast state (under
        bf16 autocast activations are half the size)."""
        return tuple(x.shape), x.dtype, x.device, autocast_state(x.device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training and torch.is_grad_enabled()):
            return self.model(x)
        if self._plan_key != self._key(x):
            self.prepare(x)
        self._order = []
        self.memory_marks = {}
        if self.plan.layers is not None:
            return self.executor.forward(x)
        hooks = self._saved_tensor_hooks() if self.plan.offload_saved else contextlib.nullcontext()
        with hooks:
            for seg in self.plan.segments:
                if seg.recompute:
                    x = _RecomputedSegment.apply(self, seg.index, x, self._anchor)
                else:
                    x = seg.run(x)
        self._prefetch_next = len(self._order) - 1
        if x.is_cuda:
            self.memory_marks.update(forward_end=torch.cuda.memory_allocated(x.device),
                                     peak_at_forward_end=torch.cuda.max_memory_allocated(x.device))
        return x

    def _mark_backward_entry(self, index: int, device: torch.device) -> None:
        allocated = torch.cuda.memory_allocated(device)
        if allocated > self.memory_marks.get("backward_entry_max", -1):
            self.memory_marks.update(backward_entry_max=allocated, backward_entry_max_segment=index)

    def _mark_backward_exit(self, index: int, device: torch.device) -> None:
        """The segment whose backward last raised the allocator's peak: where the step's peak is, when
        the peak counter was reset at the step's start (the probe does)."""
        peak = torch.cuda.max_memory_allocated(device)
        if peak > self.memory_marks.get("peak_at_backward_exit", self.memory_marks.get("peak_at_forward_end", 0)):
            self.memory_marks.update(peak_at_backward_exit=peak, peak_segment=index)

    def _prefetch_before(self, position: int) -> None:
        """At the backward of the checkpoint at ``position``: prefetch the ``prefetch_lookahead``
        checkpoints before it while the bytes being prefetched fit the plan's rooms (so that a prefetch
        never raises the plan's peak: next to the segment with the largest working set, the checkpoint
        before it is fetched when its own backward starts), and earlier ones while the pool's budget has
        room, in the order backward needs them. Backward only moves down, so the walk resumes where
        the last one stopped."""
        within_lookahead = position - 1 - self.config.prefetch_lookahead
        rooms = self.plan.prefetch_rooms
        p = min(position - 1, self._prefetch_next)
        while p >= 0:
            handle = self._order[p]()  # weak: a released checkpoint is gone
            if handle is not None:
                if p > within_lookahead:  # in flight until backward reaches it: room in every segment until then
                    issued = self.pool.prefetch(handle, limit=min(rooms[p + 1:position + 1], default=math.inf))
                else:
                    issued = self.pool.prefetch(handle, within_budget=True)
                if not issued:
                    break
            p -= 1
        self._prefetch_next = p

    def _saved_tensor_hooks(self):
        """Kept segments' saved activations through the pool (parameters, buffers such as batch-norm running
        statistics, host tensors and small tensors stay where they are)."""
        state = {p.untyped_storage().data_ptr() for p in (*self.model.parameters(), *self.model.buffers())}
        pool, order, min_bytes, lookahead = self.pool, self._order, self.config.min_offload_bytes, \
            self.config.prefetch_lookahead

        def pack(t: torch.Tensor):
            if (t.device.type != pool.device.type or t.untyped_storage().data_ptr() in state
                    or t.numel() * t.element_size() < min_bytes):
                return t  # a host tensor saved by a GPU op (SDPA's RNG seed and offset), parameters, small ones
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
