"""Liveness analysis: which tensors a training step keeps, how large they are, and the working set
of every layer; the plan of :mod:`repro.papers.superneurons.runtime` is made from this profile.

Units. An ``nn.Sequential`` (nested Sequentials are flattened) has one *unit* per non-Sequential
child (a layer, or a block such as a residual block, which is then treated as one layer); a bare
ModuleList/ModuleDict child (no forward of its own, not callable in sequence) is refused with
:class:`UnsupportedModel`. Any other model is cut into units from its ``torch.fx`` graph
(:mod:`repro.papers.superneurons.units`). The profile refuses units that return no tensor or update a
buffer other than batch-norm's statistics.

Largest single-layer working set. For unit i with input bytes ``in_i``, output bytes ``out_i``,
bytes of the tensors autograd saves for its backward ``saved_i`` (unique storages, parameters
excluded) and parameter bytes ``param_i``::

    WS_i = saved_i + out_i + in_i + param_i

i.e. its backward working set: the saved tensors, the gradient of its output (out_i), the gradient
of its input (in_i) and its weight gradient (param_i). It bounds the forward working set as well
(input + output + what is saved). The network's largest single-layer working set is max_i WS_i
(the sn.peak claim's yardstick: tensors only).

Transient bytes. On the GPU a unit's backward allocates more than WS_i: cuDNN's convolution
workspace and, inside a block, the gradients of its intermediate activations. The profile measures
it: each distinct unit's backward runs once (``torch.autograd.grad``, so no ``.grad`` is touched)
and ``transient_bytes`` = its allocator peak above what was alive after forward, minus the gradients
WS_i already counts. The plan adds it to every working set (:attr:`UnitProfile.need`). On the
H200 the runtime's plan missed about 2 GB at 420-630 bottleneck blocks without it, and
training ran out of memory under the cap; on the CPU nothing is measured (0). Likewise
``forward_bytes``: the allocator peak of the unit's forward above what was alive before it (what it
saves, its output, and temporaries such as a block's inner activations that nothing saves), which a
recomputed segment's forward reaches while backward holds its output gradient. Measuring resets the
device's peak-memory counter, when the runtime profiles (its first training step).

Shared activations. The activation between two units is one storage: when unit i-1 saves its output
(e.g. an in-place ReLU saves its result) and unit i saves its input (a convolution does), both
profiles count it. ``shared_in_bytes`` is that overlap (also through units that pass their input on
in place or as a view, like Flatten), so that a run of units keeps sum(saved) - sum(shared) bytes
(:func:`saved_bytes_between`). Counted twice, a 64-block bottleneck ResNet (batch 32) seemed to keep
12.0 GB instead of 9.1 GB (on the H200 plain training peaked at 9.99 GB, about 8.9 GB of it dynamic
next to 1.07 GB of parameters, gradients and momentum), and the runtime recomputed segments of a
network that fits.

Profiling runs each unit once on the real input shape (one unit alive at a time, so a network that
cannot train still profiles); identical units (same structure and input shape, e.g. the repeated
blocks of a deep ResNet) are profiled once. Batch-norm running statistics and the RNG are left
exactly as they were.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import asdict, dataclass

import pandas as pd
import torch
import torch.nn as nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.dropout import _DropoutNd

EXPENSIVE = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Linear, nn.ConvTranspose2d)


class UnsupportedModel(TypeError):
    """The model is not built in a way the runtime can segment."""


def flatten_units(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """(qualified name, module) of every unit of a Sequential model, nested Sequentials flattened."""
    if not isinstance(model, nn.Sequential):
        raise UnsupportedModel(
            f"the SuperNeurons runtime segments nn.Sequential models (nested Sequentials and blocks are fine); "
            f"got {type(model).__name__}. Wrap your layers in nn.Sequential, one entry per layer or block.")
    units: list[tuple[str, nn.Module]] = []

    def walk(prefix: str, seq: nn.Sequential):
        for name, child in seq.named_children():
            full = f"{prefix}.{name}" if prefix else name
            if isinstance(child, nn.Sequential):
                walk(full, child)
            elif isinstance(child, (nn.ModuleList, nn.ModuleDict)) and type(child).forward is nn.Module.forward:
                raise UnsupportedModel(f"{full} is a {type(child).__name__}, which is not callable in sequence; "
                                       "put it inside a block module with its own forward()")
            else:
                units.append((full, child))

    walk("", model)
    if not units:
        raise UnsupportedModel("the model has no layers")
    return units


def is_expensive(module: nn.Module) -> bool:
    """Conv / linear layers, and blocks containing one (their outputs are checkpoints); the rest
    (BN, activations, pooling, dropout, reshapes) is cheap to recompute. A traced unit
    (:class:`repro.papers.superneurons.units.GraphUnit`) says so itself (matmuls count too)."""
    if getattr(module, "sn_expensive", False):
        return True
    return any(isinstance(m, EXPENSIVE) for m in module.modules())


def is_stochastic(module: nn.Module) -> bool:
    if getattr(module, "sn_stochastic", False):
        return True
    return any(isinstance(m, (_DropoutNd, nn.RReLU)) for m in module.modules())


def mutates_input(module: nn.Module) -> bool:
    """True for in-place layers (e.g. ReLU(inplace=True)) that overwrite the tensor they are given, and
    traced units with an in-place op on their input or a view of it."""
    return bool(getattr(module, "inplace", False) or getattr(module, "sn_mutates_input", False))


def tensor_bytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def param_bytes(module: nn.Module) -> int:
    return sum(tensor_bytes(p) for p in module.parameters() if p.requires_grad)


@contextlib.contextmanager
def frozen_batchnorm_stats(modules):
    """Batch-norm layers run in training mode (batch statistics) but leave their running statistics
    and batch counters exactly as they were: for profiling and for recomputation in backward."""
    saved = []
    for root in modules:
        for m in root.modules():
            if isinstance(m, _BatchNorm) and m.training and m.track_running_stats:
                saved.append((m, m.momentum, m.num_batches_tracked.clone()))
                m.momentum = 0.0  # running = 1 * running + 0 * batch: bit-exact unchanged
    try:
        yield
    finally:
        for m, momentum, count in saved:
            m.momentum = momentum
            m.num_batches_tracked.copy_(count)


@dataclass
class UnitProfile:
    index: int
    name: str
    kind: str
    expensive: bool
    in_bytes: int
    out_bytes: int
    saved_bytes: int
    param_bytes: int
    forward_s: float
    shared_in_bytes: int = 0  # of saved_bytes, the input storage an earlier unit saves too
    in_saved_bytes: int = 0  # of saved_bytes, the input storage (0: the unit does not save its input)
    transient_bytes: int = 0  # measured backward temporaries beyond the working set (GPU; module docstring)
    forward_bytes: int = 0  # measured forward peak above what was alive before it (GPU; 0: not measured)
    # every non-parameter tensor autograd packs, in order: (its bytes, its storage's bytes, the storage's
    # index among the unit's storages); what the tensor pool receives (pool_split)
    packed: tuple = ()
    # the last unit only: the peak the loss's forward and backward allocate above what forward keeps,
    # the model's output (the logits) included (profile_loss); 0: no loss counted
    loss_bytes: int = 0

    @property
    def working_set(self) -> int:
        return self.saved_bytes + self.out_bytes + self.in_bytes + self.param_bytes

    @property
    def need(self) -> int:
        """What the unit's backward allocates at its peak: the working set and its transients."""
        return self.working_set + self.transient_bytes

    @property
    def forward_need(self) -> int:
        """What the unit's forward (with autograd recording) allocates at its peak: measured, else what
        it saves besides its input, and its output."""
        return max(self.forward_bytes, self.saved_bytes - self.in_saved_bytes + self.out_bytes)

    def pool_split(self, min_offload_bytes: int) -> tuple[int, list[int]]:
        """How the runtime's saved-tensor hooks split this unit's saved tensors when they go through the
        pool: (bytes that stay on the device, the storages of tensors under ``min_offload_bytes``; the
        bytes of each tensor put into the pool). A storage packed twice is put twice, and comes back
        as two copies."""
        small = {k: storage for nbytes, storage, k in self.packed if nbytes < min_offload_bytes}
        return sum(small.values()), [nbytes for nbytes, _, _ in self.packed if nbytes >= min_offload_bytes]

    def pool_need(self, min_offload_bytes: int) -> int:
        """The backward need with every poolable saved tensor offloaded: what stays, and one copy of
        each tensor the pool gives back, in place of the saved bytes."""
        resident, offloaded = self.pool_split(min_offload_bytes)
        return self.need - self.saved_bytes + resident + sum(offloaded)


class _SavedCounter:
    """saved_tensors_hooks that sum the bytes of the unique non-parameter storages autograd saves."""

    def __init__(self, param_storages: set[int]):
        self.param_storages = param_storages
        self.storages: dict[int, int] = {}
        self.packed: list[tuple[int, int, int]] = []  # (tensor bytes, storage bytes, storage index)
        self._index: dict[int, int] = {}

    def pack(self, t: torch.Tensor):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in self.param_storages:
            self.storages[ptr] = max(self.storages.get(ptr, 0), t.untyped_storage().nbytes())
            index = self._index.setdefault(ptr, len(self._index))
            self.packed.append((tensor_bytes(t), t.untyped_storage().nbytes(), index))
        return t

    @property
    def total(self) -> int:
        return sum(self.storages.values())


def _signature(module: nn.Module, x: torch.Tensor) -> tuple:
    # a traced unit's code says what it computes (its repr lists only its submodules)
    return (repr(module), getattr(module, "code", None), tuple(x.shape), x.dtype, module.training,
            torch.is_autocast_enabled(x.device.type))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _backward_transient(module: nn.Module, leaf: torch.Tensor, out: torch.Tensor, modelled: int) -> int:
    """CUDA: allocator peak of the unit's backward above what is alive after its forward (the output
    included), minus the ``modelled`` gradient bytes (output, input and weight gradients)."""
    wrt = ([leaf] if leaf.requires_grad else []) + [p for p in module.parameters() if p.requires_grad]
    if not (out.requires_grad and wrt):
        return 0
    device = out.device
    torch.cuda.synchronize(device)
    base = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    grads = torch.autograd.grad(out, wrt, torch.ones_like(out), allow_unused=True)
    del grads
    torch.cuda.synchronize(device)
    # The output is in ``base`` already: subtracting it again where no saved tensor holds it (as this
    # once did) dropped up to one output's worth of cuDNN workspace from every conv layer that does not
    # save its output (VGG-16's conv1_2 at batch 32: 392 MiB of about 786).
    return max(0, torch.cuda.max_memory_allocated(device) - base - modelled)


def _buffer_versions(module: nn.Module) -> list:
    """(name, buffer, version) of the buffers a unit may update other than batch-norm's statistics."""
    return [(f"{mname}.{bname}" if mname else bname, b, b._version)
            for mname, mod in module.named_modules() if not isinstance(mod, _BatchNorm)
            for bname, b in mod.named_buffers(recurse=False)]


def _check_unit(name: str, module: nn.Module, out, versions: list) -> None:
    """Refuse a unit the runtime cannot run: one whose output is not a tensor (nn.LSTM's tuple as a
    unit of a Sequential), or that updates a buffer in place (recomputation would update it twice)."""
    if not isinstance(out, torch.Tensor):
        raise UnsupportedModel(
            f"unit {name} ({type(module).__name__}) returns {type(out).__name__}, not one tensor; the runtime "
            "passes one tensor between units: put it in a block whose forward returns a tensor (e.g. "
            "`out, _ = self.lstm(x)`), or give the runtime a traceable model (not a Sequential) and it "
            "keeps the tuple inside one unit")
    changed = [bname for bname, b, version in versions if b._version != version]
    if changed:
        raise UnsupportedModel(
            f"unit {name} ({type(module).__name__}) updates buffer(s) {', '.join(changed)} in place in "
            "forward; recomputation would update them a second time (batch-norm statistics are handled, "
            "other stateful buffers are not)")


def profile_units(units: list[tuple[str, nn.Module]], x: torch.Tensor, loss: str = "none") -> list[UnitProfile]:
    """Profile every unit on input ``x`` (the real batch shape); see the module docstring. ``loss``
    (LOSSES): the loss the step applies to the model's output, whose working set goes into the last
    unit's ``loss_bytes`` (profile_loss)."""
    device = x.device
    cache: dict[tuple, tuple] = {}
    mutating: set[tuple] = set()  # signatures of units that write their input in place
    profiles = []
    param_storages = {p.untyped_storage().data_ptr() for _, m in units for p in m.parameters()}
    fork_devices = [device] if device.type == "cuda" else []
    carry = 0  # bytes of the current activation's storage that an earlier unit saves
    with torch.random.fork_rng(devices=fork_devices), frozen_batchnorm_stats([m for _, m in units]):
        a = x.detach()
        for i, (name, m) in enumerate(units):
            key = _signature(m, a)
            if key in mutating:
                m.sn_mutates_input = True
            inp = a.clone() if mutates_input(m) else a
            if key in cache:
                versions = _buffer_versions(m)
                with torch.no_grad():
                    out = m(inp)
                _check_unit(name, m, out, versions)
                saved, out_bytes, seconds, in_saved, out_saved, passes_on, transient, forward, packed = cache[key]
            else:
                counter = _SavedCounter(param_storages)
                leaf = a.detach().requires_grad_(a.is_floating_point())
                # a copy, so that a block writing its input in place (which no flag says) does not
                # write the leaf (autograd refuses that); found by its version counter, and marked
                inp = leaf.clone() if leaf.requires_grad or mutates_input(m) else leaf
                version = inp._version
                _sync(device)
                if device.type == "cuda":
                    before = torch.cuda.memory_allocated(device)
                    torch.cuda.reset_peak_memory_stats(device)
                versions = _buffer_versions(m)
                start = time.perf_counter()
                with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(counter.pack, lambda t: t):
                    out = m(inp)
                _sync(device)
                seconds = time.perf_counter() - start
                _check_unit(name, m, out, versions)
                if inp._version != version and not mutates_input(m):
                    m.sn_mutates_input = True  # see mutates_input: the runtime hands it a copy too
                if mutates_input(m):
                    mutating.add(key)
                forward = torch.cuda.max_memory_allocated(device) - before if device.type == "cuda" else 0
                in_ptr, out_ptr = inp.untyped_storage().data_ptr(), out.untyped_storage().data_ptr()
                saved, out_bytes = counter.total, tensor_bytes(out)
                in_saved, out_saved = counter.storages.get(in_ptr, 0), counter.storages.get(out_ptr, 0)
                passes_on = out_ptr == in_ptr  # in place, or a view of its input
                transient = 0
                if device.type == "cuda":
                    transient = _backward_transient(m, leaf, out, out_bytes + tensor_bytes(a) + param_bytes(m))
                packed = tuple(counter.packed)
                cache[key] = (saved, out_bytes, seconds, in_saved, out_saved, passes_on, transient, forward, packed)
                del counter, leaf, inp
            profiles.append(UnitProfile(i, name, type(m).__name__, is_expensive(m), tensor_bytes(a), out_bytes, saved,
                                        param_bytes(m), seconds, shared_in_bytes=min(carry, in_saved),
                                        in_saved_bytes=in_saved, transient_bytes=transient, forward_bytes=forward,
                                        packed=packed))
            carry = max(carry, out_saved) if passes_on else out_saved
            a = out.detach()
        if profiles and loss != "none":
            profiles[-1].loss_bytes = profile_loss(a, loss)
    return profiles


# ---- the loss ---------------------------------------------------------------------------------
LOSSES = ("cross_entropy", "none")


def loss_value(out: torch.Tensor, loss: str) -> torch.Tensor:
    """The loss ``loss`` of output ``out`` against class 0 (its memory does not depend on the targets):
    cross-entropy over the last dimension in fp32, as the experiments' loss (arms.loss_of) computes it
    for classifier logits (batch, classes) and language-model logits (batch, time, vocab)."""
    if loss != "cross_entropy":
        raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")
    logits = out.flatten(0, -2).float() if out.dim() > 2 else out.float()
    return torch.nn.functional.cross_entropy(logits, torch.zeros(logits.shape[0], dtype=torch.long,
                                                                  device=out.device))


def loss_need(out_bytes: int, forward_peak: int, peak: int) -> int:
    """The loss's need above what forward keeps, from its forward's allocation peak (``forward_peak``,
    e.g. the log-softmax output) and its whole forward+backward peak (``peak``; both above what was
    alive with the output): the output is alive during the loss's forward and, unless its last unit
    saved it (then forward keeps it anyway), freed before the loss's backward (which holds the saved
    log-softmax output, its gradient and the logits' gradient)."""
    return max(out_bytes + forward_peak, peak)


def modelled_loss_need(out: torch.Tensor, loss: str) -> int:
    """What loss ``loss`` allocates on output ``out`` where no allocator measures it (CPU), with
    cross-entropy's ops in fp32 over f = 4 x numel bytes: forward, the fp32 copy of non-fp32 logits and
    the log-softmax output (saved); backward, the log-softmax output, nll's gradient, the fp32 logits'
    gradient and, for non-fp32 logits, its cast back; and 64 bytes of scalars (the loss, its gradient,
    nll's total weight). tests/superneurons/test_replay.py checks it against a storage tracker."""
    if loss == "none":
        return 0
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")
    f = 4 * out.numel()
    cast = out.dtype != torch.float32
    forward = (f if cast else 0) + f + 64
    backward = 3 * f + (tensor_bytes(out) if cast else 0) + 64
    return loss_need(tensor_bytes(out), forward, backward)


def profile_loss(out: torch.Tensor, loss: str) -> int:
    """The loss's working set on the model's output ``out``: on CUDA measured with the allocator (the
    loss's forward, then its backward to the output, as the step runs them), else modelled
    (modelled_loss_need)."""
    if loss == "none":
        return 0
    if out.device.type != "cuda":
        return modelled_loss_need(out, loss)
    device = out.device
    leaf = out.detach().requires_grad_(out.is_floating_point())
    torch.cuda.synchronize(device)
    base = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    with torch.enable_grad():
        value = loss_value(leaf, loss)
    torch.cuda.synchronize(device)
    forward = torch.cuda.max_memory_allocated(device) - base
    if leaf.requires_grad:
        grad, = torch.autograd.grad(value, leaf)
        del grad
    del value
    torch.cuda.synchronize(device)
    return loss_need(tensor_bytes(out), forward, torch.cuda.max_memory_allocated(device) - base)


def profile_table(profiles: list[UnitProfile]) -> pd.DataFrame:
    rows = [dict(asdict(p), working_set=p.working_set, need=p.need) for p in profiles]
    return pd.DataFrame(rows)


def largest_working_set(profiles: list[UnitProfile]) -> UnitProfile:
    return max(profiles, key=lambda p: p.working_set)


def largest_need(profiles: list[UnitProfile]) -> int:
    """The largest single-unit backward peak, transients included, or the loss's need if larger (what
    the plan must leave room for next to what forward keeps)."""
    return max(max(p.need, p.loss_bytes) for p in profiles)


def saved_bytes_between(profiles: list[UnitProfile], start: int = 0, stop: int | None = None) -> int:
    """Bytes that units ``start`` .. ``stop - 1`` keep for backward together (shared activations once)."""
    run = profiles[start:stop]
    return sum(p.saved_bytes for p in run) - sum(p.shared_in_bytes for p in run[1:])


def plain_dynamic_estimate(profiles: list[UnitProfile]) -> int:
    """Liveness estimate of plain training's dynamic peak: every saved tensor is alive at the end of
    forward, plus the largest working set (as the runtime's estimate of a plan that keeps everything)."""
    return saved_bytes_between(profiles) + largest_working_set(profiles).working_set
