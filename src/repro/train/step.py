"""One training step (forward, loss, backward, optimiser step, per-step hooks) in one of three
execution modes, chosen for speed:

eager       plain PyTorch: one kernel launch per op. Small CIFAR networks on an H200 are bound by
            launch overhead this way (ResNet-32: 3.0 s/epoch), not by the GPU.
compile     the model through torch.compile (inductor): fused element-wise ops, fewer launches.
cudagraph   the whole step captured once as a CUDA graph and replayed: one launch per step. The
            first ``warmup_steps`` steps run eagerly on a side stream (cuDNN autotuning, lazy
            optimiser state, compilation), as the CUDA-graph documentation requires.
Modes combine ("compile+cudagraph"). Hooks with phases change ``hooks.step_key()`` between epochs;
``begin_epoch()`` then drops the graph, and the step is warmed up and captured again (``captures``
counts them). If compilation or capture fails, the step falls back to the next simpler mode and
records why in ``notes``; the same batches and learning rates are used in every mode.

Loss and correct-prediction counts accumulate on the device, so no step waits for the host.
The learning rate is a device tensor in the optimiser (fused SGD reads it on the device), so a
captured step follows the schedule without re-capture.
"""

from __future__ import annotations

import contextlib
import logging

import torch
import torch.nn as nn

from repro.train.hooks import TrainHooks

PRECISIONS = {"fp32": None, "bf16": torch.bfloat16}


def autocast(device_type: str, precision: str):
    """bf16 autocast, or nothing for fp32. cache_enabled=False: autocast's cache of cast weights
    must not outlive a CUDA-graph capture (and saves nothing when each weight is used once)."""
    dtype = PRECISIONS[precision]
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type, dtype=dtype, cache_enabled=False)


class TrainStep:
    """Callable ``step(x, y)``; for callers with their own batches, e.g.::

        optimizer, lr = make_sgd(model.parameters(), cfg, "cuda")
        step = TrainStep(model, optimizer, TrainHooks(), device="cuda", cuda_graph=True)
        for x, y in SyntheticImageNet(batch_size=32, steps=100, device="cuda"):
            step(x, y)

    With ``cuda_graph`` the optimiser's lr must be a device tensor (as make_sgd makes it).
    """

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, hooks: TrainHooks, *, device,
                 precision: str = "fp32", label_smoothing: float = 0.0, compile: bool = False,
                 cuda_graph: bool = False, warmup_steps: int = 3, log: logging.Logger | None = None):
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {sorted(PRECISIONS)}, got {precision!r}")
        self.model, self.optimizer, self.hooks = model, optimizer, hooks
        self.device = torch.device(device)
        self.precision = precision
        self.loss_fn = nn.CrossEntropyLoss(label_smoothing=label_smoothing)
        self.compile = compile
        self.cuda_graph = cuda_graph and self.device.type == "cuda"
        self.forward = torch.compile(model) if compile else model
        self.warmup_steps = warmup_steps
        self.log = log or logging.getLogger("repro")
        self.notes: list[str] = []
        self.loss_sum = torch.zeros((), device=self.device)
        self.correct = torch.zeros((), device=self.device, dtype=torch.int64)
        self.calls = 0  # since the last (re)start of warm-up
        self.captures = 0
        self.graph_key = None
        self.graph: torch.cuda.CUDAGraph | None = None
        self.static_x = self.static_y = None

    @property
    def mode(self) -> str:
        parts = [name for name, on in (("compile", self.compile), ("cudagraph", self.cuda_graph)) if on]
        return "+".join(parts) or "eager"

    def begin_epoch(self) -> None:
        """Zero the loss and accuracy meters; if the hooks' step key changed (a new phase, set in
        ``on_epoch_end``), warm up and capture anew. Once per epoch, off the per-step path."""
        self.loss_sum.zero_()
        self.correct.zero_()
        key = self.hooks.step_key()
        if self.cuda_graph and key != self.graph_key:
            self.graph_key, self.graph, self.calls = key, None, 0

    def _fall_back(self, what: str, exc: BaseException) -> None:
        note = f"{what} failed ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); fell back"
        self.log.warning(note)
        self.notes.append(note)

    def _body(self, x: torch.Tensor, y: torch.Tensor) -> None:
        with self.hooks.saved_tensors_hooks(), autocast(self.device.type, self.precision):
            mixed = self.hooks.mix_batch(x, y)
            if mixed is None:
                out = self.forward(x)
                loss = self.loss_fn(out, y)
            else:  # mixup: one forward pass over the mixed batch, the loss against both label sets
                x_mixed, y_other, lam = mixed
                out = self.forward(x_mixed)
                loss = lam * self.loss_fn(out, y) + (1 - lam) * self.loss_fn(out, y_other)
            reg = self.hooks.loss_regularizer(self.model)
            total = loss if reg is None else loss + reg
        total.backward()
        self.hooks.after_backward(self.model)
        self.optimizer.step()
        self.hooks.after_optimizer_step(self.model)
        self.loss_sum.add_(loss.detach().float() * y.shape[0])
        self.correct.add_((out.detach().argmax(1) == y).sum())

    def _eager(self, x, y) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        if not (self.compile and self.calls == 0):
            self._body(x, y)
            return
        try:  # the first compiled call compiles; a machine without a working compiler fails here
            self._body(x, y)
        except Exception as exc:  # noqa: BLE001 - any compiler failure: run eagerly instead
            self._fall_back("torch.compile", exc)
            self.compile, self.forward = False, self.model
            self.optimizer.zero_grad(set_to_none=True)
            self._body(x, y)

    def _capture(self, x, y) -> bool:
        self.static_x, self.static_y = x.clone(), y.clone()
        self.optimizer.zero_grad(set_to_none=True)  # grads are then allocated inside the graph's pool
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                self._body(self.static_x, self.static_y)
        except Exception as exc:  # noqa: BLE001 - an op that cannot be captured: run without graphs
            self._fall_back("CUDA graph capture", exc)
            self.cuda_graph = False
            torch.cuda.synchronize()
            return False
        self.graph = graph
        self.captures += 1
        return True

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """One step on batch (x, y); every call must use the same shapes when cuda_graph is on."""
        if not self.cuda_graph:
            self._eager(x, y)
        elif self.calls < self.warmup_steps:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self._eager(x, y)
            torch.cuda.current_stream().wait_stream(side)
        else:
            if self.graph is None and not self._capture(x, y):
                self._eager(x, y)
            else:
                self.static_x.copy_(x)
                self.static_y.copy_(y)
                self.graph.replay()
        self.calls += 1
