"""Pattern pruning of 3x3 kernels (ClickTrain; PatDNN): the pattern library, each kernel's pattern
and connectivity (kept or dropped), the Euclidean projection onto that set, and its check.

A pattern is a 0/1 mask over a kernel's 9 positions keeping ``keep`` (4) of them; the library is a
(P, 9) bool tensor. Scores are per-weight (importance, or squared magnitude for a projection).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
import torch.nn as nn

KERNEL = 9  # 3x3


def pattern_convs(model: nn.Module, exclude_first: bool = True) -> dict[str, nn.Conv2d]:
    """The model's 3x3 dense convolutions, by module name; the stem (the first conv) optionally left out:
    it has 3 input channels, a tiny share of the weights, and is the layer most sensitive to pruning."""
    convs = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.Conv2d)]
    first = convs[0][0] if convs else None
    return {n: m for n, m in convs
            if m.kernel_size == (3, 3) and m.groups == 1 and not (exclude_first and n == first)}


def layer_ratios(names: Iterable[str], default: float, overrides: dict | None = None) -> dict[str, float]:
    """Kernel (connectivity) prune ratio per layer: ``default`` unless ``overrides`` names the layer."""
    names = list(names)
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - set(names))
    if unknown:
        raise ValueError(f"layer_ratios names unknown or excluded layers {unknown}; pattern layers: {names}")
    ratios = {n: float(overrides.get(n, default)) for n in names}
    bad = {n: r for n, r in ratios.items() if not 0.0 <= r < 1.0}
    if bad:
        raise ValueError(f"kernel prune ratios must be in [0, 1): {bad}")
    return ratios


def artifact_block_ratios(stage_blocks: list[int]) -> list[float]:
    """Kernel prune ratio per residual block of a 4-stage network, as the ClickTrain artifact sets
    its "resnet32" for the 8.6x result (hipdac-lab/ICS21-ClickTrain 97d35ff,
    configs/cifar10_resnet32_v1.yaml:64-94, both convs of a block alike): 55% in stage 1, 65% in
    stage 2 and the first block of stage 3, 75% in the rest of stage 3 and in stage 4."""
    if len(stage_blocks) != 4:
        raise ValueError(f"the artifact's ratios are for 4 stages, got {len(stage_blocks)}: {stage_blocks}")
    per_stage = [lambda i: 0.55, lambda i: 0.65, lambda i: 0.65 if i == 0 else 0.75, lambda i: 0.75]
    return [rule(i) for rule, n in zip(per_stage, stage_blocks) for i in range(n)]


def dropped_count(ratio: float, kernels: int) -> int:
    """Kernels a layer of ``kernels`` kernels drops at ``ratio`` (round half up)."""
    return int(math.floor(ratio * kernels + 0.5))


def kernel_codes(scores: torch.Tensor, keep: int = 4) -> torch.Tensor:
    """Bit code (sum of 2**position) of each kernel's ``keep`` highest-scoring positions."""
    idx = scores.reshape(-1, KERNEL).topk(keep, dim=1).indices
    return torch.bitwise_left_shift(torch.ones_like(idx), idx).sum(1)


def codes_to_patterns(codes: torch.Tensor) -> torch.Tensor:
    return ((codes[:, None] >> torch.arange(KERNEL)) & 1).bool()


def select_library(scores: Iterable[torch.Tensor], n_patterns: int, keep: int = 4) -> torch.Tensor:
    """The ``n_patterns`` most frequent top-``keep`` patterns over all kernels of all layers (ties by
    code, so the choice is deterministic); fewer if fewer distinct patterns occur."""
    codes = torch.cat([kernel_codes(s.detach().float().cpu(), keep) for s in scores])
    values, counts = codes.unique(return_counts=True)
    order = sorted(range(len(values)), key=lambda i: (-int(counts[i]), int(values[i])))[:n_patterns]
    return codes_to_patterns(values[order])


def kernel_patterns(scores: torch.Tensor, library: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each kernel's best library pattern, none dropped: (0/1 mask shaped like ``scores`` (O, I, 3, 3),
    score each kernel keeps (O*I,))."""
    flat = scores.detach().reshape(-1, KERNEL).float()
    lib = library.to(flat.device, torch.float32)
    kept, best = (flat @ lib.T).max(1)
    return lib[best].reshape(scores.shape).to(scores.dtype), kept


def kernel_masks(scores: torch.Tensor, library: torch.Tensor, ratio: float) -> torch.Tensor:
    """0/1 mask shaped like ``scores`` (O, I, 3, 3): every kernel takes the library pattern keeping most
    score, then the ``ratio`` share of kernels keeping least score is dropped whole."""
    pattern, kept = kernel_patterns(scores, library)
    mask = pattern.reshape(-1, KERNEL).clone()
    n_drop = dropped_count(ratio, len(mask))
    if n_drop:
        mask[kept.topk(n_drop, largest=False).indices] = 0
    return mask.reshape(scores.shape)


def project(weight: torch.Tensor, library: torch.Tensor, ratio: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Euclidean projection of ``weight`` onto {each kernel in one library pattern, ``ratio`` of kernels
    zero}: keep, per kernel, the pattern with most energy and drop the kernels with least kept energy.
    Returns (projected weight, mask)."""
    mask = kernel_masks(weight.detach().square(), library, ratio)
    return weight.detach() * mask, mask


def pattern_violations(weights: dict[str, torch.Tensor], masks: dict[str, torch.Tensor], library: torch.Tensor,
                       ratios: dict[str, float]) -> dict[str, int]:
    """Count what breaks the pattern constraint in final weights: kernels whose nonzeros are not a subset
    of one library pattern (``support``), mask rows that are not a library pattern (``mask_pattern``),
    layers whose dropped-kernel count differs from the ratio (``ratio``, by how many kernels) and
    nonzero weights where the mask is zero (``outside_mask``)."""
    lib = library.bool().cpu()
    out = dict(support=0, mask_pattern=0, ratio=0, outside_mask=0)
    for name, w in weights.items():
        nz = (w.detach().cpu() != 0).reshape(-1, KERNEL)
        m = masks[name].detach().cpu().reshape(-1, KERNEL).bool()
        fits = ~(nz[:, None, :] & ~lib[None]).any(2)  # (K, P): kernel's nonzeros inside pattern p
        out["support"] += int((nz.any(1) & ~fits.any(1)).sum())
        kept = m.any(1)
        is_pattern = (m[:, None, :] == lib[None]).all(2).any(1)
        out["mask_pattern"] += int((kept & ~is_pattern).sum())
        out["ratio"] += abs(int((~kept).sum()) - dropped_count(ratios[name], len(m)))
        out["outside_mask"] += int((nz & ~m).sum())
    out["total"] = sum(out.values())
    return out
