"""The accuracy side: CIFAR-10 VGG-16 trained on the shared trainer with its conv and linear weights
pruned to one pattern (tw, sbw, unstructured, nm = 2:4, tvw) at one sparsity, and the comparison of
the arms with the dense baseline.

prune_arm   dense for warmup_frac of the epochs, then gradual pruning: at the end of each of the next
            prune_frac epochs new masks at a sparsity rising on the cubic schedule of Zhu & Gupta
            (2017) to the target (the TW artifact also prunes in rising stages between fine-tunes),
            from the weights' magnitudes in GEMM form (the TW artifact's VGG setting); then masked
            fine-tuning (repro.train.masks.ScheduledMaskHooks: masks re-applied after every step).
            Pruned: every conv but the stem (27 weights per filter; 2:4 along its 3 channels cannot
            be) and the classifier, whose output columns TW never drops (they are the logits).
            Budgets are network-wide (one cut over all pruned layers), so every pattern lands on the
            same sparsity; 2:4 is 50 % in each layer.
compare     top-1 of every arm beside the dense baseline's (baseline/vgg16: the same schedule).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd
import torch
import torch.nn as nn

from repro import records
from repro.experiment import Context, Result, experiment
from repro.models import build_model
from repro.papers.sparse_gemm import patterns
from repro.train.arm import TrainParams, finish_arm, run_arm, splits
from repro.train.masks import ScheduledMaskHooks


@dataclass
class PruneArmParams(TrainParams):
    cuda_graph: bool = True  # each mask change is a new capture; the baseline's mode otherwise
    pattern: str = "tw"  # one of patterns.PATTERNS but block
    sparsity: float = 0.75  # of the pruned layers' weights (nm: 0.5 whatever is set)
    tile: int = 128  # TW / TVW tile width (the paper's 128)
    vector: int = 64  # Shfl-BW group width (assumed)
    warmup_frac: float = 0.25  # dense share of the epochs
    prune_frac: float = 0.25  # share of the epochs that end with a pruning step


def pruned_layers(model: nn.Module) -> tuple[list[str], str]:
    """Names of the pruned modules (every conv but the first, and every linear) and the classifier's."""
    convs = [n for n, m in model.named_modules() if isinstance(m, nn.Conv2d)]
    linears = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    return convs[1:] + linears, linears[-1]


def ramp(target: float, steps: int, start: float = 0.0) -> list[float]:
    """Sparsity after each of ``steps`` pruning steps: start + (target - start)(1 - (1 - i/steps)^3)."""
    return [start + (target - start) * (1 - (1 - (i + 1) / steps) ** 3) for i in range(steps)]


def schedule(p: PruneArmParams) -> list[tuple[int, float]]:
    """(epoch, sparsity) of each pruning step; 2:4 prunes once, TVW's ramp starts at its 50 %."""
    warmup = max(1, round(p.epochs * p.warmup_frac))
    steps = 1 if p.pattern == "nm" else max(1, round(p.epochs * p.prune_frac))
    if warmup + steps > p.epochs:
        raise ValueError(f"epochs={p.epochs} leave no room for {warmup} dense and {steps} pruning epochs "
                         f"(warmup_frac={p.warmup_frac}, prune_frac={p.prune_frac})")
    target = 0.5 if p.pattern == "nm" else p.sparsity
    sparsities = ramp(target, steps, 0.5 if p.pattern == "tvw" else 0.0)
    if p.pattern == "tvw":
        sparsities[0] = max(sparsities[0], 0.5)
    return [(warmup + i, s) for i, s in enumerate(sparsities)]


def validate(p: PruneArmParams) -> None:
    allowed = [x for x in patterns.PATTERNS if x != "block"]
    if p.pattern not in allowed:
        raise ValueError(f"pattern must be one of {allowed}, got {p.pattern!r}")
    low = 0.5 if p.pattern == "tvw" else 0.0
    if not low <= p.sparsity < 1:
        raise ValueError(f"sparsity={p.sparsity} is outside [{low}, 1) for pattern {p.pattern}")
    schedule(p)


class LayoutHooks(ScheduledMaskHooks):
    """ScheduledMaskHooks that keep each layer's latest Layout (groups included) for the final check,
    checkpointed with the masks."""

    def __init__(self, prune_epochs, make_layouts):
        self.layouts: dict[str, patterns.Layout] = {}

        def make_masks(model, epoch):
            self.layouts = make_layouts(model, epoch)
            modules = dict(model.named_modules())
            return {n: patterns.from_gemm(l.mask, modules[n].weight.shape).to(modules[n].weight.device)
                    for n, l in self.layouts.items()}

        super().__init__(prune_epochs, make_masks)

    def state_dict(self) -> dict:
        layouts = {n: dict(pattern=l.pattern, mask=l.mask.cpu(), params=l.params,
                           groups=[(g.cols.cpu(), g.rows.cpu()) for g in l.groups] if l.groups is not None else None)
                   for n, l in self.layouts.items()}
        return {**super().state_dict(), "layouts": layouts}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.layouts = {n: patterns.Layout(d["pattern"], d["mask"],
                                           [patterns.Group(c, r) for c, r in d["groups"]] if d["groups"] is not None
                                           else None, d["params"])
                        for n, d in state.get("layouts", {}).items()}


@experiment(params=PruneArmParams, needs_gpu=False)
def prune_arm(p: PruneArmParams, ctx: Context) -> Result:
    validate(p)
    train_split, test_split = splits(p, ctx)
    torch.manual_seed(ctx.seed)
    model = build_model(p.model, num_classes=len(train_split.classes), **p.model_kw)
    names, classifier = pruned_layers(model)
    steps = dict(schedule(p))

    def make_layouts(m: nn.Module, epoch: int) -> dict[str, patterns.Layout]:
        modules = dict(m.named_modules())
        scores = {n: patterns.gemm_view(modules[n].weight.detach()).abs().float() for n in names}
        return patterns.prune(p.pattern, scores, steps[epoch], tile=p.tile, vector=p.vector,
                              full_columns=(classifier,))

    hooks = LayoutHooks(list(steps), make_layouts)
    result = run_arm(p, ctx, model, train_split, test_split, hooks=hooks)
    metrics, tags, artifacts = finish_arm(p, ctx, result, train_split,
                                          "training pass only, epochs 2.. (epoch 1 pays warm-up/capture)")
    modules = dict(result.model.named_modules())
    kept = sum(int(hooks.masks[n].count_nonzero()) for n in names)
    total = sum(modules[n].weight.numel() for n in names)
    outside = sum(int(((modules[n].weight != 0) & (hooks.masks[n] == 0)).sum()) for n in names)
    problems = {n: patterns.check(l) for n, l in hooks.layouts.items()}
    for n, prob in problems.items():
        if prob:
            ctx.log.error("%s: the %s mask breaks its pattern: %s", n, p.pattern, prob)
    metrics.update(sparsity=1 - kept / total, target_sparsity=0.5 if p.pattern == "nm" else p.sparsity,
                   pattern_violations=sum(len(v) for v in problems.values()), weights_outside_mask=outside,
                   pruned_weights_share=total / sum(x.numel() for x in result.model.parameters()))
    tags.update(pattern=p.pattern, pruned_layers=f"every conv but the stem, and the classifier ({classifier}, "
                                                 "its output columns kept)",
                importance="weight magnitude in GEMM form (K = kh*kw*in_channels)",
                schedule="; ".join(f"epoch {e}: {s:.3f}" for e, s in steps.items()))
    return Result(metrics=metrics, tables={"epochs": result.history}, artifacts=artifacts, tags=tags)


@dataclass
class CompareParams:
    arms: list = field(default_factory=list)  # input names of the arms' records; [] = every input but dense


@experiment(params=CompareParams, needs_gpu=False)
def compare(p: CompareParams, ctx: Context) -> Result:
    if "dense" not in ctx.inputs:
        raise records.RecordError("inputs.dense is missing: pass the dense baseline's record (baseline/vgg16)")
    names = p.arms or [n for n in ctx.inputs if n != "dense"]
    missing = [n for n in names if n not in ctx.inputs]
    if missing:
        raise records.RecordError(f"inputs {missing} are missing: pass each arm's record.json")
    dense = records.read(ctx.inputs["dense"])
    rows = [dict(arm="dense", pattern="dense", sparsity=0.0, final_top1=dense["metrics"]["final_top1"],
                 best_top1=dense["metrics"].get("best_top1"), epochs=dense["metrics"].get("epochs"))]
    metrics = {"dense_top1": dense["metrics"]["final_top1"]}
    for name in names:
        rec = records.read(ctx.inputs[name])
        m, pattern = rec["metrics"], rec["tags"]["pattern"]
        rows.append(dict(arm=name, pattern=pattern, sparsity=m["sparsity"], final_top1=m["final_top1"],
                         best_top1=m.get("best_top1"), epochs=m.get("epochs")))
        lab = f"{round(m['target_sparsity'] * 100, 1):g}".replace(".", "p")
        metrics[f"{pattern}_top1_{lab}"] = m["final_top1"]
        metrics[f"{pattern}_top1_vs_dense_{lab}"] = m["final_top1"] - metrics["dense_top1"]
        metrics[f"{pattern}_sparsity_{lab}"] = m["sparsity"]
    return Result(metrics=metrics, tables={"arms": pd.DataFrame(rows)},
                  tags={"dense": "baseline/vgg16: the same 40-epoch schedule, unpruned"})
