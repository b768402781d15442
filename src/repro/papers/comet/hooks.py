"""Activation compression in training, through the shared trainer's TrainHooks interface.

Every tensor autograd saves for backward passes through ``pack``/``unpack``
(torch.autograd.graph.saved_tensors_hooks). Eligible tensors (float32, at least ``min_numel``
values, not a parameter or other leaf that requires grad) are stored encoded; the rest pass
through. A tensor saved by several ops in one forward (an in-place ReLU's output is also the next
conv's input) is encoded once. Each saved tensor is attributed to the leaf module whose forward
saved it, which picks its error bound and its row in the per-layer accounting.

SavedTensorAccounting  identity pack; counts the bytes of saved activations (the uncompressed arm's probe)
CometHooks             error-bounded compression (repro.papers.comet.codec format, or codec_v4's with
                       ``codec_version="v4"``; GPU kernels on CUDA tensors, the NumPy codec on CPU
                       tensors), fixed eb or an EBController. Codec v4 codes each saved tensor
                       with its slot's cached code book (repro.papers.comet.books: one host sync
                       per tensor, no Huffman construction on the host after a slot's first step),
                       refreshed when it spends more than (1 + ``book_tol``) x what a new book would.
                       The format keeps zeros and signs exactly, so ReLU backward masks are exact
                       and only the values (used by the next conv's weight gradient) carry error.
                       On CUDA, ``payload="exact"`` stores each tensor at its exact size (one host
                       sync per saved tensor: the least memory); ``"arena"`` compresses a step into
                       one payload arena with no sync (repro.papers.comet.arena; graph_safe with a fixed
                       eb), and counts the arena's reserved bytes as stored. A channels-last
                       activation is read and written in NCHW order by the kernels themselves
                       (gpu_codec.Source.nhwc), without the two copies dense_flat makes.
ActNNHooks             the ActNN method: per-group 2-bit quantisation with stochastic rounding

The adaptive controller (COMET's analysis, simplified):
  an error e ~ U(-eb, eb) on the nonzero entries (density p) of a conv/linear input x makes an
  error in the weight gradient dW = sum x * dy with E||dW_err||^2 = (eb^2 / 3) p fan_in ||dy||^2,
  so keeping ||dW_err|| <= fraction * ||dW|| gives
      eb = fraction * ||dW|| * sqrt(3 / (p fan_in)) / ||dy||.
  BatchNorm inputs enter backward through x_hat = (x - mean) / sigma, so their error is scaled by
  1 / sigma: eb = bn_fraction * sqrt(3) * min_channel_sigma (running variance). Other modules
  (ReLU, pooling) save what the next conv/linear reads: they take that layer's eb. Bounds are
  clipped to [eb_min, eb_max] and re-tuned every ``retune_every`` steps from that step's norms;
  each decision is a row of ``decisions``.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass

import torch
import torch.nn as nn

from repro.papers.comet import arena, books, codec, codec_v4, gpu_codec, gpu_codec_v4
from repro.train.hooks import TrainHooks

WEIGHTED = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Linear)
NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)


VALUE_ORDERS = ("logical", "memory")


def dense_flat(t: torch.Tensor, order: str = "logical") -> tuple[torch.Tensor, str]:
    """(t's values as a flat tensor, layout). ``order="logical"``: in NCHW order, as SZ and ActNN
    see activations, so that neighbours along W (and 1024-value blocks, 256-value groups) lie in
    one channel; a channels-last tensor is copied for it. ``"memory"``: in memory order, a view of a
    dense tensor (channels-last: neighbours are the channels of one pixel). On a trained ResNet-32's
    channels-last activations (CPU, 128 images) logical order raised our codec's ratio from 5.75x
    to 7.48x at eb 0.05 and cut ActNN 2-bit's relative RMS error from 0.59 to 0.47."""
    if order not in VALUE_ORDERS:
        raise ValueError(f"value order must be one of {VALUE_ORDERS}, got {order!r}")
    if t.is_contiguous():
        return t.reshape(-1), "contiguous"
    if t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last):
        if order == "logical":
            return t.contiguous().reshape(-1), "channels_last_logical"
        return t.permute(0, 2, 3, 1).reshape(-1), "channels_last"
    return t.contiguous().reshape(-1), "contiguous"


def restore(flat: torch.Tensor, shape: torch.Size, layout: str) -> torch.Tensor:
    """The tensor dense_flat flattened, in its own memory format again."""
    if layout == "channels_last":
        n, c, h, w = shape
        return flat.view(n, h, w, c).permute(0, 3, 1, 2)
    if layout == "channels_last_logical":
        return flat.view(shape).contiguous(memory_format=torch.channels_last)
    return flat.view(shape)


@dataclass
class LayerStats:
    kind: str = ""
    tensors: int = 0
    raw_bytes: int = 0
    stored_bytes: int = 0


class SavedTensorAccounting(TrainHooks):
    """Counts saved activations per layer; subclasses override ``encode``/``decode``.

    step_raw_bytes / step_stored_bytes: the saved activations of the last forward pass (what it
    leaves alive for backward). totals: per layer over all steps. Parameters are not counted;
    tensors that are not encoded count as stored at their own size.
    """

    def __init__(self, min_numel: int = 4096, value_order: str = "logical"):
        if min_numel < 1:
            raise ValueError(f"min_numel must be >= 1, got {min_numel}")
        if value_order not in VALUE_ORDERS:
            raise ValueError(f"value_order must be one of {VALUE_ORDERS}, got {value_order!r}")
        self.min_numel = min_numel
        self.value_order = value_order  # the order an encoder sees the values in (dense_flat)
        self.totals: dict[str, LayerStats] = {}
        self.step_raw_bytes = self.step_stored_bytes = 0
        self.steps = 0
        self._current: str | None = None
        self._kinds: dict[str, str] = {}
        self._seen: dict = {}
        self._handles: list = []
        self._param_storages: set[int] = set()

    # ---- module attribution -------------------------------------------------------------------
    def wrap_model(self, model: nn.Module) -> nn.Module:
        self.attach(model)
        return model

    def attach(self, model: nn.Module) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
        # weights are saved as views too (a linear layer saves weight.t()): recognise their storage
        self._param_storages = {p.untyped_storage().data_ptr() for p in model.parameters()}
        for name, module in model.named_modules():
            if next(module.children(), None) is not None:
                continue
            self._kinds[name] = type(module).__name__
            self._handles.append(module.register_forward_pre_hook(self._enter(name)))
            self._handles.append(module.register_forward_hook(self._leave(name)))

    def _enter(self, name: str):
        def hook(module, args):
            self._current = name
            self.on_module_input(name, module, args)
        return hook

    def _leave(self, name: str):
        def hook(module, args, output):
            self.on_module_output(name, module, output)
            self._current = None
        return hook

    def on_module_input(self, name: str, module: nn.Module, args) -> None:
        pass

    def on_module_output(self, name: str, module: nn.Module, output) -> None:
        pass

    # ---- pack / unpack ----------------------------------------------------------------------
    def saved_tensors_hooks(self):
        self._seen = {}
        self.step_raw_bytes = self.step_stored_bytes = 0
        return torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)

    def after_backward(self, model: nn.Module) -> None:
        self._seen = {}
        self.steps += 1

    def eligible(self, t: torch.Tensor) -> bool:
        return t.dtype == torch.float32 and t.numel() >= self.min_numel

    def pack(self, t: torch.Tensor):
        if isinstance(t, nn.Parameter) or (t.is_leaf and t.requires_grad) or \
                t.untyped_storage().data_ptr() in self._param_storages:
            return t  # a weight, not an activation: never encoded, not counted
        key = (t.data_ptr(), t._version, tuple(t.shape), tuple(t.stride()), t.dtype, t.device)
        hit = self._seen.get(key)
        if hit is not None and hit[0]() is not None:
            return hit[1]  # alive, so its memory cannot have been reused: the same tensor
        layer = self._current or "(no module)"
        stats = self.totals.setdefault(layer, LayerStats(kind=self._kinds.get(layer, "")))
        raw = t.numel() * t.element_size()
        packed, stored = (self.encode(t, layer) if self.eligible(t) else (t, raw))
        stats.tensors += 1
        stats.raw_bytes += raw
        stats.stored_bytes += stored
        self.step_raw_bytes += raw
        self.step_stored_bytes += stored
        self._seen[key] = (weakref.ref(t), packed)
        return packed

    def unpack(self, packed):
        if isinstance(packed, torch.Tensor):
            return packed
        return self.decode(packed)

    def encode(self, t: torch.Tensor, layer: str):
        """(packed object, bytes it holds)."""
        return t, t.numel() * t.element_size()

    def decode(self, packed) -> torch.Tensor:
        raise TypeError(f"{type(self).__name__} got a packed {type(packed).__name__} it did not make")

    def layer_table(self) -> list[dict]:
        return [dict(layer=k, kind=s.kind, tensors=s.tensors, raw_bytes=s.raw_bytes, stored_bytes=s.stored_bytes,
                     ratio=s.raw_bytes / s.stored_bytes if s.stored_bytes else float("nan"))
                for k, s in self.totals.items()]

    def state_dict(self) -> dict:
        return {"totals": {k: vars(v).copy() for k, v in self.totals.items()}, "steps": self.steps}

    def load_state_dict(self, state: dict) -> None:
        self.totals = {k: LayerStats(**v) for k, v in state.get("totals", {}).items()}
        self.steps = state.get("steps", 0)


@dataclass
class CometPacked:
    data: codec.Compressed | gpu_codec.Slot | codec_v4.CompressedV4
    shape: torch.Size
    layout: str
    device: torch.device


class EBController:
    """Per-layer error bounds: fixed, or re-tuned from gradient norms (see the module doc)."""

    def __init__(self, eb: float, adaptive: bool, fraction: float = 0.1, bn_fraction: float = 0.05,
                 eb_min: float = 1e-4, eb_max: float = 1.0, retune_every: int = 100):
        codec.check_eb(eb)
        if adaptive and not (0 < eb_min <= eb_max and fraction > 0 and bn_fraction > 0 and retune_every >= 1):
            raise ValueError(f"adaptive eb needs 0 < eb_min <= eb_max, fraction > 0, bn_fraction > 0, "
                             f"retune_every >= 1; got eb_min={eb_min}, eb_max={eb_max}, fraction={fraction}, "
                             f"bn_fraction={bn_fraction}, retune_every={retune_every}")
        self.default, self.adaptive = float(eb), adaptive
        self.fraction, self.bn_fraction = fraction, bn_fraction
        self.eb_min, self.eb_max, self.retune_every = eb_min, eb_max, retune_every
        self.eb: dict[str, float] = {}
        self.consumer: dict[str, str] = {}  # module -> the conv/linear whose eb it takes
        self.decisions: list[dict] = []

    def setup(self, model: nn.Module) -> None:
        names = [(n, m) for n, m in model.named_modules() if next(m.children(), None) is None]
        nxt = None
        for name, module in reversed(names):
            if isinstance(module, WEIGHTED):
                nxt = name
            elif not isinstance(module, NORMS) and nxt is not None:
                self.consumer[name] = nxt

    def eb_for(self, layer: str) -> float:
        return self.eb.get(layer, self.eb.get(self.consumer.get(layer, ""), self.default))

    def measuring(self, step: int) -> bool:
        return self.adaptive and step % self.retune_every == 0

    def retune(self, step: int, model: nn.Module, dy_norms: dict, densities: dict) -> None:
        modules = dict(model.named_modules())
        stats = {}
        for name in dy_norms:
            m = modules[name]
            if m.weight.grad is None:
                continue
            stats[name] = torch.stack([m.weight.grad.norm(), dy_norms[name], densities[name]])
        norms = {}
        for name, m in modules.items():
            if isinstance(m, NORMS) and m.running_var is not None:
                norms[name] = (m.running_var.min() + m.eps).sqrt()
        keys = list(stats) + list(norms)
        if not keys:
            return
        values = torch.stack([*(stats[k] for k in stats), *(norms[k].expand(3) for k in norms)]).tolist()  # one sync
        for name, (gw, gy, p) in zip(stats, values[:len(stats)]):
            fan_in = modules[name].weight[0].numel()
            want = self.fraction * gw * math.sqrt(3 / (max(p, 1e-6) * fan_in)) / gy if gy > 0 else self.eb_max
            self._set(step, name, "weight-gradient", want, dict(grad_w_norm=gw, grad_out_norm=gy, density=p,
                                                                 fan_in=fan_in))
        for name, row in zip(norms, values[len(stats):]):
            sigma = row[0]
            self._set(step, name, "batchnorm", self.bn_fraction * math.sqrt(3) * sigma, dict(min_sigma=sigma))

    def _set(self, step: int, name: str, rule: str, want: float, info: dict) -> None:
        new = min(max(want, self.eb_min), self.eb_max) if math.isfinite(want) else self.eb_max
        self.decisions.append(dict(step=step, layer=name, rule=rule, eb_old=self.eb_for(name), eb_wanted=want,
                                   eb_new=new, **info))
        self.eb[name] = new

    def state_dict(self) -> dict:
        return {"eb": dict(self.eb), "decisions": list(self.decisions)}

    def load_state_dict(self, state: dict) -> None:
        self.eb = dict(state.get("eb", {}))
        self.decisions = list(state.get("decisions", []))


PAYLOADS = ("exact", "arena")
CODECS = ("v3", "v4")  # codec.py (bit planes) | codec_v4.py (Huffman with zero runs; exact payload only)


class CometHooks(SavedTensorAccounting):
    """Error-bounded compression of saved activations (fixed or adaptive eb per layer)."""

    def __init__(self, controller: EBController, min_numel: int = 4096, kernels_dir=None,
                 value_order: str = "logical", payload: str = "exact", arena_margin: float = 1.1,
                 codec_version: str = "v3", book_tol: float = 0.05):
        super().__init__(min_numel, value_order)
        if payload not in PAYLOADS:
            raise ValueError(f"payload must be one of {PAYLOADS}, got {payload!r}")
        if codec_version not in CODECS:
            raise ValueError(f"codec must be one of {CODECS}, got {codec_version!r}")
        if codec_version == "v4" and payload != "exact":
            raise ValueError("codec v4 has no arena (sync-free) path yet: use payload=exact")
        self.codec_version = codec_version
        self.controller = controller
        self.kernels_dir = kernels_dir
        self.payload = payload
        self.planner = arena.Planner(arena_margin, kernels_dir) if payload == "arena" else None
        # codec v4: a slot's book is refreshed when it spends more than (1 + book_tol) x a new book's bits
        self.books = books.SlotBooks(book_tol, kernels_dir) if codec_version == "v4" else None
        # an adaptive eb is measured and re-tuned by Python hooks on the step: eager only
        self.graph_safe = self.planner is not None and not controller.adaptive
        self._measure = False
        self._dy: dict[str, torch.Tensor] = {}
        self._density: dict[str, torch.Tensor] = {}

    def wrap_model(self, model: nn.Module) -> nn.Module:
        self.controller.setup(model)
        return super().wrap_model(model)

    def saved_tensors_hooks(self):
        self._measure = self.controller.measuring(self.steps)
        self._dy, self._density = {}, {}
        if self.planner is not None:
            self.planner.begin_step()
        if self.books is not None:
            self.books.begin_step()
        return super().saved_tensors_hooks()

    def step_key(self):
        return None if self.planner is None else ("arena", self.planner.version)

    def on_epoch_end(self, model: nn.Module, epoch: int, row: dict) -> dict | None:
        return None if self.planner is None else self.planner.replan()

    def codec_metrics(self) -> dict:
        """The arena's totals over the run (reserved bytes, overflowed steps, ...), codec v4's book
        counts (books built, refreshed, tensors coded with a cached book); {} otherwise."""
        out = {} if self.planner is None else self.planner.metrics()
        if self.books is not None:
            out.update({f"codec_{k}": float(v) for k, v in self.books.counts.items()})
        return out

    def on_module_input(self, name, module, args) -> None:
        if self._measure and isinstance(module, WEIGHTED) and args and isinstance(args[0], torch.Tensor):
            self._density[name] = (args[0].detach() != 0).float().mean()

    def on_module_output(self, name, module, output) -> None:
        if self._measure and isinstance(module, WEIGHTED) and isinstance(output, torch.Tensor) and output.requires_grad:
            def grab(grad, name=name):
                self._dy[name] = grad.detach().float().norm()
            output.register_hook(grab)

    def after_backward(self, model: nn.Module) -> None:
        if self.planner is not None:
            self.planner.end_step(model)
        if self._measure:
            self.controller.retune(self.steps, model, self._dy, self._density)
            self._dy, self._density = {}, {}
            self._measure = False
        super().after_backward(model)

    def encode(self, t: torch.Tensor, layer: str):
        eb = self.controller.eb_for(layer)
        t = t.detach()
        if self.books is not None:  # flat input only: a channels-last tensor is copied to NCHW order
            flat, layout = dense_flat(t, self.value_order)
            data = self.books.compress(flat, eb)
            return CometPacked(data, t.shape, layout, t.device), data.nbytes
        if t.device.type != "cuda":
            flat, layout = dense_flat(t, self.value_order)
            data = codec.compress(flat.numpy(), eb)
            return CometPacked(data, t.shape, layout, t.device), data.nbytes
        if self.value_order == "logical" and gpu_codec.Source.nhwc_fits(t):
            src, layout = gpu_codec.Source.nhwc_of(t, checked=True), "nhwc"
        else:
            flat, layout = dense_flat(t, self.value_order)
            src = gpu_codec.Source.flat(flat)
        if self.planner is not None:
            data, stored = self.planner.encode(src, eb)
        else:
            data = gpu_codec.compress_source(src, eb, self.kernels_dir)
            stored = data.nbytes
        return CometPacked(data, t.shape, layout, t.device), stored

    def decode(self, packed: CometPacked) -> torch.Tensor:
        v4 = isinstance(packed.data, codec_v4.CompressedV4)
        if packed.device.type != "cuda":
            flat = (codec_v4 if v4 else codec).decompress(packed.data)
            return restore(torch.from_numpy(flat), packed.shape, packed.layout)
        if v4:
            return restore(gpu_codec_v4.decompress(packed.data, kernels_dir=self.kernels_dir), packed.shape,
                           packed.layout)
        if packed.layout == "nhwc":
            out = torch.empty(packed.shape, device=packed.device, memory_format=torch.channels_last)
            return gpu_codec.decompress(packed.data, out, self.kernels_dir)
        n = packed.data.n
        flat = gpu_codec.decompress(packed.data, torch.empty(n, device=packed.device), self.kernels_dir)
        return restore(flat, packed.shape, packed.layout)

    def state_dict(self) -> dict:
        state = {**super().state_dict(), "controller": self.controller.state_dict()}
        if self.planner is not None:  # a resumed run re-calibrates its plan; the run's counts carry on
            state["arena_totals"] = dict(self.planner.totals)
        if self.books is not None:  # likewise: a resumed run builds its books again on its first step
            state["book_counts"] = dict(self.books.counts)
        return state

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.controller.load_state_dict(state.get("controller", {}))
        if self.planner is not None:
            self.planner.totals.update(state.get("arena_totals", {}))
        if self.books is not None:
            self.books.counts.update(state.get("book_counts", {}))


@dataclass
class ActNNPacked:
    codes: torch.Tensor  # uint8, four 2-bit codes per byte
    lo: torch.Tensor  # per-group minimum (float32)
    scale: torch.Tensor  # per-group step (float32)
    n: int
    shape: torch.Size
    layout: str
    positive: torch.Tensor | None = None  # a ReLU's output: its exact x > 0 mask, eight values per byte


class ActNNHooks(SavedTensorAccounting):
    """ActNN's activation quantiser (Chen et al., ICML 2021), re-implemented: groups of
    ``group_size`` consecutive values (in NCHW order by default, as ActNN groups a sample's
    flattened activation; see dense_flat), per-group min and scale = (max - min) / 3, codes
    floor((x - min) / scale + U[0, 1)) clipped to 0..3 (unbiased stochastic rounding), four codes
    per byte; stored: n / 4 bytes + 8 bytes per group.

    A ReLU's saved output also keeps its exact ``x > 0`` mask (n / 8 bytes more), as ActNN's
    ActQuantizedReLU saves a 1-bit mask: ReLU's backward reads that mask, and the next layer, which
    saves the same tensor, its 2-bit values. Without it (sessions 5-7 on the H200) ReLU's backward
    took its mask from the 2-bit values, a positive value under one step decoded as 0 with
    probability 1 - x / step, the ReLU derivative shrank to about min(1, x / step), and the gradients
    of the first layers lost 10-20x of their norm: ResNet-32 trained to 77.5% (83.4% uncompressed)
    and VGG-16 diverged."""

    BITS = 2

    def __init__(self, group_size: int = 256, min_numel: int = 4096, seed: int = 0, value_order: str = "logical"):
        super().__init__(min_numel, value_order)
        if group_size < 4 or group_size % 4:
            raise ValueError(f"group_size must be a multiple of 4 and >= 4, got {group_size}")
        self.group_size = group_size
        self.seed = seed
        self._generators: dict = {}
        self._shift_tensors: dict = {}

    def _generator(self, device: torch.device) -> torch.Generator:
        key = str(device)
        if key not in self._generators:
            self._generators[key] = torch.Generator(device=device).manual_seed(self.seed)
        return self._generators[key]

    def encode(self, t: torch.Tensor, layer: str):
        flat, layout = dense_flat(t.detach(), self.value_order)
        n, g = flat.numel(), self.group_size
        groups = -(-n // g)
        x = torch.nn.functional.pad(flat, (0, groups * g - n)).view(groups, g) if groups * g != n else flat.view(groups, g)
        lo, hi = x.amin(1, keepdim=True), x.amax(1, keepdim=True)
        levels = 2**self.BITS - 1
        scale = (hi - lo) / levels
        scale = torch.where(scale > 0, scale, torch.ones_like(scale))
        noise = torch.rand(x.shape, device=x.device, generator=self._generator(x.device))
        q = ((x - lo) / scale + noise).floor_().clamp_(0, levels).to(torch.uint8).view(-1, 4)
        codes = q[:, 0] | (q[:, 1] << 2) | (q[:, 2] << 4) | (q[:, 3] << 6)
        positive = self._pack_bits(flat > 0) if self._kinds.get(layer) == "ReLU" else None
        packed = ActNNPacked(codes, lo.view(-1), scale.view(-1), n, t.shape, layout, positive)
        return packed, codes.numel() + 8 * groups + (0 if positive is None else positive.numel())

    def _pack_bits(self, bits: torch.Tensor) -> torch.Tensor:
        b = torch.nn.functional.pad(bits.to(torch.uint8), (0, -bits.numel() % 8)).view(-1, 8)
        return (b << self._shifts(bits.device, 8)).sum(1, dtype=torch.uint8)

    def _shifts(self, device: torch.device, per_byte: int = 4) -> torch.Tensor:
        # made once per device: torch.tensor(list, device=cuda) is a blocking host-to-device copy,
        # which would stall the stream on every decode
        key = (str(device), per_byte)
        if key not in self._shift_tensors:
            step = 8 // per_byte
            self._shift_tensors[key] = torch.arange(0, 8, step, dtype=torch.uint8, device=device)
        return self._shift_tensors[key]

    def decode(self, p: ActNNPacked) -> torch.Tensor:
        q = ((p.codes[:, None] >> self._shifts(p.codes.device)) & 3).view(len(p.lo), -1).float()
        x = (q * p.scale[:, None] + p.lo[:, None]).view(-1)[:p.n]
        if p.positive is not None:  # ReLU's mask exact; a positive value rounded to 0 stays positive
            positive = ((p.positive[:, None] >> self._shifts(p.positive.device, 8)) & 1).view(-1)[:p.n].bool()
            x = torch.where(positive, x.clamp_min(torch.finfo(x.dtype).tiny), torch.zeros_like(x))
        return restore(x.contiguous(), p.shape, p.layout)


def make_hooks(method: str, *, eb: float = 0.05, fraction: float = 0.1, bn_fraction: float = 0.05,
               eb_min: float = 1e-4, eb_max: float = 1.0, retune_every: int = 100, min_numel: int = 4096,
               group_size: int = 256, seed: int = 0, kernels_dir=None, value_order: str = "logical",
               payload: str = "exact", arena_margin: float = 1.1, codec_version: str = "v3",
               book_tol: float = 0.05) -> TrainHooks | None:
    """The hooks of one arm: none (no hooks: the plain trainer), fixed, adaptive, actnn."""
    if method == "none":
        return None
    if method in ("fixed", "adaptive"):
        ctl = EBController(eb, method == "adaptive", fraction, bn_fraction, eb_min, eb_max, retune_every)
        return CometHooks(ctl, min_numel, kernels_dir, value_order, payload, arena_margin, codec_version, book_tol)
    if method == "actnn":
        return ActNNHooks(group_size, min_numel, seed, value_order)
    raise ValueError(f"method must be none, fixed, adaptive or actnn, got {method!r}")
