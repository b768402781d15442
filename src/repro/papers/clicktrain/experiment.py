"""ClickTrain (Zhang et al., ICS 2021) and the arms it is compared with, on the shared trainer.

clicktrain  dense warm-up -> pattern library + per-kernel pattern/connectivity selection from
            importance sum (w * dL/dw)^2 over the last warm-up epoch -> group lasso towards the
            masks -> hard masks after every step; one training run of ``epochs``.
admm        pruning after training: dense ``epochs``, then ADMM pattern pruning (``admm_epochs``),
            then hard prune and masked retraining (``retrain_epochs``); same library size and ratios.
prunetrain  pruning during training, PruneTrain (Lym et al., SC'19): group lasso over every conv's
            output and input channels, its coefficient set from PruneTrain's penalty ratio on the
            first batch, channel groups masked every ``prune_every`` epochs once their largest
            |weight| falls under a threshold (the paper config; older runs: output channels only,
            a fixed coefficient and a norm threshold).
sparse24    dense warm-up, then 2:4 masks along input channels (torch.ao.pruning), masked fine-tuning.
compare     derived metrics across the arms' records (inputs clicktrain, admm, prunetrain, sparse24,
            dense = the baseline ResNet-32 record).

Every arm reports final_top1, compression (dense conv params / nonzero conv params), flops_ratio
(dense / pruned conv MACs), e2e_s (training passes of every phase + pruning work between epochs;
per-epoch evaluation, which every arm does alike for the curves, is reported apart as eval_s),
schedule_s (the measured wall-clock of the whole schedule: every phase's trainer call, from its
start to its end, device-synchronised, as the trainer times it (``TrainResult.wall_s``: placement,
step capture, training passes, evaluation, hooks, checkpoints), plus the pruning work between
phases; per trainer call ``schedule_<call>_s``, ADMM's dense / admm / retrain; what ct.e2e compares),
epoch_s_mean (mean training-pass seconds of the pruning phases), dense_epoch_s (of its dense
phase, first epoch left out: it pays cuDNN autotuning) and writes pruned.pt (see load_pruned).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import torch
import torch.nn as nn

from repro import records
from repro.atomic import atomic_write
from repro.train.arm import TrainParams, splits, train_config
from repro.papers.clicktrain.masks import (ADMMHooks, ChannelLassoHooks, ClickTrainHooks, conv_costs, nm_violations,
                                    sparse24_mask)
from repro.papers.clicktrain.patterns import (artifact_block_ratios, layer_ratios, pattern_convs, pattern_violations,
                                              project, select_library)
from repro.experiment import Context, Result, experiment
from repro.models import build_model, get_entry
from repro.models.resnet import BasicBlock
from repro.train import TrainHooks, evaluate, train
from repro.train.masks import FixedMaskHooks, ScheduledMaskHooks
from repro.train.augment import DeviceAugment, channel_stats, first_batch


@dataclass
class PatternParams(TrainParams):
    cuda_graph: bool = True  # every phase captured as its own CUDA graph (the baseline's mode)
    patterns: int = 4  # library size (paper: 4 for ResNet-32, 12 for VGG-16)
    kernel_prune_ratio: float = 0.75  # share of each layer's 3x3 kernels dropped whole
    layer_ratios: dict = field(default_factory=dict)  # conv module name -> its own ratio
    # one ratio per residual block, in the model's order, for both of its 3x3 convs, or "artifact":
    # the ClickTrain artifact's 55 / 65 / 75% by stage (patterns.artifact_block_ratios); [] = kernel_prune_ratio
    block_ratios: Any = field(default_factory=list)
    ratio_scale: float = 1.0  # every layer's ratio times this (the compression sweep moves it)
    exclude_first: bool = True  # leave the stem conv (3 input channels) dense


@dataclass
class ClickTrainParams(PatternParams):
    # Defaults: ClickTrain's artifact (hipdac-lab/ICS21-ClickTrain), ResNet-32 on CIFAR-10; the
    # comparison is docs/papers/clicktrain.md, "Against the public artifact".
    # dense warm-up share: patterns chosen at epoch 61 of 190 (configs/cifar10_resnet32_v1.yaml:24, 64)
    warmup_frac: float = 0.32
    lasso_frac: float = 0.42  # group-lasso share, hard masks at epoch 141 of 190 (ibid. :25); the rest is masked
    lasso: float = 2.5e-4  # group-lasso coefficient (configs/cifar10_resnet32_v1.yaml:26)
    lasso_groups: str = "artifact"  # "artifact": pattern + dropped-kernel groups (cifar.py:496-504, 537-545); "mask"
    # mixup in the masked phase, Beta(alpha, alpha) (cifar.py:392-396, 548-558; yaml :15); 0: off
    mixup_alpha: float = 0.3


@dataclass
class ADMMParams(PatternParams):
    admm_epochs: int = 20
    retrain_epochs: int = 20
    admm_lr: float = 0.01  # peak lr of the ADMM and retraining phases (cosine each), from a trained model
    retrain_lr: float = 0.01
    rho: float = 0.01  # ADMM penalty, multiplied by rho_growth after every ADMM epoch
    rho_growth: float = 1.2


@dataclass
class PruneTrainParams(TrainParams):
    cuda_graph: bool = True
    channel_lasso: float = 5e-4  # coefficient of the sum of channel group norms (when lasso_ratio is null)
    lasso_ratio: float | None = None  # PruneTrain's penalty ratio: the coefficient is set on the first
    # training batch so that lasso / (lasso + cross-entropy) = this (their ResNet-32 setting: 0.2)
    lasso_in_channels: bool = False  # input-channel groups too (PruneTrain's regulariser), not only output
    channel_threshold: float = 0.01  # a channel group under this is masked (see threshold_type)
    threshold_type: str = "norm"  # norm: the group's L2 norm; max: its largest |weight| (PruneTrain's)
    prune_every_frac: float = 0.125  # channel masking interval, as a share of epochs


@dataclass
class Sparse24Params(TrainParams):
    cuda_graph: bool = True
    warmup_frac: float = 0.25  # dense warm-up share; then 2:4 masks and masked fine-tuning


@dataclass
class CompareParams:
    arms: list = field(default_factory=lambda: ["clicktrain", "admm", "prunetrain", "sparse24"])


def phase_epochs(total: int, *fracs: float) -> list[int]:
    """Epochs of each leading phase (each >= 1 when its share is > 0) and of the rest (>= 1)."""
    counts = [max(1, round(total * f)) if f > 0 else 0 for f in fracs]
    rest = total - sum(counts)
    if rest < 1:
        raise ValueError(f"{total} epochs leave no epoch after phases of {counts} (shares {fracs})")
    return counts + [rest]


def _model(p: TrainParams, num_classes: int, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return build_model(p.model, num_classes=num_classes, **p.model_kw)


class _Phases:
    """Runs train() phase after phase on one model, collecting one epochs table (global epoch,
    phase, phase_epoch) and the pruning time spent outside the trainer."""

    def __init__(self, p: TrainParams, ctx: Context, model: nn.Module, train_split, test_split):
        self.p, self.ctx, self.model = p, ctx, model
        self.train_split, self.test_split = train_split, test_split
        self.histories: list[pd.DataFrame] = []
        self.modes: dict[str, str] = {}
        self.notes: list[str] = []
        self.prune_s = 0.0
        self.wall_s: dict[str, float] = {}  # phase -> its trainer call's measured wall-clock
        self.checkpoints: list[Path] = []
        self.resumed: dict[str, int] = {}  # phase -> epochs a checkpoint brought back

    def run(self, name: str, hooks: TrainHooks, **overrides) -> None:
        cfg = dataclasses.replace(train_config(self.p), **overrides)
        checkpoint = self.ctx.out_dir / f"checkpoint_{name}.pt" if self.p.checkpoint else None
        if checkpoint:
            self.checkpoints.append(checkpoint)
        result = train(self.model, self.train_split, self.test_split, cfg, device=self.ctx.device,
                       seed=self.ctx.seed + len(self.histories), hooks=hooks, checkpoint=checkpoint,
                       log=self.ctx.log, progress=self.ctx.progress)
        history = result.history.copy()
        if "phase" not in history:
            history["phase"] = name
        history["hook_s"] = history.get("hook_s", pd.Series(0.0, index=history.index)).fillna(0.0)
        history.insert(0, "phase_epoch", history.pop("epoch"))
        offset = sum(len(h) for h in self.histories)
        history.insert(0, "epoch", history.phase_epoch + offset)
        self.histories.append(history)
        self.modes[name] = result.mode
        self.notes += result.notes
        # epochs a checkpoint brought back ran in an earlier call: their measured passes count instead
        earlier = result.history.iloc[:result.resumed_epochs]
        self.wall_s[name] = result.wall_s + float(earlier.get("train_s", pd.Series(dtype=float)).sum()
                                                  + earlier.get("eval_s", pd.Series(dtype=float)).sum())
        if result.resumed_epochs:
            self.resumed[name] = result.resumed_epochs

    def timed(self, fn, *args):
        """Pruning work between phases, counted in e2e_s."""
        t0 = time.perf_counter()
        out = fn(*args)
        self.prune_s += time.perf_counter() - t0
        return out

    def finish(self, masks: dict[str, torch.Tensor], library: torch.Tensor | None, arm: str) -> Result:
        epochs = pd.concat(self.histories, ignore_index=True)
        for checkpoint in self.checkpoints:
            checkpoint.unlink(missing_ok=True)  # finished: a rerun must train again
        costs = conv_costs(self.model, get_entry(self.p.model).input_size)
        pruning = epochs[epochs.phase != "dense"]
        dense = epochs[epochs.phase == "dense"]
        dense = dense.iloc[1:] if len(dense) > 1 else dense  # epoch 1 pays cuDNN autotuning
        metrics = dict(
            final_top1=float(epochs.test_top1.iloc[-1]),
            best_top1=float(epochs.test_top1.max()),
            compression=costs.params.sum() / costs.nonzero.sum(),
            conv_params=costs.params.sum(),
            conv_params_nonzero=costs.nonzero.sum(),
            flops_dense=costs.macs_dense.sum(),
            flops_pruned=costs.macs.sum(),
            flops_ratio=costs.macs_dense.sum() / costs.macs.sum(),
            e2e_s=epochs.train_s.sum() + epochs.hook_s.sum() + self.prune_s,
            schedule_s=sum(self.wall_s.values()) + self.prune_s,
            eval_s=epochs.eval_s.sum(),
            prune_s=epochs.hook_s.sum() + self.prune_s,
            epoch_s_mean=pruning.train_s.mean(),
            epochs=len(epochs),
        )
        if len(dense):
            metrics["dense_epoch_s"] = dense.train_s.mean()
        for phase, rows in epochs.groupby("phase", sort=False):
            metrics[f"epochs_{phase}"] = len(rows)
            metrics[f"time_{phase}_s"] = rows.train_s.sum() + rows.hook_s.sum()
            metrics[f"epoch_s_{phase}"] = rows.train_s.mean()
        metrics.update({f"schedule_{phase}_s": seconds for phase, seconds in self.wall_s.items()})
        path = self.ctx.out_dir / "pruned.pt"
        mean, std = channel_stats(self.train_split.images)
        payload = dict(arm=arm, model=self.p.model, model_kw=dict(self.p.model_kw),
                       num_classes=len(self.train_split.classes), input_size=get_entry(self.p.model).input_size,
                       state_dict={k: v.detach().cpu() for k, v in self.model.state_dict().items()},
                       masks={k: v.detach().cpu().bool() for k, v in masks.items()},  # 1 byte, not 4
                       library=None if library is None else library.cpu(), mean=mean, std=std,
                       final_top1=metrics["final_top1"])
        atomic_write(path, lambda fh: torch.save(payload, fh))
        phases_mode = ", ".join(f"{k}: {v}" for k, v in self.modes.items())
        tags = dict(model=self.p.model, mode=phases_mode, mode_notes="; ".join(dict.fromkeys(self.notes)) or "none",
                    data_source=self.train_split.source, seed=self.ctx.seed,
                    resumed="; ".join(f"{k} after epoch {v} from its checkpoint" for k, v in self.resumed.items())
                            + " (those epochs' times and GPU neighbours are the interrupted run's)"
                    if self.resumed else "none",
                    e2e_s="training passes of all phases + pruning work (selection, projection, masking); "
                          "per-epoch evaluation excluded (eval_s)",
                    schedule_s="measured wall-clock of the whole schedule: each phase's trainer call from start "
                               "to end (device-synchronised; placement, capture, training, evaluation, hooks, "
                               "checkpoints) + pruning work between phases"
                               + ("; resumed epochs count by their recorded train_s + eval_s" if self.resumed else ""),
                    flops="conv multiply-accumulates: nonzero weights x output pixels")
        return Result(metrics=metrics, tables={"epochs": epochs, "layers": costs},
                      artifacts={"pruned": path}, tags=tags)


def block_layer_ratios(model: nn.Module, convs, block_ratios: list | str) -> dict[str, float]:
    """Per pattern conv the ratio of the residual block holding it (``block_ratios``: one per
    BasicBlock of ``model``, in order, or "artifact": the artifact's by stage, a stage starting at
    each block with a projection or zero-pad shortcut)."""
    modules = [(n, m) for n, m in model.named_modules() if isinstance(m, BasicBlock)]
    blocks = [n for n, _ in modules]
    if block_ratios == "artifact":
        starts = [i for i, (_, m) in enumerate(modules) if i == 0 or not isinstance(m.shortcut, nn.Identity)]
        block_ratios = artifact_block_ratios([b - a for a, b in zip(starts, starts[1:] + [len(modules)])])
    elif isinstance(block_ratios, str):
        raise ValueError(f"block_ratios must be a list of ratios or 'artifact', got {block_ratios!r}")
    if len(blocks) != len(block_ratios):
        raise ValueError(f"block_ratios has {len(block_ratios)} ratios, the model {len(blocks)} residual blocks")
    return {conv: float(r) for block, r in zip(blocks, block_ratios) for conv in convs if conv.startswith(block + ".")}


def _pattern_setup(p: PatternParams, model: nn.Module):
    convs = pattern_convs(model, p.exclude_first)
    overrides = {**(block_layer_ratios(model, convs, p.block_ratios) if p.block_ratios else {}), **p.layer_ratios}
    ratios = layer_ratios(convs, p.kernel_prune_ratio, overrides)
    return convs, layer_ratios(convs, 0.0, {n: r * p.ratio_scale for n, r in ratios.items()})


def _pattern_checks(model: nn.Module, masks, library, ratios) -> dict:
    weights = {n: m.weight for n, m in pattern_convs(model, exclude_first=False).items() if n in ratios}
    v = pattern_violations(weights, masks, library, ratios)
    return dict(pattern_violations=v["total"], **{f"violations_{k}": n for k, n in v.items() if k != "total"},
                patterns_in_library=len(library))


def _pattern_tags(p: PatternParams, model: nn.Module) -> dict:
    first = next(n for n, m in model.named_modules() if isinstance(m, nn.Conv2d))
    return dict(first_conv=f"{first} excluded (dense)" if p.exclude_first else f"{first} pattern-pruned",
                pruned_layers="3x3 convs only; 1x1 convs and the classifier untouched")


@experiment(params=ClickTrainParams, needs_gpu=False)
def clicktrain(p: ClickTrainParams, ctx: Context) -> Result:
    train_split, test_split = splits(p, ctx)
    model = _model(p, len(train_split.classes), ctx.seed)
    _, ratios = _pattern_setup(p, model)
    warmup, lasso_epochs, _ = phase_epochs(p.epochs, p.warmup_frac, p.lasso_frac)
    hooks = ClickTrainHooks(ratios, p.patterns, warmup, lasso_epochs, p.lasso, lasso_groups=p.lasso_groups,
                            mixup_alpha=p.mixup_alpha)
    phases = _Phases(p, ctx, model, train_split, test_split)
    phases.run("clicktrain", hooks)
    result = phases.finish(hooks.masks, hooks.library, "clicktrain")
    result.metrics.update(_pattern_checks(model, hooks.masks, hooks.library, ratios))
    result.tags.update(_pattern_tags(p, model), importance="sum over the last warm-up epoch of (w * dL/dw)^2",
                       phases=f"dense {warmup}, lasso {lasso_epochs}, masked {p.epochs - warmup - lasso_epochs} epochs",
                       lasso_groups=p.lasso_groups,
                       mixup=f"alpha {p.mixup_alpha} in the masked phase" if p.mixup_alpha > 0 else "off")
    return result


@experiment(params=ADMMParams, needs_gpu=False)
def admm(p: ADMMParams, ctx: Context) -> Result:
    train_split, test_split = splits(p, ctx)
    model = _model(p, len(train_split.classes), ctx.seed)
    _, ratios = _pattern_setup(p, model)
    phases = _Phases(p, ctx, model, train_split, test_split)
    phases.run("dense", TrainHooks())
    weights = {n: m.weight for n, m in pattern_convs(model, exclude_first=False).items() if n in ratios}
    # magnitude is the importance of the classic after-training method (PatDNN's ADMM)
    library = phases.timed(select_library, [w.detach().square() for w in weights.values()], p.patterns)
    admm_hooks = phases.timed(ADMMHooks, model, ratios, library, p.rho, p.rho_growth)
    phases.run("admm", admm_hooks, epochs=p.admm_epochs, lr=p.admm_lr, warmup_epochs=0)
    masks = phases.timed(lambda: {n: project(w, library, ratios[n])[1] for n, w in weights.items()})
    phases.run("retrain", FixedMaskHooks(model, masks, "retrain"), epochs=p.retrain_epochs, lr=p.retrain_lr,
               warmup_epochs=0)
    result = phases.finish(masks, library, "admm")
    result.metrics.update(_pattern_checks(model, masks, library, ratios))
    result.tags.update(_pattern_tags(p, model), importance="weight magnitude (projection of W + U)")
    return result


def lasso_for_ratio(model: nn.Module, hooks: ChannelLassoHooks, split, p: PruneTrainParams, device: str) -> float:
    """PruneTrain's coefficient: lam such that lam * GL / (lam * GL + CE) = p.lasso_ratio for the
    initial model on the first ``batch_size`` training images (normalised, no augmentation), fixed
    once at the start of training as their artifact does. CE is the training loss of that first
    step: BatchNorm in training mode (batch statistics), its running statistics put back after, so
    every arm starts alike. (With BatchNorm in eval mode the initial running statistics leave
    ResNet-32's logits unnormalised: on the H200, CE 67 instead of 2.8, a coefficient 24x too large,
    and PruneTrain pruned ResNet-32 to 376x at 46.6% top-1; docs/gpu-notes.md.)"""
    if not 0 < p.lasso_ratio < 1:
        raise ValueError(f"lasso_ratio must be in (0, 1), got {p.lasso_ratio}")
    x, y = first_batch(split, p.batch_size, device)
    model.to(device)
    was_training = model.training
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    saved = [{k: v.clone() for k, v in m.state_dict().items()} for m in norms]
    model.train()
    with torch.no_grad():
        ce = float(nn.functional.cross_entropy(model(x), y))
        gl = float(hooks.group_lasso(model))
    for m, state in zip(norms, saved):
        m.load_state_dict(state)
    model.train(was_training)
    return p.lasso_ratio / (1 - p.lasso_ratio) * ce / gl


@experiment(params=PruneTrainParams, needs_gpu=False)
def prunetrain(p: PruneTrainParams, ctx: Context) -> Result:
    train_split, test_split = splits(p, ctx)
    model = _model(p, len(train_split.classes), ctx.seed)
    names = [n for n, m in model.named_modules() if isinstance(m, nn.Conv2d)]
    interval = max(1, round(p.epochs * p.prune_every_frac))
    hooks = ChannelLassoHooks(model, names, p.channel_lasso, p.channel_threshold, interval,
                              in_channels=p.lasso_in_channels, threshold_type=p.threshold_type)
    if p.lasso_ratio is not None:
        hooks.lam = lasso_for_ratio(model, hooks, train_split, p, ctx.device)
        ctx.log.info("prunetrain: group-lasso coefficient %.3g (penalty ratio %.2f on the first batch)",
                     hooks.lam, p.lasso_ratio)
    phases = _Phases(p, ctx, model, train_split, test_split)
    phases.run("lasso", hooks)
    result = phases.finish(hooks.masks, None, "prunetrain")
    kept = {n: int(m.flatten(1).any(1).sum()) for n, m in hooks.masks.items()}
    total = sum(len(m) for m in hooks.masks.values())
    modules = dict(model.named_modules())
    outside = sum(int(((modules[n].weight != 0) & (hooks.masks[n] == 0)).sum()) for n in names)
    result.metrics.update(channel_sparsity=1 - sum(kept.values()) / total, mask_violations=outside)
    groups = "output and input channels" if p.lasso_in_channels else "output channels"
    result.metrics.update(lasso_coefficient=hooks.lam)
    result.tags.update(pruned_layers=f"{groups} of every conv", prune_every=f"{interval} epochs",
                       threshold=f"{p.channel_threshold:g} on each group's {'largest |weight|' if p.threshold_type == 'max' else 'L2 norm'}",
                       compression=f"nonzero conv weights after {groups} masking (channels fed only by "
                                   "masked channels not credited beyond that)")
    return result


@experiment(params=Sparse24Params, needs_gpu=False)
def sparse24(p: Sparse24Params, ctx: Context) -> Result:
    train_split, test_split = splits(p, ctx)
    model = _model(p, len(train_split.classes), ctx.seed)
    names = [n for n, m in model.named_modules() if isinstance(m, nn.Conv2d) and m.in_channels % 4 == 0]
    warmup, _ = phase_epochs(p.epochs, p.warmup_frac)

    def make_masks(m: nn.Module, epoch: int):
        modules = dict(m.named_modules())
        return {n: sparse24_mask(modules[n].weight) for n in names}

    hooks = ScheduledMaskHooks([warmup], make_masks)
    phases = _Phases(p, ctx, model, train_split, test_split)
    phases.run("sparse24", hooks)
    result = phases.finish(hooks.masks, None, "sparse24")
    modules = dict(model.named_modules())
    result.metrics.update(nm_violations=sum(nm_violations(modules[n].weight) for n in names))
    result.tags.update(pruned_layers="convs with a multiple of 4 input channels (the stem has 3: dense)",
                       mask="2:4 along input channels, torch.ao.pruning WeightNormSparsifier on the "
                            "(O*kh*kw, I) view (it refuses 4-D conv weights)")
    return result


@dataclass
class PrunedModel:
    model: nn.Module
    masks: dict[str, torch.Tensor]
    library: torch.Tensor | None
    meta: dict

    def evaluate(self, split, device: str = "cpu", batch_size: int = 1000) -> float:
        """Top-1 (percent) on a prepared split."""
        self.model.to(device)
        augment = DeviceAugment(self.meta["mean"], self.meta["std"], split.images.shape[1], split.images.shape[2],
                                device, channels_last=False)
        return evaluate(self.model, torch.from_numpy(split.images), torch.from_numpy(split.labels), augment,
                        batch_size)[1]


def load_pruned(path: Path) -> PrunedModel:
    """Rebuild an arm's pruned model from its pruned.pt; checks that no weight lives outside its mask."""
    payload = torch.load(path, map_location="cpu", weights_only=True)
    model = build_model(payload["model"], num_classes=payload["num_classes"], **payload["model_kw"])
    model.load_state_dict(payload["state_dict"])
    modules = dict(model.named_modules())
    for name, mask in payload["masks"].items():
        outside = int(((modules[name].weight != 0) & (mask == 0)).sum())
        if outside:
            raise ValueError(f"{path}: {outside} nonzero weights of {name} lie outside its mask")
    model.eval()
    meta = {k: v for k, v in payload.items() if k not in ("state_dict", "masks", "library")}
    masks = {name: mask.to(modules[name].weight.dtype) for name, mask in payload["masks"].items()}  # as the hooks'
    return PrunedModel(model, masks, payload["library"], meta)


def _ratio(a: dict, b: dict, key: str) -> float:
    """a[key] / b[key]; NaN where either record lacks the key (ran before it was recorded)."""
    return a[key] / b[key] if key in a and key in b else float("nan")


def _arm(ctx: Context, name: str) -> dict:
    if name not in ctx.inputs:
        raise records.RecordError(f"inputs.{name} is missing: pass the {name} run record (record.json)")
    return records.read(ctx.inputs[name])["metrics"]


@experiment(params=CompareParams, needs_gpu=False)
def compare(p: CompareParams, ctx: Context) -> Result:
    arms = {name: _arm(ctx, name) for name in p.arms}
    dense = _arm(ctx, "dense")
    ct, ad, pt = arms["clicktrain"], arms["admm"], arms["prunetrain"]
    metrics = dict(
        schedule_speedup=_ratio(ad, ct, "schedule_s"),
        schedule_vs_prunetrain=_ratio(ct, pt, "schedule_s"),
        epoch_ratio=_ratio(ad, ct, "epochs"),
        e2e_speedup=ad["e2e_s"] / ct["e2e_s"],
        epoch_overhead=ct["epoch_s_mean"] / ct["dense_epoch_s"],
        epoch_overhead_vs_baseline=ct["epoch_s_mean"] / dense["epoch_s_mean"],
        top1_vs_admm=ct["final_top1"] - ad["final_top1"],
        top1_vs_prunetrain=ct["final_top1"] - pt["final_top1"],
        top1_vs_dense=ct["final_top1"] - dense["final_top1"],
        compression_vs_prunetrain=ct["compression"] / pt["compression"],
        compression=ct["compression"],
        flops_ratio=ct["flops_ratio"],
        e2e_vs_prunetrain=ct["e2e_s"] / pt["e2e_s"],
    )
    rows = [dict(arm="dense", final_top1=dense["final_top1"], compression=1.0, flops_ratio=1.0,
                 e2e_s=dense.get("total_train_s", float("nan")), epoch_s_mean=dense["epoch_s_mean"])]
    phase_rows = []
    for name, m in arms.items():
        rows.append(dict(arm=name, **{k: m.get(k, float("nan")) for k in
                                      ("final_top1", "compression", "flops_ratio", "e2e_s", "schedule_s",
                                       "epoch_s_mean", "dense_epoch_s")}))
        phase_rows += [dict(arm=name, phase=k[len("time_"):-len("_s")], seconds=v, epochs=m.get(f"epochs_{k[5:-2]}"))
                       for k, v in m.items() if k.startswith("time_") and k.endswith("_s")]
    tags = dict(epoch_overhead="ClickTrain pruning-phase epoch / its own dense warm-up epoch (same mode); "
                               "epoch_overhead_vs_baseline divides by the baseline record's epoch (its mode)",
                schedule_speedup="ADMM's measured whole-schedule wall-clock (schedule_s) / ClickTrain's; NaN: an "
                                 "arm record ran before schedule_s was recorded (rerun it)",
                schedule_vs_prunetrain="ClickTrain's schedule_s / PruneTrain's; NaN as schedule_speedup",
                epoch_ratio="diagnostic, configured: ADMM's epochs / ClickTrain's (what e2e_speedup is near at "
                            "equal epoch cost)")
    return Result(metrics=metrics, tables={"arms": pd.DataFrame(rows), "phases": pd.DataFrame(phase_rows)}, tags=tags)
