"""The training arms the SuperNeurons experiments compare, each one SGD step on a batch:

plain        PyTorch as is: autograd keeps every saved tensor, torch.optim.SGD after backward.
checkpoint   torch.utils.checkpoint.checkpoint_sequential over the units, sqrt(units) segments,
             use_reentrant=False; torch.optim.SGD.
save_on_cpu  torch.autograd.graph.save_on_cpu(pin_memory=True): every saved tensor to the host.
sac          selective activation checkpointing (torch.utils.checkpoint with
             create_selective_checkpoint_contexts) around every unit: outputs of matmuls,
             convolutions and attention saved, everything else recomputed in backward; torch.optim.SGD.
amb_<v>      torch.compile with torch._functorch.config.activation_memory_budget = v (0 < v <= 1; e.g.
             amb_0.5): AOTAutograd's min-cut partitioner recomputes cheap ops until the saved
             activations are about v of what plain training saves; inductor on CUDA, the same
             partitioner without code generation (aot_eager_decomp_partition) on the CPU, where only
             the code path is shown. torch.optim.SGD.
ours         the SuperNeurons runtime (recompute="auto", pool on, budget from the memory cap) and
             SGDInBackward (gradients freed as soon as they are applied).
The peak-memory ablation adds the runtime in five configurations (see runtime_config):
liveness (gradient liveness only: PyTorch already frees activations after their last use),
pool (+ saved activations through the tensor pool), recompute (+ every segment recomputed,
checkpoints resident), all (recompute + checkpoints through the pool), all+wscap (all + cuDNN's
convolution workspace capped, SuperNeurons' fourth mechanism; the cap is an environment variable
of the probe's process, see probe.py, and the plan counts it next to the working set).

Static memory (what persists between steps: parameters, optimizer state, and for torch.optim the
gradients, which stay until the next zero_grad) is measured after a step; dynamic = peak - static.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, checkpoint_sequential, \
    create_selective_checkpoint_contexts

from repro.papers.superneurons.liveness import (UnitProfile, flatten_units, frozen_batchnorm_stats, largest_working_set,
                                         mutates_input, param_bytes, plain_dynamic_estimate, saved_bytes_between,
                                         tensor_bytes)
from repro.papers.superneurons.plan import RuntimeConfig
from repro.papers.superneurons.runtime import SuperNeuronsModel
from repro.papers.superneurons.units import find_units
from repro.papers.superneurons.sgd_in_backward import SGDInBackward

BASELINE_ARMS = ("plain", "checkpoint", "save_on_cpu")
ARMS = BASELINE_ARMS + ("ours",)
AMB_PREFIX = "amb_"  # amb_<v>: torch.compile under activation_memory_budget v
TODAY_ARMS = ("sac", "amb_0.5")  # today's alternatives (issue 26), with amb's usual budget
PEAK_CONFIGS = ("plain", "liveness", "pool", "recompute", "all", "all+wscap")
# issue 45: the layer-granular plan (layer_plan.py) with every cheap layer recomputed and everything
# else offloaded; a peak-memory configuration by name only (not among the defaults) until a GPU has run it
LAYER_CONFIGS = ("layers",)
# issue 45: ours with the layer-granular plan (cost-aware under the arm's memory budget), beside "ours"
# (the unit plan) in the depth / throughput / max_batch experiments when their arms name it
LAYER_ARMS = ("ours_layer",)
WSCAP_CONFIGS = ("all+wscap",)  # configurations whose probe caps the convolution workspace
PINNED_ROUNDING = 1.33


def runtime_config(name: str, memory_budget_bytes: float | None, pool_budget_bytes: float | None,
                   lookahead: int, max_inflight_bytes: float, workspace_bytes: float = 0.0) -> RuntimeConfig:
    """The runtime configuration of an arm / ablation step (not plain or the baselines);
    ``workspace_bytes``: the convolution workspace cap the probe set (0: none, not modelled)."""
    pool = dict(pool=True, prefetch_lookahead=lookahead, max_inflight_bytes=max_inflight_bytes,
                workspace_bytes=workspace_bytes)
    if name == "ours":  # a plan over the budget still runs: the probe's cap (or allocator) decides the fit
        return RuntimeConfig(recompute="auto", memory_budget_bytes=memory_budget_bytes, over_budget="warn", **pool)
    if name == "liveness":
        return RuntimeConfig(recompute="off", pool=False, workspace_bytes=workspace_bytes)
    if name == "pool":
        return RuntimeConfig(recompute="off", pool_budget_bytes=pool_budget_bytes, **pool)
    if name == "recompute":
        return RuntimeConfig(recompute="all", pool=False, workspace_bytes=workspace_bytes)
    if name in ("all", "all+wscap"):
        return RuntimeConfig(recompute="all", pool_budget_bytes=pool_budget_bytes, **pool)
    if name in LAYER_ARMS:  # as "ours", with the layer plan
        return RuntimeConfig(granularity="layer", recompute="auto", memory_budget_bytes=memory_budget_bytes,
                             over_budget="warn", **pool)
    if name in LAYER_CONFIGS:
        return RuntimeConfig(granularity="layer", layer_actions="both", **pool)
    raise ValueError(f"unknown arm {name!r}; known: {', '.join(ARMS + LAYER_ARMS + PEAK_CONFIGS + LAYER_CONFIGS)}")


def amb_budget(name: str) -> float | None:
    """The activation_memory_budget of an ``amb_<v>`` arm (None: not such an arm)."""
    if not name.startswith(AMB_PREFIX):
        return None
    try:
        value = float(name[len(AMB_PREFIX):])
    except ValueError:
        value = math.nan
    if not 0 < value <= 1:
        raise ValueError(f"arm {name!r}: amb_<v> needs a budget 0 < v <= 1 (e.g. amb_0.5)")
    return value


def is_torch_arm(name: str) -> bool:
    """Arms trained by torch.optim's SGD: the baselines and today's alternatives (not the runtime)."""
    return name in BASELINE_ARMS or name == "sac" or amb_budget(name) is not None


def check_arm_names(names, allowed, what: str) -> None:
    """Refuse unknown arms: ``allowed``, plus sac and any amb_<v> (a malformed v names the problem)."""
    unknown = [a for a in names if a not in allowed and a != "sac" and amb_budget(a) is None]
    if unknown:
        raise ValueError(f"{what}: unknown arm(s) {unknown}; allowed: {list(allowed)}, sac, amb_<v> (0 < v <= 1)")


# aten ops whose outputs selective checkpointing keeps (the expensive ones); the rest is recomputed
_SAC_SAVE = {getattr(torch.ops.aten, name).default for name in
             ("mm", "addmm", "bmm", "baddbmm", "convolution", "_scaled_dot_product_flash_attention",
              "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention")
             if hasattr(torch.ops.aten, name)}


def sac_policy(ctx, op, *args, **kwargs) -> CheckpointPolicy:
    """Save matmul / convolution / attention outputs, recompute everything else."""
    return CheckpointPolicy.MUST_SAVE if op in _SAC_SAVE else CheckpointPolicy.PREFER_RECOMPUTE


def sac_context():
    return create_selective_checkpoint_contexts(sac_policy)


class _SacSavedCounter(TorchDispatchMode):
    """Bytes of the outputs of the ops sac_policy saves (the aten ops a unit's forward runs)."""

    def __init__(self):
        super().__init__()
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in _SAC_SAVE:
            self.bytes += sum(tensor_bytes(t) for t in tree_leaves(out) if isinstance(t, torch.Tensor))
        return out


def sac_saved_bytes(units: list[tuple[str, nn.Module]], x: torch.Tensor) -> list[int]:
    """Per unit, the bytes selective checkpointing keeps for its backward besides the unit's input:
    the outputs of the matmuls, convolutions and attention its forward runs (sac_policy's MUST_SAVE
    ops), counted at dispatch on input ``x`` (forward only, batch-norm statistics and the RNG left
    as they were)."""
    out, a = [], x.detach()
    with torch.no_grad(), torch.random.fork_rng(devices=[x.device] if x.is_cuda else []), \
            frozen_batchnorm_stats([m for _, m in units]):
        for _, unit in units:
            counter = _SacSavedCounter()
            with counter:
                a = unit(a.clone() if mutates_input(unit) else a)
            out.append(counter.bytes)
    return out


def model_units(model: nn.Module, x: torch.Tensor | None = None) -> list[tuple[str, nn.Module]] | None:
    """The units the arms run in sequence: a Sequential's children (flattened), any other model's
    traced units on input ``x`` (units.find_units; None until an input is given)."""
    if isinstance(model, nn.Sequential):
        return flatten_units(model)
    return None if x is None else find_units(model, x)


def loss_of(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of classifier logits (batch, classes) or language-model logits (batch, time, vocab)."""
    return F.cross_entropy(out.flatten(0, -2).float() if out.dim() > 2 else out, y.flatten())


def checkpoint_segments(units: int) -> int:
    """Segments of the checkpoint arm: sqrt(units), as checkpoint_sequential is usually run."""
    return max(1, round(math.sqrt(units)))


def unsupported(name: str, units: list[tuple[str, nn.Module]]) -> str | None:
    """Why arm ``name`` cannot train a model of these units (None: it can).

    checkpoint_sequential keeps each segment's input for the recomputation, and an in-place layer at
    the start of the next segment (VGG's ReLU(inplace=True)) overwrites it: backward then fails in
    autograd's version check. torch splits the units into segments of len // segments units (the
    last takes the rest), so the layers at k x that size are the ones that matter. The ResNets'
    segments start at blocks, AlexNet's at convolutions or Flatten; VGG-16's start at ReLUs."""
    if name != "checkpoint":
        return None
    segments = checkpoint_segments(len(units))
    size = len(units) // segments
    for start in range(size, size * segments, size):
        unit, module = units[start]
        if mutates_input(module):
            return (f"checkpoint_sequential's segment starting at unit {start} ({unit}: {type(module).__name__}, "
                    "in place) would overwrite the input the previous segment keeps for recomputation")
    return None


@dataclass
class Optim:
    lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 1e-4


class Arm:
    """One arm on one model: ``step(x, y)`` runs forward, backward and the SGD update."""

    def __init__(self, name: str, model: nn.Module, optim: Optim, *, memory_budget_bytes: float | None = None,
                 pool_budget_bytes: float | None = None, lookahead: int = 2, momentum_on_host: bool = False,
                 max_inflight_bytes: float = 512 * 2**20, workspace_bytes: float = 0.0):
        self.name, self.model, self.optim = name, model, optim
        self.runtime: SuperNeuronsModel | None = None
        self.sgd: SGDInBackward | None = None
        self.optimizer = None
        self.amb = amb_budget(name)
        self._compiled = None
        self.units = None
        if isinstance(model, nn.Sequential) or is_torch_arm(name):
            self._set_units(model_units(model))
        if is_torch_arm(name):
            self.optimizer = self._torch_sgd()
        else:
            cfg = runtime_config(name, memory_budget_bytes, pool_budget_bytes, lookahead, max_inflight_bytes,
                                 workspace_bytes)
            self.runtime = SuperNeuronsModel(model, cfg)
            self.sgd = SGDInBackward(model, optim.lr, optim.momentum, optim.weight_decay,
                                     momentum_on_host=momentum_on_host)

    def _set_units(self, units) -> None:
        if units is None:
            return
        self.units = units
        if (why := unsupported(self.name, self.units)) is not None:
            raise ValueError(f"arm {self.name!r} cannot train this model: {why}")
        self.segments = checkpoint_segments(len(self.units))
        self._flat = nn.Sequential(*[m for _, m in self.units])

    def ensure_units(self, x: torch.Tensor) -> list[tuple[str, nn.Module]]:
        """The units on input ``x`` (traced on the first input for a model that is not a Sequential)."""
        if self.units is None:
            self._set_units(self.runtime.units if self.runtime is not None and self.runtime.units
                            else model_units(self.model, x))
        return self.units

    def prepare(self, x: torch.Tensor):
        """Plan ours on ``x``'s shape (the runtime's plan; None for the other arms). Where the plan
        leaves room under the memory budget for every gradient at once (and momentum lives on the
        GPU), SGD runs after backward as torch.optim's multi-tensor step, as plain training does:
        gradient liveness buys nothing there, and applying SGD unit by unit inside backward costs
        host time that delays backward's own launches (64 bottleneck blocks on the H200: 6 ms of
        hooks in a step plain PyTorch runs in 60 ms). Without a budget (the peak-memory table) or
        when the gradients would not fit, SGD stays in backward."""
        if self.runtime is None:
            self.ensure_units(x)
            return None
        plan = self.runtime.prepare(x)
        self.units = self.units or self.runtime.units
        budget = self.runtime.config.memory_budget_bytes
        if (self.sgd is not None and budget is not None and not self.sgd.momentum_on_host
                and plan.estimate["peak_dynamic"] + param_bytes(self.model) <= budget):
            self.sgd.remove()
            self.sgd = None
            self.optimizer = self._torch_sgd()
        return plan

    def _torch_sgd(self) -> torch.optim.SGD:
        """torch.optim's SGD over the model (multi-tensor on the GPU by default): the baselines', and
        ours' where SGD runs after backward."""
        return torch.optim.SGD(self.model.parameters(), lr=self.optim.lr, momentum=self.optim.momentum,
                               weight_decay=self.optim.weight_decay)

    @property
    def sgd_placement(self) -> str:
        """Where the optimiser step runs: "in backward" (SGDInBackward) or "after backward"."""
        return "in backward" if self.sgd is not None else "after backward"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.runtime is not None:
            return self.runtime(x)
        if self.amb is not None:
            if self._compiled is None:
                # a fresh compile per arm: the models of a search share forward's code object, and
                # dynamo would otherwise fall back to eager once its recompile limit is reached
                torch._dynamo.reset()
                backend = "inductor" if x.is_cuda else "aot_eager_decomp_partition"
                self._compiled = torch.compile(self.model, backend=backend)
            with torch._functorch.config.patch(activation_memory_budget=self.amb):
                return self._compiled(x)
        self.ensure_units(x)
        if self.name == "sac":
            for _, unit in self.units:
                # a unit that writes its input in place (ReLU(inplace=True)) would overwrite the input
                # a checkpoint keeps for recomputation: it runs as in plain training
                x = unit(x) if mutates_input(unit) else checkpoint(unit, x, use_reentrant=False,
                                                                    context_fn=sac_context)
            return x
        if self.name == "checkpoint":
            return checkpoint_sequential(self._flat, self.segments, x, use_reentrant=False)
        if self.name == "save_on_cpu":
            with torch.autograd.graph.save_on_cpu(pin_memory=x.is_cuda):
                return self.model(x)
        return self.model(x)

    def step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.optimizer is not None:
            self.optimizer.zero_grad(set_to_none=True)
        loss = loss_of(self.forward(x), y)
        loss.backward()
        if self.optimizer is not None:
            self.optimizer.step()
        return loss.detach()

    def estimated_dynamic(self, profiles: list[UnitProfile], x: torch.Tensor | None = None) -> float:
        """Liveness-model estimate of this arm's dynamic peak (bytes), for CPU runs (no allocator).

        sac (needs the input ``x``): every unit keeps its input (the checkpoint's) and the outputs of
        its matmuls / convolutions / attention (sac_saved_bytes; a unit that writes its input in place
        runs as in plain training and keeps what it saves), plus the largest working set, where one
        unit is recomputed in backward. amb_<v>: by the definition of activation_memory_budget, the
        partitioner saves v of what its default (runtime-optimised) strategy saves; that is taken as v
        of what plain training saves, plus the largest working set. Both are models, not measurements:
        on the GPU the allocator decides."""
        if self.runtime is not None:
            return float(self.runtime.plan.estimate["peak_dynamic"])
        if self.name == "sac":
            if x is None:
                raise ValueError("the sac arm's estimate needs the input (estimated_dynamic(profiles, x))")
            kept = sum(p.saved_bytes if mutates_input(unit) else p.in_bytes + saved
                       for p, (_, unit), saved in zip(profiles, self.ensure_units(x), sac_saved_bytes(self.units, x)))
            return float(kept + largest_working_set(profiles).working_set)
        if self.amb is not None:
            return float(self.amb * saved_bytes_between(profiles) + largest_working_set(profiles).working_set)
        if self.name == "plain":
            return float(plain_dynamic_estimate(profiles))
        if self.name == "save_on_cpu":  # only the largest unit's working set on the device
            return float(largest_working_set(profiles).working_set)
        size = math.ceil(len(profiles) / self.segments)
        starts = range(0, len(profiles), size)
        boundaries = sum(profiles[i].in_bytes for i in starts)
        return float(boundaries + max(saved_bytes_between(profiles, i, i + size) for i in starts)
                     + max(p.in_bytes + p.out_bytes for p in profiles))

    def estimated_static(self) -> float:
        """Parameters + optimizer state (+ gradients for torch.optim, which keeps them between steps)."""
        p = param_bytes(self.model)
        if self.sgd is None:  # torch.optim (the baselines, or ours with SGD after backward)
            return 3.0 * p
        return p + (0.0 if self.sgd.momentum_on_host else p)

    def estimated_host(self, profiles: list[UnitProfile]) -> float:
        """Pinned host bytes this arm needs: save_on_cpu every saved tensor, ours what the pool offloads
        and momentum kept on the host; x PINNED_ROUNDING (PyTorch's pinned allocator rounds block sizes
        up to powers of two)."""
        if self.name == "save_on_cpu":
            return PINNED_ROUNDING * sum(p.saved_bytes for p in profiles)
        if self.runtime is None:
            return 0.0
        est = self.runtime.plan.estimate if self.runtime.plan else None
        offloaded = (est["checkpoints"] - est["resident_checkpoints"]) if est else 0.0
        on_host = self.sgd is not None and self.sgd.momentum_on_host
        return PINNED_ROUNDING * (offloaded + (param_bytes(self.model) if on_host else 0.0))

    def close(self) -> None:
        if self.sgd is not None:
            self.sgd.remove()
