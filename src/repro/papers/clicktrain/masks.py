"""Training hooks of the pruning arms (ClickTrain, ADMM, PruneTrain; the masking mechanism itself,
MaskHooks, is the shared repro.train.masks), the 2:4 mask, and the conv cost count (parameters and
MACs with masks).

Every hook keys its state by conv module name and resolves the weights from the model it is
handed, so the state (masks, importance, ADMM Z/U) checkpoints with the model and a resumed run
continues exactly. Phase decisions happen in ``on_epoch_end`` (Python); per-step methods only
do tensor work, the same within a phase. So every hook is graph_safe: ``step_key()`` names the
phase and the tensors a step reads (their addresses), and the trainer captures each phase's step
as its own CUDA graph. State read inside a step changes in place (ADMM's Z, U and rho) or comes
with a new key (new masks). Every arm and phase thus runs in the baseline's CUDA-graph mode.
"""

from __future__ import annotations

import time

import pandas as pd
import torch
import torch.nn as nn

from repro.papers.clicktrain.patterns import kernel_masks, kernel_patterns, project, select_library
from repro.train import TrainHooks
from repro.train.masks import MaskHooks, addresses, cpu_state, like_weight, weights_of
from repro.train.mixup import Mixup


class ClickTrainHooks(MaskHooks):
    """Dense warm-up (importance = sum over its last epoch of (w * dL/dw)^2), then pattern library and
    per-kernel pattern/connectivity selection, then group lasso towards the masks, then hard masks.
    Phases are counted in epochs: ``warmup`` dense, ``lasso``, then masked.

    ``lasso_groups`` is the regulariser's form (both are lasso * a sum of group L2 norms):
      "artifact": ClickTrain's artifact (hipdac-lab/ICS21-ClickTrain, cifar.py:496-504, 537-545, 567):
        per kernel, the weights outside its pattern, plus, per dropped kernel, the whole kernel; each
        norm sqrt(sum of squares + 1e-8) (finite gradient at 0).
      "mask": one group per kernel, its weights outside the final mask (a dropped kernel's 9 weights
        form one group), plain L2 norms: this repository's form before the artifact was compared.
    ``mixup_alpha`` > 0: mixup (lambda ~ Beta(alpha, alpha)) in the masked phase, as the artifact's
    hard-mask phase does (cifar.py:392-396, 548-558; alpha 0.3 in configs/cifar10_*_v1.yaml)."""

    LASSO_GROUPS = ("artifact", "mask")
    EPS = 1e-8  # inside the artifact's square roots (cifar.py:504, 544-545)

    def __init__(self, ratios: dict[str, float], n_patterns: int, warmup: int, lasso_epochs: int, lasso: float,
                 lasso_groups: str = "mask", mixup_alpha: float = 0.0):
        super().__init__()
        if lasso_groups not in self.LASSO_GROUPS:
            raise ValueError(f"lasso_groups must be one of {self.LASSO_GROUPS}, got {lasso_groups!r}")
        if mixup_alpha < 0:
            raise ValueError(f"mixup_alpha must be >= 0 (0: no mixup), got {mixup_alpha}")
        self.ratios, self.n_patterns = dict(ratios), n_patterns
        self.warmup, self.lasso_epochs, self.lasso = warmup, lasso_epochs, lasso
        self.lasso_groups = lasso_groups
        self.mixup = Mixup(mixup_alpha) if mixup_alpha > 0 else None
        self.completed = 0  # epochs finished
        self.importance: dict[str, torch.Tensor] = {}
        self.library: torch.Tensor | None = None
        self.patterns: dict[str, torch.Tensor] = {}  # each kernel's pattern, no kernel dropped (lasso phase)
        self._groups: list[tuple[torch.Tensor, torch.Tensor]] | None = None  # per layer: the lasso's group masks
        self._patterns: dict[str, torch.Tensor] = {}  # select()'s patterns, until installed beside the masks

    def step_key(self):
        epoch = self.completed + 1
        return (self.phase(epoch), epoch == self.warmup, super().step_key(),
                addresses(self.masks, self.patterns) if self.phase(epoch) == "lasso" else ())

    def phase(self, epoch: int) -> str:
        """Phase of 1-based ``epoch``."""
        if epoch <= self.warmup:
            return "dense"
        return "lasso" if epoch <= self.warmup + self.lasso_epochs else "masked"

    def mix_batch(self, x, y):
        if self.mixup is None or self.phase(self.completed + 1) != "masked":
            return None
        return self.mixup(x, y)

    @torch.no_grad()
    def after_backward(self, model: nn.Module) -> None:
        if self.completed + 1 != self.warmup:
            return
        ws = weights_of(model, self.ratios)
        if not self.importance:
            self.importance = {n: torch.zeros_like(w) for n, w in zip(self.ratios, ws)}
        prods = torch._foreach_mul(ws, [w.grad for w in ws])
        torch._foreach_mul_(prods, prods)
        torch._foreach_add_(list(self.importance.values()), prods)

    def _lasso_groups(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer, two masks whose per-kernel products with the weights are the groups: "artifact":
        (1 - pattern, dropped kernel as (O, I, 1, 1)); "mask": (1 - mask, none)."""
        groups = []
        for n, m in self.masks.items():
            if self.lasso_groups == "artifact":
                dropped = (m.sum(dim=(2, 3), keepdim=True) == 0).to(m.dtype)
                groups.append((1 - self.patterns[n], dropped))
            else:
                groups.append((1 - m, None))
        return groups

    def loss_regularizer(self, model: nn.Module):
        if self.phase(self.completed + 1) != "lasso":
            return None
        if self._groups is None:
            self._groups = self._lasso_groups()
        terms = []
        for w, (outside, dropped) in zip(weights_of(model, self.masks), self._groups):
            if dropped is None:
                terms.append(torch.linalg.vector_norm(w * outside, dim=(2, 3)).sum())
            else:
                for g in (w * outside, w * dropped):
                    terms.append(g.square().sum(dim=(2, 3)).add(self.EPS).sqrt().sum())
        return self.lasso * torch.stack(terms).sum()

    def select(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """Library from the importance, then each kernel's pattern and the kernels to drop."""
        self.library = select_library(self.importance.values(), self.n_patterns)
        self._patterns = {n: kernel_patterns(self.importance[n], self.library)[0] for n in self.ratios}
        return {n: kernel_masks(self.importance[n], self.library, r) for n, r in self.ratios.items()}

    def on_epoch_end(self, model: nn.Module, epoch: int, row: dict) -> dict:
        t0 = time.perf_counter()
        phase = self.phase(epoch)
        self.completed = epoch
        if epoch == self.warmup:
            masks = self.select(model)
            self.importance = {}
            if self.lasso_epochs:  # soft phase first: masks chosen, weights not yet zeroed
                ws = weights_of(model, masks)
                self.masks = {n: like_weight(m, w) for (n, m), w in zip(masks.items(), ws)}
                self.patterns = {n: like_weight(self._patterns[n], w) for n, w in zip(masks, ws)}
                self._patterns, self._groups = {}, None
            else:
                self.set_masks(model, masks)
                self._patterns = {}
        elif epoch == self.warmup + self.lasso_epochs and self.masks:
            self.set_masks(model, self.masks)
            self.patterns, self._groups = {}, None
        return dict(phase=phase, hook_s=time.perf_counter() - t0)

    def state_dict(self) -> dict:
        return {**super().state_dict(), "completed": self.completed, "importance": cpu_state(self.importance),
                "library": self.library, "patterns": cpu_state(self.patterns)}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.completed, self.importance, self.library = state["completed"], dict(state["importance"]), state["library"]
        self.patterns = dict(state.get("patterns", {}))
        if self.lasso_groups == "artifact" and self.masks and not self.active and not self.patterns:
            raise ValueError("checkpoint of a lasso phase without the kernels' patterns (written before "
                             "lasso_groups='artifact' existed): rerun from the start")
        self._groups = None

    def on_resume(self, model: nn.Module) -> None:
        super().on_resume(model)
        ws = weights_of(model, self.patterns)
        self.patterns = {n: like_weight(p, w) for (n, p), w in zip(self.patterns.items(), ws)}


class ADMMHooks(TrainHooks):
    """ADMM pattern pruning of a trained model: minimise loss + rho/2 sum ||W - Z + U||^2; after each epoch
    Z = projection of W + U onto the pattern + connectivity set, U += W - Z, rho *= growth."""

    graph_safe = True

    def __init__(self, model: nn.Module, ratios: dict[str, float], library: torch.Tensor, rho: float,
                 rho_growth: float = 1.0):
        self.ratios, self.library, self.rho_growth = dict(ratios), library, rho_growth
        ws = weights_of(model, self.ratios)
        self.z = {n: project(w, library, self.ratios[n])[0] for n, w in zip(self.ratios, ws)}
        self.u = {n: torch.zeros_like(w) for n, w in zip(self.ratios, ws)}
        self.rho = torch.tensor(float(rho), device=ws[0].device)  # a device tensor: captured steps read it

    def step_key(self):
        return addresses(self.z, self.u, [self.rho])

    def loss_regularizer(self, model: nn.Module):
        terms = [(w - self.z[n] + self.u[n]).square().sum() for n, w in zip(self.ratios, weights_of(model, self.ratios))]
        return 0.5 * self.rho * torch.stack(terms).sum()

    @torch.no_grad()
    def on_epoch_end(self, model: nn.Module, epoch: int, row: dict) -> dict:
        t0 = time.perf_counter()
        gap = norm = 0.0
        for n, w in zip(self.ratios, weights_of(model, self.ratios)):
            self.z[n].copy_(project(w + self.u[n], self.library, self.ratios[n])[0])
            self.u[n] += w - self.z[n]
            gap += float((w - self.z[n]).square().sum())
            norm += float(w.square().sum())
        row_rho = float(self.rho)
        self.rho.mul_(self.rho_growth)
        return dict(phase="admm", hook_s=time.perf_counter() - t0, rho=row_rho, admm_gap=(gap / max(norm, 1e-30)) ** 0.5)

    def state_dict(self) -> dict:
        return {"z": cpu_state(self.z), "u": cpu_state(self.u), "rho": float(self.rho)}

    def load_state_dict(self, state: dict) -> None:
        for mine, saved in ((self.z, state["z"]), (self.u, state["u"])):
            for k, v in saved.items():
                mine[k].copy_(v)
        self.rho.fill_(state["rho"])


class ChannelLassoHooks(MaskHooks):
    """PruneTrain-style training: group lasso over every conv's output channels (and, with
    ``in_channels``, over its input channels too, except the first conv's: PruneTrain's regulariser,
    Lym et al. SC'19, group_lasso_regs.py of their artifact) throughout, and every ``interval``
    epochs the channel groups that fell under ``threshold`` are masked for good (at least one output
    and one input channel per layer stay). ``threshold_type``: "norm" compares a group's L2 norm,
    "max" its largest |weight| (PruneTrain's default)."""

    THRESHOLD_TYPES = ("norm", "max")

    def __init__(self, model: nn.Module, names, lam: float, threshold: float, interval: int,
                 in_channels: bool = False, threshold_type: str = "norm"):
        super().__init__()
        if threshold_type not in self.THRESHOLD_TYPES:
            raise ValueError(f"threshold_type must be one of {self.THRESHOLD_TYPES}, got {threshold_type!r}")
        self.names, self.lam, self.threshold, self.interval = list(names), lam, threshold, interval
        self.in_channels, self.threshold_type = in_channels, threshold_type
        self.masks = {n: torch.ones_like(w) for n, w in zip(self.names, weights_of(model, self.names))}

    def group_lasso(self, model: nn.Module) -> torch.Tensor:
        """The unscaled penalty: the sum of the groups' L2 norms."""
        ws = weights_of(model, self.names)
        norms = [torch.linalg.vector_norm(w, dim=(1, 2, 3)).sum() for w in ws]
        if self.in_channels:  # the first conv's input channels are the image's: not a group
            norms += [torch.linalg.vector_norm(w, dim=(0, 2, 3)).sum() for w in ws[1:]]
        return torch.stack(norms).sum()

    def loss_regularizer(self, model: nn.Module):
        return self.lam * self.group_lasso(model)

    def _small(self, w: torch.Tensor, dims) -> torch.Tensor:
        size = torch.linalg.vector_norm(w, dim=dims) if self.threshold_type == "norm" else w.abs().amax(dim=dims)
        dead = size < self.threshold
        if bool(dead.all()):
            dead[size.argmax()] = False
        return dead

    @torch.no_grad()
    def on_epoch_end(self, model: nn.Module, epoch: int, row: dict) -> dict:
        t0 = time.perf_counter()
        if epoch % self.interval == 0:
            self._to_device(model)
            for i, (n, w) in enumerate(zip(self.names, weights_of(model, self.names))):
                live = w * self.masks[n]
                self.masks[n][self._small(live, (1, 2, 3))] = 0
                if self.in_channels and i > 0:
                    self.masks[n][:, self._small(live, (0, 2, 3))] = 0
            self.set_masks(model, self.masks)
        kept = sum(int(m.flatten(1).any(1).sum()) for m in self.masks.values())
        total = sum(len(m) for m in self.masks.values())
        density = sum(float(m.sum()) for m in self.masks.values()) / sum(m.numel() for m in self.masks.values())
        return dict(phase="lasso", hook_s=time.perf_counter() - t0, channel_density=kept / total,
                    weight_density=density)


def sparse24_mask(weight: torch.Tensor) -> torch.Tensor:
    """2:4 mask of a conv weight (O, I, kh, kw) along the input channels: of every 4 consecutive input
    channels at one (output channel, kernel position), keep the 2 largest in magnitude.
    torch.ao.pruning's WeightNormSparsifier refuses 4-D weights (it pads a 2-D view), so it runs on the
    (O*kh*kw, I) view, where its (1, 4) blocks are exactly those groups of input channels."""
    from torch.ao.pruning import WeightNormSparsifier

    o, i, kh, kw = weight.shape
    if i % 4:
        raise ValueError(f"2:4 along input channels needs a multiple of 4 input channels, got {i}")
    holder = nn.Module()
    holder.weight = nn.Parameter(weight.detach().float().cpu().permute(0, 2, 3, 1).reshape(-1, i).clone())
    sparsifier = WeightNormSparsifier(sparsity_level=1.0, sparse_block_shape=(1, 4), zeros_per_block=2)
    sparsifier.prepare(holder, [{"tensor_fqn": "weight"}])
    sparsifier.step()
    mask = holder.parametrizations.weight[0].mask
    return mask.reshape(o, kh, kw, i).permute(0, 3, 1, 2).to(weight.device, weight.dtype).contiguous()


def nm_violations(weight: torch.Tensor, n: int = 2, m: int = 4) -> int:
    """Groups of ``m`` consecutive input channels holding more than ``n`` nonzeros."""
    o, i, kh, kw = weight.shape
    groups = (weight.detach().cpu() != 0).permute(0, 2, 3, 1).reshape(-1, i // m, m)
    return int((groups.sum(-1) > n).sum())


@torch.no_grad()
def conv_costs(model: nn.Module, input_size: int = 32) -> pd.DataFrame:
    """One row per conv: parameters, nonzero parameters, output pixels, and multiply-accumulates dense
    and counting only nonzero weights (nonzero weights x output pixels)."""
    convs = {n: m for n, m in model.named_modules() if isinstance(m, nn.Conv2d)}
    pixels: dict[str, int] = {}
    handles = [m.register_forward_hook(lambda mod, inp, out, n=n: pixels.__setitem__(n, out.shape[-2] * out.shape[-1]))
               for n, m in convs.items()]
    was_training = model.training
    model.eval()
    try:
        device = next(model.parameters()).device
        model(torch.zeros(1, 3, input_size, input_size, device=device))
    finally:
        model.train(was_training)
        for h in handles:
            h.remove()
    rows = []
    for n, m in convs.items():
        params, nonzero = m.weight.numel(), int(torch.count_nonzero(m.weight))
        rows.append(dict(layer=n, shape="x".join(map(str, m.weight.shape)), params=params, nonzero=nonzero,
                         out_pixels=pixels[n], macs_dense=params * pixels[n], macs=nonzero * pixels[n]))
    return pd.DataFrame(rows)
