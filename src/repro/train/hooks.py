"""The one place where the training arms change the shared trainer.

Subclass :class:`TrainHooks` and override only what an arm needs; the trainer calls:

  wrap_model(model)           once, before the optimiser is built (memory policies: offload,
                              recomputation). Must keep training ``model``'s own parameters.
  saved_tensors_hooks()       a context entered around every forward pass (activation
                              compression, offload): e.g. torch.autograd.graph.saved_tensors_hooks.
  mix_batch(x, y)             None, or (x_mixed, y_other, lam): the step trains on x_mixed with the
                              loss lam * CE(out, y) + (1 - lam) * CE(out, y_other) (mixup).
  loss_regularizer(model)     added to the loss each step if not None (group lasso).
  after_backward(model)       gradients are in ``p.grad`` (gradient-based importance scores).
  after_optimizer_step(model) after every optimiser step (re-apply pruning masks).
  on_epoch_end(model, epoch, row)  after each epoch's evaluation, before the checkpoint; may
                              change the model (phase changes, mask selection) and return extra
                              metrics for the epoch's row.
  state_dict() / load_state_dict(state)  the hooks' own state (masks, phase), checkpointed with
                              the model so that a resumed run continues exactly. Checkpoints
                              hold CPU tensors: load_state_dict gets them there.
  on_resume(model)            after load_state_dict, once the model is on its device, before the
                              first step: move loaded state next to the weights.
  step_key()                  a hashable naming what the per-step methods currently do (phase,
                              which tensors they touch); a CUDA-graph step is re-captured when
                              it changes (see below).

Fast modes: a CUDA graph replays the tensor operations recorded once during capture, so per-step
hooks run as Python only during warm-up and capture. torch.compile may drop or break on context
managers such as saved-tensor hooks. So hooks that override a per-step method make the trainer fall
back to eager execution (and say so) unless they declare ``graph_safe`` / ``compile_safe``: a
promise that every step performs the same tensor operations on the same tensors with no host sync
and no Python-side state that changes between steps, for as long as ``step_key()`` returns the same
value. Hooks with phases (dense, then masked) change the key in ``on_epoch_end``; the trainer then
warms up and captures the new step once, so every phase runs as its own CUDA graph. State that a
captured step reads (masks, penalty weights) is updated in place, or the key changes with it.
"""

from __future__ import annotations

import contextlib

import torch.nn as nn

PER_STEP_METHODS = ("wrap_model", "saved_tensors_hooks", "mix_batch", "loss_regularizer", "after_backward",
                    "after_optimizer_step")


class TrainHooks:
    graph_safe: bool = False
    compile_safe: bool = False

    def wrap_model(self, model: nn.Module) -> nn.Module:
        return model

    def saved_tensors_hooks(self):
        return contextlib.nullcontext()

    def mix_batch(self, x, y):
        return None

    def loss_regularizer(self, model: nn.Module):
        return None

    def after_backward(self, model: nn.Module) -> None:
        pass

    def after_optimizer_step(self, model: nn.Module) -> None:
        pass

    def on_epoch_end(self, model: nn.Module, epoch: int, row: dict) -> dict | None:
        return None

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass

    def on_resume(self, model: nn.Module) -> None:
        pass

    def step_key(self):
        return None

    def per_step_overrides(self) -> list[str]:
        """Names of the per-step methods this class overrides."""
        return [name for name in PER_STEP_METHODS if getattr(type(self), name) is not getattr(TrainHooks, name)]


def fast_mode_conflict(hooks: TrainHooks, compile: bool, cuda_graph: bool) -> str | None:
    """Why ``hooks`` cannot run under the requested fast mode, or None if they can."""
    overrides = hooks.per_step_overrides()
    if not overrides:
        return None
    name = type(hooks).__name__
    if cuda_graph and not hooks.graph_safe:
        return f"{name} overrides {', '.join(overrides)} and does not declare graph_safe"
    if compile and not hooks.compile_safe:
        return f"{name} overrides {', '.join(overrides)} and does not declare compile_safe"
    return None
