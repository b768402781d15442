"""Every pattern's pruner lands on the asked sparsity network-wide, its masks pass the pattern's
check, the check catches a broken mask, and packing reconstructs the dense-equivalent weight."""

from __future__ import annotations

import math

import pytest
import torch

from repro.papers.sparse_gemm import patterns
from repro.papers.sparse_gemm.packing import expand, pack, unpack


def _scores(seed=0, shapes=((70, 150), (27, 64), (96, 10))):
    g = torch.Generator().manual_seed(seed)
    return {f"l{i}": torch.randn(*s, generator=g).abs() for i, s in enumerate(shapes)}


def _overall_density(layouts):
    kept = sum(int(l.mask.sum()) for l in layouts.values())
    return kept / sum(l.mask.numel() for l in layouts.values())


@pytest.mark.parametrize("pattern,kw", [("unstructured", {}), ("tw", {"tile": 32}), ("sbw", {"vector": 16}),
                                        ("block", {"block_size": 8}), ("tvw", {"tile": 32})])
@pytest.mark.parametrize("sparsity", [0.5, 0.75, 0.875])
def test_pruners_hit_the_sparsity_and_hold_their_pattern(pattern, kw, sparsity):
    layouts = patterns.prune(pattern, _scores(), sparsity, **kw)
    # budgets count weights: exact up to one group's worth (tvw: 2:4 in partial runs keeps a little less)
    assert abs(_overall_density(layouts) - (1 - sparsity)) < (0.03 if pattern != "block" else 0.06)
    for name, layout in layouts.items():
        assert patterns.check(layout) == [], (name, patterns.check(layout))


def test_tw_keeps_tiles_of_kept_columns_and_full_columns_on_request():
    layouts = patterns.tw(_scores(), 0.75, tile=32, full_columns=("l2",))
    tw = layouts["l0"]
    kept_cols = torch.nonzero(tw.mask.any(0)).flatten()
    assert torch.equal(torch.cat([g.cols for g in tw.groups]), kept_cols)
    assert [g.cols.numel() for g in tw.groups[:-1]] == [32] * (len(tw.groups) - 1)
    # each tile keeps its own rows: not every tile the same set
    assert len({tuple(g.rows.tolist()) for g in tw.groups}) > 1
    assert bool(layouts["l2"].mask.any(0).all())  # the classifier keeps all its outputs


def test_nm_and_its_check():
    score = _scores()["l0"]
    mask = patterns.nm_mask(score)
    assert patterns.nm_problems(mask) == []
    assert int(mask[:68].sum()) == 68 // 4 * 2 * 150 and int(mask[68:].sum()) == 2 * 150  # K = 70: a run of 2 keeps both
    bad = mask.clone()
    bad[0:4, 0] = True
    assert patterns.nm_problems(bad)


def test_sbw_groups_alike_columns():
    # two families of columns that keep different halves of K: grouping must not mix them
    k, n = 64, 64
    score = torch.rand(k, n, generator=torch.Generator().manual_seed(1)) * 0.1
    score[:32, ::2] += 1
    score[32:, 1::2] += 1
    layout = patterns.sbw({"w": score}, 0.5, vector=16)["w"]
    for g in layout.groups:
        assert len({int(c) % 2 for c in g.cols}) == 1
    assert _overall_density({"w": layout}) == pytest.approx(0.5)
    kept_importance = float((score * layout.mask).sum() / score.sum())
    assert kept_importance > 0.9


@pytest.mark.parametrize("pattern", ["tw", "sbw", "tvw"])
def test_check_catches_broken_masks(pattern):
    layout = patterns.prune(pattern, {"w": _scores()["l0"]}, 0.75, tile=32, vector=16)["w"]
    g = layout.groups[0]
    broken = layout.mask.clone()
    broken[int(g.rows[0]), int(g.cols[0])] = False  # a hole in a kept row (tvw: may still hold 2:4)
    outside = layout.mask.clone()
    free = torch.nonzero(~layout.mask.any(1)).flatten()
    row = int(free[0]) if free.numel() else int(torch.nonzero(~layout.mask[:, int(g.cols[0])])[0])
    outside[row, int(g.cols[0])] = True
    assert patterns.check(patterns.Layout(pattern, outside, layout.groups, layout.params))
    if pattern != "tvw":
        assert patterns.check(patterns.Layout(pattern, broken, layout.groups, layout.params))
    assert patterns.check(patterns.Layout(pattern, layout.mask.float(), layout.groups, layout.params))


def test_bad_inputs_name_the_problem():
    with pytest.raises(ValueError, match="sparsity"):
        patterns.tw(_scores(), 1.0)
    with pytest.raises(ValueError, match="tvw"):
        patterns.tvw(_scores(), 0.4)
    with pytest.raises(ValueError, match="unknown pattern"):
        patterns.prune("diagonal", _scores(), 0.5)
    with pytest.raises(ValueError, match="conv"):
        patterns.gemm_view(torch.zeros(3, 3, 3))


def test_gemm_view_round_trip_and_order():
    w = torch.randn(8, 5, 3, 3)
    g = patterns.gemm_view(w)
    assert g.shape == (45, 8)
    assert torch.equal(g[:5, 2], w[2, :, 0, 0])  # channels innermost at kernel position (0, 0)
    assert torch.equal(patterns.from_gemm(g, w.shape), w)
    lin = torch.randn(10, 7)
    assert torch.equal(patterns.from_gemm(patterns.gemm_view(lin), lin.shape), lin)


@pytest.mark.parametrize("pattern,width,compact", [("tw", 32, True), ("sbw", 16, False), ("tvw", 32, True)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_pack_reconstructs_the_dense_equivalent(pattern, width, compact, dtype):
    w = torch.randn(70, 150, generator=torch.Generator().manual_seed(3))
    layout = patterns.prune(pattern, {"w": w.abs()}, 0.75, tile=width, vector=width)["w"]
    packed = pack(w, layout, width, compact, dtype=dtype)
    assert torch.equal(unpack(packed), (w * layout.mask).to(dtype))
    assert packed.nnz == int(layout.mask.sum()) or pattern == "tvw"  # tvw counts its tiles' 2:4 zeros as kept
    assert int(packed.kstart[-1]) % 64 == 0 and packed.n_out == (int(layout.mask.any(0).sum()) if compact else 150)
    y = torch.randn(packed.n_out, 5)
    full = expand(y, packed) if compact else y
    assert full.shape == (150, 5) and (not compact or bool((full[~layout.mask.any(0)] == 0).all()))
    assert math.isclose(layout.density, float(layout.mask.float().mean()))
