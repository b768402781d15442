"""The trainer shared by the four training arms (baseline, SuperNeurons, compression, ClickTrain).

Image classification with SGD (momentum, weight decay, fused on the device), a step-wise
learning-rate schedule (:mod:`repro.train.schedule`), CIFAR augmentation on the device
(:mod:`repro.train.augment`), optional bf16 autocast, channels-last, and a fast execution mode
(:mod:`repro.train.step`). Off by default, for airbench94-style recipes: a triangular schedule,
reflect padding and alternating flips, flip + translate test-time augmentation, a larger learning
rate for BatchNorm biases, parameters frozen after some epochs, and lookahead
(:mod:`repro.train.lookahead`). The data set lives on the GPU when it fits (CIFAR-10 is 180 MB), so
no loader stands between epochs and the GPU. After every epoch: evaluation, per-epoch metrics,
``hooks.on_epoch_end``, and a checkpoint from which a killed run resumes to the same result.

Arms change training only through :class:`repro.train.hooks.TrainHooks`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import resource
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd
import torch
import torch.nn as nn

from repro.data.arrays import Split
from repro.train.augment import DeviceAugment, channel_stats, epoch_plan
from repro.faults import kill_point
from repro.train.checkpoint import load_checkpoint, save_checkpoint, set_rng_state
from repro.train.hooks import TrainHooks, fast_mode_conflict
from repro.train.lookahead import Lookahead
from repro.train.schedule import lr_at
from repro.train.step import TrainStep, autocast

# Execution-mode settings: they change speed, not what is computed, so a run may resume in
# another mode (e.g. after a fast mode failed on a new machine).
MODE_FIELDS = ("compile", "cuda_graph", "eval_batch_size")


@dataclass
class TrainConfig:
    epochs: int = 40
    batch_size: int = 128
    lr: float = 0.1  # peak learning rate
    momentum: float = 0.9
    weight_decay: float = 5e-4
    nesterov: bool = False
    schedule: str = "cosine"  # cosine | onecycle | constant (see repro.train.schedule)
    warmup_epochs: float = 1.0
    label_smoothing: float = 0.0
    augment: bool = True  # random crop (pad 4) + horizontal flip
    eval_flip: bool = False  # test-time augmentation: average the logits of each image and its mirror
    precision: str = "fp32"  # fp32 | bf16 (autocast; weights and optimiser stay fp32)
    channels_last: bool = True
    compile: bool = False  # torch.compile the model
    cuda_graph: bool = False  # capture and replay the whole training step (CUDA only)
    eval_batch_size: int = 1000
    # Off by default (an existing run's result and checkpoint fingerprint are unchanged); airbench94's:
    crop_pad: int = 4  # random-crop padding (airbench: 2)
    pad_mode: str = "zeros"  # zeros | reflect
    flip: str = "random"  # random | alternate (see repro.train.augment)
    eval_translate: bool = False  # with eval_flip: also the 1-pixel translations (airbench's TTA level 2)
    lr_start: float = 0.0  # schedule "triangle": first lr, as a fraction of lr
    lr_end: float = 0.0  # schedule "triangle": last lr, as a fraction of lr
    bias_lr_scale: float = 1.0  # BatchNorm biases: lr times this, weight decay divided by it
    freeze: dict = field(default_factory=dict)  # parameter name -> epochs it trains; lr 0 after them
    lookahead_every: int = 0  # steps between lookahead updates; 0 = off
    lookahead_decay: float = 0.95 ** 5  # base of the lookahead decay schedule


# TrainConfig fields added after checkpoints were written: left out of the fingerprint at their
# defaults, so that those checkpoints still resume.
_LATER_FIELDS = ("crop_pad", "pad_mode", "flip", "eval_translate", "lr_start", "lr_end", "bias_lr_scale",
                 "freeze", "lookahead_every", "lookahead_decay")


def check_config(cfg: TrainConfig) -> None:
    """A clear error for settings the trainer cannot run."""
    if cfg.eval_translate and not cfg.eval_flip:
        raise ValueError("eval_translate needs eval_flip (airbench's TTA: mirror, then mirror + translate)")
    if cfg.bias_lr_scale <= 0:
        raise ValueError(f"bias_lr_scale must be > 0, got {cfg.bias_lr_scale}")
    if cfg.lookahead_every < 0:
        raise ValueError(f"lookahead_every must be >= 0 (0 = off), got {cfg.lookahead_every}")
    for name, epochs in cfg.freeze.items():
        if not isinstance(epochs, int) or epochs < 0:
            raise ValueError(f"freeze.{name} must be a number of epochs >= 0, got {epochs!r}")


def _param_groups(model: nn.Module, params: list, cfg: TrainConfig) -> list[dict]:
    """Optimiser groups of ``params`` (the wrapped model's, in order): the frozen-later parameters
    one group each, BatchNorm biases (with bias_lr_scale), the rest. Each group carries lr_scale
    and train_epochs (None: every epoch)."""
    named = dict(model.named_parameters())
    unknown = sorted(set(cfg.freeze) - set(named))
    if unknown:
        raise ValueError(f"freeze names unknown parameters {unknown}; the model has e.g. {sorted(named)[:6]}")
    frozen = {id(named[k]): (k, e) for k, e in cfg.freeze.items()}
    bn_biases = {id(m.bias) for m in model.modules()
                 if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.bias is not None}
    groups, rest, biases = [], [], []
    for p in params:
        if id(p) in frozen:
            groups.append(dict(params=[p], lr_scale=1.0, wd_scale=1.0, train_epochs=frozen[id(p)][1]))
        elif cfg.bias_lr_scale != 1.0 and id(p) in bn_biases:
            biases.append(p)
        else:
            rest.append(p)
    if biases:
        groups.append(dict(params=biases, lr_scale=cfg.bias_lr_scale, wd_scale=1 / cfg.bias_lr_scale,
                           train_epochs=None))
    if rest or not groups:
        groups.append(dict(params=rest, lr_scale=1.0, wd_scale=1.0, train_epochs=None))
    return groups


class TrainingDiverged(RuntimeError):
    """The training loss became NaN or infinite."""


@dataclass
class TrainResult:
    history: pd.DataFrame  # one row per epoch (see train())
    model: nn.Module
    mode: str  # execution mode actually used: eager, compile, cudagraph, compile+cudagraph
    notes: list[str] = field(default_factory=list)  # why the mode differs from the requested one
    seed: int = 0
    resumed_epochs: int = 0  # epochs taken from a checkpoint instead of trained in this call
    data_on_device: bool = False
    n_train: int = 0  # images in the training split given
    steps_per_epoch: int = 0
    # wall-clock seconds of this call, device-synchronised at both ends: placement, step capture,
    # every epoch's training pass, evaluation, hooks and checkpoints (epochs resumed from a
    # checkpoint are not in it: their rows' train_s / eval_s are)
    wall_s: float = 0.0

    @property
    def final_top1(self) -> float:
        return float(self.history.test_top1.iloc[-1])

    @property
    def best_top1(self) -> float:
        return float(self.history.test_top1.max())


def _fingerprint(cfg: TrainConfig, seed: int, model: nn.Module, hooks: TrainHooks, n_train: int, n_test: int) -> str:
    defaults = TrainConfig()
    settings = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in MODE_FIELDS
                and not (k in _LATER_FIELDS and v == getattr(defaults, k))}
    arch = [(k, list(v.shape)) for k, v in model.state_dict().items()]
    blob = json.dumps({"cfg": settings, "seed": seed, "arch": arch, "hooks": type(hooks).__qualname__,
                       "n": [n_train, n_test]}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def _place(split: Split, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """Images and labels on the device if they take under a quarter of its free memory, else on the CPU."""
    images, labels = torch.from_numpy(split.images), torch.from_numpy(split.labels)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        if images.nbytes + labels.nbytes < free // 4:
            return images.to(device), labels.to(device), True
        return images, labels, False
    return images, labels, device.type == "cpu"


def _peak_memory(device: torch.device) -> int:
    """Peak bytes allocated by PyTorch on a GPU; the process's peak resident set on the CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def make_sgd(params, cfg: TrainConfig, device) -> tuple[torch.optim.SGD, torch.Tensor]:
    """Fused SGD whose learning rate is a device tensor (returned: set it with ``lr.fill_``), so
    that a CUDA-graph-captured step follows the schedule (see repro.train.step)."""
    lr = torch.tensor(cfg.lr, device=device)
    optimizer = torch.optim.SGD(params, lr=lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay,
                                nesterov=cfg.nesterov, fused=True)
    return optimizer, lr


def make_grouped_sgd(groups: list[dict], cfg: TrainConfig, device) -> tuple[torch.optim.SGD, list[torch.Tensor]]:
    """Fused SGD over :func:`_param_groups`' groups, each with its own device-tensor lr (returned,
    in the optimiser's group order) and weight decay ``cfg.weight_decay * wd_scale``."""
    lrs = [torch.tensor(cfg.lr * g["lr_scale"], device=device) for g in groups]
    optimizer = torch.optim.SGD([dict(params=g["params"], lr=lr, weight_decay=cfg.weight_decay * g["wd_scale"])
                                 for g, lr in zip(groups, lrs)],
                                lr=lrs[-1], momentum=cfg.momentum, nesterov=cfg.nesterov, fused=True)
    return optimizer, lrs


@torch.no_grad()
def evaluate(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, augment: DeviceAugment,
             batch_size: int = 1000, precision: str = "fp32", flip: bool = False,
             translate: bool = False) -> tuple[float, float]:
    """(mean cross-entropy, top-1 in percent) of ``model`` on uint8 NHWC ``images``; with ``flip``,
    of the mean logits of each image and its horizontal mirror; with ``translate`` too (airbench's
    TTA level 2), of 0.5 x that + 0.5 x the mean of the same for the image moved one pixel up-left
    and one pixel down-right (reflect padding): six views."""
    if translate and not flip:
        raise ValueError("translate needs flip (airbench's TTA level 2 is mirror + translate)")

    def mirrored(x):
        return (model(x).float() + model(x.flip(3)).float()) / 2
    was_training = model.training
    model.eval()
    loss_sum = torch.zeros((), device=augment.device)
    correct = torch.zeros((), device=augment.device, dtype=torch.int64)
    for start in range(0, len(labels), batch_size):
        x = augment.normalize(images[start:start + batch_size])
        y = labels[start:start + batch_size].to(augment.device, non_blocking=True)
        with autocast(augment.device.type, precision):
            if translate:
                padded = nn.functional.pad(x, (1, 1, 1, 1), mode="reflect")
                h, w = x.shape[2], x.shape[3]
                shifted = (mirrored(padded[:, :, :h, :w]) + mirrored(padded[:, :, 2:, 2:])) / 2
                out = 0.5 * mirrored(x) + 0.5 * shifted
            elif flip:
                out = mirrored(x)
            else:
                out = model(x)
        loss_sum += nn.functional.cross_entropy(out.float(), y, reduction="sum")
        correct += (out.argmax(1) == y).sum()
    model.train(was_training)
    return loss_sum.item() / len(labels), 100.0 * correct.item() / len(labels)


def train(model: nn.Module, train_split: Split, test_split: Split, cfg: TrainConfig, *, device: str = "cpu",
          seed: int = 0, hooks: TrainHooks | None = None, checkpoint: Path | None = None,
          log: logging.Logger | None = None, progress: Callable | None = None) -> TrainResult:
    """Train ``model`` (initialised by the caller) on ``train_split``, evaluating on ``test_split``
    after every epoch.

    seed: shuffling, augmentation and in-model randomness (the caller seeds initialisation).
    checkpoint: file to resume from (if present, and written by the same configuration) and to
    save to after every epoch. progress: ``ctx.progress``-like wrapper for the epoch loop.
    History columns: epoch (1-based), lr (at the epoch's last step), train_loss, train_top1,
    test_loss, test_top1 (top-1 in percent), train_s (training pass only), eval_s, images_per_s,
    peak_mem_bytes (see _peak_memory), mode, plus whatever ``hooks.on_epoch_end`` returns.
    """
    check_config(cfg)
    hooks = hooks or TrainHooks()
    log = log or logging.getLogger("repro")
    dev = torch.device(device)
    _sync(dev)
    started = time.perf_counter()
    notes: list[str] = []
    compile_, cuda_graph = cfg.compile, cfg.cuda_graph
    if cuda_graph and dev.type != "cuda":
        notes.append("cuda_graph needs a CUDA device; ran without it")
        cuda_graph = False
    conflict = fast_mode_conflict(hooks, compile_, cuda_graph)
    if conflict:
        notes.append(f"{conflict}: ran eager")
        compile_ = cuda_graph = False

    memory_format = torch.channels_last if cfg.channels_last else torch.contiguous_format
    model.to(dev, memory_format=memory_format)
    fingerprint = _fingerprint(cfg, seed, model, hooks, len(train_split), len(test_split))
    wrapped = hooks.wrap_model(model)
    groups = _param_groups(model, list(wrapped.parameters()), cfg)
    optimizer, lrs = make_grouped_sgd(groups, cfg, dev)

    torch.manual_seed(seed)  # for any randomness inside the model (dropout)
    history: list[dict] = []
    start_epoch = 0
    state = load_checkpoint(checkpoint, fingerprint) if checkpoint else None
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        for group, lr in zip(optimizer.param_groups, lrs):
            group["lr"] = lr
        hooks.load_state_dict(state["hooks"])
        hooks.on_resume(model)
        history, start_epoch = list(state["history"]), state["epoch"]
        set_rng_state(state["rng"])
        log.info("resuming from %s after epoch %d", checkpoint, start_epoch)

    train_x, train_y, on_device = _place(train_split, dev)
    test_x, test_y, _ = _place(test_split, dev)
    mean, std = channel_stats(train_split.images)
    augment = DeviceAugment(mean, std, train_split.images.shape[1], train_split.images.shape[2], dev,
                            channels_last=cfg.channels_last, pad=cfg.crop_pad, pad_mode=cfg.pad_mode)
    step = TrainStep(wrapped, optimizer, hooks, device=dev, precision=cfg.precision,
                     label_smoothing=cfg.label_smoothing, compile=compile_, cuda_graph=cuda_graph, log=log)
    steps = len(train_split) // cfg.batch_size
    total_steps = steps * cfg.epochs
    warmup_steps = round(cfg.warmup_epochs * steps)
    lookahead = Lookahead(model, cfg.lookahead_every, cfg.lookahead_decay, total_steps) if cfg.lookahead_every else None
    if lookahead is not None and state is not None:
        lookahead.load_state_dict(state["extra"]["lookahead"])
    prev_benchmark = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = dev.type == "cuda"  # pick the fastest conv algorithms once
    epochs = range(start_epoch, cfg.epochs)
    try:
        for epoch in progress(epochs, total=len(epochs), desc="epochs") if progress else epochs:
            plan = epoch_plan(len(train_split), cfg.batch_size, seed, epoch, cfg.augment, pad=cfg.crop_pad,
                              flip=cfg.flip).to(train_x.device)
            wrapped.train()
            step.begin_epoch()
            if dev.type == "cuda":
                torch.cuda.reset_peak_memory_stats(dev)
            _sync(dev)
            t0 = time.perf_counter()
            for i in range(steps):
                lr_value = lr_at(epoch * steps + i, total_steps, cfg.lr, warmup_steps, cfg.schedule,
                                 cfg.lr_start, cfg.lr_end)
                for group, lr in zip(groups, lrs):
                    trains = group["train_epochs"] is None or epoch < group["train_epochs"]
                    lr.fill_(lr_value * group["lr_scale"] if trains else 0.0)
                x = augment(train_x, plan[i])
                y = train_y[plan[i, :, 0]].to(dev, non_blocking=True)
                step(x, y)
                if lookahead is not None:
                    lookahead.after_step(epoch * steps + i + 1)
            _sync(dev)
            train_s = time.perf_counter() - t0
            seen = steps * cfg.batch_size
            train_loss = step.loss_sum.item() / seen
            if not math.isfinite(train_loss):
                raise TrainingDiverged(f"training loss became {train_loss} in epoch {epoch + 1} (lr {lr_value:.4g}); "
                                       "lower the learning rate or train in fp32")
            t1 = time.perf_counter()
            test_loss, test_top1 = evaluate(wrapped, test_x, test_y, augment, cfg.eval_batch_size, cfg.precision,
                                           cfg.eval_flip, cfg.eval_translate)
            row = dict(epoch=epoch + 1, lr=lr_value, train_loss=train_loss,
                       train_top1=100.0 * step.correct.item() / seen, test_loss=test_loss, test_top1=test_top1,
                       train_s=train_s, eval_s=time.perf_counter() - t1, images_per_s=seen / train_s,
                       peak_mem_bytes=_peak_memory(dev), mode=step.mode)
            row.update(hooks.on_epoch_end(model, epoch + 1, row) or {})
            history.append(row)
            if checkpoint:
                save_checkpoint(checkpoint, epoch=epoch + 1, model=model, optimizer=optimizer,
                                hooks_state=hooks.state_dict(), history=history, fingerprint=fingerprint,
                                extra={"lookahead": lookahead.state_dict()} if lookahead is not None else None)
                kill_point("train.checkpointed")
            log.info("epoch %d/%d loss %.4f test top-1 %.2f%% train %.2fs (%.0f img/s) peak %.2f GiB [%s]",
                     epoch + 1, cfg.epochs, train_loss, test_top1, train_s, row["images_per_s"],
                     row["peak_mem_bytes"] / 2**30, step.mode)
    finally:
        torch.backends.cudnn.benchmark = prev_benchmark
    _sync(dev)
    return TrainResult(history=pd.DataFrame(history), model=model, mode=step.mode, notes=notes + step.notes,
                       seed=seed, resumed_epochs=start_epoch, data_on_device=on_device,
                       n_train=len(train_split), steps_per_epoch=steps, wall_s=time.perf_counter() - started)
