"""The SuperNeurons plan: what to keep, recompute and offload, and what that costs in memory,
made from the liveness profile before the first step (no tensor runs here but the segments' own
``run``; :mod:`repro.papers.superneurons.runtime` executes a plan).

Segments. The units (see :mod:`repro.papers.superneurons.liveness`) are cut into segments, each starting
at an expensive unit (conv / linear / a block holding one) followed by the cheap units after it
(BN, activations, pooling, dropout); cheap units before the first expensive one form a segment of
their own. A segment's input is its *checkpoint*.

Plan. Each segment is either *kept* (runs under ordinary autograd, its saved tensors stay) or
*recomputed* (forward runs without saving anything but the checkpoint; backward recomputes it):
- ``recompute="off"``: all kept; ``"all"``: all recomputed, each segment speed-centric (recompute
  it once and keep its intermediates for its whole backward) when that needs no more than the
  largest single-layer working set, else memory-centric (recompute up to each unit, one unit's
  backward at a time; an in-place unit is backpropagated with the unit before it, so that it
  overwrites a recomputed tensor instead of a copy).
- ``"auto"`` (cost-aware, for a ``memory_budget_bytes``): resident first, offload only the excess.
  (1) Starting from all kept, the segments with the least forward time per byte freed are
  recomputed until the plan fits with every checkpoint resident, so a network that fits pays no
  recomputation and no copies. (2) When every segment worth recomputing is and the checkpoints
  still do not fit, consecutive recomputed segments are merged into longer speed-centric segments
  (fewer checkpoints; each unit still recomputed once), under a working-set allowance that starts at
  the largest single-layer working set (merging costs no peak there) and grows until the
  checkpoints fit. (3) Only when no allowance makes them fit does the tensor pool offload: the
  merge with the fewest resident bytes that still leaves the pool room, the pool keeping what the
  budget leaves and offloading the rest. Offloading is the last resort because host copies are
  slow next to recomputation on a current GPU (H200: ~50 GB/s pinned copies; recomputing a
  bottleneck block frees ~300 MB in ~0.3 ms of forward). Segments are speed-centric whenever the
  plan still fits with it (step 1: memory-centric ones are turned speed-centric while it fits;
  steps 2-3: up to the allowance).
- checkpoints go to the tensor pool, which keeps ``pool_budget_bytes`` of them resident (default:
  what the memory budget leaves after the rest of the plan) and offloads the rest; when pool is on
  and recompute is off, the kept segments' saved activations go through the pool instead
  (saved-tensor hooks), parameters never, nor tensors under ``min_offload_bytes`` (they stay on the
  device, and the estimate counts them there whatever the pool's budget).
The estimate bounds the step's dynamic peak (tests/superneurons/test_replay.py replays steps under a
storage tracker). A plan whose estimate is over ``memory_budget_bytes`` raises BudgetUnreachable
with the estimate, its parts and the budget, or with ``over_budget="warn"`` warns (BudgetWarning)
and runs (the experiments' "ours" arm: its probe's cap decides what fits).

Convolution workspace (SuperNeurons' fourth mechanism, the fastest algorithm whose workspace fits)
is outside the runtime: cuDNN picks algorithms itself; ``workspace_bytes`` is the workspace the
estimate counts next to the working set (the cap set through ``CUDNN_CONV_WSCAP_DBG``, see
probe.py).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import torch
import torch.nn as nn

from repro.papers.superneurons.liveness import (LOSSES, UnitProfile, is_stochastic, largest_need,
                                                largest_working_set, mutates_input, saved_bytes_between)

RECOMPUTE_MODES = ("off", "auto", "all")
STRATEGIES = ("auto", "speed", "memory")
OVER_BUDGET = ("error", "warn")
GRANULARITIES = ("unit", "layer")
LAYER_ACTIONS = ("auto", "recompute", "offload", "both")
ALLOWANCE_STEP = math.sqrt(2)  # growth of the working-set allowance between merge attempts


@dataclass
class RuntimeConfig:
    recompute: str = "auto"  # off | auto | all
    strategy: str = "auto"  # auto | speed | memory: force every recomputed segment's strategy
    pool: bool = True  # unified tensor pool (offload what does not fit)
    pool_budget_bytes: float | None = None  # resident pool bytes; None = what the memory budget leaves
    memory_budget_bytes: float | None = None  # dynamic memory the plan may use; None = unlimited
    prefetch_lookahead: int = 2  # checkpoints prefetched ahead in backward (more when the pool has room)
    min_offload_bytes: int = 1 << 20  # smaller saved tensors are not worth a copy (pool without recompute)
    max_inflight_bytes: float = 512 * 2**20  # GPU memory held by offloads still copying
    workspace_bytes: float = 0.0  # convolution workspace counted next to the working set (0: not modelled)
    over_budget: str = "error"  # a plan estimated over memory_budget_bytes: "error" (BudgetUnreachable) | "warn"
    # the loss the step applies to the model's output, whose working set (logits, log-softmax output,
    # their gradients) the plan counts next to what forward keeps: "cross_entropy" | "none"
    loss: str = "cross_entropy"
    # "unit": the plan above (keep / recompute / offload whole segments of units); "layer": the
    # layer-granular plan inside units (layer_plan.py: per layer keep / offload / recompute, cheap
    # layers recomputed from kept or offloaded convolution outputs), executed by layers.py
    granularity: str = "unit"
    # "layer" plans: "auto" (cost-aware under memory_budget_bytes) or every group "recompute"d where it
    # can be, "offload"ed, or "both" (recompute where it can, offload the rest), whatever the budget
    layer_actions: str = "auto"
    pcie_bytes_per_s: float = 50e9  # host-device copy bandwidth each way (PAPERS.md: 55 GB/s pinned on the H200)

    def __post_init__(self):
        if self.recompute not in RECOMPUTE_MODES:
            raise ValueError(f"recompute must be one of {RECOMPUTE_MODES}, got {self.recompute!r}")
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, got {self.strategy!r}")
        if self.granularity not in GRANULARITIES:
            raise ValueError(f"granularity must be one of {GRANULARITIES}, got {self.granularity!r}")
        if self.layer_actions not in LAYER_ACTIONS:
            raise ValueError(f"layer_actions must be one of {LAYER_ACTIONS}, got {self.layer_actions!r}")
        if self.loss not in LOSSES:
            raise ValueError(f"loss must be one of {LOSSES}, got {self.loss!r}")
        if self.over_budget not in OVER_BUDGET:
            raise ValueError(f"over_budget must be one of {OVER_BUDGET}, got {self.over_budget!r}")
        if self.prefetch_lookahead < 0:
            raise ValueError(f"prefetch_lookahead must be >= 0, got {self.prefetch_lookahead}")
        for name in ("pool_budget_bytes", "memory_budget_bytes", "workspace_bytes"):
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

    def run(self, x: torch.Tensor, start: int = 0, stop: int | None = None) -> torch.Tensor:
        for m in self.modules[start:stop]:
            x = m(x)
        return x


@dataclass
class Plan:
    segments: list[Segment]
    profiles: list[UnitProfile]
    pool_budget_bytes: float
    estimate: dict = field(default_factory=dict)
    offload_saved: bool = False  # kept segments' saved activations go through the pool (they do not fit)
    speed_working_set: float = 0.0  # largest working set of a speed-centric segment (or of a layer), bytes
    prefetch_rooms: list = field(default_factory=list)  # per recomputed segment, see prefetch_rooms()
    layers: object = None  # granularity="layer": its layer_plan.LayerPlan (segments then empty)

    @property
    def largest_working_set(self) -> int:
        return largest_working_set(self.profiles).working_set

    def summary(self) -> dict:
        rec = [s for s in self.segments if s.recompute]
        layers = self.layers.summary() if self.layers is not None else {}
        return dict(segments=len(self.segments), recomputed=len(rec), **layers,
                    recomputed_units=sum(len(s.units) for s in rec),
                    memory_centric=sum(s.strategy == "memory" for s in rec),
                    largest_working_set=self.largest_working_set, speed_working_set=self.speed_working_set,
                    pool_budget_bytes=self.pool_budget_bytes,
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
    return saved_bytes_between(profiles, seg.units[0], seg.units[-1] + 1)


def _checkpoint(seg: Segment, profiles) -> int:
    return profiles[seg.units[0]].in_bytes


@dataclass
class _BackwardNeed:
    """Running peak of recomputing and backpropagating a run of units in one autograd call (a
    speed-centric segment, or one memory-centric step), while the run's output gradient waits (the
    segment's backward is called with it). Forward, at unit i: what the units before i save, the run's
    input and i's measured forward peak (:attr:`UnitProfile.forward_need`). Backward, last unit to
    first, at unit i: what the units up to i save (a unit's saved tensors are freed once its backward
    ran) and the run's input, i's output and input gradients, its weight gradient and measured
    transient; the run's output gradient counts next to every unit before the last (at the last it is
    that unit's output gradient). Units are added first to last (``add``), so that merging segments
    extends a run without starting over."""

    saved: int = 0  # what the units so far save together (shared activations once), and the run's input
    forward: int = 0  # the largest forward need so far, without the run's output gradient
    before_last: int = 0  # the largest backward need of a unit before the last, without the run's output gradient
    last: int = 0  # the backward need of the last unit (its output gradient is the run's)
    out: int = 0  # the run's output gradient

    def add(self, p: UnitProfile, first: bool = False) -> "_BackwardNeed":
        self.before_last = max(self.before_last, self.last)
        # forward: its input (unless the units before save it) and what it allocates; the run's input
        # stays alive throughout (the checkpoint, or a step's recomputed input, whose gradient the
        # runtime returns), saved by the first unit or not
        self.forward = max(self.forward, self.saved + p.in_bytes - (0 if first else p.shared_in_bytes)
                           + p.forward_need)
        self.saved += (p.saved_bytes + max(0, p.in_bytes - p.in_saved_bytes) if first
                       else p.saved_bytes - p.shared_in_bytes)
        self.last = self.saved + p.out_bytes + p.in_bytes + p.param_bytes + p.transient_bytes
        self.out = p.out_bytes
        return self

    def copy(self) -> "_BackwardNeed":
        return _BackwardNeed(self.saved, self.forward, self.before_last, self.last, self.out)

    def need(self, out_held: bool = True) -> int:
        """``out_held``: the run's output gradient stays alive until the run is done (false for a
        memory-centric step before the segment's last: the runtime hands autograd the gradient without
        keeping it, see _GradRoot, so it goes once the step's last unit has used it)."""
        return max(self.forward + self.out, self.before_last + (self.out if out_held else 0), self.last)


def _run_need(units, profiles) -> _BackwardNeed:
    run = _BackwardNeed()
    for k, i in enumerate(units):
        run.add(profiles[i], first=k == 0)
    return run


def _seg_speed_ws(seg: Segment, profiles) -> int:
    """Speed-centric recompute: the segment's backward in one autograd call (:class:`_BackwardNeed`),
    its checkpoint being the run's input."""
    return _run_need(seg.units, profiles).need()


def memory_steps(seg: Segment) -> list[tuple[int, int]]:
    """Memory-centric backward, as (start, stop) positions in the segment: one unit at a time, except
    that a unit overwriting its input (in-place ReLU) joins the step of the unit before it; alone, it
    would need a copy of its recomputed input (a leaf cannot be overwritten), one activation more."""
    steps: list[list[int]] = []
    for j, m in enumerate(seg.modules):
        if steps and mutates_input(m):
            steps[-1][1] = j + 1
        else:
            steps.append([j, j + 1])
    return [(a, b) for a, b in steps]


def _seg_memory_ws(seg: Segment, profiles) -> int:
    """Memory-centric: one step at a time. A step backpropagates its units (:class:`_BackwardNeed`)
    next to the checkpoint (unless it is the step's own input) and the segment's output gradient
    (autograd holds it for the whole segment); before that, it recomputes its input from the
    checkpoint without saving anything (one unit's input and what its forward allocates at a time)
    while the step's output gradient waits."""
    units, n = seg.units, len(seg.units)
    ckpt, seg_grad = _checkpoint(seg, profiles), profiles[units[-1]].out_bytes

    def step_ws(a, b):
        last_step = b == n
        held = (ckpt if a else 0) + (0 if last_step else seg_grad)
        ws = _run_need(units[a:b], profiles).need(out_held=last_step) + held
        if a:
            waiting = profiles[units[b - 1]].out_bytes
            ws = max(ws, held + waiting + max(profiles[i].in_bytes + profiles[i].forward_need for i in units[:a]))
        return ws
    return max(step_ws(a, b) for a, b in memory_steps(seg))


def _rec_ws(seg: Segment, profiles) -> int:
    return _seg_speed_ws(seg, profiles) if seg.strategy == "speed" else _seg_memory_ws(seg, profiles)


def _kept_saved(segments: list[Segment], profiles) -> int:
    """Saved bytes of the kept segments; an activation two neighbouring kept segments save counts once."""
    total = 0
    for k, s in enumerate(segments):
        if not s.recompute:
            total += _seg_saved(s, profiles)
            if k and not segments[k - 1].recompute:
                total -= profiles[s.units[0]].shared_in_bytes
    return total


def _unmeasured_workspace(profiles, workspace: float) -> float:
    """The convolution workspace to count next to the working set: none where the profile measured
    the units' transients (on the GPU they hold it), else ``workspace``."""
    return 0.0 if any(p.transient_bytes for p in profiles) else workspace


def _segment_needs(segments: list[Segment], profiles) -> list[int]:
    """What each segment's backward needs beyond the plan's resident bytes: a recomputed segment's
    working set, a kept segment's largest unit need."""
    return [_rec_ws(s, profiles) if s.recompute else max(profiles[i].need for i in s.units) for s in segments]


def prefetch_rooms(segments: list[Segment], needs: list[int], limit: float) -> list[float]:
    """Per recomputed segment (in order): the bytes of checkpoints being prefetched that may be alive
    during its backward and that of the kept segments after it (up to the next recomputed one), so
    that no segment's need plus prefetches exceeds ``limit``."""
    rooms, room = [], math.inf
    for s, need in zip(segments, needs):
        room = min(room, limit - need)
        if s.recompute:
            rooms.append(max(0.0, room))
            room = math.inf
    return rooms


def prefetch_schedule(checkpoints: list[int], rooms: list[float], lookahead: int) -> list[float]:
    """Bytes being prefetched during each recomputed segment's backward, as
    :meth:`SuperNeuronsModel._prefetch_before` issues them when every checkpoint is offloaded: at
    segment i (after taking its own checkpoint), the ``lookahead`` checkpoints before it, in order,
    while the bytes in flight fit the rooms of every segment they will be alive in."""
    held, inflight, resume = [0.0] * len(checkpoints), {}, len(checkpoints) - 1
    for i in reversed(range(len(checkpoints))):
        inflight.pop(i, None)
        p = min(i - 1, resume)
        while p >= max(0, i - lookahead) and sum(inflight.values()) + checkpoints[p] <= min(rooms[p + 1:i + 1]):
            inflight[p] = checkpoints[p]
            p -= 1
        resume = p
        held[i] = sum(inflight.values())
    return held


def _prefetch_peak(segments: list[Segment], needs: list[int], held: list[float]) -> float:
    """The largest segment need plus the prefetches alive during it."""
    peak, k = 0.0, 0
    for s, need in zip(segments, needs):
        peak = max(peak, need + (held[k] if k < len(held) else 0.0))
        k += s.recompute
    return peak


def _pooled_saved(segments: list[Segment], profiles, min_offload: int) -> tuple[int, list[int], list[int]]:
    """Kept segments' saved tensors through the pool (the hooks of _saved_tensor_hooks): the bytes that
    stay on the device (tensors under ``min_offload``), the bytes of each tensor put into the pool, and
    per segment its largest unit need with its poolable tensors offloaded (pool_need; 0 for a
    recomputed segment)."""
    resident, offloaded, needs = 0, [], []
    for s in segments:
        if s.recompute:
            needs.append(0)
            continue
        for i in s.units:
            stays, put = profiles[i].pool_split(min_offload)
            resident += stays
            offloaded += put
        needs.append(max(profiles[i].pool_need(min_offload) for i in s.units))
    return resident, offloaded, needs


def estimate(segments: list[Segment], profiles: list[UnitProfile], pool_budget: float, pool_saved: bool,
             lookahead: int, inflight: float = 0.0, workspace: float = 0.0, ceiling: float | None = None,
             min_offload: int = 0) -> dict:
    """Liveness estimate of the dynamic peak of a plan (bytes); ``inflight``: offload copies in flight,
    ``workspace``: convolution workspace next to the working set, where the profile did not measure
    it (on the GPU it is in the units' transients). The peak is a segment's backward: the kept saved
    tensors, the resident checkpoints and the copies in flight (forward's, counted throughout), the
    segment's need (its recomputation included, which holds more than its first forward did) and
    the checkpoints being prefetched meanwhile; or the loss (the last profile's ``loss_bytes``: logits,
    log-softmax output and their gradients) next to all that forward keeps, when it needs more
    (``working`` is the larger; ``loss`` says what the loss needs). Prefetches: with ``ceiling`` None, room for the
    ``lookahead`` largest checkpoints next to the largest need (a reservation, for budgeting); else
    as the runtime issues them (prefetch_schedule) within the rooms that ``ceiling`` (the plan's
    limit; never below its peak without prefetches) leaves each segment.

    ``pool_saved`` (kept segments' saved tensors through the pool): tensors under ``min_offload`` bytes
    never enter the pool and stay on the device (counted resident, whatever the pool's budget); of the
    rest the pool keeps up to ``pool_budget`` bytes. Where it offloads, a unit's backward holds one
    copy of each tensor it gets back (pool_need: a storage packed twice comes back twice), and each
    unpack prefetches the ``lookahead`` tensors packed before it, with no room check: the largest
    ``lookahead`` offloaded tensors count on top."""
    kept = _kept_saved(segments, profiles)
    checkpoints = [_checkpoint(s, profiles) for s in segments if s.recompute]
    resident_ckpt = min(sum(checkpoints), pool_budget)
    needs = _segment_needs(segments, profiles)
    saved_offloading, saved_prefetch = False, 0.0
    if pool_saved:
        stays, poolable, pool_needs = _pooled_saved(segments, profiles, min_offload)
        saved_offloading = pool_budget < sum(poolable)
        kept = min(kept, stays + min(sum(poolable), pool_budget))
        if saved_offloading:
            needs = [max(a, b) for a, b in zip(needs, pool_needs)]
            saved_prefetch = float(sum(sorted(poolable)[-lookahead:])) if lookahead else 0.0
    offloading = resident_ckpt < sum(checkpoints) or saved_offloading
    inflight = inflight if offloading else 0.0
    est = dict(kept_saved=kept, checkpoints=sum(checkpoints), resident_checkpoints=resident_ckpt,
               prefetched=saved_prefetch, inflight=inflight, working=max(needs + [largest_need(profiles)]),
               workspace=_unmeasured_workspace(profiles, workspace), loss=profiles[-1].loss_bytes)
    if lookahead and resident_ckpt < sum(checkpoints):
        if ceiling is None:
            est["prefetched"] = sum(sorted(checkpoints)[-lookahead:])
        else:
            held = prefetch_schedule(checkpoints, _rooms(segments, needs, est, ceiling), lookahead)
            est["prefetched"] = max(0.0, _prefetch_peak(segments, needs, held) - est["working"])
    est["peak_dynamic"] = _resident_part(est) + est["working"] + est["prefetched"]
    return est


def _resident_part(est: dict) -> float:
    """What an estimate counts alive throughout backward: kept saved tensors, resident checkpoints,
    forward's copies in flight and the unmeasured workspace."""
    return est["kept_saved"] + est["resident_checkpoints"] + est["inflight"] + est["workspace"]


def _rooms(segments: list[Segment], needs: list[int], est: dict, ceiling: float) -> list[float]:
    """prefetch_rooms under ``ceiling``, or under the plan's peak without prefetches if that is higher."""
    return prefetch_rooms(segments, needs, max(ceiling - _resident_part(est), est["working"]))


def _strategy(seg: Segment, profiles, forced: str, allowance: float) -> str:
    if forced != "auto":
        return forced
    return "speed" if _seg_speed_ws(seg, profiles) <= allowance else "memory"


def _recompute_cheapest(segments: list[Segment], profiles, cfg: RuntimeConfig, budget: float) -> None:
    """Step (1) of the auto plan: recompute the segments with the least forward time per byte freed
    until every checkpoint fits resident. The estimate is updated per segment (an exact running
    version of :func:`estimate`), so that a 1,000-segment network plans in milliseconds."""
    largest = largest_need(profiles)
    workspace = _unmeasured_workspace(profiles, cfg.workspace_bytes)
    kept, checkpoints, rec_ws = _kept_saved(segments, profiles), 0, 0
    position = {id(s): k for k, s in enumerate(segments)}

    def freed(s):
        return _seg_saved(s, profiles) - _checkpoint(s, profiles)

    def cost(s):
        return sum(profiles[i].forward_s for i in s.units)

    for s in sorted((s for s in segments if freed(s) > 0), key=lambda s: cost(s) / freed(s)):
        if kept + checkpoints + max(rec_ws, largest) + workspace <= budget:
            return
        k = position[id(s)]
        kept -= _seg_saved(s, profiles)
        if k and not segments[k - 1].recompute:
            kept += profiles[s.units[0]].shared_in_bytes
        if k + 1 < len(segments) and not segments[k + 1].recompute:
            kept += profiles[segments[k + 1].units[0]].shared_in_bytes
        s.recompute, s.strategy = True, _strategy(s, profiles, cfg.strategy, largest)
        checkpoints += _checkpoint(s, profiles)
        rec_ws = max(rec_ws, _rec_ws(s, profiles))


def merge_recomputed(segments: list[Segment], profiles, allowance: float, forced: str = "auto") -> list[Segment]:
    """Consecutive recomputed segments merged into speed-centric segments whose working set stays
    within ``allowance`` (a segment over it alone keeps its own strategy); kept segments unchanged."""
    merged: list[Segment] = []
    open_run = None  # backward need of the last merged segment while it may still grow
    for s in segments:
        if not s.recompute:
            merged.append(Segment(len(merged), s.units, s.modules, stochastic=s.stochastic))
            open_run = None
            continue
        if open_run is not None and forced != "memory":
            grown = open_run.copy()
            for i in s.units:
                grown.add(profiles[i])
            if grown.need() <= allowance:
                last = merged[-1]
                last.units, last.modules = last.units + s.units, last.modules + s.modules
                last.stochastic = last.stochastic or s.stochastic
                open_run = grown
                continue
        seg = Segment(len(merged), s.units, s.modules, recompute=True, stochastic=s.stochastic)
        seg.strategy = _strategy(seg, profiles, forced, allowance)
        merged.append(seg)
        open_run = _run_need(seg.units, profiles) if seg.strategy == "speed" else None
    return merged


def _speed_where_it_fits(segments: list[Segment], profiles, cfg: RuntimeConfig, budget: float) -> None:
    """Memory-centric segments become speed-centric (recomputed once instead of once per unit),
    smallest working set first, while every checkpoint still fits resident."""
    if cfg.strategy != "auto":
        return
    for s in sorted((s for s in segments if s.recompute and s.strategy == "memory"),
                    key=lambda s: _seg_speed_ws(s, profiles)):
        s.strategy = "speed"
        if estimate(segments, profiles, math.inf, False, 0, workspace=cfg.workspace_bytes)["peak_dynamic"] > budget:
            s.strategy = "memory"
            return


def _auto_plan(segments: list[Segment], profiles, cfg: RuntimeConfig, budget: float,
               overhead: float) -> list[Segment]:
    """recompute="auto" (module docstring, steps 1-3). ``overhead``: what offloading adds to the
    estimate (prefetched checkpoints, copies in flight)."""
    largest = largest_need(profiles)
    _recompute_cheapest(segments, profiles, cfg, budget)
    if not any(s.recompute for s in segments):
        return segments
    if estimate(segments, profiles, math.inf, False, 0, workspace=cfg.workspace_bytes)["peak_dynamic"] <= budget:
        _speed_where_it_fits(segments, profiles, cfg, budget)
        return segments
    best, best_resident, allowance = None, math.inf, largest
    while allowance <= max(budget, largest):
        merged = merge_recomputed(segments, profiles, allowance, cfg.strategy)
        est = estimate(merged, profiles, math.inf, False, 0, workspace=cfg.workspace_bytes)
        if est["peak_dynamic"] <= budget:
            return merged
        # offloading needs room next to the rest of the plan; a larger allowance only takes more
        leaves_room = est["peak_dynamic"] - est["checkpoints"] + overhead <= budget
        if best is None or (leaves_room and est["peak_dynamic"] < best_resident):
            best, best_resident = merged, est["peak_dynamic"]
        allowance *= ALLOWANCE_STEP
    return best


class BudgetUnreachable(ValueError):
    """The best plan's estimated dynamic peak is over ``memory_budget_bytes`` (RuntimeConfig.over_budget)."""


def _bytes(n: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.4g} {unit}"
    return f"{n:.0f} B"


def _over_budget(est: dict, budget: float, cfg: RuntimeConfig) -> None:
    """A plan over its budget: raise BudgetUnreachable, or warn (``over_budget="warn"``), with the numbers."""
    parts = ", ".join(f"{k} {_bytes(est[k])}" for k in ("kept_saved", "resident_checkpoints", "working", "prefetched",
                                                         "inflight", "workspace") if est[k])
    hint = "use recompute='auto', " if cfg.recompute == "off" else ""
    message = (f"memory budget unreachable: the best plan (recompute={cfg.recompute!r}, pool={cfg.pool}) is "
               f"estimated at {_bytes(est['peak_dynamic'])} of dynamic memory ({parts}), over the budget of "
               f"{_bytes(budget)} (memory_budget_bytes={budget:.0f}); 'working' is the largest segment's or "
               f"unit's backward need or the loss's ({_bytes(est['loss'])}), which no plan goes below. "
               f"Raise the budget, {hint}or set over_budget='warn' to run this plan anyway")
    if cfg.over_budget == "warn":
        message = message[:message.index(" Raise the budget")] + " Running it anyway (over_budget='warn')."
        warnings.warn(message, BudgetWarning, stacklevel=4)
    else:
        raise BudgetUnreachable(message)


class BudgetWarning(UserWarning):
    """A plan over its memory budget, run anyway (RuntimeConfig.over_budget="warn")."""


def make_plan(units, profiles: list[UnitProfile], cfg: RuntimeConfig, copies: bool = True) -> Plan:
    """``copies``: the pool really copies (CUDA); on the CPU it is a pass-through with nothing in flight."""
    segments = cut_segments(units, profiles)
    inflight = cfg.max_inflight_bytes if copies else 0.0
    largest = largest_need(profiles)
    budget = math.inf if cfg.memory_budget_bytes is None else cfg.memory_budget_bytes
    if cfg.recompute == "all":
        for s in segments:
            s.recompute, s.strategy = True, _strategy(s, profiles, cfg.strategy, largest)
    elif cfg.recompute == "auto":
        checkpoints = sorted(_checkpoint(s, profiles) for s in segments)
        overhead = (sum(checkpoints[-cfg.prefetch_lookahead:]) if cfg.prefetch_lookahead else 0) + inflight
        segments = _auto_plan(segments, profiles, cfg, budget, overhead if cfg.pool else 0.0)
    any_recompute = any(s.recompute for s in segments)
    pool_saved = cfg.pool and not any_recompute
    resident = estimate(segments, profiles, math.inf, False, 0, workspace=cfg.workspace_bytes)
    if not cfg.pool:
        pool_budget = math.inf
    elif cfg.pool_budget_bytes is not None:
        pool_budget = float(cfg.pool_budget_bytes)
    elif budget == math.inf:
        pool_budget = math.inf
    elif resident["peak_dynamic"] <= budget:  # all fits: the pool holds it all and what is left
        held = resident["checkpoints"] + (resident["kept_saved"] if pool_saved else 0)
        pool_budget = budget - resident["peak_dynamic"] + held
    else:
        rest = estimate(segments, profiles, 0.0, pool_saved, cfg.prefetch_lookahead, inflight, cfg.workspace_bytes,
                        min_offload=cfg.min_offload_bytes)
        pool_budget = max(0.0, budget - rest["peak_dynamic"])
    # prefetches in backward may fill what the memory budget leaves, and without one, only what no
    # segment's backward needs (they never raise the plan's peak)
    ceiling = 0.0 if budget == math.inf else budget
    lookahead = cfg.prefetch_lookahead if cfg.pool else 0
    est = estimate(segments, profiles, pool_budget, pool_saved, lookahead, inflight if cfg.pool else 0.0,
                   cfg.workspace_bytes, ceiling=ceiling, min_offload=cfg.min_offload_bytes)
    if est["peak_dynamic"] > budget:
        _over_budget(est, budget, cfg)
    rooms = _rooms(segments, _segment_needs(segments, profiles), est, ceiling)
    kept = _kept_saved(segments, profiles)
    speed = [_seg_speed_ws(s, profiles) for s in segments if s.recompute and s.strategy == "speed"]
    return Plan(segments, profiles, pool_budget, est, offload_saved=pool_saved and pool_budget < kept,
                speed_working_set=max(speed + [largest]), prefetch_rooms=rooms)


def make_layer_plan(profiles: list[UnitProfile], layer_profile, cfg: RuntimeConfig) -> Plan:
    """granularity="layer": the layer plan (layer_plan.py) under ``memory_budget_bytes``, as a Plan with no
    segments (its estimate the layer plan's; the pool offloads what the plan says, budget 0)."""
    from repro.papers.superneurons.layer_plan import forced_plan, plan_layers

    lookahead = cfg.prefetch_lookahead if cfg.pool else 0
    min_offload = cfg.min_offload_bytes
    if cfg.layer_actions == "auto":
        budget = math.inf if cfg.memory_budget_bytes is None else cfg.memory_budget_bytes
        layer_plan = plan_layers(layer_profile, budget, cfg.pcie_bytes_per_s, min_offload, lookahead,
                                 recompute=cfg.recompute != "off", offload=cfg.pool)
    else:
        layer_plan = forced_plan(layer_profile, cfg.layer_actions, lookahead, min_offload)
    est = dict(layer_plan.estimate)
    est.update(kept_saved=est["kept"], checkpoints=0.0, resident_checkpoints=0.0, inflight=0.0,
               working=est["peak_dynamic"] - est["kept"], workspace=0.0,
               loss=float(layer_profile.loss_bytes))
    if cfg.memory_budget_bytes is not None and est["peak_dynamic"] > cfg.memory_budget_bytes:
        _over_budget(est, cfg.memory_budget_bytes, cfg)
    largest = largest_need(profiles)
    return Plan([], profiles, 0.0, est, speed_working_set=float(largest), layers=layer_plan)
