"""Training with pruning masks: per-layer 0/1 masks multiplied into the weights after every optimiser
step, so that momentum and weight decay cannot revive a pruned weight.

MaskHooks           the mechanism: masks keyed by module name (shaped like its weight), resolved on the
                    model each call, checkpointed with the hooks' state, moved next to the weights on
                    resume.
FixedMaskHooks      masks fixed from the start (retraining a pruned model).
ScheduledMaskHooks  dense until the first of ``prune_epochs``; at the end of each of them the masks of
                    ``make_masks(model, epoch)`` replace the current ones (one-shot or gradual pruning).

Every hook is graph_safe: its per-step work is one foreach multiply of the same tensors; ``step_key()``
names whether masks are active and where they live, so new masks mean a new CUDA-graph capture.
"""

from __future__ import annotations

import time
from typing import Callable, Iterable

import torch
import torch.nn as nn

from repro.train.hooks import TrainHooks


def weights_of(model: nn.Module, names: Iterable[str]) -> list[torch.Tensor]:
    """The ``weight`` of each named module of ``model``."""
    found = dict(model.named_modules())
    return [found[n].weight for n in names]


def cpu_state(tensors: dict) -> dict:
    """Detached CPU copies (checkpoints hold CPU tensors)."""
    return {k: v.detach().cpu() for k, v in tensors.items()}


def addresses(*groups) -> tuple:
    """Where the tensors of dicts/lists ``groups`` live: part of a step key, so replacing a tensor
    that a captured step reads forces a new capture."""
    return tuple(t.data_ptr() for g in groups for t in (g.values() if isinstance(g, dict) else g))


def like_weight(mask: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``mask`` on the weight's device, dtype and memory format (channels-last weights): foreach
    kernels then take their fast path, one launch for all layers."""
    return torch.empty_like(weight).copy_(mask)


class MaskHooks(TrainHooks):
    """Per-module 0/1 masks (name -> tensor shaped like the weight), multiplied into the weights after
    every optimiser step once ``active``."""

    graph_safe = True

    def __init__(self):
        self.masks: dict[str, torch.Tensor] = {}
        self.active = False

    def step_key(self):
        return (self.active, addresses(self.masks) if self.active else ())

    def set_masks(self, model: nn.Module, masks: dict[str, torch.Tensor]) -> None:
        """Install ``masks`` and zero the weights they prune now."""
        ws = weights_of(model, masks)
        self.masks = {n: like_weight(m, w) for (n, m), w in zip(masks.items(), ws)}
        self.active = True
        self.apply_masks(model)

    @torch.no_grad()
    def apply_masks(self, model: nn.Module) -> None:
        torch._foreach_mul_(weights_of(model, self.masks), list(self.masks.values()))

    def after_optimizer_step(self, model: nn.Module) -> None:
        if self.active:
            self.apply_masks(model)

    def state_dict(self) -> dict:
        return {"masks": cpu_state(self.masks), "active": self.active}

    def load_state_dict(self, state: dict) -> None:
        self.masks, self.active = dict(state["masks"]), state["active"]

    def on_resume(self, model: nn.Module) -> None:
        self._to_device(model)

    def _to_device(self, model: nn.Module) -> None:
        """Move the masks next to the weights (device, dtype, layout) where they are not: after
        load_state_dict (they come from the CPU), or masks made before the model moved."""
        for n, w in zip(self.masks, weights_of(model, self.masks)):
            if self.masks[n].device != w.device or self.masks[n].stride() != w.stride():
                self.masks[n] = like_weight(self.masks[n], w)


class FixedMaskHooks(MaskHooks):
    """Masked training with masks fixed from the start; every epoch's row says ``phase``."""

    def __init__(self, model: nn.Module, masks: dict[str, torch.Tensor], phase: str):
        super().__init__()
        self.phase = phase
        self.set_masks(model, masks)

    def on_epoch_end(self, model: nn.Module, epoch: int, row: dict) -> dict:
        return dict(phase=self.phase, hook_s=0.0)


class ScheduledMaskHooks(MaskHooks):
    """Dense up to the first of ``prune_epochs`` (1-based); at the end of each of them the masks of
    ``make_masks(model, epoch)`` replace the current ones. Epoch rows say their phase: dense (up to
    the first pruning), pruning (up to the last), masked (after it)."""

    def __init__(self, prune_epochs: Iterable[int], make_masks: Callable[[nn.Module, int], dict]):
        super().__init__()
        self.prune_epochs = sorted({int(e) for e in prune_epochs})
        if not self.prune_epochs or self.prune_epochs[0] < 1:
            raise ValueError(f"prune_epochs must hold epochs >= 1, got {list(prune_epochs)}")
        self.make_masks, self.completed = make_masks, 0

    def phase(self, epoch: int) -> str:
        if epoch <= self.prune_epochs[0]:
            return "dense"
        return "pruning" if epoch <= self.prune_epochs[-1] else "masked"

    def on_epoch_end(self, model: nn.Module, epoch: int, row: dict) -> dict:
        t0 = time.perf_counter()
        self.completed = epoch
        if epoch in self.prune_epochs:
            self.set_masks(model, self.make_masks(model, epoch))
        return dict(phase=self.phase(epoch), hook_s=time.perf_counter() - t0)

    def state_dict(self) -> dict:
        return {**super().state_dict(), "completed": self.completed}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.completed = state["completed"]
