"""The mma.sync m16n8k16 kernel's NumPy twin (its per-lane offsets and the PTX fragment layout)
against the plain tile products, every group length, and that the CUDA source builds."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from repro.kernels.build import build
from repro.papers.tsparse import mma_twin, twin
from test_tile_mma import synthetic_pairs

KERNEL = Path(__file__).resolve().parents[2] / "src" / "repro" / "papers" / "tsparse" / "kernels" / "tsparse_mma.cu"


def test_fragment_twin_equals_the_tile_products():
    a, b, pairs = synthetic_pairs([1, 2, 3, 4, 7], seed=2)
    got = mma_twin.tile_products(a.numpy(), b.numpy(), pairs.pair_a.numpy(), pairs.pair_b.numpy(),
                                 pairs.group_ptr.numpy())
    np.testing.assert_allclose(got, _plain(a.numpy(), b.numpy(), pairs), rtol=1e-5, atol=1e-5)
    # and the tile-product twin of the Triton kernel agrees with it on the same rounded tiles
    h = a.half(), b.half()
    np.testing.assert_allclose(mma_twin.tile_products(twin.as_f32(h[0]), twin.as_f32(h[1]), pairs.pair_a.numpy(),
                                                      pairs.pair_b.numpy(), pairs.group_ptr.numpy()),
                               twin.tile_products(*h, pairs), rtol=1e-5, atol=1e-5)


def _plain(a, b, pairs):
    gp = pairs.group_ptr.tolist()
    return np.stack([sum(a[i] @ b[j] for i, j in zip(pairs.pair_a[gp[o]:gp[o + 1]].tolist(),
                                                     pairs.pair_b[gp[o]:gp[o + 1]].tolist()))
                     for o in range(pairs.n_out)])


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_the_kernel_builds_without_spills(tmp_path):
    entry = build(tmp_path, srcs=[KERNEL])["kernels"]["tsparse_mma"]
    assert entry["status"] == "built" and entry["entries"] == 2 and not entry["spilling_entries"], entry
    assert (tmp_path / "tsparse_mma.cubin").exists()
