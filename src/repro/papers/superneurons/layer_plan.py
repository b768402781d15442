"""The layer-granular plan (issue 45): per layer inside each unit, keep, offload or recompute what the
layer produces, as SuperNeurons plans (offload the outputs of convolutions, recompute cheap layers
such as BN, ReLU, pooling and LRN from them), instead of one decision per unit.

Pure: this module reads the layer profile (:class:`LayerProfile`, measured by
:func:`repro.papers.superneurons.layers.profile_layers`) and computes decisions and their memory
estimate with no tensor; :mod:`repro.papers.superneurons.layers` executes them.

Layers and storages. A *layer* is a leaf module a unit runs (conv, BN, ReLU, ...), or a unit's
*functional* pseudo-layer (the ops between its modules, e.g. a residual add), in forward order over
the whole network. A *storage* is a tensor autograd saves for backward (parameters excepted), or the
source a recomputation starts from; its *producer* is the layer whose output it is. A layer that
writes its input in place (ReLU(inplace=True)) produces nothing: it joins its input's producer's
*group*, which is decided as one (recomputing a BN means recomputing the ReLU it feeds in place).

Decisions per group, applied to the storages its layers produce:
- keep: the storage stays on the device until autograd frees it (after the backward of the
  earliest layer that saved it);
- offload: the tensor pool copies it to pinned host memory during forward and back before its
  first use in backward; priced as free while the bytes offloaded at and after its layer fit the
  PCIe overlap window (bandwidth x the measured backward time of the units after it, which run
  before its backward), else at bytes / bandwidth of stall;
- recompute (groups of cheap layers only, :attr:`LayerInfo.cheap`): the storage is dropped and
  recomputed in backward from the group's input (the *source*, a convolution's output that is kept
  or offloaded, or recursively recomputable), priced by the group's measured forward time; a source
  no layer saves is held by the recomputation (counted, with its producer's decision).

The plan (:func:`plan_layers`): with everything kept, done if the estimate fits the budget; else
decisions are taken in order of seconds per byte freed (free offloads first, then recomputations
and stalled offloads) until it fits, the shortest such prefix found by bisection (the estimate is
recomputed for each probe; O(layers log layers) estimates' worth of work).

The estimate (:func:`layer_estimate`) bounds the dynamic peak as the unit plan's does: at the loss
(everything resident that forward kept, and the loss's need), during each unit's forward (what the
units before it keep, its input and its measured forward need), and during each layer's backward
(the kept storages not yet freed, the offloaded and recomputed ones materialised for it or for a
later layer until the earliest layer that saved them is done, what a recomputation allocates besides
its output (the measured forward allocations of its group), the largest offloaded storage being
prefetched, and the unit's gradient working set: its measured backward need less what it saves).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

ACTIONS = ("keep", "offload", "recompute")
# cheap layer kinds (module class names): recomputed in backward rather than kept (SuperNeurons: BN,
# activations, pooling, LRN); dropout is cheap but draws random numbers, so it is kept
CHEAP_KINDS = frozenset({
    "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "ReLU", "ReLU6", "LeakyReLU", "ELU", "GELU", "SiLU", "Tanh",
    "Sigmoid", "Hardswish", "Hardsigmoid", "Mish", "MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d",
    "AvgPool2d", "AvgPool3d", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveMaxPool2d", "LocalResponseNorm",
    "FusedLocalResponseNorm", "Identity", "Flatten",
})


@dataclass
class LayerInfo:
    index: int  # global, forward order
    unit: int
    name: str
    kind: str  # module class name, or "functional"
    cheap: bool  # recomputable (CHEAP_KINDS, deterministic)
    forward_s: float  # measured forward time
    group: int  # index of the group's head layer (itself unless it writes its input in place)
    forward_bytes: int = 0  # measured: what its forward allocates at its peak (output, temporaries, indices)


@dataclass
class StorageInfo:
    index: int
    nbytes: int
    producer: int  # layer index
    packers: list[int] = field(default_factory=list)  # layers that save it, forward order (may be empty)
    source_of: list[int] = field(default_factory=list)  # groups whose recomputation starts from it


@dataclass
class UnitCost:
    """What the layer estimate takes from the unit profile (liveness.UnitProfile)."""
    in_bytes: int
    forward_need: int  # measured forward peak (or modelled), see UnitProfile.forward_need
    grad_need: int  # backward need less saved bytes: gradients and transients (workspace)
    backward_s: float  # measured backward time


@dataclass
class LayerProfile:
    layers: list[LayerInfo]
    storages: list[StorageInfo]
    units: list[UnitCost]
    group_source: dict[int, int]  # group head -> storage its recomputation starts from
    group_output: dict[int, int]  # group head -> storage it produces (its output), if any
    loss_bytes: int = 0
    calls: list = field(default_factory=list)  # per unit, its leaf layers' indices in call order
    functional: list = field(default_factory=list)  # per unit, its functional pseudo-layer's index

    def groups(self) -> list[int]:
        return sorted({layer.group for layer in self.layers})

    def recomputable(self, group: int) -> bool:
        members = [layer for layer in self.layers if layer.group == group]
        return all(layer.cheap for layer in members) and group in self.group_source


@dataclass
class LayerPlan:
    decisions: dict[int, str]  # group head -> action
    estimate: dict
    seconds: float  # priced cost: recompute time + offload stalls

    def action(self, layer: LayerInfo) -> str:
        return self.decisions.get(layer.group, "keep")

    def summary(self) -> dict:
        counts = {a: sum(1 for d in self.decisions.values() if d == a) for a in ACTIONS}
        return dict(layer_groups=len(self.decisions), **{f"layer_{a}": n for a, n in counts.items()},
                    layer_priced_s=self.seconds)


def _decision(profile: LayerProfile, decisions: dict, storage: StorageInfo, min_offload: int = 0) -> str:
    """What happens to a storage: its producer group's action, except that only the group's output is
    recomputed (other storages it makes, e.g. max-pool indices, are kept) and storages under
    ``min_offload`` bytes are not offloaded."""
    group = profile.layers[storage.producer].group
    action = decisions.get(group, "keep")
    if action == "recompute" and profile.group_output.get(group) != storage.index:
        return "keep"
    if action == "offload" and storage.nbytes < min_offload:
        return "keep"
    return action


def _needed_storages(profile: LayerProfile, decisions: dict) -> list[StorageInfo]:
    """Storages the step holds: those layers save, and the sources of recomputed groups."""
    sources = {profile.group_source[g] for g, a in decisions.items() if a == "recompute"}
    return [s for s in profile.storages if s.packers or s.index in sources]


def _release(profile: LayerProfile, decisions: dict) -> tuple[dict, dict]:
    """Per storage: the layer after whose backward it is freed (its earliest packer, or that of what
    is recomputed from it) and the layer at whose backward it is materialised first (offloaded or
    recomputed storages: its latest packer, or that of what is recomputed from it)."""
    release, materialise = {}, {}
    by_index = {s.index: s for s in profile.storages}
    # recomputed outputs depend on their sources: resolve dependents first (a source comes earlier
    # in forward order than what is recomputed from it)
    for s in sorted(profile.storages, key=lambda s: -s.index):
        lo = min(s.packers) if s.packers else math.inf
        hi = max(s.packers) if s.packers else -math.inf
        for g in s.source_of:
            if decisions.get(g) == "recompute" and g in profile.group_output:
                d = by_index[profile.group_output[g]]
                if d.index in release:
                    lo, hi = min(lo, release[d.index]), max(hi, materialise[d.index])
        release[s.index], materialise[s.index] = lo, hi
    return release, materialise


def layer_estimate(profile: LayerProfile, decisions: dict, lookahead: int = 1, min_offload: int = 0) -> dict:
    """The dynamic peak of a layer plan (module docstring), bytes, with its parts."""
    release, materialise = _release(profile, decisions)
    needed = _needed_storages(profile, decisions)
    n = len(profile.layers)
    action = {s.index: _decision(profile, decisions, s, min_offload) for s in needed}
    kept = [s for s in needed if action[s.index] == "keep"]
    dropped = [s for s in needed if action[s.index] != "keep"]
    offloaded = [s.nbytes for s in needed if action[s.index] == "offload"]
    prefetch = sum(sorted(offloaded)[-lookahead:]) if lookahead and offloaded else 0
    # backward: a difference array over layer positions
    alive = [0.0] * (n + 1)
    for s in kept:
        if release[s.index] <= n - 1:
            alive[int(release[s.index])] += s.nbytes
            alive[n] -= s.nbytes
    for s in dropped:
        lo, hi = release[s.index], materialise[s.index]
        if lo <= hi:
            alive[int(lo)] += s.nbytes
            alive[int(hi) + 1] -= s.nbytes
    # a recomputation allocates what its modules' forwards do (e.g. max-pool indices) besides the output
    # it keeps, at the backward of the layer that first needs it
    transient = [0.0] * n
    for s in dropped:
        group = profile.layers[s.producer].group
        if action[s.index] == "recompute" and materialise[s.index] >= 0:
            extra = sum(layer.forward_bytes for layer in profile.layers if layer.group == group) - s.nbytes
            j = int(materialise[s.index])
            transient[j] = max(transient[j], float(extra))
    backward, running = 0.0, 0.0
    for j, layer in enumerate(profile.layers):
        running += alive[j]
        backward = max(backward, running + profile.units[layer.unit].grad_need + transient[j])
    backward += prefetch
    resident_end = sum(s.nbytes for s in kept)
    # forward: what the units before unit i keep, plus unit i's input and forward need
    forward, before = 0.0, [0.0] * (len(profile.units) + 1)
    for s in kept:
        before[profile.layers[s.producer].unit + 1] += s.nbytes
    acc = 0.0
    for i, u in enumerate(profile.units):
        acc += before[i]
        forward = max(forward, acc + u.in_bytes + u.forward_need)
    loss = resident_end + profile.loss_bytes
    peak = max(backward, forward, loss)
    return dict(peak_dynamic=peak, backward=backward, forward=forward, loss=loss, kept=resident_end,
                offloaded=float(sum(offloaded)), prefetched=float(prefetch),
                recomputed=float(sum(s.nbytes for s in dropped if action[s.index] == "recompute")))


def _group_bytes(profile: LayerProfile, group: int) -> int:
    """Bytes of what the group produces and layers save (what deciding it frees)."""
    s = profile.group_output.get(group)
    return profile.storages[s].nbytes if s is not None and profile.storages[s].packers else 0


def _unit_backward_after(profile: LayerProfile) -> list[float]:
    """Per unit, the measured backward seconds of the units after it."""
    after, acc = [0.0] * len(profile.units), 0.0
    for i in reversed(range(len(profile.units))):
        after[i] = acc
        acc += profile.units[i].backward_s
    return after


def free_offloads(profile: LayerProfile, bandwidth: float, min_offload: int = 0) -> set[int]:
    """Groups whose output can be offloaded at no stall: from the last layer to the first, a group's
    output joins while the bytes offloaded at and after it fit bandwidth x the backward time of the
    units after its latest use (module docstring). Exact for this condition: adding an earlier group
    never changes a later one's."""
    after = _unit_backward_after(profile)
    chosen, total = set(), 0.0
    for g in sorted(profile.group_output, reverse=True):
        s = profile.storages[profile.group_output[g]]
        if not s.packers or s.nbytes < min_offload:
            continue
        window = bandwidth * after[profile.layers[max(s.packers)].unit]
        if total + s.nbytes <= window:
            chosen.add(g)
            total += s.nbytes
    return chosen


def plan_layers(profile: LayerProfile, budget: float, bandwidth: float, min_offload: int = 0,
                lookahead: int = 1, recompute: bool = True, offload: bool = True) -> LayerPlan:
    """Decisions per group (module docstring) for a dynamic-memory ``budget`` (bytes; inf: keep all)."""
    keep_all: dict[int, str] = {}

    def estimate(decisions):
        return layer_estimate(profile, decisions, lookahead, min_offload)

    est = estimate(keep_all)
    if est["peak_dynamic"] <= budget:
        return LayerPlan(keep_all, est, 0.0)
    free = free_offloads(profile, bandwidth, min_offload) if offload else set()
    candidates = []  # (seconds per byte, -bytes, group, action, seconds)
    for g in profile.groups():
        freed = _group_bytes(profile, g)
        if freed <= 0:
            continue
        if offload and freed >= min_offload:
            seconds = 0.0 if g in free else freed / bandwidth
            candidates.append((seconds / freed, -freed, g, "offload", seconds))
        if recompute and profile.recomputable(g):
            seconds = sum(layer.forward_s for layer in profile.layers if layer.group == g)
            candidates.append((seconds / freed, -freed, g, "recompute", seconds))
    candidates.sort()
    order, seen = [], set()
    for c in candidates:  # a group's cheapest action
        if c[2] not in seen:
            seen.add(c[2])
            order.append(c)

    def decide(k):
        return {c[2]: c[3] for c in order[:k]}

    lo, hi = 1, len(order)
    best = decide(hi)
    if estimate(best)["peak_dynamic"] <= budget:
        while lo < hi:  # the shortest prefix that fits
            mid = (lo + hi) // 2
            if estimate(decide(mid))["peak_dynamic"] <= budget:
                hi = mid
            else:
                lo = mid + 1
        best = decide(hi)
    else:
        hi = len(order)
    chosen = order[:hi]
    return LayerPlan(best, estimate(best), sum(c[4] for c in chosen))


def forced_plan(profile: LayerProfile, action: str, lookahead: int = 1, min_offload: int = 0) -> LayerPlan:
    """Every group recomputed where it can be and kept elsewhere (``"recompute"``), every group offloaded
    (``"offload"``), or recomputed where it can be and offloaded elsewhere (``"both"``): for tests and
    ablations, whatever the budget."""
    decisions = {}
    for g in profile.groups():
        if action in ("recompute", "both") and profile.recomputable(g):
            decisions[g] = "recompute"
        elif action in ("offload", "both"):
            decisions[g] = "offload"
    return LayerPlan(decisions, layer_estimate(profile, decisions, lookahead, min_offload), 0.0)
