"""Joint training of every exit of an :class:`~repro.split.exits.ExitNet` (BranchyNet: the sum of the
exits' cross-entropy losses, equal weights), on the shared CIFAR-10 pipeline: the trainer's
augmentation (random crop, flip), fused SGD with a device-tensor learning rate and its schedule."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from repro.data.arrays import Split
from repro.split.exits import ExitNet
from repro.train.augment import DeviceAugment, channel_stats, epoch_plan
from repro.train.schedule import lr_at
from repro.train.trainer import TrainConfig, make_sgd


@dataclass
class DataParams:
    """The CIFAR-10 subset a nets experiment trains and tests on (repro.train.arm.splits)."""

    n_train: int = 0  # a class-balanced subset of the train split; 0 = all of it
    n_test: int = 0


@dataclass
class ExitTraining:
    epochs: int = 30  # assumed: a CIFAR-10 schedule long enough for the exits to separate in accuracy
    batch_size: int = 128
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 5e-4
    warmup_epochs: float = 1.0


def train_exits(net: ExitNet, train: Split, p: ExitTraining, device: str, seed: int,
                progress=lambda it, **kw: it) -> pd.DataFrame:
    """Train ``net`` in place; returns the mean joint loss of each epoch (:func:`exit_accuracy`
    measures the exits)."""
    torch.manual_seed(seed)
    dev = torch.device(device)
    net.to(dev).train()
    mean, std = channel_stats(train.images)
    aug = DeviceAugment(mean, std, 32, 32, dev, channels_last=False)
    images = torch.from_numpy(train.images).to(dev)
    labels = torch.from_numpy(train.labels).to(dev)
    cfg = TrainConfig(epochs=p.epochs, batch_size=p.batch_size, lr=p.lr, momentum=p.momentum,
                      weight_decay=p.weight_decay)
    optimizer, lr = make_sgd(net.parameters(), cfg, dev)
    steps = len(train) // p.batch_size
    total, warmup = p.epochs * steps, int(p.warmup_epochs * steps)
    rows, step = [], 0
    for epoch in progress(range(p.epochs), desc=f"{net.name} exits"):
        plan = epoch_plan(len(train), p.batch_size, seed, epoch)
        loss_sum = torch.zeros((), device=dev)
        for k in range(steps):
            lr.fill_(lr_at(step, total, p.lr, warmup))
            x, y = aug(images, plan[k]), labels[plan[k][:, 0].to(dev)]
            loss = sum(F.cross_entropy(out, y) for out in net(x))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            loss_sum += loss.detach()
            step += 1
        rows.append({"epoch": epoch + 1, "loss": float(loss_sum) / steps})
    net.eval()
    return pd.DataFrame(rows)


@torch.no_grad()
def exit_accuracy(net: ExitNet, train: Split, test: Split, device: str, batch: int = 1000) -> np.ndarray:
    """Top-1 of every exit on ``test`` (normalised with the train split's statistics)."""
    dev = torch.device(device)
    net.to(dev).eval()
    mean, std = channel_stats(train.images)
    aug = DeviceAugment(mean, std, 32, 32, dev, channels_last=False)
    correct = np.zeros(len(net.heads))
    for i in range(0, len(test), batch):
        x = aug.normalize(torch.from_numpy(test.images[i:i + batch]))
        y = torch.from_numpy(test.labels[i:i + batch]).to(dev)
        for e, out in enumerate(net(x)):
            correct[e] += int((out.argmax(1) == y).sum())
    return correct / len(test)
