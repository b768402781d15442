"""The sparsity patterns, their pruning from importance scores, and their checks.

Weights are in GEMM form W (K x N): K input features (a conv's kh*kw*in_channels, in that order, as
an NHWC implicit GEMM reads them: see gemm_view), N output features. A pruner takes scores
(name -> non-negative (K, N) tensor, e.g. |w|) and a sparsity, and returns one Layout per layer (its
bool mask, True = kept, and for the grouped patterns the groups the kernels compute). Thresholds are
network-wide where the pattern has one, as the TW artifact prunes (one cut over all layers' scores),
and budgets count weights, so every pattern lands on the same overall sparsity.

unstructured  the largest scores overall.
nm            n:m along K (2:4: in every m consecutive K entries of a column, the n largest), per layer;
              sparsity 1 - n/m whatever is asked.
tw            tile-wise (Guo et al., SC 2020, Sec. 4; the artifact's tiled_wise_2d): the sparsity split
              into equal shares for N and K (1 - sqrt(1 - s) each): first whole columns by their
              score's L2 norm / K; the kept columns, in order, form tiles of ``tile`` columns; then in
              each tile whole rows by their L2 norm over the tile's columns / its width (one cut over
              all tiles and layers). Each tile is a smaller dense GEMM.
sbw           Shfl-BW (Huang et al., DAC 2022): output columns in groups of ``vector`` (any columns, not
              neighbours: the shuffle), each group keeping its own K rows (vectors of ``vector``
              weights) by their L2 norm over the group / its width, one cut over all groups and layers.
              The grouping puts columns with alike important rows together (group_columns).
block         block-wise (the BSR baseline): whole (block x block) blocks by their L2 norm, one cut.
tvw           tile-vector-wise: TW at twice the target density, then 2:4 along each kept tile's packed
              K rows (75% = TW at 50% + 2:4): the packed tiles suit the sparse tensor cores.

``full_columns`` (layer names) keeps every column of those layers in TW and TVW: the classifier's
columns are the network's outputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

PATTERNS = ("unstructured", "nm", "block", "tw", "sbw", "tvw")


@dataclass
class Group:
    """Output columns (original indices, in output order) sharing one set of kept K rows (ascending)."""

    cols: torch.Tensor
    rows: torch.Tensor


@dataclass
class Layout:
    """A pruned layer: its mask (K, N), and for tw/sbw/tvw the groups the gather GEMM computes (a tvw
    group's rows are its tile's TW rows; 2:4 holds inside them)."""

    pattern: str
    mask: torch.Tensor
    groups: list[Group] | None = None
    params: dict = field(default_factory=dict)

    @property
    def density(self) -> float:
        return float(self.mask.float().mean())


def gemm_view(weight: torch.Tensor) -> torch.Tensor:
    """A conv weight (O, I, kh, kw) or linear weight (O, I) as its GEMM matrix (K, N): K = (kh, kw, I)
    flattened (channels innermost), N = O. A view where possible (linear), else a copy."""
    if weight.dim() == 4:
        o, i, kh, kw = weight.shape
        return weight.permute(2, 3, 1, 0).reshape(kh * kw * i, o)
    if weight.dim() == 2:
        return weight.t()
    raise ValueError(f"gemm_view takes a conv (4-D) or linear (2-D) weight, got shape {tuple(weight.shape)}")


def from_gemm(matrix: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """Inverse of gemm_view: the (K, N) matrix back in the weight's shape."""
    if len(shape) == 4:
        o, i, kh, kw = shape
        return matrix.reshape(kh, kw, i, o).permute(3, 2, 0, 1).contiguous()
    return matrix.t().contiguous()


def _check_sparsity(sparsity: float) -> None:
    if not 0.0 <= sparsity < 1.0:
        raise ValueError(f"sparsity must be in [0, 1), got {sparsity}")


def keep_top(scores: torch.Tensor, weights: torch.Tensor, budget: float) -> torch.Tensor:
    """Keep the highest scores until their weights (how many matrix entries each stands for) reach
    ``budget``: a bool mask over the 1-D ``scores``; ties go by position, so it is deterministic."""
    order = torch.sort(scores, descending=True, stable=True).indices
    taken = torch.cumsum(weights[order].double(), 0) <= budget + 1e-9
    keep = torch.zeros_like(scores, dtype=torch.bool)
    keep[order[taken]] = True
    return keep


def unstructured(scores: dict[str, torch.Tensor], sparsity: float) -> dict[str, Layout]:
    _check_sparsity(sparsity)
    flat = torch.cat([s.flatten().float() for s in scores.values()])
    keep = keep_top(flat, torch.ones_like(flat), (1 - sparsity) * flat.numel())
    out, at = {}, 0
    for name, s in scores.items():
        out[name] = Layout("unstructured", keep[at:at + s.numel()].reshape(s.shape))
        at += s.numel()
    return out


def nm_mask(score: torch.Tensor, n: int = 2, m: int = 4) -> torch.Tensor:
    """n:m along dim 0 of a (K, N) score: in each run of m rows (the last one may be shorter) of a
    column, the n largest are kept."""
    k, cols = score.shape
    pad = (-k) % m
    padded = torch.cat([score.float(), score.new_full((pad, cols), -math.inf, dtype=torch.float32)])
    groups = padded.reshape(-1, m, cols)
    top = groups.topk(min(n, m), dim=1).indices
    keep = torch.zeros_like(groups, dtype=torch.bool).scatter_(1, top, True)
    return keep.reshape(-1, cols)[:k] & torch.isfinite(padded[:k])


def nm(scores: dict[str, torch.Tensor], sparsity: float | None = None, n: int = 2, m: int = 4) -> dict[str, Layout]:
    return {name: Layout("nm", nm_mask(s, n, m), params={"n": n, "m": m}) for name, s in scores.items()}


def block(scores: dict[str, torch.Tensor], sparsity: float, size: int = 64) -> dict[str, Layout]:
    _check_sparsity(sparsity)
    norms, areas, shapes = [], [], {}
    for name, s in scores.items():
        k, n = s.shape
        pk, pn = -(-k // size) * size, -(-n // size) * size
        padded = s.new_zeros(pk, pn, dtype=torch.float32)
        padded[:k, :n] = s.float()
        blocks = padded.reshape(pk // size, size, pn // size, size)
        norms.append(torch.linalg.vector_norm(blocks, dim=(1, 3)).flatten())
        ones = torch.zeros(pk, pn, device=s.device)
        ones[:k, :n] = 1
        areas.append(ones.reshape(pk // size, size, pn // size, size).sum((1, 3)).flatten())
        shapes[name] = (pk // size, pn // size)
    total = sum(s.numel() for s in scores.values())
    keep = keep_top(torch.cat(norms), torch.cat(areas), (1 - sparsity) * total)
    out, at = {}, 0
    for name, s in scores.items():
        bk, bn = shapes[name]
        blocks = keep[at:at + bk * bn].reshape(bk, bn)
        out[name] = Layout("block", blocks.repeat_interleave(size, 0).repeat_interleave(size, 1)[:s.shape[0], :s.shape[1]],
                           params={"size": size})
        at += bk * bn
    return out


def _column_norms(score: torch.Tensor) -> torch.Tensor:
    return torch.linalg.vector_norm(score.float(), dim=0) / score.shape[0]


def tile_columns(kept_cols: torch.Tensor, tile: int) -> list[torch.Tensor]:
    """The kept columns (ascending), in consecutive tiles of ``tile`` (the last may be short)."""
    return list(torch.split(kept_cols, tile))


def tw(scores: dict[str, torch.Tensor], sparsity: float, tile: int = 128,
       full_columns: tuple[str, ...] = ()) -> dict[str, Layout]:
    _check_sparsity(sparsity)
    if tile < 1:
        raise ValueError(f"tile must be >= 1, got {tile}")
    share = 1 - math.sqrt(1 - sparsity)
    total = sum(s.numel() for s in scores.values())
    # N: whole columns, one cut over the layers (full_columns layers keep theirs, inside the budget)
    names = list(scores)
    dev = scores[names[0]].device
    norms = torch.cat([_column_norms(scores[n]) if n not in full_columns else
                       torch.full((scores[n].shape[1],), math.inf, device=dev) for n in names])
    sizes = torch.cat([torch.full((scores[n].shape[1],), float(scores[n].shape[0]), device=dev) for n in names])
    keep_cols = keep_top(norms, sizes, (1 - share) * total)
    cols, at = {}, 0
    for n in names:
        width = scores[n].shape[1]
        kept = torch.nonzero(keep_cols[at:at + width]).flatten()
        if kept.numel() == 0:  # a layer keeps at least its strongest column
            kept = _column_norms(scores[n]).argmax().reshape(1)
        cols[n] = tile_columns(kept, tile)
        at += width
    # K: whole rows of each tile, one cut over all tiles and layers
    row_norms, widths, owners = [], [], []
    for n in names:
        for t, c in enumerate(cols[n]):
            sub = scores[n][:, c].float()
            row_norms.append(torch.linalg.vector_norm(sub, dim=1) / c.numel())
            widths.append(torch.full((sub.shape[0],), float(c.numel()), device=dev))
            owners.append((n, t))
    keep_rows = keep_top(torch.cat(row_norms), torch.cat(widths), (1 - sparsity) * total)
    groups: dict[str, list[Group]] = {n: [] for n in names}
    at = 0
    for (n, t), norm in zip(owners, row_norms):
        rows = torch.nonzero(keep_rows[at:at + norm.numel()]).flatten()
        if rows.numel() == 0:  # a tile keeps at least its strongest row
            rows = norm.argmax().reshape(1)
        groups[n].append(Group(cols[n][t], rows))
        at += norm.numel()
    return {n: Layout("tw", groups_mask(groups[n], scores[n].shape), groups[n], {"tile": tile}) for n in names}


def identity(k: int, n: int, tile: int = 128) -> Layout:
    """The unpruned layer as a TW layout: every column, in tiles of ``tile``, each keeping all K rows.
    The gather GEMM on it does the dense GEMM's work: its time against cuBLAS is the kernel's own
    quality, with no sparsity in it (the sparse benchmark's kernel-quality ceiling)."""
    if k < 1 or n < 1 or tile < 1:
        raise ValueError(f"identity needs positive k, n and tile, got {k}, {n}, {tile}")
    rows = torch.arange(k)
    groups = [Group(c, rows) for c in tile_columns(torch.arange(n), tile)]
    return Layout("tw", torch.ones(k, n, dtype=torch.bool), groups, {"tile": tile})


def groups_mask(groups: list[Group], shape) -> torch.Tensor:
    """The (K, N) mask of full group rectangles (rows x cols), on the groups' device."""
    mask = torch.zeros(shape, dtype=torch.bool, device=groups[0].cols.device if groups else "cpu")
    for g in groups:
        mask[g.rows[:, None], g.cols[None, :]] = True
    return mask


def _principal_order(features: torch.Tensor, iters: int = 8) -> torch.Tensor:
    """Rows of ``features`` ordered by their projection on its leading principal direction."""
    centred = features - features.mean(0, keepdim=True)
    v = centred[centred.norm(dim=1).argmax()]  # a deterministic start: the row farthest from the mean
    for _ in range(iters):
        v = centred.t() @ (centred @ v)
        v = v / v.norm().clamp_min(1e-30)
    return torch.argsort(centred @ v, stable=True)


def group_columns(score: torch.Tensor, sparsity: float, vector: int) -> list[torch.Tensor]:
    """Shfl-BW's shuffle: the N columns in groups of ``vector`` (the last may be short) whose
    important K rows agree. Each column's feature is its own top-(1 - sparsity) rows (a 0/1
    vector); groups come from recursive balanced bisection along the features' leading principal
    direction, so columns that keep the same rows land together. (Our heuristic: the paper
    groups rows by similarity of their pruning pattern.)"""
    k, n = score.shape
    keep = max(1, round((1 - sparsity) * k))
    top = score.float().topk(keep, dim=0).indices
    features = torch.zeros(n, k, device=score.device).scatter_(1, top.t(), 1.0)

    def split(cols: torch.Tensor) -> list[torch.Tensor]:
        if cols.numel() <= vector:
            return [cols]
        n_groups = math.ceil(cols.numel() / vector)
        left = (n_groups // 2) * vector
        order = cols[_principal_order(features[cols])]
        return split(order[:left]) + split(order[left:])

    return [torch.sort(g).values for g in split(torch.arange(n, device=score.device))]


def sbw(scores: dict[str, torch.Tensor], sparsity: float, vector: int = 64) -> dict[str, Layout]:
    _check_sparsity(sparsity)
    if vector < 1:
        raise ValueError(f"vector must be >= 1, got {vector}")
    total = sum(s.numel() for s in scores.values())
    cols = {n: group_columns(s, sparsity, vector) for n, s in scores.items()}
    norms, widths, owners = [], [], []
    for n, s in scores.items():
        for g, c in enumerate(cols[n]):
            norms.append(torch.linalg.vector_norm(s[:, c].float(), dim=1) / c.numel())
            widths.append(torch.full((s.shape[0],), float(c.numel()), device=s.device))
            owners.append((n, g))
    keep = keep_top(torch.cat(norms), torch.cat(widths), (1 - sparsity) * total)
    groups: dict[str, list[Group]] = {n: [] for n in scores}
    at = 0
    for (n, g), norm in zip(owners, norms):
        rows = torch.nonzero(keep[at:at + norm.numel()]).flatten()
        if rows.numel() == 0:
            rows = norm.argmax().reshape(1)
        groups[n].append(Group(cols[n][g], rows))
        at += norm.numel()
    return {n: Layout("sbw", groups_mask(groups[n], s.shape), groups[n], {"vector": vector})
            for n, s in scores.items()}


def tvw(scores: dict[str, torch.Tensor], sparsity: float, tile: int = 128,
        full_columns: tuple[str, ...] = ()) -> dict[str, Layout]:
    if not 0.5 <= sparsity < 1.0:
        raise ValueError(f"tvw (TW + 2:4) reaches sparsity in [0.5, 1), got {sparsity}")
    out = {}
    for n, layout in tw(scores, 2 * sparsity - 1, tile, full_columns).items():
        mask = torch.zeros_like(layout.mask)
        for g in layout.groups:
            packed = scores[n][g.rows[:, None], g.cols[None, :]]
            mask[g.rows[:, None], g.cols[None, :]] = nm_mask(packed, 2, 4)
        out[n] = Layout("tvw", mask, layout.groups, {"tile": tile})
    return out


def prune(pattern: str, scores: dict[str, torch.Tensor], sparsity: float, tile: int = 128, vector: int = 64,
          full_columns: tuple[str, ...] = (), block_size: int = 64) -> dict[str, Layout]:
    """Layouts of ``pattern`` at ``sparsity`` (nm: 2:4, its own 50%)."""
    if pattern == "unstructured":
        return unstructured(scores, sparsity)
    if pattern == "block":
        return block(scores, sparsity, block_size)
    if pattern == "nm":
        return nm(scores)
    if pattern == "tw":
        return tw(scores, sparsity, tile, full_columns)
    if pattern == "sbw":
        return sbw(scores, sparsity, vector)
    if pattern == "tvw":
        return tvw(scores, sparsity, tile, full_columns)
    raise ValueError(f"unknown pattern {pattern!r}; expected one of {PATTERNS}")


# ---- checks -------------------------------------------------------------------------------------


def nm_problems(mask: torch.Tensor, n: int = 2, m: int = 4) -> list[str]:
    """Runs of m consecutive K entries (per column) holding more than n kept."""
    k, cols = mask.shape
    padded = torch.cat([mask, mask.new_zeros((-k) % m, cols)])
    over = int((padded.reshape(-1, m, cols).sum(1) > n).sum())
    return [f"{over} runs of {m} hold more than {n} kept"] if over else []


def check(layout: Layout) -> list[str]:
    """What breaks the pattern's constraints (empty: they hold)."""
    mask, p = layout.mask, layout.pattern
    if mask.dtype != torch.bool or mask.dim() != 2:
        return [f"mask must be a 2-D bool tensor, got {mask.dtype} {tuple(mask.shape)}"]
    if p == "unstructured":
        return []
    if p == "block":
        size = layout.params["size"]
        k, n = mask.shape
        padded = torch.zeros(-(-k // size) * size, -(-n // size) * size, dtype=torch.bool, device=mask.device)
        padded[:k, :n] = mask
        blocks = padded.reshape(padded.shape[0] // size, size, padded.shape[1] // size, size)
        kept = blocks.any(3).any(1)
        full = torch.zeros_like(padded)
        full[:k, :n] = True
        whole = (blocks == full.reshape(blocks.shape)).all(3).all(1)
        return [] if bool(whole[kept].all()) else ["a kept block is not kept whole"]
    if p == "nm":
        return nm_problems(mask, layout.params.get("n", 2), layout.params.get("m", 4))
    if layout.groups is None:
        return [f"a {p} layout needs its groups"]
    problems = []
    width = layout.params["tile"] if p in ("tw", "tvw") else layout.params["vector"]
    cols = torch.cat([g.cols for g in layout.groups])
    if cols.numel() != torch.unique(cols).numel():
        problems.append("a column belongs to two groups")
    sizes = [g.cols.numel() for g in layout.groups]
    if any(s > width for s in sizes):
        problems.append(f"a group is wider than {width}")
    if p in ("tw", "tvw"):
        if not bool((cols[1:] > cols[:-1]).all()):
            problems.append("tiles must hold the kept columns in order")
        if any(s != width for s in sizes[:-1]):
            problems.append(f"every tile but the last must hold {width} columns")
    else:
        if cols.numel() != mask.shape[1]:
            problems.append("Shfl-BW groups must cover every column")
    support = groups_mask(layout.groups, mask.shape)
    if bool((mask & ~support).any()):
        problems.append("kept weights outside the groups")
    if p in ("tw", "sbw") and not torch.equal(mask, support):
        problems.append("a group's kept rows must be kept across all its columns")
    if p == "tvw":
        for i, g in enumerate(layout.groups):
            for problem in nm_problems(mask[g.rows[:, None], g.cols[None, :]]):
                problems.append(f"tile {i}: {problem}")
    return problems
